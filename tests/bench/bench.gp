# bench.gp — the plot of `make bench` (bench.py calls it):
#   gnuplot -e "datafile='plot.dat'; outfile='bench.png'; subtitle='...'" bench.gp
# plot.dat: one row per workload: its label, then requests/s, requests per server
# CPU-second and p99 latency (ms), each for lfhttpd, nginx, lighttpd and h2o (columns
# 2-5, 6-9, 10-13). NaN = skipped.
# Three panels of grouped bars, log scales: the workloads differ by orders of magnitude
# (10 MiB files against 1 KiB ones), and bars on a linear scale would hide the small ones.

# noenhanced: workload labels hold underscores (directive names), not subscripts.
set terminal pngcairo size 1400,1500 font "sans,12" noenhanced
set output outfile
set datafile missing "NaN"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics mytics lc rgb "#dddddd"
set logscale y
set format y "%.0s%c"
set xtics nomirror rotate by 20 right
set key above horizontal
set lmargin 12
set rmargin 4
set bmargin 5

lf = "#1f77b4"; ng = "#2ca02c"; li = "#ff7f0e"; ho = "#9467bd"

set multiplot layout 3,1 title "lfhttpd vs nginx vs lighttpd vs h2o — ".subtitle font "sans,14"

set title "requests/s (higher is better)"
set ylabel "req/s"
plot datafile using 2:xtic(1) title "lfhttpd" lc rgb lf, \
     ''       using 3 title "nginx" lc rgb ng, \
     ''       using 4 title "lighttpd" lc rgb li, \
     ''       using 5 title "h2o" lc rgb ho

set title "requests per server CPU-second (higher is better; the steadiest figure)"
set ylabel "req / CPU-s"
plot datafile using 6:xtic(1) title "lfhttpd" lc rgb lf, \
     ''       using 7 title "nginx" lc rgb ng, \
     ''       using 8 title "lighttpd" lc rgb li, \
     ''       using 9 title "h2o" lc rgb ho

set title "p99 latency (lower is better)"
set ylabel "ms"
set format y "%g"
plot datafile using 10:xtic(1) title "lfhttpd" lc rgb lf, \
     ''       using 11 title "nginx" lc rgb ng, \
     ''       using 12 title "lighttpd" lc rgb li, \
     ''       using 13 title "h2o" lc rgb ho

unset multiplot
