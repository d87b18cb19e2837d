# Chapter 6: what a bounded KV cache costs in quality, against the memory it
# holds. scripts/bench-ch06.sh writes the data (one line per run:
# "budget policy kv_mib perplexity agreement_pct", policy = window, sinks or
# h2o) and calls
#   gnuplot -e "data='runs.tsv'; full_mib=88.1; full_ppl=2.3; name='SmolLM2-135M'; out='x.svg'" scripts/window-quality.gp
# Top: the share of steps whose greedy token is the full cache's (teacher-
# forced, so every run is scored on the same text). Bottom: the perplexity
# of the full cache's continuation. The full cache is the dashed line and
# the black point at its size. The rows must come sorted by policy (a
# policy's points are joined in file order).
set terminal svg size 900,640 dynamic font 'sans,11' background rgb 'white'
set output out
set multiplot layout 2,1 title sprintf("%s: a bounded KV cache against the full cache (%.1f MiB)", name, full_mib)
set logscale x 2
set xrange [*:full_mib * 1.5]
set autoscale xfixmin
set offsets graph 0.05, 0, 0, 0
set xtics format "%g"
set grid xtics ytics lc rgb '#dddddd'
set key bottom right
set xlabel "KV held by the sequence at its peak (MiB, positions x bytes per position)"
set ylabel "greedy = full cache (%)"
set yrange [*:100.5]
plot data using (strcol(2) eq 'window' ? $3 : 1/0):5 with linespoints pt 7 lw 2 lc rgb '#c0392b' title 'window, no sinks', \
     data using (strcol(2) eq 'sinks' ? $3 : 1/0):5 with linespoints pt 5 lw 2 lc rgb '#1f5fa8' title 'window + 4 sinks', \
     data using (strcol(2) eq 'h2o' ? $3 : 1/0):5 with linespoints pt 9 lw 2 lc rgb '#2e8b57' title 'H2O (window, 4 sinks, heavy hitters)', \
     100 with lines dt 2 lc rgb '#555555' title 'full cache', \
     '+' using (full_mib):(100) every ::0::0 with points pt 7 lc rgb 'black' notitle
set ylabel "perplexity of the full cache's text"
set yrange [*:*]
set autoscale yfix
set offsets graph 0.05, 0, graph 0.08, graph 0.08
set key top right
plot data using (strcol(2) eq 'window' ? $3 : 1/0):4 with linespoints pt 7 lw 2 lc rgb '#c0392b' title 'window, no sinks', \
     data using (strcol(2) eq 'sinks' ? $3 : 1/0):4 with linespoints pt 5 lw 2 lc rgb '#1f5fa8' title 'window + 4 sinks', \
     data using (strcol(2) eq 'h2o' ? $3 : 1/0):4 with linespoints pt 9 lw 2 lc rgb '#2e8b57' title 'H2O (window, 4 sinks, heavy hitters)', \
     full_ppl with lines dt 2 lc rgb '#555555' title 'full cache', \
     '+' using (full_mib):(full_ppl) every ::0::0 with points pt 7 lc rgb 'black' notitle
unset multiplot
