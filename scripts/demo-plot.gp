# KV memory reserved vs used over the steps, one panel per chapter, from
# the data build/demo writes (kv-timeline.tsv: one block per chapter, each
# "step reserved_bytes used_bytes"; chapter 1's block has a fourth column,
# the K/V it recomputed in the step and threw away). scripts/demo.sh runs it
# twice:
#   gnuplot -e "data='build/demo-out/kv-timeline.tsv'; out='build/demo-out/kv-timeline.svg'; fmt='svg'" scripts/demo-plot.gp
#
# Every panel has the same x scale (steps, 0 to the longest chapter's last)
# and the same y scale, so that the panels compare at a glance. Reserved is
# drawn as an area with its edge as a dashed line on top, used as an area
# in front of it with its own line: where the two are nearly equal
# (chapter 4) both lines still show.
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
stats data using 1 nooutput
last_step = STATS_max > 0 ? STATS_max : 1

set multiplot layout 3,2 title "KV memory reserved vs used, step by step (same requests, same model, same scales)"
set yrange [0:top]
set xrange [0:last_step]
set ylabel "MiB"
set xlabel "step"
set grid ytics lc rgb '#dddddd'
set key top right horizontal
set style fill transparent solid 0.55 noborder
titles = "'1 naive: reserves no K/V, recomputes all of them every step' \
          '2 KV cache: one request at a time, seq\\_len reserved' \
          '3 batching: a seq\\_len region per request, per batch' \
          '4 paged: blocks of 16 tokens, on demand' \
          '5 prefix cache: paged, full blocks shared between requests'"
set title word(titles, 1)
plot data index 0 using 1:($4 / MiB) with filledcurves y1=0 lc rgb '#b07cc6' title 'K/V recomputed (activations)', \
     data index 0 using 1:($4 / MiB) with lines lw 1 lc rgb '#6a3d7d' notitle
do for [k = 1:4] {
    set title word(titles, k + 1)
    plot data index k every thin using 1:($2 / MiB) with filledcurves y1=0 lc rgb '#f4b27a' title 'reserved', \
         data index k every thin using 1:($3 / MiB) with filledcurves y1=0 lc rgb '#6f9fd8' title 'used (token states)', \
         data index k every thin using 1:($2 / MiB) with lines lw 1.5 dt 2 lc rgb '#c8641e' notitle, \
         data index k every thin using 1:($3 / MiB) with lines lw 1.5 lc rgb '#1f5fa8' notitle
}
unset multiplot
