/* transformer_encoder_layer and transformer_decoder_layer, as PyTorch's
 * nn.TransformerEncoderLayer / nn.TransformerDecoderLayer (batch first):
 * each is an inner graph of existing ops (multihead_attention, dropout,
 * add, layer_norm, linear, relu or gelu) built from their descriptors once
 * d_model is known, with PyTorch's parameter names (self_attn.*,
 * multihead_attn.*, linear1.*, linear2.*, norm1.*, norm2.*, norm3.*). Its
 * memory is planned inside this node's workspace and saved state. */
#include <stdio.h>
#include <string.h>

#include "engine/graph.h"
#include "engine/op.h"
#include "ops/subgraph.h"

enum {
	HP_DMODEL, HP_NHEAD, HP_FF, HP_DROPOUT, HP_ACT, HP_EPS, HP_BATCH_FIRST,
	HP_NORM_FIRST, HP_CAUSAL, N_HP
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
};

static int is_decoder(const struct dl_node *n)
{
	return strcmp(n->op->name, "transformer_decoder_layer") == 0;
}

/* The layer as inner nodes, in PyTorch's order (which is the order of its
 * parameters): the inputs are x (or tgt and memory, -1 and -2). Returns
 * the number of nodes. */
static int describe(const struct dl_node *n, int64_t D, struct dl_sub_node *sp)
{
	double p = n->hp[HP_DROPOUT].f, eps = n->hp[HP_EPS].f;
	double H = (double)n->hp[HP_NHEAD].i, F = (double)n->hp[HP_FF].i;
	int pre = (int)n->hp[HP_NORM_FIRST].i, k = 0;
	int x = -1, cur;   /* the block's input: the residual stream */
#define NODE(scope_, op_, ...) (sp[k] = (struct dl_sub_node){scope_, op_, __VA_ARGS__}, k++)
#define NORM(scope_, from) NODE(scope_, "layer_norm", 1, {from}, {{"eps", eps}})
#define DROP(scope_) NODE(scope_, "dropout", 0, {0}, {{"p", p}})
#define NONE {{NULL, 0}}
	/* self attention block: x + dropout1(self_attn(norm1?(x))) */
	if (pre)
		NORM("norm1", x);
	NODE("self_attn", "multihead_attention", 1, {pre ? k - 1 : x},
	     {{"num_heads", H}, {"dropout", p}, {"causal", (double)n->hp[HP_CAUSAL].i}});
	DROP("dropout1");
	NODE("sum1", "add", 2, {x, k - 1}, NONE);
	cur = k - 1;
	if (!pre) {
		NORM("norm1", cur);
		cur = k - 1;
	}
	const char *ff_norm = "norm2", *ff_drop = "dropout2", *ff_sum = "sum2";
	if (is_decoder(n)) {
		/* cross attention block on the memory */
		if (pre)
			NORM("norm2", cur);
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
	for (int i = 0; i < n->n_in; i++)
		if (in[i].ndim != 3)
			return dl_node_error(err, n, -1, "expects [N, T, d_model] sequences, got %s",
					     dl_shape_str(&in[i], a, sizeof a));
	int64_t D = in[0].d[2];
	if (n->hp[HP_DMODEL].set && n->hp[HP_DMODEL].i != D)
		return dl_node_error(err, n, HP_DMODEL, "d_model is %lld but the input has %lld features",
				     (long long)n->hp[HP_DMODEL].i, (long long)D);
	if (D % n->hp[HP_NHEAD].i)
		return dl_node_error(err, n, HP_NHEAD, "nhead %lld does not divide d_model %lld",
				     (long long)n->hp[HP_NHEAD].i, (long long)D);
	if (n->n_in == 2 && (in[1].d[2] != D || in[1].d[0] != in[0].d[0]))
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
		dl_sub_bind(n, n->sub, 0, 1, ctx->saved, ctx->ws);
	else
		dl_sub_bind(n, n->sub, 0, 0, ctx->ws,
			    (char *)ctx->ws + dl_sub_planned(n)->arena);
	return layer(n);
}

static void tf_forward(struct dl_node *n, const struct dl_tensor *in,
		       struct dl_tensor *out, struct dl_ctx *ctx)
{
	struct dl_graph *g = bind(n, ctx);
	float *data[2];
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

/* x = norm1(x + dropout1(self_attn(x))); x = norm2(x + dropout2(linear2(
 * dropout(activation(linear1(x)))))); norm_first: x + block(norm(x)) */
static const struct dl_op_desc encoder_op = {
	.name = "transformer_encoder_layer",
	.doc = "nn.TransformerEncoderLayer: self attention and feed-forward blocks, residuals, layer norms",
	.min_in = 1, .max_in = 1,
	.hp = tf_hp, .n_hp = N_HP,
	.infer = tf_infer, .forward = tf_forward, .backward = tf_backward,
	.flags = DL_OP_COMPLEX | DL_OP_BWD_NO_OUTPUT,
	.params = "self_attn.* (multihead_attention), linear1.*, linear2.*, norm1.*, norm2.*",
};

/* the encoder's blocks with a cross attention block on the memory between
 * them (multihead_attn, dropout2, norm2; the feed-forward's norm3) */
static const struct dl_op_desc decoder_op = {
	.name = "transformer_decoder_layer",
	.doc = "nn.TransformerDecoderLayer on in: [tgt, memory]: self attention, cross attention, feed-forward",
	.min_in = 2, .max_in = 2,
	.hp = tf_hp, .n_hp = N_HP,
	.infer = tf_infer, .forward = tf_forward, .backward = tf_backward,
	.flags = DL_OP_COMPLEX | DL_OP_BWD_NO_OUTPUT,
	.params = "self_attn.*, multihead_attn.*, linear1.*, linear2.*, norm1.*, norm2.*, norm3.*",
};

const struct dl_op_desc *const dl_ops_transformer[] = {&encoder_op, &decoder_op, NULL};
