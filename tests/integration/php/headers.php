<?php
header("Status: 404 Not Here");
header("X-Custom: one");
header("X-Accel-Redirect: /secret");
setcookie("a", "1");
setcookie("b", "2");
echo "missing\n";
