#!/bin/sh
# hello.sh — an example CGI script (RFC 3875): a header block, a blank line, the body.
# Try: curl 'http://localhost:8080/cgi-bin/hello.sh/some/path?name=world'
printf 'Content-Type: text/plain; charset=utf-8\n\n'
printf 'Hello from CGI!\n\n'
printf 'method:      %s\n' "$REQUEST_METHOD"
printf 'script:      %s\n' "$SCRIPT_NAME"
printf 'path info:   %s\n' "$PATH_INFO"
printf 'query:       %s\n' "$QUERY_STRING"
printf 'client:      %s:%s\n' "$REMOTE_ADDR" "$REMOTE_PORT"
printf 'server:      %s (%s)\n' "$SERVER_SOFTWARE" "$SERVER_PROTOCOL"
if [ -n "$CONTENT_LENGTH" ]; then
    printf 'body:        %s bytes of %s\n' "$CONTENT_LENGTH" "${CONTENT_TYPE:-?}"
fi
