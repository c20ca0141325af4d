/* The graph: op nodes in execution order, the values they pass, shape
 * inference over the whole graph, the memory plan, and execution. The
 * loader (src/model) builds it; verbs run it. */
#ifndef DL_GRAPH_H
#define DL_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "engine/op.h"

struct dl_value {
	struct dl_shape shape;
	float *data;       /* set by dl_graph_plan (arena) or dl_graph_forward
	                    * (model inputs: the caller's buffers) */
	float *grad;       /* its gradient, in the arena (training plans) */
	int producer;      /* node index; -1 for a model input */
	int last_use;      /* last node reading it, for buffer reuse */
	int pinned;        /* a model output: kept to the end */
	size_t offset;     /* of data in the arena */
	size_t goffset;    /* of grad in the arena */
	size_t bytes;
	/* Lifetimes in steps: forward of node i is step i; the loss is step
	 * n_nodes; backward of node i is step 2 n_nodes - i. */
	int t0, t1;        /* data */
	int g0, g1;        /* grad (training plans) */
	int alias;         /* fused away (engine/fuse.c): 1 + the value whose
	                    * buffer it shares; 0: its own */
	int born;          /* 1 + the node from which a fused chain writes it;
	                    * 0: its producer's step */
};

struct dl_input_spec {
	char *name;
	int ndim;                    /* per-sample rank (batch excluded) */
	int64_t d[DL_MAX_DIMS];      /* fixed sizes; -1 where symbolic */
	char *sym[DL_MAX_DIMS];      /* symbolic names, or NULL */
	int is_int;                  /* dtype: int (token ids) */
	int line, col;
};

/* One row of `dlrun summary`: an entry of the model file. A composite's
 * row covers nodes [first, last]; an op's row is one node. */
struct dl_row {
	char *scope;       /* full scope, "4.0" */
	char *label;       /* the entry's own scope, shown indented */
	const char *kind;  /* op name or composite kind */
	int depth;
	int first, last;   /* node range; last < first for an empty body */
	int value;         /* the entry's output value */
	int shared;        /* a repeat whose copies share one set of
	                    * parameters (drawn "xN, shared") */
};

/* The inner graphs of a composite node: the copies of the body of an
 * ENTRIES hyperparameter (a mixture's experts, one input of per-sample
 * shape [D]), or the one graph a composite op builds (a transformer layer).
 * Their memory and parameters are the parent's (borrowed; planned by
 * ops/subgraph.h). node->sub points here. */
struct dl_subgraphs {
	int n;
	struct dl_graph **g;
};

/* A `train:` default of the model file, kept as text for the train verb. */
struct dl_kv {
	char *key, *val;
	int line, col;
};

struct dl_data_conf;                 /* model/data_spec.h */

struct dl_graph {
	char *file;                  /* model file path, for messages */
	struct dl_data_conf *data;   /* the `data:` mapping (one block), or NULL */
	char *name;                  /* `name:` key, or NULL */
	char *weights;               /* `weights:` resolved against the model
	                              * file's directory, or NULL */

	int n_nodes;
	struct dl_node *nodes;
	int n_values;
	struct dl_value *values;     /* values [0, n_inputs) are the inputs */
	int n_inputs;
	struct dl_input_spec *inputs;
	int n_outputs;
	int *outputs;                /* value ids */
	char **output_names;
	int n_rows;
	struct dl_row *rows;

	int n_syms;                  /* symbolic sizes and their bindings */
	char **sym_names;
	int64_t *sym_vals;           /* -1 while unbound */

	/* Parameters: one block, laid out in node order on the first
	 * successful inference. */
	int params_ready;
	size_t n_param_floats;
	float *param_block;
	float *grad_block;           /* NULL until training asks for it */

	/* The input shapes of the last successful inference, and what the
	 * memory plan was made for: a stream of same-shaped steps infers and
	 * plans once. */
	struct dl_shape *last_in;    /* [n_inputs] */
	unsigned shape_gen;          /* counts successful inferences */
	unsigned plan_gen;           /* shape_gen of the plan; 0: none */
	int plan_train;

	/* Memory plan for the current shapes. */
	int shapes_ready;
	int train_plan;              /* the plan holds gradients and keeps
	                              * activations until backward is done
	                              * with them */
	char *arena;
	size_t arena_bytes, arena_cap;
	size_t act_bytes;            /* peak bytes of live activations */
	void *ws;
	size_t ws_bytes, ws_cap;
	int fuse;                    /* inference plans run the fusion pass
	                              * (engine/fuse.c): set while the weights
	                              * are fixed (dl_ctx.fixed_weights) */
	size_t keep_bytes;           /* transformed weights the nodes may keep
	                              * at inference (node->keep), in the plan */
	struct dl_tensor *tin;       /* input views for one node call */
	int tin_cap;

	/* Training plans: what each node saves for its backward. */
	char *saved;
	size_t saved_cap;
	size_t *saved_off;           /* [n_nodes] */
	float **din;                 /* input-gradient pointers for one call */

