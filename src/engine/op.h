/* What an op sees: its descriptor, its node (hyperparameters, parameters,
 * shapes), and the run context. Ops never see files, YAML or the command
 * line. Adding an op: one `const struct dl_op_desc`, one line in its family's
 * NULL-terminated array (src/ops/<family>.c), one test. */
#ifndef DL_OP_H
#define DL_OP_H

#include <stddef.h>
#include <stdint.h>

#include "engine/error.h"
#include "engine/rng.h"
#include "engine/tensor.h"

/* ---- hyperparameters: declared as data, read by one generic routine ---- */

enum dl_hp_type {
	DL_HP_INT,     /* decimal integer */
	DL_HP_FLOAT,   /* any number */
	DL_HP_BOOL,    /* true / false */
	DL_HP_ENUM,    /* one of `choices`, "a|b|c"; value.i is the index */
	DL_HP_INTS,    /* an integer or a flat list of integers */
	DL_HP_FLOATS,  /* a number or a flat list of numbers */
	DL_HP_PADDING, /* int, flat list, "same", "valid", or [[b, a], ...] */
	DL_HP_ENTRIES, /* a list of model entries (a sub-model, e.g. an expert) */
	DL_HP_INPUT,   /* the name of a model input or an earlier entry (as in
	                * in: lists): the loader appends that value to the
	                * node's inputs, last; value.set says it was given */
};

enum {
	DL_HP_REQUIRED = 1 << 0, /* no default: the model file must give it */
	DL_HP_DERIVED = 1 << 1,  /* default follows from other values; `def` is
	                          * only shown (e.g. "kernel_size"); value.set
	                          * tells whether the file gave one */
	DL_HP_NONNEG = 1 << 2,   /* every integer >= 0 */
	DL_HP_POSITIVE = 1 << 3, /* every integer (or number) > 0 */
};

struct dl_hp_desc {
	const char *name;     /* PyTorch's constructor argument name */
	enum dl_hp_type type;
	const char *def;      /* default, written as in a model file; NULL when
	                       * DL_HP_REQUIRED; DL_HP_ENTRIES: the scope
	                       * prefix of the copies ("experts") */
	const char *choices;  /* DL_HP_ENUM: "none|tanh"; DL_HP_ENTRIES: the
	                       * name of the INT hyperparameter that says how
	                       * many copies of the body to build */
	unsigned flags;
};

#define DL_HP_MAXN 16

enum dl_pad_kind { DL_PAD_INTS, DL_PAD_SAME, DL_PAD_VALID, DL_PAD_PAIRS };

struct dl_hp_value {
	int set;               /* given in the model file (else the default) */
	int line, col;         /* 1-based, where it was given (else the entry) */
	int64_t i;             /* INT; BOOL (0/1); ENUM (index into choices) */
	double f;              /* FLOAT */
	int n;                 /* INTS, FLOATS, PADDING: number of values (pairs
	                        * for DL_PAD_PAIRS); 0 when unset and derived */
	int scalar;            /* INTS, FLOATS, PADDING: written as a scalar */
	int64_t v[2 * DL_HP_MAXN]; /* INTS, PADDING (pairs: b0, a0, b1, a1...) */
	double fv[DL_HP_MAXN]; /* FLOATS */
	enum dl_pad_kind pad;  /* PADDING */
	const void *entries;   /* ENTRIES: opaque, for the loader */
};

/* ---- parameters ---- */

enum dl_init {
	DL_INIT_ZEROS,
	DL_INIT_ONES,
	DL_INIT_CONST,    /* every element = init_arg */
	DL_INIT_UNIFORM,  /* U(-init_arg, init_arg): PyTorch's kaiming_uniform
	                   * with a = sqrt(5) is init_arg = 1 / sqrt(fan_in) */
	DL_INIT_UNIFORM01,/* U(init_arg, init_arg2) */
	DL_INIT_NORMAL,   /* N(0, init_arg^2) */
};

struct dl_param {
	const char *name;        /* own name, e.g. "weight", "out_proj.bias";
	                          * "" for a bare tensor keyed by the scope
	                          * alone (the parameter op) */
	struct dl_shape shape;
	float *data;             /* in the model's parameter block */
	float *grad;             /* in the gradient block; NULL for buffers and
	                          * when not training */
	int buffer;              /* running statistics: saved, never trained */
	enum dl_init init;
	double init_arg, init_arg2;
	int64_t init_zero_row;   /* a row (first index) set to 0 after the init
	                          * (embedding's padding_idx); -1: none */
	struct dl_param *tie;    /* the parameter whose storage (data and
	                          * grad) this one uses (share:, a shared
	                          * repeat), or NULL; set at layout. A tied
	                          * parameter is not saved, counted, initialised
	                          * or stepped: its owner is */
	int repeat_copy;         /* tied by a shared repeat: no key of its own
	                          * in a weights file (the model format keys
	                          * the tensor by copy 0 alone), where share:
	                          * accepts both keys */
};

