# Tokens per step of chapter 4, two runs one above the other: whole prompts,
# and a token budget with chunked prefill. scripts/plot-step-sizes.sh gives
# the data ("step tokens prompt_tokens" per line) and the output:
#   gnuplot -e "whole='w.tsv'; chunked='c.tsv'; budget=32; out='book/ch04-step-sizes.svg'" scripts/step-sizes.gp
set terminal svg size 1000,600 dynamic font 'sans,11' background rgb 'white'
set output out
stats whole using 2 nooutput
top = STATS_max * 1.15
stats chunked using 1 nooutput
last = STATS_max
stats whole using 1 nooutput
last = STATS_max > last ? STATS_max : last
set multiplot layout 2,1 title "Tokens per step, data/requests-mixed.tsv in 640 KiB of K/V (preempted requests come back)"
set xrange [0:last]
set yrange [0:top]
set ylabel "tokens in the step"
set grid ytics lc rgb '#dddddd'
set key top right
set style fill solid 1.0 noborder
set title "whole prompts (budget max(seq\\_len, 2048)): a readmitted request is recomputed in one step"
plot whole using 1:2 with impulses lw 1.5 lc rgb '#1f5fa8' title 'decode tokens', \
     whole using 1:3 with impulses lw 1.5 lc rgb '#e07b28' title 'prompt or recomputed positions'
set title sprintf("--max-num-batched-tokens %d: decodes first, prompts and recomputations in chunks", budget)
set xlabel "step"
plot chunked using 1:2 with impulses lw 1.5 lc rgb '#1f5fa8' title 'decode tokens', \
     chunked using 1:3 with impulses lw 1.5 lc rgb '#e07b28' title 'prompt or recomputed positions', \
     budget with lines dt 2 lw 1 lc rgb '#555555' title 'the budget'
unset multiplot
