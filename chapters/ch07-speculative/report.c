/* Chapter 7's report: chapter 4's lines, then what speculation proposed,
 * what it kept, and what it cost the cache. */
#include "spec.h"

static const char *method_name(SpecMethod m)
{
    switch (m) {
    case SPEC_NGRAM: return "ngram";
    case SPEC_SELF: return "self";
    case SPEC_DRAFT: return "draft";
    default: return "none";
    }
}

static double ratio(double a, double b)
{
    return b > 0.0 ? a / b : 0.0;
}

/* K/V bytes of the positions written by the verifier and then given back. */
static double rejected_bytes(const SpecDecoder *d)
{
    return (double)d->rejected_positions * (double)paged_bytes_per_token(d->server);
}

void spec_report_table(FILE *f, void *ctx, const ServingRun *run)
{
    const SpecDecoder *d = ctx;
    char a[32], b[32];
    paged_report_table(f, d->server, run);
    if (!d->opt.method) {
        fprintf(f, "  speculation    none: chapter 4's step\n");
        return;
    }
    if (d->opt.method == SPEC_SELF)
        fprintf(f, "  speculation    self:%d, k = %d, %s\n", d->opt.self_layers, d->opt.k,
                d->sampled ? "rejection sampling" : "greedy");
    else
        fprintf(f, "  speculation    %s, k = %d, %s\n", method_name(d->opt.method), d->opt.k,
                d->sampled ? "rejection sampling" : "greedy");
    fprintf(f, "  acceptance     %ld of %ld proposals accepted (%.1f%%); %.2f tokens per speculating sequence-step\n",
            d->accepted, d->proposed, 100.0 * ratio((double)d->accepted, (double)d->proposed),
            ratio((double)d->spec_emitted, (double)d->spec_steps));
    fprintf(f, "  forward steps  %ld verifier passes for %ld tokens: %.2f tokens per pass, %.3f passes per token\n",
            d->forward_steps, run->tokens_generated, ratio((double)run->tokens_generated, (double)d->forward_steps),
            ratio((double)d->forward_steps, (double)run->tokens_generated));
    fprintf(f, "  rolled back    %ld positions written then released = %s of transient K/V; %ld blocks back to the "
               "pool; at most %d blocks held for proposals in one step\n",
            d->rejected_positions, cli_format_bytes(a, sizeof a, rejected_bytes(d)), d->blocks_rolled_back,
            d->proposal_blocks_peak);
    if (d->has_draft)
        fprintf(f, "  proposer K/V   %s in a cache of its own (%d layers), outside the pool%s\n",
                cli_format_bytes(b, sizeof b, (double)d->draft.kv_bytes), d->draft.model->cfg.n_layers,
                d->opt.method == SPEC_SELF ? " (a copy of the first layers' K/V)" : "");
}

void spec_report_json(JsonWriter *j, void *ctx, const ServingRun *run)
{
    const SpecDecoder *d = ctx;
    paged_report_json(j, d->server, run);
    json_string(j, "spec_method", method_name(d->opt.method));
    json_int(j, "spec_k", d->opt.method ? d->opt.k : 0);
    json_int(j, "spec_proposed", d->proposed);
    json_int(j, "spec_accepted", d->accepted);
    json_double(j, "spec_acceptance_rate", ratio((double)d->accepted, (double)d->proposed));
    json_int(j, "spec_steps", d->spec_steps);
    json_double(j, "spec_tokens_per_spec_step", ratio((double)d->spec_emitted, (double)d->spec_steps));
    json_int(j, "spec_forward_steps", d->opt.method ? d->forward_steps : run->step);
    json_double(j, "spec_tokens_per_forward_step",
                ratio((double)run->tokens_generated, (double)(d->opt.method ? d->forward_steps : run->step)));
    json_int(j, "spec_rejected_positions", d->rejected_positions);
    json_int(j, "spec_rejected_kv_bytes", (long long)rejected_bytes(d));
    json_int(j, "spec_blocks_rolled_back", d->blocks_rolled_back);
    json_int(j, "spec_draft_kv_bytes", d->has_draft ? (long long)d->draft.kv_bytes : 0);
}
