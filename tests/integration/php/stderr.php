<?php
error_log("a line for the log\twith a tab");
echo "ok\n";
