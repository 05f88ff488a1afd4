<?php
sleep((int)($_GET["s"] ?? 3));
echo "late\n";
