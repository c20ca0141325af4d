/* transformer_encoder_layer and transformer_decoder_layer, as PyTorch's
 * nn.TransformerEncoderLayer / nn.TransformerDecoderLayer (batch first):
 * each is a sub-model of existing ops (multihead_attention, dropout, add,
 * layer_norm, linear, relu or gelu) written in the model format once
 * d_model is known, with PyTorch's parameter names (self_attn.*,
 * multihead_attn.*, linear1.*, linear2.*, norm1.*, norm2.*, norm3.*). */
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

/* The layer written as a model: inputs x (or tgt and memory) [T, D]. */
static int describe(const struct dl_node *n, int64_t D, char *buf, size_t size)
{
	double p = n->hp[HP_DROPOUT].f, eps = n->hp[HP_EPS].f;
	long long H = n->hp[HP_NHEAD].i, F = n->hp[HP_FF].i;
	const char *act = n->hp[HP_ACT].i ? "gelu" : "relu";
	const char *causal = n->hp[HP_CAUSAL].i ? "true" : "false";
	int pre = (int)n->hp[HP_NORM_FIRST].i;
	const char *x = is_decoder(n) ? "tgt" : "x";
	int k = 0;
#define OUT(...) \
	do { \
		int w_ = snprintf(buf + k, size - (size_t)k, __VA_ARGS__); \
		if (w_ < 0 || (size_t)(k + w_) >= size) \
			return -1; \
		k += w_; \
	} while (0)
	OUT("inputs:\n  %s: {shape: [T, %lld]}\n", x, (long long)D);
	if (is_decoder(n))
		OUT("  memory: {shape: [S, %lld]}\n", (long long)D);
	OUT("layers:\n");
	/* self attention block: x + dropout1(self_attn(norm1?(x))) */
	if (pre)
		OUT("  - {name: norm1, in: %s, layer_norm: {eps: %.17g}}\n", x, eps);
	OUT("  - {name: self_attn, in: %s, multihead_attention: "
	    "{num_heads: %lld, dropout: %.17g, causal: %s}}\n", pre ? "norm1" : x, H, p, causal);
	OUT("  - {name: dropout1, dropout: {p: %.17g}}\n", p);
	OUT("  - {name: sum1, in: [%s, dropout1], add: {}}\n", x);
	const char *cur = "sum1";
	if (!pre) {
		OUT("  - {name: norm1, layer_norm: {eps: %.17g}}\n", eps);
		cur = "norm1";
	}
	int ff_norm = 2;
	if (is_decoder(n)) {
		/* cross attention block on the memory */
		if (pre)
			OUT("  - {name: norm2, in: %s, layer_norm: {eps: %.17g}}\n", cur, eps);
		OUT("  - {name: multihead_attn, in: [%s, memory], multihead_attention: "
		    "{num_heads: %lld, dropout: %.17g}}\n", pre ? "norm2" : cur, H, p);
		OUT("  - {name: dropout2, dropout: {p: %.17g}}\n", p);
		OUT("  - {name: sum2, in: [%s, dropout2], add: {}}\n", cur);
		cur = "sum2";
		if (!pre) {
			OUT("  - {name: norm2, layer_norm: {eps: %.17g}}\n", eps);
			cur = "norm2";
		}
		ff_norm = 3;
	}
	/* feed-forward block */
	if (pre)
		OUT("  - {name: norm%d, in: %s, layer_norm: {eps: %.17g}}\n", ff_norm, cur, eps);
	OUT("  - {name: linear1, in: %s, linear: {out_features: %lld}}\n",
	    pre ? (ff_norm == 3 ? "norm3" : "norm2") : cur, F);
	OUT("  - {name: activation, %s: {}}\n", act);
	OUT("  - {name: dropout, dropout: {p: %.17g}}\n", p);
	OUT("  - {name: linear2, linear: {out_features: %lld}}\n", (long long)D);
	OUT("  - {name: dropout%d, dropout: {p: %.17g}}\n", ff_norm, p);
	OUT("  - {name: sum%d, in: [%s, dropout%d], add: {}}\n", ff_norm, cur, ff_norm);
	if (!pre)
		OUT("  - {name: norm%d, layer_norm: {eps: %.17g}}\n", ff_norm, eps);
#undef OUT
	return 0;
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
		char text[4096];
		if (!n->build_sub)
			return dl_node_error(err, n, -1, "internal: no sub-model builder");
		if (describe(n, D, text, sizeof text) != 0)
			return dl_node_error(err, n, -1, "internal: description too long");
		int rc = n->build_sub(n, text, err);
		if (rc)
			return rc;
	}
	struct dl_graph *g = layer(n);
	struct dl_error inner = {0};
	if (dl_graph_infer(g, in, &inner) != 0) {
		/* a sub-model's message already names this entry's place */
		dl_error_set(err, inner.code, "%s", inner.msg);
		return inner.code;
	}
	int rc = dl_sub_declare(n, n->sub, err);
	if (rc)
		return rc;
	*out = g->values[g->outputs[0]].shape;
	n->macs = 0;
	for (int i = 0; i < g->n_nodes; i++)
		n->macs += g->nodes[i].macs;
	n->ws_bytes = 0;
	n->saved_bytes = 0;
	return 0;
}

static void tf_forward(struct dl_node *n, const struct dl_tensor *in,
		       struct dl_tensor *out, struct dl_ctx *ctx)
{
	struct dl_graph *g = layer(n);
	struct dl_shape shapes[2];
	float *data[2];
	for (int i = 0; i < n->n_in; i++) {
		shapes[i] = in[i].shape;
		data[i] = in[i].data;
	}
	struct dl_error err = {0};
	/* the shapes passed this node's infer, so the sub-model's too */
	if (dl_sub_prepare(g, shapes, ctx->train, &err) != 0)
		return;
	dl_sub_link(n, n->sub);
	struct dl_ctx sub = *ctx;
	dl_graph_forward(g, data, &sub);
	memcpy(out->data, g->values[g->outputs[0]].data,
	       (size_t)dl_shape_numel(&out->shape) * sizeof(float));
}

static void tf_backward(struct dl_node *n, const struct dl_tensor *in,
			const struct dl_tensor *out, const float *dout,
			float *const *din, struct dl_ctx *ctx)
{
	struct dl_graph *g = layer(n);
	dl_sub_link(n, n->sub);
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