	int watch_finite;            /* forward records first_bad (training) */
	int first_bad;               /* first node whose output was not
	                              * finite in the last forward, or -1 */
	double *prof;                /* [n_nodes] when not NULL: seconds spent
	                              * in each node, added by every forward and
	                              * backward (dlrun bench) */
	/* When not NULL: called after each node's forward with its inputs
	 * and output (dlrun gradcheck reads the side of every kink there). */
	void (*on_forward)(void *arg, const struct dl_node *n,
			   const struct dl_tensor *in, const struct dl_tensor *out);
	void *on_forward_arg;

	int n_train;
	struct dl_kv *train;

	int borrowed;                /* a composite's inner graph: its arena,
	                              * ws, saved state and parameters are
	                              * views into its parent's plan and
	                              * parameter block (ops/subgraph.h) */
	/* Set by the loader: called once every parameter is declared, before
	 * the parameter layout, to tie parameters (p->tie: share:, shared
	 * repeats) and check their keys; `bind` is its data, freed with
	 * bind_free. */
	int (*bind_params)(struct dl_graph *g, struct dl_error *err);
	void *bind;
	void (*bind_free)(void *bind);
	int n_ignore_keys;           /* `ignore_keys:` globs of weights-file */
	char **ignore_keys;          /* keys the model does not use */
	struct dl_vocab *vocab;      /* `vocab:` (model/vocab.h), or NULL */
};

/* Defined in model/vocab.c; dl_graph_free calls it. */
struct dl_vocab;
void dl_vocab_free(struct dl_vocab *v);

/* Frees everything the graph owns; NULL-safe. */
void dl_graph_free(struct dl_graph *g);

/* Shape inference over the whole graph for the given model input shapes
 * (full shapes, batch first): binds symbolic sizes, runs every op's infer,
 * declares parameters (laid out on the first call). Nothing is computed. */
int dl_graph_infer(struct dl_graph *g, const struct dl_shape *in,
		   struct dl_error *err);
/* Lays out activations for the shapes of the last dl_graph_infer, reusing
 * buffers by liveness, and allocates the arena and workspace (grown, never
 * shrunk). A training plan also lays out every activation's gradient, and
 * keeps an activation until the last backward that reads it (see the
 * DL_OP_BWD_* flags). */
int dl_graph_plan(struct dl_graph *g, int train, struct dl_error *err);
/* The most memory a plan may need (weights, their gradients when
 * training, activations, workspace and saved state), checked by
 * dl_graph_plan before it allocates; 0 restores the default, 80% of the
 * physical memory. Process-wide, as the thread count. */
void dl_set_max_memory(size_t bytes);
size_t dl_max_memory(void);
/* The activation layout alone, for the current shapes (after inference):
 * sets every value's bytes, lifetimes and offset (and, train, gradient
 * offset) as dl_graph_plan does, and the arena size in *arena_bytes, but
 * allocates nothing that outlives the call. For a graph whose memory its
 * parent plans (a composite's inner graph). */
int dl_graph_layout(struct dl_graph *g, int train, size_t *arena_bytes,
		    struct dl_error *err);
/* Runs every node. in[i] holds model input i in the inferred shape.
 * Outputs are then in g->values[g->outputs[k]]. */
void dl_graph_forward(struct dl_graph *g, float *const *in, struct dl_ctx *ctx);

/* Gives every trainable parameter a gradient in one zeroed block. Fails
 * naming the first op that has no backward. */
int dl_graph_train_setup(struct dl_graph *g, struct dl_error *err);
void dl_graph_zero_grad(struct dl_graph *g);
/* After a training forward (ctx->train, training plan): back-propagates
 * dout[k] (the gradient of output k, NULL for none), adding into the
 * parameter gradients and, where din_in[i] is not NULL, into the gradient
 * of model input i. dout[k] may be output k's own gradient slot
 * (dl_graph_output_grad), filled after the forward: it is then taken as
 * it is, with no buffer outside the plan. */
void dl_graph_backward(struct dl_graph *g, const float *const *dout,
		       float *const *din_in, struct dl_ctx *ctx);
/* The gradient slot of output k in a training plan's arena (NULL
 * outside training): placed at the loss step, so it may share memory with
 * forward activations and is to be written after the forward. */
float *dl_graph_output_grad(struct dl_graph *g, int k);
/* The first node (in execution order) whose output held a NaN or an
 * infinity in the last forward, or -1; recorded while g->watch_finite is
 * set (a training plan may reuse an activation's memory before the end). */
int dl_graph_first_nonfinite(const struct dl_graph *g);

/* Finds parameter `key` ("3.weight"); returns it or NULL. */
struct dl_param *dl_graph_param(struct dl_graph *g, const char *key,
				struct dl_node **node);
/* Writes "SCOPE.NAME" into buf; returns buf. */
char *dl_param_key(const struct dl_node *n, const struct dl_param *p,
		   char *buf, size_t size);
/* Fills every parameter and buffer with its op's default initialisation,
 * deterministically from seed. */
void dl_graph_init_params(struct dl_graph *g, uint64_t seed);

#endif
