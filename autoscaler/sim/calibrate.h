/* Calibrating the simulator's replica model from a `cinfer-engine bench` run: its stdout holds a
 * "# model: ..." header and one JSON line per decode batch size,
 *   {"batch":B,"prompt_tokens":P,"depth":D,"pp_tok_s":X,"tg_tok_s":Y,"rss_bytes":R}
 * (engine/cmd/cmd_bench.c). Prefill rate = pp_tok_s of the batch-1 line, single-stream decode =
 * its tg_tok_s, the batching curve through the largest batch measured. So a GPU replica is
 * simulated from a GPU benchmark. Parsing is bounded and every malformed line is an error naming
 * it; other lines (the table, comments) are skipped. Pure: the caller reads the file.
 *
 * A speculative run's lines (`bench --speculative ngram|draft`: "speculative",
 * "num_speculative_tokens", "spec_tokens_per_step") are not points of that curve: the one of the
 * smallest batch sets the model's speculation, K as measured and the acceptance at which K
 * proposals per step give the measured tokens per sequence step (a geometric model of
 * acceptance; with an adaptive run that proposed fewer than K, an underestimate); for a draft
 * model, the draft's cost from the measured rate on the plain curve. So the plain and the
 * speculative bench outputs of one replica, concatenated, calibrate both. */
#ifndef CINFER_AUTOSCALER_CALIBRATE_H
#define CINFER_AUTOSCALER_CALIBRATE_H

#include "autoscaler/sim/sim.h"

#include <stddef.h>

#define CALIBRATE_MAX_BYTES (1u << 20)

/* Sets prefill_tps, decode_tps, decode_batch, decode_batch_tps and, with speculative lines, the
 * spec_* fields of *m from `text[0..len)`
 * (borrowed, need not be NUL-terminated) and writes the run's header (or "") into `desc`. Returns
 * 0, or ERR_PARSE / ERR_INVAL / ERR_TOO_BIG with a message in `err`; *m is untouched then. */
int calibrate_from_bench(const char *text, size_t len, struct sim_replica_model *m, char *desc,
                         size_t desclen, char *err, size_t errlen);

#endif