/* ---- nodes ---- */

struct dl_op_desc;
struct dl_xwt_set;

/* One node of a composite's inner graph, as the composite's C code
 * describes it (transformer.c); node->build_sub makes it a node. */
struct dl_sub_node {
	const char *scope;         /* below the composite's: "self_attn" */
	const char *op;            /* op name: "multihead_attention" */
	int n_in;                  /* 0: the previous node's output (the
	                            * composite's first input for node 0) */
	int in[3];                 /* k >= 0: node k's output; -1 - i: the
	                            * composite's input i */
	struct {
		const char *name;  /* NULL ends the list */
		double value;      /* INT, FLOAT or BOOL */
	} hp[16];                  /* the others keep their defaults */
};

struct dl_node {
	const struct dl_op_desc *op;
	const char *scope;         /* parameter key prefix, "4.0" */
	const char *file;          /* model file, for messages */
	int line, col;             /* 1-based place of the entry's op key */
	struct dl_hp_value *hp;    /* [op->n_hp], in the order of op->hp */

	int n_in;
	int *in;                   /* value ids of the inputs */
	int out;                   /* value id of the output (the first one) */
	int n_out;                 /* outputs: values out .. out + n_out - 1
	                            * (op->n_outputs; 0 is read as 1) */
	unsigned in_int;           /* bit k: input k is a `dtype: int` model
	                            * input (set by shape inference) */

	/* Set by the op's infer; infer runs again whenever input shapes
	 * change, so it must be idempotent. */
	int n_params;
	struct dl_param *params;   /* declared with dl_node_param */
	size_t ws_bytes;           /* scratch for one forward or backward call */
	size_t saved_bytes;        /* kept from forward to backward (training):
	                            * dropout masks, batch-norm statistics */
	int64_t macs;              /* multiply-adds of one forward call */
	size_t keep_bytes;         /* what the op would keep from one call to
	                            * the next while the weights are fixed
	                            * (ctx->fixed_weights): transformed weights */
	int keep;                  /* set by the inference plan: the node may
	                            * keep them (they fit the plan's budget) */
	struct dl_epilogue *epi;   /* set by the fusion pass (engine/fuse.c):
	                            * this node also computes the entries that
	                            * follow it, up to epi->last; NULL: not */
	int fused;                 /* computed by an earlier node's epilogue:
	                            * skipped */

	/* Stepped calls (engine/stepper.h): the axis, counted from the end
	 * (1: the last), along which the output runs over the token
	 * positions, 0 when it does not depend on them; and the state the
	 * node keeps between calls, step_floats per sequence, sequence s's at
	 * step_state + s * step_floats (placed by the stepping session). */
	int step_axis;
	size_t step_floats;
	float *step_state;

	void *priv;                /* op-private, free()d with the graph */
	void *sub;                 /* struct dl_subgraphs (engine/graph.h): an
	                            * ENTRIES hyperparameter's copies, or the
	                            * inner graph of a composite op */
	/* Builds n->sub (one inner graph, inputs those of n, output the last
	 * node's) from spec[0..count-1], each node from its op's descriptor,
	 * for ops whose structure depends on sizes known only at shape
	 * inference (the transformer layers). Set by the loader, so ops need
	 * not know it; NULL outside a loaded model. */
	int (*build_sub)(struct dl_node *n, const struct dl_sub_node *spec,
			 int count, struct dl_error *err);
};

/* Run-time context of one forward or backward call. */
struct dl_ctx {
	void *ws;                  /* node->ws_bytes of scratch, planned */
	void *saved;               /* node->saved_bytes, planned; NULL when
	                            * not training */
	int train;                 /* PyTorch's train() semantics */
	struct dl_rng *rng;        /* dropout masks (training) */
	const float *const *dout;  /* backward of a node with several outputs:
	                            * dL/d output k for k < n_out */
	const struct dl_shard *shard;  /* data-parallel training, else NULL */
	int fixed_weights;         /* the parameters stay as they are for the
	                            * life of the graph (dlrun infer, dlrun
	                            * bench without --train): an op may keep
	                            * a transform of them in n->priv, made at
	                            * its first call */
	int fuse;                  /* with fixed_weights: composite ops run
	                            * their inner graphs through the fusion
	                            * pass (engine/fuse.c), as dl_graph.fuse
	                            * does for the graph itself */
	struct dl_xwt_set *xwt;    /* with fixed_weights: the weights of
	                            * y = x W^T products packed once
	                            * (engine/xwt.h); NULL: dl_sgemm */
	const struct dl_step_call *step;/* a stepped call (engine/stepper.h): the
	                            * inputs hold only the new positions of
	                            * the token stream; NULL: a whole run */
	double *aux_loss;          /* training forward: ops with an auxiliary
	                            * loss (mixture_of_experts' balance_loss)
	                            * add its value here, and their backward
	                            * adds its gradient; NULL: not wanted */
};

