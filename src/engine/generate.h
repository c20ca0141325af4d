/* Autoregressive decoding on a stepped session (engine/session.h): the
 * prompts run once, then one new token per sequence and step, chosen
 * greedily, by sampling (temperature, top-k, top-p) or by beam search.
 * Shared by `dlrun generate` and dlrun.h's dlrun_generate; nothing here
 * prints. */
#ifndef DL_GENERATE_H
#define DL_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/error.h"
#include "engine/session.h"

struct dl_gen_opts {
	int64_t max_new;        /* new tokens per prompt at most */
	int greedy;             /* the largest logit (ties: the lowest id) */
	double temperature;     /* > 0 */
	int64_t top_k;          /* 0: all */
	double top_p;           /* (0, 1]; 1: all */
	uint64_t seed;
	int beams;              /* 0 or 1: no beam search */
	double length_penalty;  /* beams: score = sum logp / len^this */
	const int64_t *stop;    /* ids that end a prompt's decoding */
	int n_stop;
	int64_t eos;            /* -1: none */
	int64_t context;        /* positions kept per sequence; 0: every
	                         * prompt's whole length plus max_new */
	int out;                /* the logits output */
	/* Called with each token as it is chosen (beam search: the best
	 * sequence's tokens at the end); nonzero stops decoding with that
	 * value as the result. NULL: none. */
	int (*on_token)(void *arg, int64_t prompt, int64_t id, double logprob);
	void *arg;
	volatile int *interrupt; /* set from a signal handler: stop early */
	/* Called once the logits' shape is known (after the first call), to
	 * check it (a vocabulary's size); NULL: none. */
	int (*check)(void *arg, struct dl_error *err);
};

enum { DL_GEN_LENGTH, DL_GEN_EOS, DL_GEN_STOP };

struct dl_gen_result {
	int64_t *ids;           /* the new tokens (the stop or eos id not
	                         * included), malloc()ed */
	double *logprobs;       /* log softmax of the logits at each */
	size_t n;
	int why;                /* DL_GEN_LENGTH, DL_GEN_EOS, DL_GEN_STOP */
};

/* Decodes n prompts (prompt[p] of len[p] >= 1 ids) on token input tok.
 * The other inputs' values, one row per prompt or one row for all, are
 * in[i] with shapes shape[i] (in[tok] unused). res[p] gets each result
 * (free with dl_gen_result_free). Fails as dl_session_step does, or
 * DL_EINPUT for a model whose logits are not [N, T, V] over the tokens. */
int dl_generate(struct dl_session *s, int tok, int64_t n, const int64_t *const *prompt,
		const size_t *len, float *const *in, const struct dl_shape *shape,
		const struct dl_gen_opts *o, struct dl_gen_result *res,
		struct dl_error *err);
void dl_gen_result_free(struct dl_gen_result *r);

/* The number of positions the model holds at most: the smallest max_len
 * hyperparameter of its entries (a learned position table), or 0. */
int64_t dl_model_max_len(const struct dl_graph *g);

#endif
