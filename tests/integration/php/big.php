<?php
if (isset($_GET["accel"])) {
    header("X-Accel-Buffering: " . $_GET["accel"]);
}
$n = (int)($_GET["mib"] ?? 4);
$block = str_repeat("0123456789abcdef", 65536);   /* 1 MiB */
for ($i = 0; $i < $n; $i++) {
    echo substr(sprintf("%08d", $i) . $block, 0, 1048576);
}
