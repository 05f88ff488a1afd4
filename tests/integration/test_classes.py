"""Service classes: several Leader/Followers groups at different priorities.

Which class served a request is read from the status page: each class's group counts the
requests it answered (`groups[].requests` in /status?format=json). Threads and their
priorities are observed through /proc: each class's threads are named after it
("interactive-0", ...)."""
import os
import re
import resource
import subprocess
import time

import json

import pytest

from conftest import BIN, scaled, wait_until

GET = "GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n"


def threads_by_class(pid):
    """{class name: [(tid, nice, cpu ticks)]} from /proc/PID/task/*/stat and comm."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            comm = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
        except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile
            continue
        m = re.match(r"(.+)-(\d+)$", comm)
        if not m:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        # fields[0] is field 3 (state): utime is field 14, stime 15, nice 19
        utime, stime, nice = int(fields[11]), int(fields[12]), int(fields[16])
        # thread names are "CLASS-N", the class cut to 12 characters (a name is 15 at most)
        out.setdefault(m.group(1), []).append((int(tid), nice, utime + stime))
    return out


def settled_threads(pid, want):
    """threads_by_class once every class in want {name: count} has its threads running
    (each names itself and sets its priority as it starts, after the port is reported)."""
    deadline = time.time() + 5
    while True:
        t = threads_by_class(pid)
        if all(len(t.get(k, [])) == n for k, n in want.items()) or time.time() > deadline:
            time.sleep(0.05)  # the priority is set just after the name
            return threads_by_class(pid)
        time.sleep(0.02)


def hammer(server, path, n=6000, host="t"):
    """n keep-alive GETs, pipelined in batches of 50; returns the statuses."""
    c = server.connect(timeout=10)
    statuses = []
    batch = 50
    for _ in range(n // batch):
        c.send((GET.format(path=path, host=host) * batch).encode())
        for _ in range(batch):
            statuses.append(c.read_response()[0])
    c.close()
    return statuses


def served_by(server):
    """{class name: requests its group answered}, from the status page (mounted by
    STATUS). The status request itself is counted by the default class."""
    c = server.connect()
    c.send(b"GET /status?format=json HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    status, _, body, _ = c.read_response()
    c.close()
    assert status == 200, body
    return {g["name"]: g["requests"] for g in json.loads(body)["groups"]}


def served_delta(server, before):
    """How many requests each class answered since `before` (a served_by result)."""
    return {k: v - before.get(k, 0) for k, v in served_by(server).items()}


def served_reaches(server, before, cls, n):
    """Waits until class `cls` has answered n requests since `before` (a group counts a
    request once its response is handed to the socket, which may be just after the client
    read it); returns the last delta."""
    delta = {}

    def reached():
        delta.update(served_delta(server, before))
        return delta[cls] >= n

    wait_until(reached, scaled(5))
    return delta


STATUS = "handler /status status;\n"

CLASSES = STATUS + """
class interactive { threads 2; priority high; match path /api/; match host api.example; }
class bulk { threads 1; priority low; match path /downloads/; max_connections 2; }
"""


@pytest.fixture
def site(docroot):
    (docroot / "api").mkdir()
    (docroot / "api" / "x.txt").write_text("api")
    (docroot / "downloads").mkdir()
    (docroot / "downloads" / "big.bin").write_bytes(os.urandom(1 << 20))
    (docroot / "index.html").write_text("home")
    (docroot / "plain.txt").write_text("plain")
    return docroot


def test_each_class_has_its_own_named_threads(start_server, site):
    s = start_server(site, CLASSES)
    t = settled_threads(s.proc.pid, {"interactive": 2, "bulk": 1, "default": 4})
    assert len(t["interactive"]) == 2
    assert len(t["bulk"]) == 1
    assert len(t["default"]) == 4


CAP_SYS_NICE = 23  # the capability's bit in /proc/PID/status CapEff


def has_cap_sys_nice(pid="self"):
    """Whether the process may raise a thread's priority: CAP_SYS_NICE in its effective
    set. Root in a container usually lacks it; the uid says nothing."""
    with open(f"/proc/{pid}/status") as f:
        caps = next(line for line in f if line.startswith("CapEff:"))
    return bool(int(caps.split()[1], 16) >> CAP_SYS_NICE & 1)


def may_raise_by_rlimit(own):
    """Whether RLIMIT_NICE alone lets a thread go 10 below its process's nice `own`."""
    soft = resource.getrlimit(resource.RLIMIT_NICE)[0]
    return soft == resource.RLIM_INFINITY or own - 10 >= 20 - soft


def process_nice(pid):
    stat = open(f"/proc/{pid}/stat").read()
    return int(stat[stat.rindex(")") + 2:].split()[16])