/* One stepped call (dlrun generate): the call's batch rows are the
 * session's sequences row0 .. row0 + N - 1, and sequence row0 + i had
 * pos[i] positions before this call, so its new positions are pos[i] ..
 * pos[i] + T - 1. A node's state holds max_len positions per sequence. */
struct dl_step_call {
	int64_t row0;
	const int64_t *pos;        /* [N] */
	int64_t max_len;
	/* Entries that do not depend on the tokens (an encoder) run once per
	 * sequence: the values of theirs that token entries read are kept,
	 * konst_off[v] floats into each sequence's konst_floats of konst
	 * (-1: not kept). warm: every sequence of the call has run before, so
	 * those entries are skipped and their kept values put back. */
	const int64_t *konst_off;  /* [n_values] of the top graph, or NULL */
	float *konst;
	size_t konst_floats;
	int warm;
};

/* Whether node n runs a part of the token sequence in this call: its
 * output is on the token positions and the call is stepped. */
static inline int dl_stepping(const struct dl_node *n, const struct dl_ctx *ctx)
{
	return ctx->step && n->step_axis > 0;
}

/* Inner graphs of this call run fused: inference on fixed weights with
 * fusion wanted (dl_ctx.fuse). */
static inline int dl_ctx_fuses(const struct dl_ctx *ctx)
{
	return ctx->fuse && ctx->fixed_weights && !ctx->train;
}

/* Most ops have one output; an op whose n_outputs says more gets `out` as
 * an array of n_out shapes (infer) or tensors (forward, backward), and
 * reads the gradients of all of them from ctx->dout in backward. */
#define DL_MAX_OUT 4

/* Data-parallel training (src/train/dist.c): this process computes samples
 * [off, off + n) of a global batch of `total`. Random masks are drawn as
 * one process would for the whole batch (dl_shard_rng_skip); with sync_bn,
 * batch norm sums its statistics over all processes through allreduce. */
struct dl_shard {
	int64_t off, n, total;
	double weight;             /* n / total: this gradient's share */
	int sync_bn;
	/* sums buf[0..len) over every process, in place */
	void (*allreduce)(const struct dl_shard *s, double *buf, int len);
	void *user;
};

/* Advances rng past the draws of `samples` samples of `per_sample` draws
 * each (one dl_rng_uniform is one draw); nothing when s is NULL. */
static inline void dl_shard_rng_skip(const struct dl_shard *s, struct dl_rng *rng,
				     int64_t samples, int64_t per_sample)
{
	for (int64_t i = 0; s && i < samples * per_sample; i++)
		(void)dl_rng_next(rng);
}

/* Shape inference: check the inputs and hyperparameters, set *out, declare
 * parameters, ws_bytes, saved_bytes and macs. Errors name the entry (or the
 * hyperparameter) with dl_node_error. in[0..n_in-1] are full shapes, batch
 * first. */
typedef int (*dl_infer_fn)(struct dl_node *n, const struct dl_shape *in,
			   struct dl_shape *out, struct dl_error *err);
/* out->data has room for out->shape; inputs are never written. */
typedef void (*dl_forward_fn)(struct dl_node *n, const struct dl_tensor *in,
			      struct dl_tensor *out, struct dl_ctx *ctx);
/* Adds (+=) the gradient of each input into din[i] (NULL: not needed) and
 * of each parameter into params[k].grad, given dout = dL/dout. in and out
 * hold the forward values of this step; ctx->saved what forward saved. */
typedef void (*dl_backward_fn)(struct dl_node *n, const struct dl_tensor *in,
			       const struct dl_tensor *out, const float *dout,
			       float *const *din, struct dl_ctx *ctx);

enum {
	DL_OP_COMPLEX = 1 << 0,   /* drawn as a taller box (attention, rnn) */
	DL_OP_INPLACE_OK = 1 << 1,/* forward may write out over in[0] when
	                           * in[0] dies here (elementwise ops) */
	/* What backward reads, so training keeps activations only as long as
	 * they are needed. Without these flags an op's inputs and output are
	 * kept until its backward has run. */
	DL_OP_BWD_NO_INPUTS = 1 << 2, /* backward reads no input's data (only
	                               * shapes) */
	DL_OP_BWD_NO_OUTPUT = 1 << 3, /* backward reads not the output's data */
	DL_OP_IDS = 1 << 4,       /* input 0 holds token ids, each a whole
	                           * number in [0, params[0].shape.d[0]):
	                           * checked on every path (engine/session.h) */
	DL_OP_KINKED = 1 << 5,    /* the derivative jumps where the output
	                           * leaves the input, or sticks to 0 or 1
	                           * (relu's 0, clamp's bounds): gradcheck
	                           * skips the elements a step moves across */
	DL_OP_ADJACENCY = 1 << 6, /* input 1 is a graph's adjacency, weights
	                           * in [0, 1] (gradcheck draws it so) */
};

