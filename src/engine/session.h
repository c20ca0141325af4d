/* The session: one loaded model (graph and weights), its plan for the
 * current input shapes, and the state that lives across calls (packed
 * weights, the random stream, a stepped model's KV caches and recurrent
 * states). Every front end runs a model through it (dlrun infer,
 * dlrun generate, the library of dlrun.h), so the checks of inputs,
 * fusion and packed weights are the same on every path. */
#ifndef DL_SESSION_H
#define DL_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "engine/error.h"
#include "engine/graph.h"
#include "engine/rng.h"

struct dl_xwt_set;

struct dl_session {
	struct dl_graph *g;        /* owned */
	char *weights;             /* weights path; NULL: the model's default
	                            * (set to it once loaded) */
	int ignore_extra;          /* unused keys of the weights file skipped */
	int n_ignored;             /* how many were, at the load */
	int weights_loaded;
	/* The weights stay as loaded (inference): fusion and ops' kept
	 * transforms; cleared for good once training begins. */
	int fixed;
	int fuse;                  /* with fixed: the fusion pass (engine/fuse.c) */
	int pack;                  /* packed y = x W^T weights at inference,
	                            * put back by dl_session_restore */
	struct dl_xwt_set *xwt;    /* made at the first forward */
	struct dl_rng rng;

	/* Stepping (dl_session_step_*): the token input, the sequences and
	 * their state. */
	int stepping;
	int tok;                   /* the token input */
	int64_t rows;              /* sequences */
	int64_t max_len;           /* positions each sequence's state holds */
	float *state;              /* [rows, dl_graph_step_floats] */
	int *in_axis;              /* [n_inputs] */
	int *out_axis;             /* [n_outputs] */
	int64_t *konst_off;        /* [n_values]: kept values of the entries
	                            * off the tokens (dl_graph_step_konst) */
	float *konst;              /* [rows, konst_floats] */
	size_t konst_floats;
};

/* Loads the model file at path into a new session (weights are read at
 * the first inference that lays out the parameters). weights: NULL for
 * the model's default path. *out gets it, NULL on failure. */
int dl_session_open(struct dl_session **out, const char *path,
		    const char *weights, int ignore_extra, struct dl_error *err);
/* Takes over a loaded graph (freed with the session). */
int dl_session_wrap(struct dl_session **out, struct dl_graph *g,
		    const char *weights, int ignore_extra, struct dl_error *err);
/* Frees the session, its graph and its state; NULL-safe. */
void dl_session_free(struct dl_session *s);

/* Loads the weights once the parameters are laid out (after a shape
 * inference); nothing for a model without parameters. A missing default
 * weights file says how to make one. */
int dl_session_load_weights(struct dl_session *s, struct dl_error *err);

/* Shape inference for the model inputs' full shapes (batch first), the
 * weights, and the memory plan (train: a training plan). */
int dl_session_prepare(struct dl_session *s, const struct dl_shape *in,
		       int train, struct dl_error *err);
/* Runs the prepared plan on in[i] (inference: dropout off, batch norm's
 * running statistics), after checking the inputs' values (token ids).
 * Outputs are then in s->g->values[s->g->outputs[k]]. */
int dl_session_forward(struct dl_session *s, float *const *in,
		       struct dl_error *err);
/* Both. */
int dl_session_run(struct dl_session *s, const struct dl_shape *shape,
		   float *const *in, struct dl_error *err);
/* Marks the weights as changing from now on (training): no fusion or
 * kept transforms of them any more, and packed ones are put back (later
 * inference packs them again: dl_session_restore before each change). */
int dl_session_unfix(struct dl_session *s, struct dl_error *err);
/* Puts packed weights back into rows (before a training step changes
 * them or a save writes them). */
int dl_session_restore(struct dl_session *s, struct dl_error *err);

/* Every token id of input v (count values) that feeds an op taking ids
 * (DL_OP_IDS) is a whole number in [0, its table's rows): else DL_EINPUT
 * naming the entry, the id and the size, prefixed "WHERE: " when where is
 * not NULL. */
int dl_graph_check_input_ids(const struct dl_graph *g, int v, const float *ids,
			     int64_t count, const char *where, struct dl_error *err);
/* The same for every model input, in[i] holding the inferred shape. */
int dl_graph_check_ids(const struct dl_graph *g, float *const *in,
		       struct dl_error *err);

/* ---- stepping ---- */

/* The token input of a model that can be stepped: the first `dtype: int`
 * input with a symbolic length ([T]); -1 when there is none. */
int dl_session_token_input(const struct dl_session *s);
/* Prepares rows sequences of at most max_len positions each, on token
 * input tok (every other input stays fixed for a sequence). The model is
 * checked at the first dl_session_step. */
int dl_session_step_begin(struct dl_session *s, int tok, int64_t rows,
			  int64_t max_len, struct dl_error *err);
/* Feeds new positions: in[tok] is [N, T] ids of sequences row0 .. row0 +
 * N - 1, each of which had pos[i] positions (0: start it afresh); the
 * other inputs as for dl_session_run, their rows those sequences'. The
 * outputs then hold the new positions' values. A model that cannot be
 * stepped fails naming the entry. */
int dl_session_step(struct dl_session *s, const struct dl_shape *shape,
		    float *const *in, int64_t row0, const int64_t *pos,
		    struct dl_error *err);
/* Copies sequence src's state to sequence dst (beam search). */
void dl_session_step_copy(struct dl_session *s, int64_t dst, int64_t src);
/* Ends stepping: frees the state. */
void dl_session_step_end(struct dl_session *s);

#endif