def nices(t, cls):
    return {n for _, n, _ in t[cls]}


def expected(own, relative):
    """The nice value the kernel keeps for `relative` to the process's own: -20..19."""
    return max(-20, min(19, own + min(relative, 19)))


def test_priorities_are_applied_to_each_classes_thread_ids(start_server, site):
    """With CAP_SYS_NICE the configured values apply, relative to the process's own nice:
    high -10, normal 0, low +10, read back per thread from /proc. Without it (root in a
    container) the server says so and moves every class down by 10 instead: high runs at
    the process's own priority, normal at +10, low at +19 (the weakest there is)."""
    s = start_server(site, CLASSES)
    t = settled_threads(s.proc.pid, {"interactive": 2, "bulk": 1, "default": 4})
    own = process_nice(s.proc.pid)
    if has_cap_sys_nice(s.proc.pid) or may_raise_by_rlimit(own):
        assert nices(t, "interactive") == {expected(own, -10)}, t
        assert nices(t, "default") == {own}, t
        assert nices(t, "bulk") == {expected(own, 10)}, t
        assert "cannot raise thread priorities" not in s.error_log()
    else:
        assert nices(t, "interactive") == {own}, t
        assert nices(t, "default") == {expected(own, 10)}, t
        assert nices(t, "bulk") == {expected(own, 20)}, t
        assert "cannot raise thread priorities" in s.error_log()


def test_without_cap_sys_nice_the_order_is_kept_by_lowering_the_others(start_server, site):
    """The server started without CAP_SYS_NICE (dropped with setpriv when the tests have
    it) and with RLIMIT_NICE 0, so that nothing lets it raise a priority."""
    wrap = ("prlimit", "--nice=0:0", "--")
    if has_cap_sys_nice():
        wrap += ("setpriv", "--inh-caps=-all", "--bounding-set=-all", "--")
    s = start_server(site, CLASSES, wrap=wrap)
    assert not has_cap_sys_nice(s.proc.pid)
    t = settled_threads(s.proc.pid, {"interactive": 2, "bulk": 1, "default": 4})
    own = process_nice(s.proc.pid)
    assert nices(t, "interactive") == {own}, t
    assert nices(t, "default") == {expected(own, 10)}, t
    assert nices(t, "bulk") == {expected(own, 20)}, t
    assert "cannot raise thread priorities" in s.error_log()


def test_request_is_served_by_the_class_of_its_path(start_server, site):
    s = start_server(site, CLASSES)
    before = served_by(s)
    assert set(hammer(s, "/api/x.txt", n=300)) == {200}
    assert served_reaches(s, before, "interactive", 300)["interactive"] == 300


def test_unmatched_requests_stay_in_the_default_class(start_server, site):
    s = start_server(site, CLASSES)
    before = served_by(s)
    assert set(hammer(s, "/plain.txt", n=300)) == {200}
    delta = served_reaches(s, before, "default", 300)
    assert delta["interactive"] == delta["bulk"] == 0 and delta["default"] >= 300, delta


def test_request_is_served_by_the_class_of_its_host(start_server, site):
    s = start_server(site, CLASSES)
    before = served_by(s)
    assert set(hammer(s, "/plain.txt", n=300, host="API.example:8080")) == {200}
    assert served_reaches(s, before, "interactive", 300)["interactive"] == 300


SITE_CLASSES = STATUS + """
class interactive { threads 2; match path /api/; }
class bulk { threads 1; }
server {
    server_name t;
    location /downloads/ { class bulk; }
    location /api/ { class bulk; }
}
server {
    server_name bulk.example;
    class bulk;
    location /plain.txt { }
}
"""


def test_request_is_served_by_the_class_its_location_names(start_server, site):
    s = start_server(site, SITE_CLASSES)
    before = served_by(s)
    assert set(hammer(s, "/downloads/big.bin", n=100)) == {200}
    assert served_reaches(s, before, "bulk", 100)["bulk"] == 100


def test_location_inherits_the_class_its_server_names(start_server, site):
    s = start_server(site, SITE_CLASSES)
    before = served_by(s)
    assert set(hammer(s, "/plain.txt", n=300, host="bulk.example")) == {200}
    assert served_reaches(s, before, "bulk", 300)["bulk"] == 300


def test_a_match_rule_comes_before_the_class_a_location_names(start_server, site):
    """One meaning: `match path /api/` gives interactive, though the location says bulk."""
    s = start_server(site, SITE_CLASSES)
    before = served_by(s)
    assert set(hammer(s, "/api/x.txt", n=300)) == {200}
    delta = served_reaches(s, before, "interactive", 300)
    assert delta["interactive"] == 300 and delta["bulk"] == 0, delta


