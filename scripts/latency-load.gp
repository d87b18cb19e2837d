# Latency against load: scripts/bench-latency.sh writes one line per run
# ("model chapter rate ttft_p50 ttft_p99 tpot_p50 tpot_p99 goodput
# requests_per_s good requests", seconds and requests/s) and the knees
# ("chapter rate goodput"), and calls
#   gnuplot -e "data='runs.tsv'; knees='knees.txt'; name='stories260K'; out='x.svg'" scripts/latency-load.gp
# Left: TTFT, middle: TPOT (p50 solid, p99 dashed), right: goodput, with
# the offered load dashed and each chapter's knee ringed. Times under the
# cost model's clock.
set terminal svg size 1200,420 dynamic font 'sans,11' background rgb 'white'
set output out
set multiplot layout 1,3 title sprintf("%s: latency against load (cost-model clock; p50 solid, p99 dashed)", name)
set logscale xy 10
set xtics format "%g"
set grid xtics ytics lc rgb '#dddddd'
set xlabel "arrival rate (requests/s, Poisson)"
set key top left font 'sans,9'
c03 = '#c0392b'; c04 = '#1f5fa8'; c05 = '#2e8b57'; c4c = '#8e44ad'
is(k) = strcol(2) eq k
set ylabel "TTFT (ms)"
plot data using (is('ch03') ? $3 : 1/0):($4 * 1000) with linespoints pt 7 lw 2 lc rgb c03 title 'ch03', \
     data using (is('ch03') ? $3 : 1/0):($5 * 1000) with linespoints pt 7 lw 1 dt 2 lc rgb c03 notitle, \
     data using (is('ch04') ? $3 : 1/0):($4 * 1000) with linespoints pt 5 lw 2 lc rgb c04 title 'ch04', \
     data using (is('ch04') ? $3 : 1/0):($5 * 1000) with linespoints pt 5 lw 1 dt 2 lc rgb c04 notitle, \
     data using (is('ch05') ? $3 : 1/0):($4 * 1000) with linespoints pt 9 lw 2 lc rgb c05 title 'ch05', \
     data using (is('ch05') ? $3 : 1/0):($5 * 1000) with linespoints pt 9 lw 1 dt 2 lc rgb c05 notitle, \
     data using (is('ch04-chunked') ? $3 : 1/0):($4 * 1000) with linespoints pt 11 lw 2 lc rgb c4c title 'ch04 chunked', \
     data using (is('ch04-chunked') ? $3 : 1/0):($5 * 1000) with linespoints pt 11 lw 1 dt 2 lc rgb c4c notitle
set ylabel "TPOT (ms)"
plot data using (is('ch03') ? $3 : 1/0):($6 * 1000) with linespoints pt 7 lw 2 lc rgb c03 title 'ch03', \
     data using (is('ch03') ? $3 : 1/0):($7 * 1000) with linespoints pt 7 lw 1 dt 2 lc rgb c03 notitle, \
     data using (is('ch04') ? $3 : 1/0):($6 * 1000) with linespoints pt 5 lw 2 lc rgb c04 title 'ch04', \
     data using (is('ch04') ? $3 : 1/0):($7 * 1000) with linespoints pt 5 lw 1 dt 2 lc rgb c04 notitle, \
     data using (is('ch05') ? $3 : 1/0):($6 * 1000) with linespoints pt 9 lw 2 lc rgb c05 title 'ch05', \
     data using (is('ch05') ? $3 : 1/0):($7 * 1000) with linespoints pt 9 lw 1 dt 2 lc rgb c05 notitle, \
     data using (is('ch04-chunked') ? $3 : 1/0):($6 * 1000) with linespoints pt 11 lw 2 lc rgb c4c title 'ch04 chunked', \
     data using (is('ch04-chunked') ? $3 : 1/0):($7 * 1000) with linespoints pt 11 lw 1 dt 2 lc rgb c4c notitle
set ylabel "goodput (requests/s meeting both objectives)"
set key top left
plot data using (is('ch03') ? $3 : 1/0):($8 > 0 ? $8 : 1/0) with linespoints pt 7 lw 2 lc rgb c03 title 'ch03', \
     data using (is('ch04') ? $3 : 1/0):($8 > 0 ? $8 : 1/0) with linespoints pt 5 lw 2 lc rgb c04 title 'ch04', \
     data using (is('ch05') ? $3 : 1/0):($8 > 0 ? $8 : 1/0) with linespoints pt 9 lw 2 lc rgb c05 title 'ch05', \
     data using (is('ch04-chunked') ? $3 : 1/0):($8 > 0 ? $8 : 1/0) with linespoints pt 11 lw 2 lc rgb c4c title 'ch04 chunked', \
     data using 3:3 with lines dt 2 lc rgb '#555555' title 'offered load', \
     knees using ($2 > 0 ? $2 : 1/0):($3 > 0 ? $3 : 1/0) with points pt 6 ps 3 lw 2 lc rgb 'black' title 'knee'
unset multiplot
