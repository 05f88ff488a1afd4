<?php
header("Content-Type: application/json");
$keys = ["SCRIPT_FILENAME", "SCRIPT_NAME", "PATH_INFO", "QUERY_STRING", "REQUEST_URI",
         "DOCUMENT_ROOT", "DOCUMENT_URI", "REQUEST_METHOD", "CONTENT_TYPE", "CONTENT_LENGTH",
         "SERVER_PORT", "SERVER_ADDR", "REMOTE_ADDR", "HTTPS", "GATEWAY_INTERFACE",
         "SERVER_PROTOCOL", "REQUEST_SCHEME", "REDIRECT_STATUS", "PHP_SELF", "SERVER_NAME", "SERVER_SOFTWARE", "REMOTE_USER"];
$out = [];
foreach ($keys as $k)
    $out[$k] = array_key_exists($k, $_SERVER) ? $_SERVER[$k] : null;
foreach ($_SERVER as $k => $v)
    if (strncmp($k, "HTTP_", 5) == 0)
        $out[$k] = $v;
$out["body"] = file_get_contents("php://input");
$out["post"] = $_POST;
$out["files"] = array_map(function ($f) {
    return ["name" => $f["name"], "size" => $f["size"], "md5" => md5_file($f["tmp_name"])];
}, $_FILES);
echo json_encode($out, JSON_INVALID_UTF8_SUBSTITUTE);
