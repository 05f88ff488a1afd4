#!/bin/bash
# healthcheck.sh PORT PATH — the services' health check (compose.yaml mounts it into both
# containers): exit 0 when GET PATH on 127.0.0.1:PORT answers 200. The images have no curl;
# bash's /dev/tcp sends the request.
exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
printf 'GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' "$2" >&3
head -c 12 <&3 | grep -q '^HTTP/1\.[01] 200'
