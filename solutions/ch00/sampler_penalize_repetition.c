/* Sampler lab (lab 0): sampler_penalize_repetition(), vLLM's repetition
 * penalty. exercises/ch00/sampler_penalize_repetition.c is generated from
 * this file by scripts/make-exercises.sh; `make lab CH=sampling` grades
 * yours. */
#include "lab.h"
#include "sampler.h"

void sampler_penalize_repetition(float *logits, int vocab, const unsigned char *in_prompt, const int *output_counts,
                                 float penalty)
{
    // LAB BEGIN(ch00.repetition): for every token of the prompt or the output, divide a positive logit by penalty, multiply any other by it
    for (int v = 0; v < vocab; v++) {
        if (!in_prompt[v] && output_counts[v] == 0)
            continue;
        /* Dividing a negative logit would raise it: multiply it instead. */
        if (logits[v] > 0.0f)
            logits[v] /= penalty;
        else
            logits[v] *= penalty;
    }
    // LAB STUB:
    // (void)logits; (void)vocab; (void)in_prompt; (void)output_counts; (void)penalty;
    // LAB_TODO("penalise the logits of the tokens seen in the prompt or the output");
    // LAB END
}
