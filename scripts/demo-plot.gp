# KV memory reserved vs used over the steps, one panel per chapter, from
# the data build/demo writes (kv-timeline.tsv: one block per chapter, each
# "step reserved_bytes used_bytes"). scripts/demo.sh runs it twice:
#   gnuplot -e "data='build/demo-out/kv-timeline.tsv'; out='build/demo-out/kv-timeline.svg'; fmt='svg'" scripts/demo-plot.gp
if (!exists("data")) data = 'build/demo-out/kv-timeline.tsv'
if (!exists("out")) out = 'build/demo-out/kv-timeline.svg'
if (!exists("fmt")) fmt = 'svg'
if (!exists("thin")) thin = 1   # plot every thin-th sample (a lighter SVG for the book)

if (fmt eq 'svg') {
    set terminal svg size 1000,960 dynamic font 'sans,11' background rgb 'white'
} else {
    set terminal pngcairo size 1000,960 font 'sans,10' background rgb 'white'
}
set output out

MiB = 1048576.0
stats data using ($2 / MiB) nooutput
top = STATS_max > 0 ? STATS_max * 1.25 : 1  # room above for the key

set multiplot layout 3,2 title "KV memory reserved vs used, step by step (same requests, same model)"
set yrange [0:top]
set xrange [0:*]
set ylabel "MiB"
set xlabel "step"
set grid ytics lc rgb '#dddddd'
set key top right horizontal
set style fill solid 1.0 noborder
titles = "'1 naive: keeps no K/V, recomputes them every step' \
          '2 KV cache: one request at a time, seq\\_len reserved' \
          '3 batching: a seq\\_len region per request, per batch' \
          '4 paged: blocks of 16 tokens, on demand' \
          '5 prefix cache: paged, full blocks shared between requests'"
do for [k = 0:4] {
    set title word(titles, k + 1)
    plot data index k every (k == 0 ? 1 : thin) using 1:($2 / MiB) with filledcurves y1=0 lc rgb '#f4c9a4' title 'reserved', \
         data index k every (k == 0 ? 1 : thin) using 1:($3 / MiB) with lines lw 2 lc rgb '#1f5fa8' title 'used (token states)'
}
unset multiplot