/* The activations a fused epilogue applies (engine/fuse.c). */
enum dl_act { DL_ACT_NONE, DL_ACT_RELU, DL_ACT_RELU6, DL_ACT_SILU, DL_ACT_GELU,
	      DL_ACT_GELU_TANH };

/* What the fusion pass of inference plans may make of an op (fuse.c). */
enum dl_fuse_role {
	DL_FUSE_NONE,
	DL_FUSE_HEAD_ROWS,     /* y = x W^T + b: heads a chain, its epilogue
	                        * per output row (linear) */
	DL_FUSE_HEAD_CHANNELS, /* a convolution: heads a chain, its
	                        * epilogue per output channel */
	DL_FUSE_BATCH_NORM,    /* folded into the convolution before it */
	DL_FUSE_ACT,           /* an epilogue activation (.fuse_act) */
	DL_FUSE_ADD,           /* a residual add of two inputs */
	DL_FUSE_IDENTITY,      /* the identity at inference: skipped */
};

/* Stepping (engine/stepper.h): whether and how the op runs a part of a
 * sequence at a time. in_axis[i] is input i's token axis (counted from the
 * end; 0: input i does not depend on the tokens; at least one is not 0);
 * in[] the inputs' shapes. Sets out_axis[k] for each output and
 * n->step_floats (state per sequence for max_len positions), or fails
 * naming the entry and why. */
typedef int (*dl_step_fn)(struct dl_node *n, const struct dl_shape *in,
			  const int *in_axis, int *out_axis, int64_t max_len,
			  struct dl_error *err);

struct dl_op_desc {
	const char *name;          /* snake_case of the PyTorch class */
	const char *doc;           /* one line: the formula */
	int min_in, max_in;        /* inputs; max_in -1: any number */
	const struct dl_hp_desc *hp;
	int n_hp;
	dl_infer_fn infer;
	dl_forward_fn forward;
	dl_backward_fn backward;   /* NULL: not differentiable yet */
	unsigned flags;
	const char *params;        /* for `dlrun ops OP`: "weight [out_features,
	                            * in_features], bias [out_features]" */
	/* How many outputs the node has, from its hyperparameters (lstm's
	 * output: state: h_n and c_n), at most DL_MAX_OUT; NULL: one. */
	int (*n_outputs)(const struct dl_node *n);
	/* NULL: the op cannot run on a part of the token sequence (a
	 * stepped session refuses a model where it does). */
	dl_step_fn step;
	/* Fusion (engine/fuse.c): the op's role in a chain, and for
	 * DL_FUSE_ACT the activation node n computes (enum dl_act). */
	enum dl_fuse_role fuse;
	int (*fuse_act)(const struct dl_node *n);
	/* Whether the node adds an auxiliary loss in training (through
	 * ctx->aux_loss: mixture_of_experts' balance_loss); NULL: never. */
	int (*has_aux_loss)(const struct dl_node *n);
};

/* ---- helpers for ops ---- */

/* Formats "FILE:LINE:COL: OP: message" at the hyperparameter hp (index into
 * op->hp, or -1 for the entry itself), sets err, returns DL_EINPUT. */
int dl_node_error(struct dl_error *err, const struct dl_node *n, int hp,
		  const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Declares (first call) or re-checks (later calls) parameter `name`.
 * Returns its index in n->params, or DL_EINPUT with err set when a later
 * call gives another shape. name must be a string literal or outlive n. */
int dl_node_param(struct dl_node *n, const char *name,
		  const struct dl_shape *shape, enum dl_init init, double arg,
		  struct dl_error *err);
/* The index of n's parameter or buffer `name` in n->params, or -1. */
int dl_node_find_param(const struct dl_node *n, const char *name);
/* The owner of a tied parameter's storage (ties may chain); p itself
 * when it is not tied. */
const struct dl_param *dl_param_root(const struct dl_param *p);
/* The same for a buffer (batch-norm running statistics). */
int dl_node_buffer(struct dl_node *n, const char *name,
		   const struct dl_shape *shape, enum dl_init init, double arg,
		   struct dl_error *err);

/* Expands an INTS value to exactly `count` integers (a scalar repeats);
 * a list of another length is an error at that hyperparameter. */
int dl_hp_tuple(const struct dl_node *n, int hp, int count, int64_t *out,
		struct dl_error *err);
/* The same for FLOATS. */
int dl_hp_ftuple(const struct dl_node *n, int hp, int count, double *out,
		 struct dl_error *err);

/* Threads for op loops (OpenMP); set by --threads. */
int dl_threads(void);

#endif
