# bench.gp — the plot of `make bench` (bench.py calls it):
#   gnuplot -e "datafile='plot.dat'; outfile='bench.png'; subtitle='...'; ymax=2.5; \
#               off_rps=''; off_cpu=''" bench.gp
# (off_rps, off_cpu: the ratios above ymax, written under each panel's title.)
# plot.dat: one row per workload: its label, then requests/s and requests per server
# CPU-second as ratios to nginx's in the same run, each for lfhttpd, nginx, lighttpd, h2o
# and the ceiling (columns 2-6, 7-11). NaN = not run (the ceiling runs only the 1 KiB
# keep-alive workloads).
# Ratios on a linear axis from 0, nginx = 1.0 drawn across: how far ahead or behind reads
# off directly, which a log scale of rates (10 MiB files beside 1 KiB ones) hid. bench.py
# caps the axis at ymax and names the ratios above it.

# noenhanced: workload labels hold underscores (directive names), not subscripts.
set terminal pngcairo size 1500,1100 font "sans,12" noenhanced
set output outfile
set datafile missing "NaN"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics lc rgb "#dddddd"
set yrange [0:ymax]
set format y "%.1fx"
set xtics nomirror rotate by 20 right
set key above horizontal
set lmargin 12
set rmargin 4
set bmargin 7
# nginx = 1.0: the line every bar is read against.
set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead lc rgb "#d62728" lw 2 dt 2 front

lf = "#1f77b4"; ng = "#2ca02c"; li = "#ff7f0e"; ho = "#9467bd"; ce = "#7f7f7f"

set multiplot layout 2,1 title "lfhttpd vs nginx vs lighttpd vs h2o — ".subtitle font "sans,14"

set title "requests/s, x nginx (higher is better)".off_rps
set ylabel "x nginx"
plot datafile using 2:xtic(1) title "lfhttpd" lc rgb lf, \
     ''       using 3 title "nginx" lc rgb ng, \
     ''       using 4 title "lighttpd" lc rgb li, \
     ''       using 5 title "h2o" lc rgb ho, \
     ''       using 6 title "ceiling (canned response)" lc rgb ce

unset key  # the first panel's key serves both
set title "requests per server CPU-second, x nginx (higher is better; the steadiest figure)".off_cpu
plot datafile using 7:xtic(1) title "lfhttpd" lc rgb lf, \
     ''       using 8 title "nginx" lc rgb ng, \
     ''       using 9 title "lighttpd" lc rgb li, \
     ''       using 10 title "h2o" lc rgb ho, \
     ''       using 11 title "ceiling (canned response)" lc rgb ce

unset multiplot