def test_a_location_naming_an_unknown_class_is_refused_with_its_line(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text(f'root "{tmp_path}";\nserver {{\n  location / {{ class nosuch; }}\n}}\n')
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True)
    assert r.returncode != 0
    assert f"{conf}:3: class: no class \"nosuch\" is defined" in r.stderr, r.stderr


def test_connection_is_classified_by_its_listener(start_server, site):
    s = start_server(site, STATUS + "class side { threads 1; listen 127.0.0.1:0; }\n")
    # Every listener is logged as it opens; the first line may come before the class's.
    pattern = r"listening on 127\.0\.0\.1:(\d+) \(class side\)"
    assert wait_until(lambda: re.search(pattern, s.error_log()), scaled(5)), s.error_log()
    side = int(re.search(pattern, s.error_log()).group(1))
    before = served_by(s)
    default_port, s.port = s.port, side
    assert set(hammer(s, "/plain.txt", n=300)) == {200}
    s.port = default_port
    assert served_reaches(s, before, "side", 300)["side"] == 300


def test_connection_is_classified_by_client_address(start_server, site):
    s = start_server(site, STATUS + "class local { threads 1; match addr 127.0.0.0/8; }\n")
    before = served_by(s)
    assert set(hammer(s, "/plain.txt", n=300)) == {200}
    # the status requests come from there too
    assert served_reaches(s, before, "local", 300)["local"] >= 300


def test_pipelined_requests_moving_between_classes_lose_nothing_and_keep_order(
        start_server, site):
    """One write holding requests for three classes, interleaved: every response arrives,
    in order, with the right body."""
    s = start_server(site, CLASSES)
    paths = ["/api/x.txt", "/plain.txt", "/downloads/big.bin", "/api/x.txt", "/index.html"] * 8
    c = s.connect(timeout=10)
    c.send("".join(GET.format(path=p, host="t") for p in paths).encode())
    want = {"/api/x.txt": b"api", "/plain.txt": b"plain", "/index.html": b"home",
            "/downloads/big.bin": (site / "downloads" / "big.bin").read_bytes()}
    for p in paths:
        st, _, body, _ = c.read_response(timeout=10)
        assert st == 200 and body == want[p], p


def test_request_with_body_is_handed_off_with_its_body(start_server, site):
    """The body bytes travel with the connection: the next request still parses."""
    s = start_server(site, CLASSES)
    c = s.connect()
    c.send(b"POST /api/x.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
           + GET.format(path="/api/x.txt", host="t").encode())
    assert c.read_response()[0] == 405
    st, _, body, _ = c.read_response()
    assert st == 200 and body == b"api"


def test_class_over_max_connections_answers_503_with_retry_after(start_server, site):
    s = start_server(site, CLASSES)
    holders = []
    for _ in range(2):  # bulk allows 2 connections: hold them with a request each
        c = s.connect()
        c.send(GET.format(path="/downloads/big.bin", host="t").encode())
        c.read_response(head_only=True)
        holders.append(c)
    c = s.connect()
    c.send(GET.format(path="/downloads/big.bin", host="t").encode())
    st, headers, _, _ = c.read_response()
    assert st == 503
    assert headers.get("retry-after") == "1"
    for h in holders:
        h.close()


def check(tmp_path, text):
    p = tmp_path / "c.conf"
    p.write_text(f'root "{tmp_path}";\n' + text)
    return subprocess.run([BIN, "-t", "-c", str(p)], capture_output=True, text=True)


@pytest.mark.parametrize("text,line,words", [
    ("class a { threads 1; }\nclass a { threads 1; }\n", 3, "defined twice"),
    ("class a { match path /x/; }\nclass b { match path /x/; }\n", 3, "/x/"),
    ("class a { match host h; }\nclass b { match host H; }\n", 3, "host"),
    ("class a { listen 127.0.0.1:8181; }\nclass b { listen 127.0.0.1:8181; }\n", 3, "listen"),
    ("listen 127.0.0.1:8181;\nclass a { listen 127.0.0.1:8181; }\n", 3, "default class"),
    ("class default { threads 1; }\n", 2, "invalid class name"),
    ("class a {\n  colour red;\n}\n", 3, "unknown directive"),
    ("class a { priority urgent; }\n", 2, "priority"),
    ("class a { match path api; }\n", 2, "path"),
    ("class a { match addr 10.0.0.0/33; }\n", 2, "addr"),
    ("class a { match port 1; }\n", 2, "match kind"),
    ("class a;\n", 2, "block"),
])
def test_bad_class_configuration_is_refused_with_its_line(tmp_path, text, line, words):
    r = check(tmp_path, text)
    assert r.returncode == 1, r.stdout
    assert f"c.conf:{line}:" in r.stderr, r.stderr
    assert words in r.stderr, r.stderr
