/* transformer_encoder_layer and transformer_decoder_layer, as PyTorch's
 * nn.TransformerEncoderLayer / nn.TransformerDecoderLayer (batch first):
 * each is an inner graph of existing ops (multihead_attention, dropout,
 * add, layer_norm, linear, relu or gelu) built from their descriptors once
 * d_model is known, with PyTorch's parameter names (self_attn.*,
 * multihead_attn.*, linear1.*, linear2.*, norm1.*, norm2.*, norm3.*). Its
 * memory is planned inside this node's workspace and saved state.
 *
 * A last input of rank 2 is a key_padding_mask [N, S] (nonzero = padding):
 * the encoder's (in: [x, mask]) masks its self attention's keys, as
 * PyTorch's src_key_padding_mask; the decoder's (in: [tgt, memory, mask])
 * masks the memory's keys in the cross attention, as
 * memory_key_padding_mask. The sparse patterns of multihead_attention
 * (window, dilation, global_tokens, random_keys, seed, stride, fixed,
 * fixed_summary, block_size) go to the self attention only, with causal;
 * the decoder's cross attention stays dense. */
#include <stdio.h>
#include <string.h>

#include "engine/graph.h"
#include "engine/op.h"
#include "ops/subgraph.h"
#include "engine/stepper.h"

enum {
	HP_DMODEL, HP_NHEAD, HP_FF, HP_DROPOUT, HP_ACT, HP_EPS, HP_BATCH_FIRST,
	HP_NORM_FIRST, HP_CAUSAL, HP_WINDOW, HP_DILATION, HP_GLOBAL, HP_RANDOM,
	HP_SEED, HP_STRIDE, HP_FIXED, HP_FSUM, HP_BLOCK, N_HP
};

static const struct dl_hp_desc tf_hp[] = {
	[HP_DMODEL] = {"d_model", DL_HP_INT, "inferred", NULL, DL_HP_DERIVED | DL_HP_POSITIVE},
	[HP_NHEAD] = {"nhead", DL_HP_INT, NULL, NULL, DL_HP_REQUIRED | DL_HP_POSITIVE},
	[HP_FF] = {"dim_feedforward", DL_HP_INT, "2048", NULL, DL_HP_POSITIVE},
	[HP_DROPOUT] = {"dropout", DL_HP_FLOAT, "0.1", NULL, DL_HP_NONNEG},
	[HP_ACT] = {"activation", DL_HP_ENUM, "relu", "relu|gelu", 0},
	[HP_EPS] = {"layer_norm_eps", DL_HP_FLOAT, "1e-5", NULL, DL_HP_POSITIVE},
	[HP_BATCH_FIRST] = {"batch_first", DL_HP_BOOL, "true", NULL, 0},
	[HP_NORM_FIRST] = {"norm_first", DL_HP_BOOL, "false", NULL, 0},
	[HP_CAUSAL] = {"causal", DL_HP_BOOL, "false", NULL, 0},
	/* the self attention's sparse patterns, as multihead_attention's */
	[HP_WINDOW] = {"window", DL_HP_INT, "none", NULL, DL_HP_DERIVED | DL_HP_NONNEG},
	[HP_DILATION] = {"dilation", DL_HP_INT, "1", NULL, DL_HP_POSITIVE},
	[HP_GLOBAL] = {"global_tokens", DL_HP_INT, "0", NULL, DL_HP_NONNEG},
	[HP_RANDOM] = {"random_keys", DL_HP_INT, "0", NULL, DL_HP_NONNEG},
	[HP_SEED] = {"seed", DL_HP_INT, "0", NULL, DL_HP_NONNEG},
	[HP_STRIDE] = {"stride", DL_HP_INT, "none", NULL, DL_HP_DERIVED | DL_HP_POSITIVE},
	[HP_FIXED] = {"fixed", DL_HP_INT, "none", NULL, DL_HP_DERIVED | DL_HP_POSITIVE},
	[HP_FSUM] = {"fixed_summary", DL_HP_INT, "1", NULL, DL_HP_POSITIVE},
	[HP_BLOCK] = {"block_size", DL_HP_INT, "none", NULL, DL_HP_DERIVED | DL_HP_POSITIVE},
};

static int is_decoder(const struct dl_node *n)
{
	return strcmp(n->op->name, "transformer_decoder_layer") == 0;
}

