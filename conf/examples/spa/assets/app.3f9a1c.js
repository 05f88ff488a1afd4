// A router in a few lines: the page shows the route it was opened at (location.pathname),
// and links inside the app change the route with history.pushState, without a request.
"use strict";

const views = {
  "/": "Home.",
  "/settings/profile": "Your name and picture.",
  "/settings/security": "Your password and sessions.",
};

function render() {
  const path = location.pathname;
  document.getElementById("route").textContent = path;
  document.getElementById("view").textContent = views[path] || "No such page in the app.";
  document.documentElement.dataset.rendered = "yes";
}

document.addEventListener("click", (event) => {
  const link = event.target.closest("a");
  if (!link || link.origin !== location.origin) return;
  event.preventDefault();
  history.pushState(null, "", link.pathname);
  render();
});
window.addEventListener("popstate", render);
render();
