#!/bin/sh
# 64 KiB in sixteen writes: the server streams it chunked.
printf 'Content-Type: text/plain\n\n'
line=$(printf '%063d' 0)
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do
    n=0
    while [ $n -lt 64 ]; do printf '%s\n' "$line"; n=$((n + 1)); done
done
