#!/bin/sh
# Silent for a second before its head: clients that reset leave while it runs.
sleep 1
printf 'Content-Type: text/plain\n\nslow\n'
