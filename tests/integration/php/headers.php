<?php
header("Status: 404 Not Here");
header("X-Custom: one");
header("X-Accel-Expires: 10");
setcookie("a", "1");
setcookie("b", "2");
echo "missing\n";
