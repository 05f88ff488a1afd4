<?php
header("Status: 404 Not Here");
echo "missing\n";