/* The self attention's hyperparameters after num_heads, dropout and causal:
 * the patterns the entry sets, under multihead_attention's names. */
static void pattern_hps(const struct dl_node *n, struct dl_sub_node *sp)
{
	int h = 3;
	for (int i = HP_WINDOW; i <= HP_BLOCK; i++)
		if (n->hp[i].set) {
			sp->hp[h].name = tf_hp[i].name;
			sp->hp[h].value = (double)n->hp[i].i;
			h++;
		}
	sp->hp[h].name = NULL;
}

/* The key_padding_mask's input index, or -1 */
static int kpm_input(const struct dl_node *n)
{
	return n->n_in == (is_decoder(n) ? 3 : 2) ? n->n_in - 1 : -1;
}

/* The layer as inner nodes, in PyTorch's order (which is the order of its
 * parameters): the inputs are x (or tgt and memory, -1 and -2), then the
 * key_padding_mask if any (-2 or -3). Returns the number of nodes. */
static int describe(const struct dl_node *n, int64_t D, struct dl_sub_node *sp)
{
	double p = n->hp[HP_DROPOUT].f, eps = n->hp[HP_EPS].f;
	double H = (double)n->hp[HP_NHEAD].i, F = (double)n->hp[HP_FF].i;
	int pre = (int)n->hp[HP_NORM_FIRST].i, k = 0;
	int x = -1, cur;   /* the block's input: the residual stream */
	int kpm = kpm_input(n), dec = is_decoder(n);
#define NODE(scope_, op_, ...) (sp[k] = (struct dl_sub_node){scope_, op_, __VA_ARGS__}, k++)
#define NORM(scope_, from) NODE(scope_, "layer_norm", 1, {from}, {{"eps", eps}})
#define DROP(scope_) NODE(scope_, "dropout", 0, {0}, {{"p", p}})
#define NONE {{NULL, 0}}
	/* self attention block: x + dropout1(self_attn(norm1?(x))) */
	if (pre)
		NORM("norm1", x);
	if (kpm >= 0 && !dec)
		NODE("self_attn", "multihead_attention", 2, {pre ? k - 1 : x, -1 - kpm},
		     {{"num_heads", H}, {"dropout", p}, {"causal", (double)n->hp[HP_CAUSAL].i}});
	else
		NODE("self_attn", "multihead_attention", 1, {pre ? k - 1 : x},
		     {{"num_heads", H}, {"dropout", p}, {"causal", (double)n->hp[HP_CAUSAL].i}});
	pattern_hps(n, &sp[k - 1]);
	DROP("dropout1");
	NODE("sum1", "add", 2, {x, k - 1}, NONE);
	cur = k - 1;
	if (!pre) {
		NORM("norm1", cur);
		cur = k - 1;
	}
	const char *ff_norm = "norm2", *ff_drop = "dropout2", *ff_sum = "sum2";
	if (dec) {
		/* cross attention block on the memory (and its padding) */
		if (pre)
			NORM("norm2", cur);
		if (kpm >= 0)
			NODE("multihead_attn", "multihead_attention", 3,
			     {pre ? k - 1 : cur, -2, -1 - kpm}, {{"num_heads", H}, {"dropout", p}});
		else
			NODE("multihead_attn", "multihead_attention", 2, {pre ? k - 1 : cur, -2},
			     {{"num_heads", H}, {"dropout", p}});
		DROP("dropout2");
		NODE("sum2", "add", 2, {cur, k - 1}, NONE);
		cur = k - 1;
		if (!pre) {
			NORM("norm2", cur);
			cur = k - 1;
		}
		ff_norm = "norm3";
		ff_drop = "dropout3";
		ff_sum = "sum3";
	}
	/* feed-forward block */
	if (pre)
		NORM(ff_norm, cur);
	NODE("linear1", "linear", 1, {pre ? k - 1 : cur}, {{"out_features", F}});
	NODE("activation", n->hp[HP_ACT].i ? "gelu" : "relu", 0, {0}, NONE);
	DROP("dropout");
	NODE("linear2", "linear", 0, {0}, {{"out_features", (double)D}});
	DROP(ff_drop);
	NODE(ff_sum, "add", 2, {cur, k - 1}, NONE);
	if (!pre)
		NORM(ff_norm, k - 1);
#undef NODE
#undef NORM
#undef DROP
#undef NONE
	return k;
}

