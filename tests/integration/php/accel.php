<?php
header("Content-Type: application/x-test");
header("Content-Disposition: attachment; filename=\"f.txt\"");
header("X-Custom: dropped");
setcookie("a", "1");
setcookie("b", "2");
header("X-Accel-Redirect: " . ($_GET["to"] ?? "/protected/file.txt"));
echo "the application's body\n";
