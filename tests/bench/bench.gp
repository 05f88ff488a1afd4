# bench.gp — the plot of `make bench` (bench.py calls it):
#   gnuplot -e "datafile='plot.dat'; outfile='bench.png'; subtitle='...'" bench.gp
# plot.dat: one row per workload: its label, then requests/s, requests per server
# CPU-second and p99 latency (ms), each for lfhttpd, nginx and lighttpd. NaN = skipped.
# Three panels of grouped bars, log scales: the workloads differ by orders of magnitude
# (10 MiB files against 1 KiB ones), and bars on a linear scale would hide the small ones.

set terminal pngcairo size 1400,1500 font "sans,12"
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

lf = "#1f77b4"; ng = "#2ca02c"; li = "#ff7f0e"

set multiplot layout 3,1 title "lfhttpd vs nginx vs lighttpd — ".subtitle font "sans,14"

set title "requests/s (higher is better)"
set ylabel "req/s"
plot datafile using 2:xtic(1) title "lfhttpd" lc rgb lf, \
     ''       using 3 title "nginx" lc rgb ng, \
     ''       using 4 title "lighttpd" lc rgb li

set title "requests per server CPU-second (higher is better; the steadiest figure)"
set ylabel "req / CPU-s"
plot datafile using 5:xtic(1) title "lfhttpd" lc rgb lf, \
     ''       using 6 title "nginx" lc rgb ng, \
     ''       using 7 title "lighttpd" lc rgb li

set title "p99 latency (lower is better)"
set ylabel "ms"
set format y "%g"
plot datafile using 8:xtic(1) title "lfhttpd" lc rgb lf, \
     ''       using 9 title "nginx" lc rgb ng, \
     ''       using 10 title "lighttpd" lc rgb li

unset multiplot