static struct dl_graph *layer(const struct dl_node *n)
{
	const struct dl_subgraphs *s = n->sub;
	return s ? s->g[0] : NULL;
}

static int tf_infer(struct dl_node *n, const struct dl_shape *in,
		    struct dl_shape *out, struct dl_error *err)
{
	char a[128], b[128];
	if (!n->hp[HP_BATCH_FIRST].i)
		return dl_node_error(err, n, HP_BATCH_FIRST,
				     "dlrun is batch first: batch_first is accepted only as true");
	int kpm = kpm_input(n);
	for (int i = 0; i < n->n_in; i++)
		if (i != kpm && in[i].ndim != 3)
			return dl_node_error(err, n, -1, "expects [N, T, d_model] sequences, got %s",
					     dl_shape_str(&in[i], a, sizeof a));
	if (kpm >= 0) {
		int64_t S = in[is_decoder(n) ? 1 : 0].d[1];
		if (in[kpm].ndim != 2 || in[kpm].d[1] != S ||
		    (in[kpm].d[0] != in[0].d[0] && in[kpm].d[0] != 1))
			return dl_node_error(err, n, -1,
				"the key_padding_mask (input %d) has shape %s; it must be [N, %lld] (one flag per %s)",
				kpm + 1, dl_shape_str(&in[kpm], a, sizeof a), (long long)S,
				is_decoder(n) ? "memory step" : "step");
	}
	const struct dl_hp_value *h = n->hp;
	if (h[HP_DILATION].set && !h[HP_WINDOW].set)
		return dl_node_error(err, n, HP_DILATION,
			"dilation applies to the window pattern; give window too");
	if (h[HP_FSUM].set && !h[HP_FIXED].set)
		return dl_node_error(err, n, HP_FSUM,
			"fixed_summary applies to the fixed pattern; give fixed too");
	if (h[HP_FIXED].set && h[HP_FSUM].i > h[HP_FIXED].i)
		return dl_node_error(err, n, HP_FSUM,
			"fixed_summary is %lld but a fixed block has only %lld cells",
			(long long)h[HP_FSUM].i, (long long)h[HP_FIXED].i);
	if (h[HP_SEED].set && h[HP_RANDOM].i == 0)
		return dl_node_error(err, n, HP_SEED,
			"seed chooses the random keys; give random_keys too");
	if (h[HP_BLOCK].set && !h[HP_WINDOW].set && h[HP_GLOBAL].i == 0 && h[HP_RANDOM].i == 0)
		return dl_node_error(err, n, HP_BLOCK,
			"block_size applies to the window, global_tokens and random_keys patterns; give one of them too");
	int64_t D = in[0].d[2];
	if (n->hp[HP_DMODEL].set && n->hp[HP_DMODEL].i != D)
		return dl_node_error(err, n, HP_DMODEL, "d_model is %lld but the input has %lld features",
				     (long long)n->hp[HP_DMODEL].i, (long long)D);
	if (D % n->hp[HP_NHEAD].i)
		return dl_node_error(err, n, HP_NHEAD, "nhead %lld does not divide d_model %lld",
				     (long long)n->hp[HP_NHEAD].i, (long long)D);
	if (is_decoder(n) && (in[1].d[2] != D || in[1].d[0] != in[0].d[0]))
		return dl_node_error(err, n, -1, "memory %s does not fit the target %s: "
				     "the same batch and d_model", dl_shape_str(&in[1], a, sizeof a),
				     dl_shape_str(&in[0], b, sizeof b));
	if (!n->sub) {
		struct dl_sub_node spec[24];
		if (!n->build_sub)
			return dl_node_error(err, n, -1, "internal: no inner-graph builder");
		int rc = n->build_sub(n, spec, describe(n, D, spec), err);
		if (rc)
			return rc;
	}
	struct dl_graph *g = layer(n);
	struct dl_error inner = {0};
	if (dl_sub_infer(g, in, &inner) != 0) {
		/* an inner node's message already names this entry's place */
		dl_error_set(err, inner.code, "%s", inner.msg);
		return inner.code;
	}
	struct dl_sub_sizes sz;
	int rc = dl_sub_plan(n, n->sub, &sz, err);
	if (rc)
		return rc;
	*out = g->values[g->outputs[0]].shape;
	n->macs = 0;
	for (int i = 0; i < g->n_nodes; i++)
		n->macs += g->nodes[i].macs;
	/* inference: the inner activations, then the inner workspace;
	 * training: the inner activations and gradients are kept for
	 * backward in the saved state, the workspace is the inner one */
	n->ws_bytes = sz.arena + sz.ws;
	n->saved_bytes = sz.train;
	return 0;
}

