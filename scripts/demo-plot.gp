# KV memory reserved vs used over the steps, one panel per chapter, from
# the data build/demo writes (kv-timeline.tsv: one block per chapter, each
# "step reserved_bytes used_bytes"; chapter 1's block has a fourth column,
# the K/V it recomputed in the step and threw away). scripts/demo.sh runs it
# twice:
#   gnuplot -e "data='build/demo-out/kv-timeline.tsv'; out='build/demo-out/kv-timeline.svg'; fmt='svg'" scripts/demo-plot.gp
#
# Each panel has its own scales (its steps, and MiB up to its own peak):
# chapters 1 and 2 run one request after another for thousands of steps,
# chapters 3 to 5 all requests at once in a few hundred, and chapter 3
# reserves several times what chapter 4 does, so shared scales would
# squeeze the later chapters into a corner and hide their waste. Compare
# the peaks with the table's numbers, not by the height of the areas.
# Reserved is drawn as a light area with a dashed edge, used as a darker
# area in front of it with a solid edge, both opaque, so that the colours
# are those of the key and the light band above the dark one is exactly the
# memory reserved and not used.
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
reserved_fill = '#f6c89f'
reserved_edge = '#c8641e'
used_fill = '#5b8fd1'
used_edge = '#1f4f8f'
recomputed_fill = '#c39bd6'
recomputed_edge = '#6a3d7d'

set multiplot layout 3,2 title "KV memory reserved vs used, step by step (same requests, same model; each panel on its own scale)"
set ylabel "MiB"
set xlabel "step"
set grid ytics lc rgb '#dddddd'
set key top right horizontal nobox
set style fill solid 1.0 noborder
titles = "'1 naive: keeps no K/V, recomputes all of it every step' \
          '2 KV cache: one request at a time, seq\\_len reserved each' \
          '3 batching: a seq\\_len region per request, per batch' \
          '4 paged: blocks of 16 tokens, on demand' \
          '5 prefix cache: paged, full blocks shared between requests'"

# Panel k's scales: its last step, and room above its peak for the key
# (stats reads only what the current ranges show, so they are reset first).
do for [k = 0:4] {
    col = (k == 0) ? 4 : 2
    set autoscale xy
    stats data index k using (column(col) / MiB) nooutput
    top = STATS_max > 0 ? STATS_max * 1.4 : 1
    stats data index k using 1 nooutput
    set xrange [0:(STATS_max > 0 ? STATS_max : 1)]
    set yrange [0:top]
    set title word(titles, k + 1)
    if (k == 0) {
        plot data index 0 using 1:($4 / MiB) with filledcurves y1=0 lc rgb recomputed_fill title 'K/V recomputed (activations, thrown away)', \
             data index 0 using 1:($4 / MiB) with lines lw 1 lc rgb recomputed_edge notitle
    } else {
        plot data index k every thin using 1:($2 / MiB) with filledcurves y1=0 lc rgb reserved_fill title 'reserved', \
             data index k every thin using 1:($3 / MiB) with filledcurves y1=0 lc rgb used_fill title 'used (token states)', \
             data index k every thin using 1:($2 / MiB) with lines lw 1.5 dt 2 lc rgb reserved_edge notitle, \
             data index k every thin using 1:($3 / MiB) with lines lw 1.5 lc rgb used_edge notitle
    }
}
# The sixth place: how to read the panels.
unset title
unset key
unset border
unset tics
unset xlabel
unset ylabel
unset grid
set xrange [0:1]
set yrange [0:1]
set label 1 "How to read it" at 0.02,0.92 font ',12'
set label 2 "dark: K/V of tokens (used)" at 0.02,0.78
set label 3 "light above it: reserved and not used, the waste" at 0.02,0.68
set label 4 "chapter 1 keeps nothing: what it recomputes each step" at 0.02,0.58
set label 5 "each panel has its own scales: compare the" at 0.02,0.44
set label 6 "peaks with the table, not the heights" at 0.02,0.36
set label 7 "make demo prints the table; the page build/demo-out/" at 0.02,0.22
set label 8 "index.html shows chapters 3 and 4 step by step" at 0.02,0.14
plot NaN notitle
unset multiplot
