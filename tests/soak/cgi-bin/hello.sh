#!/bin/sh
# A small CGI answer, with the request's query in it.
printf 'Content-Type: text/plain\n\n'
printf 'hello %s from %s\n' "$QUERY_STRING" "$REMOTE_PORT"