/* Places the inner graph in this call's memory: the saved state while
 * training (forward and backward), else the workspace. */
static struct dl_graph *bind(struct dl_node *n, struct dl_ctx *ctx)
{
	dl_sub_link(n, n->sub);
	if (ctx->saved)
		dl_sub_bind(n, n->sub, 0, 1, 0, ctx->saved, ctx->ws);
	else
		dl_sub_bind(n, n->sub, 0, 0, dl_ctx_fuses(ctx), ctx->ws,
			    (char *)ctx->ws + dl_sub_planned(n)->arena);
	return layer(n);
}

static void tf_forward(struct dl_node *n, const struct dl_tensor *in,
		       struct dl_tensor *out, struct dl_ctx *ctx)
{
	struct dl_graph *g = bind(n, ctx);
	float *data[3];
	for (int i = 0; i < n->n_in; i++)
		data[i] = in[i].data;
	struct dl_ctx sub = *ctx;
	dl_graph_forward(g, data, &sub);
	memcpy(out->data, g->values[g->outputs[0]].data,
	       (size_t)dl_shape_numel(&out->shape) * sizeof(float));
}

static void tf_backward(struct dl_node *n, const struct dl_tensor *in,
			const struct dl_tensor *out, const float *dout,
			float *const *din, struct dl_ctx *ctx)
{
	struct dl_graph *g = bind(n, ctx);
	struct dl_ctx sub = *ctx;
	const float *douts[1] = {dout};
	dl_graph_backward(g, douts, din, &sub);
}

/* Stepped as its inner graph is: the self attention keeps its cache, the
 * rest runs position by position. */
static int tf_step(struct dl_node *n, const struct dl_shape *in,
		   const int *in_axis, int *out_axis, int64_t max_len,
		   struct dl_error *err)
{
	(void)in;
	struct dl_graph *g = layer(n);
	if (!g)
		return dl_node_error(err, n, -1, "no inner graph to step");
	return dl_graph_step_analyse(g, in_axis, max_len, out_axis, err);
}

/* x = norm1(x + dropout1(self_attn(x))); x = norm2(x + dropout2(linear2(
 * dropout(activation(linear1(x)))))); norm_first: x + block(norm(x)) */
static const struct dl_op_desc encoder_op = {
	.name = "transformer_encoder_layer",
	.doc = "nn.TransformerEncoderLayer on in: x or [x, key_padding_mask]: self attention (sparse patterns too) and feed-forward blocks, residuals, layer norms",
	.min_in = 1, .max_in = 2,
	.hp = tf_hp, .n_hp = N_HP,
	.infer = tf_infer, .forward = tf_forward, .backward = tf_backward,
	.step = tf_step,
	.flags = DL_OP_COMPLEX | DL_OP_BWD_NO_OUTPUT,
	.params = "self_attn.* (multihead_attention), linear1.*, linear2.*, norm1.*, norm2.*",
};

/* the encoder's blocks with a cross attention block on the memory between
 * them (multihead_attn, dropout2, norm2; the feed-forward's norm3) */
static const struct dl_op_desc decoder_op = {
	.name = "transformer_decoder_layer",
	.doc = "nn.TransformerDecoderLayer on in: [tgt, memory] or [tgt, memory, memory_key_padding_mask]: self attention (sparse patterns too), cross attention, feed-forward",
	.min_in = 2, .max_in = 3,
	.hp = tf_hp, .n_hp = N_HP,
	.infer = tf_infer, .forward = tf_forward, .backward = tf_backward,
	.step = tf_step,
	.flags = DL_OP_COMPLEX | DL_OP_BWD_NO_OUTPUT,
	.params = "self_attn.*, multihead_attn.*, linear1.*, linear2.*, norm1.*, norm2.*, norm3.*",
};

const struct dl_op_desc *const dl_ops_transformer[] = {&encoder_op, &decoder_op, NULL};
