# soak.gp — the plot of a soak run: gnuplot -e "dir='RUN_DIR'; label='TITLE'" soak.gp
# Reads RUN_DIR/samples.csv (seconds, rss_kib, fds, threads, upstream_conns) and
# RUN_DIR/events.csv (seconds, reload|reopen); writes RUN_DIR/soak.png. The dashed lines
# part the thirds: warm-up, then the middle and the last, whose maxima the verdict compares.
set terminal pngcairo size 1100,520 font ",10"
set output dir."/soak.png"
set datafile separator ","
set key bottom right opaque box
set title label
set xlabel "seconds"
set ylabel "resident memory (MiB)"
set y2label "open descriptors, upstream connections"
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
set grid xtics ytics
stats dir."/samples.csv" using 1 skip 1 nooutput
third = STATS_max / 3.0
set arrow from third, graph 0 to third, graph 1 nohead dt 2 lc rgb "gray40"
set arrow from 2 * third, graph 0 to 2 * third, graph 1 nohead dt 2 lc rgb "gray40"
set label "warm-up" at third / 2, graph 0.04 center tc rgb "gray40"
plot dir."/samples.csv" using 1:($2 / 1024.0) skip 1 with lines lw 2 lc rgb "#1f77b4" title "RSS (MiB)", \
     dir."/samples.csv" using 1:3 skip 1 axes x1y2 with lines lw 1 lc rgb "#d62728" title "descriptors", \
     dir."/samples.csv" using 1:5 skip 1 axes x1y2 with lines lw 1 lc rgb "#2ca02c" title "upstream connections", \
     dir."/events.csv" using 1:(stringcolumn(2) eq "reload" ? 0 : 1/0) skip 1 with points pt 9 ps 1.5 lc rgb "black" title "SIGHUP (reload)", \
     dir."/events.csv" using 1:(stringcolumn(2) eq "reopen" ? 0 : 1/0) skip 1 with points pt 6 ps 2 lc rgb "black" title "SIGUSR1 (log reopen)"
