<?php
header("Location: /elsewhere.php?x=1");
