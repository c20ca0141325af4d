/* Attention ops: the book's `attention` operator (scaled-dot, dot, bilinear
 * and additive scores, on [N, T, D] sequences or per-head [N, H, T, d]
 * inputs) and PyTorch's nn.MultiheadAttention (batch first). Both take the
 * shared masks (causal; window/dilation, global tokens, random keys,
 * strided and fixed sparse patterns as a union, optionally counted in
 * blocks), an attn_mask and a key_padding_mask input, dropout on the
 * weights and Shaw et al.'s relative keys and values; multihead adds
 * Primer's depthwise convolutions. This file reads hyperparameters and
 * inputs; the math of one (sample, head) slice is attention_core.c's.
 *
 * Inputs: q, k, v as `in: [x]`, `[q, kv]` or `[q, k, v]`; a fourth input
 * after q, k, v written out is the attn_mask ([Tq, Tk] per sample, or one
 * batch-1 mask for every sample; a `dtype: int` model input masks where
 * nonzero, any other is added to the scores); a last input of rank 2
 * ([N, Tk]: one per-sample dimension, where q, k and v have two or three)
 * is the key_padding_mask (nonzero = padding, PyTorch's boolean mask,
 * whatever the input's dtype: a float 0/1 mask from inside a composite
 * reads the same). */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/gemm.h"
#include "engine/op.h"
#include "engine/stepper.h"
#include "engine/xwt.h"
#include "ops/attention.h"

/* ---- hyperparameters: the masks, shared by both ops as a tail ---- */

enum {
	MK_CAUSAL, MK_WINDOW, MK_DILATION, MK_GLOBAL, MK_RANDOM, MK_SEED,
	MK_STRIDE, MK_FIXED, MK_FSUM, MK_REL, MK_BLOCK, MK_RELV, MK_COUNT
};

#define MASK_HPS                                                           \
	{"causal", DL_HP_BOOL, "false", NULL, 0},                          \
	{"window", DL_HP_INT, "none", NULL, DL_HP_DERIVED | DL_HP_NONNEG}, \
	{"dilation", DL_HP_INT, "1", NULL, DL_HP_POSITIVE},                \
	{"global_tokens", DL_HP_INT, "0", NULL, DL_HP_NONNEG},             \
	{"random_keys", DL_HP_INT, "0", NULL, DL_HP_NONNEG},               \
	{"seed", DL_HP_INT, "0", NULL, DL_HP_NONNEG},                      \
	{"stride", DL_HP_INT, "none", NULL, DL_HP_DERIVED | DL_HP_POSITIVE}, \
	{"fixed", DL_HP_INT, "none", NULL, DL_HP_DERIVED | DL_HP_POSITIVE}, \
	{"fixed_summary", DL_HP_INT, "1", NULL, DL_HP_POSITIVE},           \
	{"relative_positions", DL_HP_INT, "0", NULL, DL_HP_NONNEG},        \
	{"block_size", DL_HP_INT, "none", NULL,                            \
	 DL_HP_DERIVED | DL_HP_POSITIVE},                                  \
	{"relative_values", DL_HP_BOOL, "false", NULL, 0}

/* Checks the mask hyperparameters at base. */
static int mask_check(const struct dl_node *n, int base, struct dl_error *err)
{
	const struct dl_hp_value *h = n->hp + base;
	if (h[MK_FIXED].set && h[MK_FSUM].i > h[MK_FIXED].i)
		return dl_node_error(err, n, base + MK_FSUM,
			"fixed_summary is %lld but a fixed block has only %lld cells",
			(long long)h[MK_FSUM].i, (long long)h[MK_FIXED].i);
	if (h[MK_DILATION].set && !h[MK_WINDOW].set)
		return dl_node_error(err, n, base + MK_DILATION,
			"dilation applies to the window pattern; give window too");
	if (h[MK_FSUM].set && !h[MK_FIXED].set)
		return dl_node_error(err, n, base + MK_FSUM,
			"fixed_summary applies to the fixed pattern; give fixed too");
	if (h[MK_SEED].set && h[MK_RANDOM].i == 0)
		return dl_node_error(err, n, base + MK_SEED,
			"seed chooses the random keys; give random_keys too");
	if (h[MK_BLOCK].set && !h[MK_WINDOW].set && h[MK_GLOBAL].i == 0 &&
	    h[MK_RANDOM].i == 0)
		return dl_node_error(err, n, base + MK_BLOCK,
			"block_size applies to the window, global_tokens and random_keys patterns; give one of them too");
	if (h[MK_RELV].i && h[MK_REL].i == 0)
		return dl_node_error(err, n, base + MK_RELV,
			"relative_values needs relative_positions (the clipping distance K of its table)");
	return 0;
}

static void mask_fill(struct att *a, const struct dl_node *n, int base)
{
	const struct dl_hp_value *h = n->hp + base;
	a->causal = (int)h[MK_CAUSAL].i;
	a->window = h[MK_WINDOW].set ? h[MK_WINDOW].i : -1;
	a->dilation = h[MK_DILATION].i;
	a->global = h[MK_GLOBAL].i;
	a->random = h[MK_RANDOM].i;
	a->seed = (uint64_t)h[MK_SEED].i;
	a->stride = h[MK_STRIDE].set ? h[MK_STRIDE].i : 0;
	a->fixed = h[MK_FIXED].set ? h[MK_FIXED].i : 0;
	a->fsum = h[MK_FSUM].i;
	a->block = h[MK_BLOCK].set ? h[MK_BLOCK].i : 1;
	a->K = (int)h[MK_REL].i;
	att_prepare(a);
}

/* ---- inputs ---- */

/* Which input is which: q, k, v (k = q for one input, v = k for two), the
 * attn_mask (a fourth after q, k, v) and the key_padding_mask (a last input
 * of rank 2); -1: none. n: the q/k/v inputs. */
struct roles {
	int q, k, v, am, kpm, n;
};

static void att_roles(int n_in, int last_ndim, struct roles *r)
{
	int m = n_in;
	r->am = r->kpm = -1;
	if (m >= 2 && last_ndim == 2)
		r->kpm = --m;
	if (m == 4)
		r->am = --m;
	r->q = 0;
	r->k = m > 1 ? 1 : 0;
	r->v = m - 1;
	r->n = m;
}

/* q, k, v shapes (rank 3, or 4 when allow4: all the same), their batch,
 * head and length agreement, and the masks' shapes */
static int input_shapes(const struct dl_node *n, const struct dl_shape *in,
			const struct roles *r, int allow4,
			struct dl_error *err)
{
	char b[128], c[128];
	if (r->n > 3)
		return dl_node_error(err, n, -1,
			"%d inputs: attention takes q, k, v, an attn_mask [N, T, S] and a key_padding_mask [N, S]",
			n->n_in);
	int nd = in[0].ndim;
	for (int i = 0; i < r->n; i++) {
		const struct dl_shape *s = &in[i];
		if (s->ndim != 3 && !(allow4 && s->ndim == 4))
			return dl_node_error(err, n, -1,
				allow4 ? "input %d has shape %s; attention needs sequences [N, T, D] or per-head inputs [N, H, T, d]"
				       : "input %d has shape %s; attention needs sequences [N, T, D]",
				i + 1, dl_shape_str(s, b, sizeof b));
		if (s->ndim != nd)
			return dl_node_error(err, n, -1,
				"inputs 1 %s and %d %s have different ranks",
				dl_shape_str(&in[0], b, sizeof b), i + 1,
				dl_shape_str(s, c, sizeof c));
		for (int t = 1; t < nd; t++)
			if (s->d[t] <= 0 || s->d[t] > INT_MAX / 4)
				return dl_node_error(err, n, -1,
					"input %d has shape %s; attention needs steps and features",
					i + 1, dl_shape_str(s, b, sizeof b));
	}
	const struct dl_shape *q = &in[r->q], *k = &in[r->k], *v = &in[r->v];
	for (int i = 1; i < r->n; i++)
		if (in[i].d[0] != in[0].d[0])
			return dl_node_error(err, n, -1,
				"the inputs have batch sizes %lld and %lld; they must be equal",
				(long long)in[0].d[0], (long long)in[i].d[0]);
	if (nd == 4)
		for (int i = 1; i < r->n; i++)
			if (in[i].d[1] != in[0].d[1])
				return dl_node_error(err, n, -1,
					"inputs 1 %s and %d %s have different numbers of heads",
					dl_shape_str(&in[0], b, sizeof b), i + 1,
					dl_shape_str(&in[i], c, sizeof c));
	if (k->d[nd - 2] != v->d[nd - 2])
		return dl_node_error(err, n, -1,
			"keys %s and values %s have different lengths",
			dl_shape_str(k, b, sizeof b),
			dl_shape_str(v, c, sizeof c));
	int64_t N = q->d[0], Tq = q->d[nd - 2], Tk = k->d[nd - 2];
	if (r->am >= 0) {
		const struct dl_shape *m = &in[r->am];
		if (m->ndim != 3 || m->d[1] != Tq || m->d[2] != Tk)
			return dl_node_error(err, n, -1,
				"the attn_mask (input %d) has shape %s; it must be [N, %lld, %lld] (queries by keys per sample)",
				r->am + 1, dl_shape_str(m, b, sizeof b),
				(long long)Tq, (long long)Tk);
		if (m->d[0] != N && m->d[0] != 1)
			return dl_node_error(err, n, -1,
				"the attn_mask (input %d) has batch size %lld; it must be the queries' %lld, or 1 for one mask for every sample",
				r->am + 1, (long long)m->d[0], (long long)N);
	}
	if (r->kpm >= 0) {
		const struct dl_shape *m = &in[r->kpm];
		if (m->d[1] != Tk)
			return dl_node_error(err, n, -1,
				"the key_padding_mask (input %d) has shape %s; it must be [N, %lld] (one flag per key)",
				r->kpm + 1, dl_shape_str(m, b, sizeof b),
				(long long)Tk);
		if (m->d[0] != N && m->d[0] != 1)
			return dl_node_error(err, n, -1,
				"the key_padding_mask (input %d) has batch size %lld; it must be the queries' %lld, or 1 for every sample",
				r->kpm + 1, (long long)m->d[0], (long long)N);
	}
	return 0;
}

/* Points a at sample b's masks; mask gradients when din is given */
static void set_masks(struct att *a, const struct dl_node *n,
		      const struct dl_tensor *in, const struct roles *r, int b,
		      float *const *din)
{
	a->am = a->kpm = NULL;
	a->dam = NULL;
	if (r->am >= 0) {
		const struct dl_tensor *m = &in[r->am];
		int64_t off = m->shape.d[0] == 1 ? 0
			      : (int64_t)b * m->shape.d[1] * m->shape.d[2];
		a->am = m->data + off;
		a->am_int = (int)(n->in_int >> r->am & 1u);
		if (din && din[r->am] && !a->am_int)
			a->dam = din[r->am] + off;
	}
	if (r->kpm >= 0) {
		const struct dl_tensor *m = &in[r->kpm];
		int64_t off = m->shape.d[0] == 1 ? 0
			      : (int64_t)b * m->shape.d[1];
		a->kpm = m->data + off;
	}
}


/* ---- stepped decoding (engine/stepper.h) ----
 * Self attention over the token positions keeps the keys and values of
 * the earlier positions of each sequence (a KV cache, max_len rows);
 * queries on the tokens against keys that are not (cross attention on an
 * encoder's memory) need nothing kept. Only causal attention can be
 * stepped over the tokens: otherwise an early position would see later
 * ones. */

/* What can be stepped: q, k, v on the tokens (self attention; causal,
 * no mask inputs, no random keys), or q alone (cross attention: no
 * causal mask, relative positions or convolution over the positions). */
static int att_step_check(struct dl_node *n, const struct dl_shape *in,
			  const int *in_axis, int base, int dconv,
			  int *self, struct dl_error *err)
{
	struct roles r;
	att_roles(n->n_in, in[n->n_in - 1].ndim, &r);
	const struct dl_hp_value *h = n->hp + base;
	if (!in_axis[r.q])
		return dl_node_error(err, n, -1,
			"its keys run over the token positions but its queries do not, so the "
			"model cannot be decoded step by step");
	if (in[r.q].ndim != 3 || in_axis[r.q] != 2)
		return dl_node_error(err, n, -1,
			"its queries are not a sequence [N, T, D] over the token positions, so "
			"the model cannot be decoded step by step");
	if ((r.am >= 0 && in_axis[r.am]) || (r.kpm >= 0 && in_axis[r.kpm]))
		return dl_node_error(err, n, -1,
			"its mask input runs over the token positions; decoding step by step "
			"takes the causal: true mask instead");
	*self = in_axis[r.k] != 0;
	if (*self) {
		if (in_axis[r.k] != 2 || in_axis[r.v] != 2)
			return dl_node_error(err, n, -1,
				"its keys or values are not sequences over the token positions");
		if (!h[MK_CAUSAL].i)
			return dl_node_error(err, n, base + MK_CAUSAL,
				"it is not causal, so each position sees later ones and the model "
				"cannot be decoded step by step (give causal: true)");
		if (r.am >= 0 || r.kpm >= 0)
			return dl_node_error(err, n, -1,
				"it takes a mask input; decoding step by step takes causal: true alone");
		if (h[MK_RANDOM].i > 0)
			return dl_node_error(err, n, base + MK_RANDOM,
				"random keys depend on the whole sequence's length, so the model "
				"cannot be decoded step by step");
		return 0;
	}
	if (in_axis[r.v])
		return dl_node_error(err, n, -1,
			"its values run over the token positions but its keys do not");
	if (h[MK_CAUSAL].i || h[MK_REL].i > 0 || dconv > 0 || (h[MK_WINDOW].set) ||
	    h[MK_STRIDE].set || h[MK_FIXED].set || h[MK_GLOBAL].i > 0 || h[MK_RANDOM].i > 0)
		return dl_node_error(err, n, -1,
			"its queries are the token positions and its keys are not, under a mask "
			"that relates the two positions; it cannot be decoded step by step");
	return 0;
}

/* The positions a node's cache holds, from its state's size: keys and
 * values of dk + dv floats a position, then `extra` floats. */
static int64_t cache_len(const struct dl_node *n, int64_t dkv, int64_t extra)
{
	return n->step_floats > (size_t)extra && dkv > 0
		       ? (int64_t)(n->step_floats - (size_t)extra) / dkv : 0;
}

/* ---- attention ---- */

enum { AT_SCORE, AT_SIZE, AT_MASK, AT_DROPOUT = AT_MASK + MK_COUNT, AT_N };

static const struct dl_hp_desc attention_hp[] = {
	[AT_SCORE] = {"score", DL_HP_ENUM, "scaled_dot",
		      "scaled_dot|dot|bilinear|additive", 0},
	[AT_SIZE] = {"attention_size", DL_HP_INT, "none", NULL,
		     DL_HP_DERIVED | DL_HP_POSITIVE},
	MASK_HPS,
	[AT_DROPOUT] = {"dropout", DL_HP_FLOAT, "0.0", NULL, 0},
};

/* scratch floats of the bilinear / additive scores */
static int64_t attention_tmpf(const struct dl_node *n, int64_t Tq,
			      int64_t Tk, int64_t Dk)
{
	int64_t A = n->hp[AT_SIZE].set ? n->hp[AT_SIZE].i : 0;
	return 2 * (Tq * Dk > (Tq + Tk) * A ? Tq * Dk : (Tq + Tk) * A);
}

/* The att of the attention op for q, k, v shapes (rank nd); parameters
 * (and their gradients when grads) once they are laid out */
static void attention_att(struct att *a, const struct dl_node *n,
			  const struct dl_shape *q, const struct dl_shape *k,
			  const struct dl_shape *v, int params, int grads)
{
	int nd = q->ndim;
	memset(a, 0, sizeof *a);
	a->score = (int)n->hp[AT_SCORE].i;
	a->Tq = (int)q->d[nd - 2];
	a->Tk = (int)k->d[nd - 2];
	a->dq = (int)q->d[nd - 1];
	a->dk = (int)k->d[nd - 1];
	a->dv = (int)v->d[nd - 1];
	a->A = n->hp[AT_SIZE].set ? (int)n->hp[AT_SIZE].i : 0;
	a->scale = a->score == SC_SCALED ? (float)(1.0 / sqrt((double)a->dq))
					 : 1.0f;
	double pd = n->hp[AT_DROPOUT].f;
	a->keep_scale = pd < 1.0 ? (float)(1.0 / (1.0 - pd)) : 0.0f;
	mask_fill(a, n, AT_MASK);
	a->tlists = grads;
	if (!params)
		return;
	int p = 0;
	if (a->score == SC_BILINEAR || a->score == SC_ADDITIVE) {
		a->W = n->params[p].data;
		a->dW = grads ? n->params[p].grad : NULL;
		p++;
	}
	if (a->score == SC_ADDITIVE) {
		a->w2 = n->params[p].data;
		a->dw2 = grads ? n->params[p].grad : NULL;
		p++;
	}
	if (a->K > 0) {
		a->relk = n->params[p].data;
		a->drelk = grads ? n->params[p].grad : NULL;
		p++;
	}
	if (n->hp[AT_MASK + MK_RELV].i) {
		a->relv = n->params[p].data;
		a->drelv = grads ? n->params[p].grad : NULL;
	}
}

static int attention_infer(struct dl_node *n, const struct dl_shape *in,
			   struct dl_shape *out, struct dl_error *err)
{
	char b[128], c[128];
	struct roles r;
	att_roles(n->n_in, in[n->n_in - 1].ndim, &r);
	int rc = input_shapes(n, in, &r, 1, err);
	if (rc < 0)
		return rc;
	rc = mask_check(n, AT_MASK, err);
	if (rc < 0)
		return rc;
	const struct dl_shape *q = &in[r.q], *k = &in[r.k], *v = &in[r.v];
	int nd = q->ndim;
	int score = (int)n->hp[AT_SCORE].i;
	int64_t Dq = q->d[nd - 1], Dk = k->d[nd - 1], Dv = v->d[nd - 1];
	if (score == SC_ADDITIVE && !n->hp[AT_SIZE].set)
		return dl_node_error(err, n, AT_SCORE,
			"the additive score needs attention_size (the width of its hidden layer)");
	if (score != SC_ADDITIVE && n->hp[AT_SIZE].set)
		return dl_node_error(err, n, AT_SIZE,
			"attention_size applies to the additive score only");
	if (n->hp[AT_MASK + MK_REL].i > 0 && score != SC_SCALED)
		return dl_node_error(err, n, AT_MASK + MK_REL,
			"relative_positions applies to the scaled_dot score only");
	if ((score == SC_SCALED || score == SC_DOT) && Dq != Dk)
		return dl_node_error(err, n, -1,
			"queries %s and keys %s have different sizes; a dot-product score needs equal ones",
			dl_shape_str(q, b, sizeof b),
			dl_shape_str(k, c, sizeof c));
	double p = n->hp[AT_DROPOUT].f;
	if (!(p >= 0.0 && p <= 1.0))
		return dl_node_error(err, n, AT_DROPOUT,
			"dropout is %g; a probability is between 0 and 1", p);
	if (score == SC_BILINEAR) {
		int64_t wd[2] = {Dq, Dk};
		struct dl_shape ws = dl_shape_make(2, wd);
		rc = dl_node_param(n, "weight", &ws, DL_INIT_UNIFORM,
				   1.0 / sqrt((double)Dk), err);
		if (rc < 0)
			return rc;
	} else if (score == SC_ADDITIVE) {
		int64_t A = n->hp[AT_SIZE].i;
		int64_t wd[2] = {A, Dq + Dk}, w2d[2] = {1, A};
		struct dl_shape ws = dl_shape_make(2, wd);
		struct dl_shape w2s = dl_shape_make(2, w2d);
		rc = dl_node_param(n, "w.weight", &ws, DL_INIT_UNIFORM,
				   1.0 / sqrt((double)(Dq + Dk)), err);
		if (rc < 0)
			return rc;
		rc = dl_node_param(n, "w2.weight", &w2s, DL_INIT_UNIFORM,
				   1.0 / sqrt((double)A), err);
		if (rc < 0)
			return rc;
	}
	int64_t K = n->hp[AT_MASK + MK_REL].i;
	if (K > 0) {
		int64_t rd[2] = {2 * K + 1, Dq};
		struct dl_shape rs = dl_shape_make(2, rd);
		rc = dl_node_param(n, "rel_k", &rs, DL_INIT_NORMAL, 1.0, err);
		if (rc < 0)
			return rc;
	}
	if (n->hp[AT_MASK + MK_RELV].i) {
		int64_t rd[2] = {2 * K + 1, Dv};
		struct dl_shape rs = dl_shape_make(2, rd);
		rc = dl_node_param(n, "rel_v", &rs, DL_INIT_NORMAL, 1.0, err);
		if (rc < 0)
			return rc;
	}
	int64_t N = q->d[0], H = nd == 4 ? q->d[1] : 1;
	int64_t Tq = q->d[nd - 2], Tk = k->d[nd - 2];
	int64_t A = n->hp[AT_SIZE].set ? n->hp[AT_SIZE].i : 0;
	struct att a;
	attention_att(&a, n, q, k, v, 0, 0);
	/* the flash path holds no Tq x Tk cells: only its time grows so */
	if ((!a.flash && (double)a.cells > 1e9) || (double)(Tq + Tk) * A > 1e9)
		return dl_node_error(err, n, -1, "the inputs are too long");
	*out = *q;
	out->d[nd - 1] = Dv;
	n->ws_bytes = att_ws_layout(&a, attention_tmpf(n, Tq, Tk, Dk), NULL,
				    NULL);
	/* stepped: one score row per query sample over the cache */
	n->ws_bytes += sizeof(float) * (size_t)N * (size_t)cache_len(n, Dk + Dv, 0);
	n->saved_bytes = p > 0.0 ? (size_t)(N * H * a.cells) : 0;
	n->macs = N * H *
		  (a.cells * (Dq + Dv) +
		   (score == SC_BILINEAR ? Tq * Dq * Dk : 0) +
		   (score == SC_ADDITIVE ? (Tq * Dq + Tk * Dk) * A + a.cells * A
					 : 0));
	return 0;
}

/* The op's slices: sample b, head h of [N, H, T, d] (H = 1 for [N, T, D]) */
static void attention_run(struct dl_node *n, const struct dl_tensor *in,
			  float *o, const float *dout, float *const *din,
			  struct dl_ctx *ctx)
{
	struct roles r;
	att_roles(n->n_in, in[n->n_in - 1].shape.ndim, &r);
	const struct dl_tensor *q = &in[r.q], *k = &in[r.k], *v = &in[r.v];
	int nd = q->shape.ndim;
	struct att a;
	attention_att(&a, n, &q->shape, &k->shape, &v->shape, 1, din != NULL);
	struct att_ws w;
	att_ws_layout(&a, attention_tmpf(n, a.Tq, a.Tk, a.dk), ctx->ws, &w);
	att_build(&a, &w);
	int N = (int)q->shape.d[0], H = nd == 4 ? (int)q->shape.d[1] : 1;
	double p = n->hp[AT_DROPOUT].f;
	int drop = ctx->train && ctx->saved && p > 0.0;
	for (int b = 0; b < N; b++) {
		set_masks(&a, n, in, &r, b, din);
		for (int h = 0; h < H; h++) {
			int64_t s = (int64_t)b * H + h;
			int64_t oq = s * a.Tq * a.dq, ok = s * a.Tk * a.dk;
			int64_t ov = s * a.Tk * a.dv, oo = s * a.Tq * a.dv;
			unsigned char *keep =
				drop ? (unsigned char *)ctx->saved + s * a.cells
				     : NULL;
			if (!din) {
				att_slice_fwd(&a, q->data + oq, a.dq,
					      k->data + ok, a.dk, v->data + ov,
					      a.dv, o + oo, a.dv, &w, keep,
					      ctx->rng, p);
				continue;
			}
			float *dq = din[r.q], *dk = din[r.k], *dv = din[r.v];
			att_slice_bwd(&a, q->data + oq, a.dq, k->data + ok,
				      a.dk, v->data + ov, a.dv, dout + oo, a.dv,
				      dq ? dq + oq : NULL, a.dq,
				      dk ? dk + ok : NULL, a.dk,
				      dv ? dv + ov : NULL, a.dv, &w, keep);
		}
	}
}

static int attention_step(struct dl_node *n, const struct dl_shape *in,
			  const int *in_axis, int *out_axis, int64_t max_len,
			  struct dl_error *err)
{
	int self;
	int rc = att_step_check(n, in, in_axis, AT_MASK, 0, &self, err);
	if (rc)
		return rc;
	int sc = (int)n->hp[AT_SCORE].i;
	if (self && sc != SC_SCALED && sc != SC_DOT)
		return dl_node_error(err, n, AT_SCORE,
			"stepped decoding takes the scaled_dot and dot scores");
	struct roles r;
	att_roles(n->n_in, in[n->n_in - 1].ndim, &r);
	out_axis[0] = 2;
	n->step_floats = self ? (size_t)max_len * (size_t)(in[r.k].d[2] + in[r.v].d[2]) : 0;
	return 0;
}

/* A stepped call of self attention: the new keys and values go into each
 * sequence's cache, then every new query attends to the cache. */
static void attention_fwd_step(struct dl_node *n, const struct dl_tensor *in,
			       struct dl_tensor *out, struct dl_ctx *ctx)
{
	struct roles r;
	att_roles(n->n_in, in[n->n_in - 1].shape.ndim, &r);
	const struct dl_tensor *q = &in[r.q], *k = &in[r.k], *v = &in[r.v];
	struct att a;
	attention_att(&a, n, &q->shape, &k->shape, &v->shape, 1, 0);
	int N = (int)q->shape.d[0], T = (int)q->shape.d[1];
	int dk = a.dk, dv = a.dv;
	int64_t L = cache_len(n, dk + dv, 0);
	float *scores = (float *)((char *)ctx->ws + n->ws_bytes) - (size_t)N * L;
#pragma omp parallel for if (N > 1)
	for (int b = 0; b < N; b++) {
		int64_t p0 = ctx->step->pos[b];
		float *K = n->step_state + (size_t)(ctx->step->row0 + b) * n->step_floats;
		float *V = K + L * dk;
		memcpy(K + p0 * dk, k->data + (int64_t)b * T * dk, sizeof(float) * (size_t)T * dk);
		memcpy(V + p0 * dv, v->data + (int64_t)b * T * dv, sizeof(float) * (size_t)T * dv);
		att_step_fwd(&a, q->data + (int64_t)b * T * a.dq, a.dq, T, p0, K, dk, V, dv,
			     out->data + (int64_t)b * T * dv, dv, scores + (size_t)b * L);
	}
}

static void attention_fwd(struct dl_node *n, const struct dl_tensor *in,
			  struct dl_tensor *out, struct dl_ctx *ctx)
{
	if (dl_stepping(n, ctx) && n->step_state) {
		attention_fwd_step(n, in, out, ctx);
		return;
	}
	attention_run(n, in, out->data, NULL, NULL, ctx);
}

static void attention_bwd(struct dl_node *n, const struct dl_tensor *in,
			  const struct dl_tensor *out, const float *dout,
			  float *const *din, struct dl_ctx *ctx)
{
	attention_run(n, in, NULL, dout, din, ctx);
}

/* Y = softmax(score(Q, K) + mask) V (+ relative values), per head for
 * [N, H, T, d] inputs */
static const struct dl_op_desc op_attention = {
	.name = "attention",
	.doc = "Y = softmax(score(Q, K) + mask) V; in: x, [q, kv] or [q, k, v] (+ attn_mask, key_padding_mask)",
	.min_in = 1, .max_in = 5,
	.hp = attention_hp, .n_hp = AT_N,
	.infer = attention_infer,
	.forward = attention_fwd,
	.backward = attention_bwd,
	.step = attention_step,
	.flags = DL_OP_COMPLEX | DL_OP_BWD_NO_OUTPUT,
	.params = "bilinear: weight [D_q, D_k]; additive: w.weight [attention_size, D_q + D_k], w2.weight [1, attention_size]; rel_k [2 relative_positions + 1, D_q]; relative_values: rel_v [2 relative_positions + 1, D_v]",
};

/* ---- multihead_attention ---- */

enum {
	MH_EMBED, MH_HEADS, MH_DROPOUT, MH_BIAS, MH_KDIM, MH_VDIM, MH_BF,
	MH_DCONV, MH_MASK
};

static const struct dl_hp_desc mha_hp[] = {
	[MH_EMBED] = {"embed_dim", DL_HP_INT, "inferred", NULL,
		      DL_HP_DERIVED | DL_HP_POSITIVE},
	[MH_HEADS] = {"num_heads", DL_HP_INT, NULL, NULL,
		      DL_HP_REQUIRED | DL_HP_POSITIVE},
	[MH_DROPOUT] = {"dropout", DL_HP_FLOAT, "0.0", NULL, 0},
	[MH_BIAS] = {"bias", DL_HP_BOOL, "true", NULL, 0},
	[MH_KDIM] = {"kdim", DL_HP_INT, "inferred", NULL,
		     DL_HP_DERIVED | DL_HP_POSITIVE},
	[MH_VDIM] = {"vdim", DL_HP_INT, "inferred", NULL,
		     DL_HP_DERIVED | DL_HP_POSITIVE},
	[MH_BF] = {"batch_first", DL_HP_BOOL, "true", NULL, 0},
	[MH_DCONV] = {"dconv", DL_HP_INT, "0", NULL, DL_HP_NONNEG},
	MASK_HPS,
};

/* Parameter indices of one multihead node */
struct mha_p {
	int inw, qw, kw, vw, inb, ow, ob, dw[3], db[3], rel, relv;
};

static void mha_params(const struct dl_node *n, int sep, struct mha_p *p)
{
	int i = 0;
	memset(p, -1, sizeof *p);
	if (sep) {
		p->qw = i++;
		p->kw = i++;
		p->vw = i++;
	} else {
		p->inw = i++;
	}
	if (n->hp[MH_BIAS].i)
		p->inb = i++;
	p->ow = i++;
	if (n->hp[MH_BIAS].i)
		p->ob = i++;
	if (n->hp[MH_DCONV].i > 0)
		for (int t = 0; t < 3; t++) {
			p->dw[t] = i++;
			if (n->hp[MH_BIAS].i)
				p->db[t] = i++;
		}
	if (n->hp[MH_MASK + MK_REL].i > 0)
		p->rel = i++;
	if (n->hp[MH_MASK + MK_RELV].i)
		p->relv = i++;
}

/* scratch in floats: X[3] projections, C[3] after dconv, O, then backward's
 * dX[3], dC[3], dO, then the attention core's scratch (core bytes) */
struct mha_ws {
	float *x[3], *c[3], *o, *dx[3], *dc[3], *dO;
	void *core;
};

static size_t mha_layout(int64_t N, int64_t Tq, int64_t Tk, size_t core,
			 int64_t E, int dconv, void *base, struct mha_ws *w)
{
	float *f = base;
	int64_t len[3] = {N * Tq * E, N * Tk * E, N * Tk * E};
	int64_t off = 0;
	for (int t = 0; t < 3; t++) {
		if (w)
			w->x[t] = f + off;
		off += len[t];
	}
	for (int t = 0; t < 3; t++) {
		if (w)
			w->c[t] = dconv ? f + off : w->x[t];
		off += dconv ? len[t] : 0;
	}
	if (w)
		w->o = f + off;
	off += N * Tq * E;
	for (int t = 0; t < 3; t++) {
		if (w)
			w->dx[t] = f + off;
		off += len[t];
	}
	for (int t = 0; t < 3; t++) {
		if (w)
			w->dc[t] = dconv ? f + off : w->dx[t];
		off += dconv ? len[t] : 0;
	}
	if (w)
		w->dO = f + off;
	off += N * Tq * E;
	off += (-off) & 3; /* 16-byte alignment for the core's lists */
	if (w)
		w->core = f + off;
	return sizeof(float) * (size_t)off + core;
}

static int mha_infer(struct dl_node *n, const struct dl_shape *in,
		     struct dl_shape *out, struct dl_error *err)
{
	struct roles r;
	att_roles(n->n_in, in[n->n_in - 1].ndim, &r);
	int rc = input_shapes(n, in, &r, 0, err);
	if (rc < 0)
		return rc;
	const struct dl_shape *q = &in[r.q], *k = &in[r.k], *v = &in[r.v];
	rc = mask_check(n, MH_MASK, err);
	if (rc < 0)
		return rc;
	if (!n->hp[MH_BF].i)
		return dl_node_error(err, n, MH_BF,
			"batch_first must be true: dlrun is always batch first");
	int64_t E = q->d[2], KD = k->d[2], VD = v->d[2];
	int64_t H = n->hp[MH_HEADS].i;
	const int chk[3] = {MH_EMBED, MH_KDIM, MH_VDIM};
	const int64_t got[3] = {E, KD, VD};
	const char *what[3] = {"queries", "keys", "values"};
	for (int t = 0; t < 3; t++)
		if (n->hp[chk[t]].set && n->hp[chk[t]].i != got[t])
			return dl_node_error(err, n, chk[t],
				"%s is %lld but the %s have %lld features",
				mha_hp[chk[t]].name, (long long)n->hp[chk[t]].i,
				what[t], (long long)got[t]);
	if (E % H != 0)
		return dl_node_error(err, n, MH_HEADS,
			"num_heads %lld does not divide embed_dim %lld",
			(long long)H, (long long)E);
	double p = n->hp[MH_DROPOUT].f;
	if (!(p >= 0.0 && p <= 1.0))
		return dl_node_error(err, n, MH_DROPOUT,
			"dropout is %g; a probability is between 0 and 1", p);
	int64_t Tq = q->d[1], Tk = k->d[1], N = q->d[0];
	struct att a;
	memset(&a, 0, sizeof a);
	a.score = SC_SCALED;
	a.Tq = (int)Tq;
	a.Tk = (int)Tk;
	a.dq = a.dk = a.dv = (int)(E / H);
	a.keep_scale = p < 1.0 ? (float)(1.0 / (1.0 - p)) : 0.0f;
	mask_fill(&a, n, MH_MASK);
	if ((!a.flash && (double)a.cells * H > 1e10) ||
	    (double)N * (Tq + 2 * Tk) * E > 1e10)
		return dl_node_error(err, n, -1, "the inputs are too large");
	int sep = KD != E || VD != E;
	int bias = (int)n->hp[MH_BIAS].i;
	if (sep) {
		const char *nm[3] = {"q_proj_weight", "k_proj_weight",
				     "v_proj_weight"};
		for (int t = 0; t < 3; t++) {
			int64_t wd[2] = {E, got[t]};
			struct dl_shape s = dl_shape_make(2, wd);
			rc = dl_node_param(n, nm[t], &s, DL_INIT_UNIFORM,
					   sqrt(6.0 / (double)(E + got[t])),
					   err);
			if (rc < 0)
				return rc;
		}
	} else {
		int64_t wd[2] = {3 * E, E};
		struct dl_shape s = dl_shape_make(2, wd);
		rc = dl_node_param(n, "in_proj_weight", &s, DL_INIT_UNIFORM,
				   sqrt(6.0 / (double)(4 * E)), err);
		if (rc < 0)
			return rc;
	}
	if (bias) {
		int64_t d3 = 3 * E;
		struct dl_shape s = dl_shape_make(1, &d3);
		rc = dl_node_param(n, "in_proj_bias", &s, DL_INIT_ZEROS, 0.0, err);
		if (rc < 0)
			return rc;
	}
	{
		int64_t wd[2] = {E, E};
		struct dl_shape s = dl_shape_make(2, wd);
		rc = dl_node_param(n, "out_proj.weight", &s, DL_INIT_UNIFORM,
				   1.0 / sqrt((double)E), err);
		if (rc < 0)
			return rc;
	}
	if (bias) {
		struct dl_shape s = dl_shape_make(1, &E);
		rc = dl_node_param(n, "out_proj.bias", &s, DL_INIT_ZEROS, 0.0, err);
		if (rc < 0)
			return rc;
	}
	int64_t w = n->hp[MH_DCONV].i;
	if (w > 0) {
		const char *wn[3] = {"q_dconv.weight", "k_dconv.weight",
				     "v_dconv.weight"};
		const char *bn[3] = {"q_dconv.bias", "k_dconv.bias",
				     "v_dconv.bias"};
		for (int t = 0; t < 3; t++) {
			int64_t wd[3] = {E, 1, w};
			struct dl_shape s = dl_shape_make(3, wd);
			rc = dl_node_param(n, wn[t], &s, DL_INIT_UNIFORM,
					   1.0 / sqrt((double)w), err);
			if (rc < 0)
				return rc;
			if (bias) {
				struct dl_shape bs = dl_shape_make(1, &E);
				rc = dl_node_param(n, bn[t], &bs,
						   DL_INIT_UNIFORM,
						   1.0 / sqrt((double)w), err);
				if (rc < 0)
					return rc;
			}
		}
	}
	int64_t K = n->hp[MH_MASK + MK_REL].i;
	if (K > 0) {
		int64_t rd[2] = {2 * K + 1, E / H};
		struct dl_shape rs = dl_shape_make(2, rd);
		rc = dl_node_param(n, "rel_k", &rs, DL_INIT_NORMAL, 1.0, err);
		if (rc < 0)
			return rc;
	}
	if (n->hp[MH_MASK + MK_RELV].i) {
		int64_t rd[2] = {2 * K + 1, E / H};
		struct dl_shape rs = dl_shape_make(2, rd);
		rc = dl_node_param(n, "rel_v", &rs, DL_INIT_NORMAL, 1.0, err);
		if (rc < 0)
			return rc;
	}
	*out = *q;
	n->ws_bytes = mha_layout(N, Tq, Tk, att_ws_layout(&a, 0, NULL, NULL), E,
				 w > 0, NULL, NULL);
	/* stepped: one score row per (sample, head) over the cache */
	n->ws_bytes += sizeof(float) * (size_t)(N * H) *
		       (size_t)cache_len(n, 2 * E, 3 * (w > 0 ? w - 1 : 0) * E);
	n->saved_bytes = p > 0.0 ? (size_t)(N * H * a.cells) : 0;
	n->macs = N * (Tq * E * E + Tk * E * (KD + VD) + 2 * a.cells * E +
		       Tq * E * E + (Tq + 2 * Tk) * E * w);
	return 0;
}

/* out[M, E] = x[M, I] W^T (W rows of ld I) + b; with xwt (fixed
 * weights, inference) W is packed once (engine/xwt.h) */
static void proj_fwd(float *out, const float *x, float *W,
		     const float *b, int M, int I, int E, struct dl_xwt_set *xwt)
{
	dl_xwt(xwt, out, x, I, M, I, W, E);
	if (b)
		for (int m = 0; m < M; m++) {
			float *o = out + (int64_t)m * E;
#pragma omp simd   /* as linear.c's bias */
			for (int j = 0; j < E; j++)
				o[j] += b[j];
		}
}

static void proj_bwd(float *dx, float *dW, float *db, const float *g,
		     const float *x, const float *W, int M, int I, int E)
{
	if (dx)
		dl_sgemm(0, 0, M, I, E, 1.0f, g, E, W, I, 1.0f, dx, I);
	if (dW)
		dl_sgemm(1, 0, E, I, M, 1.0f, g, E, x, I, 1.0f, dW, I);
	if (db)
		for (int j = 0; j < E; j++) {
			double acc = 0.0;
			for (int m = 0; m < M; m++)
				acc += g[(int64_t)m * E + j];
			db[j] += (float)acc;
		}
}

/* causal depthwise conv over T of y[N, T, E] from x: y[t, c] = b[c] +
 * sum_u W[c, u] x[t - (w - 1) + u, c] */
static void dconv_fwd(float *y, const float *x, const float *W,
		      const float *b, int N, int T, int E, int w)
{
	for (int s = 0; s < N; s++)
		for (int t = 0; t < T; t++) {
			float *yo = y + ((int64_t)s * T + t) * E;
			for (int c = 0; c < E; c++) {
				const float *wc = W + (int64_t)c * w;
				double acc = b ? b[c] : 0.0;
				for (int u = 0; u < w; u++) {
					int tt = t - (w - 1) + u;
					int64_t xi = ((int64_t)s * T + tt) * E;
					if (tt >= 0)
						acc += (double)wc[u] *
						       x[xi + c];
				}
				yo[c] = (float)acc;
			}
		}
}

static void dconv_bwd(float *dx, float *dW, float *db, const float *g,
		      const float *x, const float *W, int N, int T, int E,
		      int w)
{
	for (int s = 0; s < N; s++)
		for (int t = 0; t < T; t++) {
			const float *go = g + ((int64_t)s * T + t) * E;
			for (int c = 0; c < E; c++) {
				const float *wc = W + (int64_t)c * w;
				float *dwc = dW ? dW + (int64_t)c * w : NULL;
				if (db)
					db[c] += go[c];
				for (int u = 0; u < w; u++) {
					int tt = t - (w - 1) + u;
					if (tt < 0)
						continue;
					int64_t xi = ((int64_t)s * T + tt) * E;
					dx[xi + c] += wc[u] * go[c];
					if (dwc)
						dwc[u] += go[c] * x[xi + c];
				}
			}
		}
}

struct mha_dims {
	int N, Tq, Tk, E, H, d, I[3], w;
	const struct dl_tensor *x[3];
	int ix[3];
	struct roles r;
};

static void mha_dims(const struct dl_node *n, const struct dl_tensor *in,
		     struct mha_dims *D)
{
	att_roles(n->n_in, in[n->n_in - 1].shape.ndim, &D->r);
	D->ix[0] = D->r.q;
	D->ix[1] = D->r.k;
	D->ix[2] = D->r.v;
	for (int t = 0; t < 3; t++) {
		D->x[t] = &in[D->ix[t]];
		D->I[t] = (int)D->x[t]->shape.d[2];
	}
	D->N = (int)in[0].shape.d[0];
	D->Tq = (int)in[0].shape.d[1];
	D->Tk = (int)D->x[1]->shape.d[1];
	D->E = (int)in[0].shape.d[2];
	D->H = (int)n->hp[MH_HEADS].i;
	D->d = D->E / D->H;
	D->w = (int)n->hp[MH_DCONV].i;
}

/* weights and biases of projection t */
static void mha_wb(const struct dl_node *n, const struct mha_p *p,
		   const struct mha_dims *D, int t, int grad, float **W,
		   float **b)
{
	if (p->inw >= 0) {
		float *base =
			grad ? n->params[p->inw].grad : n->params[p->inw].data;
		*W = base ? base + (int64_t)t * D->E * D->E : NULL;
	} else {
		int k = t == 0 ? p->qw : t == 1 ? p->kw : p->vw;
		*W = grad ? n->params[k].grad : n->params[k].data;
	}
	*b = NULL;
	if (p->inb >= 0) {
		float *base =
			grad ? n->params[p->inb].grad : n->params[p->inb].data;
		*b = base ? base + (int64_t)t * D->E : NULL;
	}
}

static void mha_att(struct att *a, const struct dl_node *n,
		    const struct mha_p *p, const struct mha_dims *D, int grads)
{
	memset(a, 0, sizeof *a);
	a->score = SC_SCALED;
	a->Tq = D->Tq;
	a->Tk = D->Tk;
	a->dq = a->dk = a->dv = D->d;
	a->scale = (float)(1.0 / sqrt((double)D->d));
	double pd = n->hp[MH_DROPOUT].f;
	a->keep_scale = pd < 1.0 ? (float)(1.0 / (1.0 - pd)) : 0.0f;
	mask_fill(a, n, MH_MASK);
	a->tlists = grads;
	if (a->K > 0) {
		a->relk = n->params[p->rel].data;
		a->drelk = grads ? n->params[p->rel].grad : NULL;
	}
	if (p->relv >= 0) {
		a->relv = n->params[p->relv].data;
		a->drelv = grads ? n->params[p->relv].grad : NULL;
	}
}

/* projections (and dconv) of the inputs, into w->x and w->c */
static void mha_project(const struct dl_node *n, const struct mha_p *p,
			const struct mha_dims *D, struct mha_ws *w,
			struct dl_xwt_set *xwt)
{
	for (int t = 0; t < 3; t++) {
		float *W, *b;
		mha_wb(n, p, D, t, 0, &W, &b);
		int T = t == 0 ? D->Tq : D->Tk;
		proj_fwd(w->x[t], D->x[t]->data, W, b, D->N * T, D->I[t], D->E, xwt);
		if (D->w > 0)
			dconv_fwd(w->c[t], w->x[t], n->params[p->dw[t]].data,
				  p->db[t] >= 0 ? n->params[p->db[t]].data
						: NULL,
				  D->N, T, D->E, D->w);
	}
}

/* Every (sample, head) slice: forward into w->o (dropout masks drawn
 * when rng is given), and with din, each slice's backward right after its
 * forward, from w->dO into w->dc (and the masks' gradients into din),
 * while the slice's weights are still in the scratch (the key lists'
 * backward takes them from there when there is no dropout) */
static void mha_slices(const struct dl_node *n, struct att *a,
		       const struct att_ws *aw, const struct mha_dims *D,
		       const struct mha_ws *w, const struct dl_tensor *in,
		       void *saved, struct dl_rng *rng, double pd,
		       float *const *din)
{
	int E = D->E;
	for (int b = 0; b < D->N; b++) {
		set_masks(a, n, in, &D->r, b, din);
		for (int h = 0; h < D->H; h++) {
			int64_t oq = (int64_t)b * D->Tq * E + (int64_t)h * D->d;
			int64_t ok = (int64_t)b * D->Tk * E + (int64_t)h * D->d;
			unsigned char *keep =
				saved ? (unsigned char *)saved +
						((int64_t)b * D->H + h) * a->cells
				      : NULL;
			att_slice_fwd(a, w->c[0] + oq, E, w->c[1] + ok, E,
				      w->c[2] + ok, E, w->o + oq, E, aw, keep,
				      din ? NULL : rng, pd);
			if (!din)
				continue;
			a->p_ready = !keep;
			att_slice_bwd(a, w->c[0] + oq, E, w->c[1] + ok, E,
				      w->c[2] + ok, E, w->dO + oq, E,
				      w->dc[0] + oq, E, w->dc[1] + ok, E,
				      w->dc[2] + ok, E, aw, keep);
			a->p_ready = 0;
		}
	}
}

static int mha_step(struct dl_node *n, const struct dl_shape *in,
		    const int *in_axis, int *out_axis, int64_t max_len,
		    struct dl_error *err)
{
	int self;
	int64_t w = n->hp[MH_DCONV].i;
	int rc = att_step_check(n, in, in_axis, MH_MASK, (int)w, &self, err);
	if (rc)
		return rc;
	int64_t E = in[0].d[2];
	out_axis[0] = 2;
	n->step_floats = self ? (size_t)(2 * max_len + 3 * (w > 0 ? w - 1 : 0)) * (size_t)E : 0;
	return 0;
}

/* dconv over a stepped call's new rows x [N, T, E] (projection t) into
 * y, with each sequence's last w - 1 rows before them in hist [w - 1, E]
 * (positions before 0 count as absent, as dconv_fwd's left padding);
 * then hist takes the last w - 1 rows. */
static void dconv_step(float *y, const float *x, const float *W, const float *bias,
		       float *const *hist, const int64_t *pos, int N, int T, int E, int w)
{
	for (int s = 0; s < N; s++) {
		const float *xs = x + (int64_t)s * T * E;
		float *h = hist[s];
		for (int t = 0; t < T; t++) {
			float *yo = y + ((int64_t)s * T + t) * E;
			for (int c = 0; c < E; c++) {
				const float *wc = W + (int64_t)c * w;
				double acc = bias ? bias[c] : 0.0;
				for (int u = 0; u < w; u++) {
					int tt = t - (w - 1) + u;   /* row of this call */
					if (pos[s] + tt < 0)
						continue;
					float xv = tt >= 0 ? xs[(int64_t)tt * E + c]
							   : h[(int64_t)(w - 1 + tt) * E + c];
					acc += (double)wc[u] * xv;
				}
				yo[c] = (float)acc;
			}
		}
		/* the last w - 1 rows of [hist, x] */
		int keep = w - 1;
		if (T >= keep) {
			memcpy(h, xs + (int64_t)(T - keep) * E, sizeof(float) * (size_t)keep * E);
		} else {
			memmove(h, h + (int64_t)T * E, sizeof(float) * (size_t)(keep - T) * E);
			memcpy(h + (int64_t)(keep - T) * E, xs, sizeof(float) * (size_t)T * E);
		}
	}
}

/* A stepped call of causal self attention: project the new rows (and run
 * Primer's convolutions on them with each sequence's last rows), append
 * their keys and values to the caches, attend every new query to its
 * cache, project the result. */
static void mha_fwd_step(struct dl_node *n, const struct dl_tensor *in,
			 struct dl_tensor *out, struct dl_ctx *ctx)
{
	struct mha_dims D;
	mha_dims(n, in, &D);
	struct mha_p p;
	mha_params(n, D.I[1] != D.E || D.I[2] != D.E, &p);
	struct mha_ws w;
	struct att a;
	mha_att(&a, n, &p, &D, 0);
	mha_layout(D.N, D.Tq, D.Tk, att_ws_layout(&a, 0, NULL, NULL), D.E,
		   D.w > 0, ctx->ws, &w);
	int E = D.E, N = D.N, T = D.Tq, H = D.H, d = D.d;
	int64_t hw = D.w > 0 ? D.w - 1 : 0;
	int64_t L = cache_len(n, 2 * E, 3 * hw * E);
	float *scores = (float *)((char *)ctx->ws + n->ws_bytes) - (size_t)N * H * L;
	const struct dl_step_call *st = ctx->step;
	struct dl_xwt_set *xwt = ctx->xwt;
	for (int t = 0; t < 3; t++) {
		float *W, *b;
		mha_wb(n, &p, &D, t, 0, &W, &b);
		proj_fwd(w.x[t], D.x[t]->data, W, b, N * T, D.I[t], E, xwt);
		if (D.w > 0) {
			float *hist[N > 0 ? N : 1];
			for (int s = 0; s < N; s++)
				hist[s] = n->step_state + (size_t)(st->row0 + s) * n->step_floats +
					  2 * L * E + t * hw * E;
			dconv_step(w.c[t], w.x[t], n->params[p.dw[t]].data,
				   p.db[t] >= 0 ? n->params[p.db[t]].data : NULL, hist,
				   st->pos, N, T, E, D.w);
		}
	}
	for (int s = 0; s < N; s++) {
		float *K = n->step_state + (size_t)(st->row0 + s) * n->step_floats;
		float *V = K + L * E;
		int64_t p0 = st->pos[s];
		memcpy(K + p0 * E, w.c[1] + (int64_t)s * T * E, sizeof(float) * (size_t)T * E);
		memcpy(V + p0 * E, w.c[2] + (int64_t)s * T * E, sizeof(float) * (size_t)T * E);
	}
#pragma omp parallel for collapse(2) if (N * H > 1)
	for (int s = 0; s < N; s++)
		for (int h = 0; h < H; h++) {
			const float *K = n->step_state + (size_t)(st->row0 + s) * n->step_floats;
			const float *V = K + L * E;
			int64_t oq = (int64_t)s * T * E + (int64_t)h * d;
			att_step_fwd(&a, w.c[0] + oq, E, T, st->pos[s], K + h * d, E, V + h * d, E,
				     w.o + oq, E, scores + ((size_t)s * H + h) * L);
		}
	proj_fwd(out->data, w.o, n->params[p.ow].data,
		 p.ob >= 0 ? n->params[p.ob].data : NULL, N * T, E, E, xwt);
}

/* Whether every sequence of a stepped call starts afresh (a prompt): the
 * whole forward then serves, and only fills the caches. */
static int step_fresh(const struct dl_ctx *ctx, int N)
{
	for (int b = 0; b < N; b++)
		if (ctx->step->pos[b] != 0)
			return 0;
	return 1;
}

/* After a whole forward of a prompt: its keys and values (and Primer's
 * last w - 1 projected rows) into each sequence's state. */
static void mha_fill_cache(struct dl_node *n, const struct mha_dims *D,
			   const struct mha_ws *w, const struct dl_ctx *ctx)
{
	int E = D->E, T = D->Tq;
	int64_t hw = D->w > 0 ? D->w - 1 : 0;
	int64_t L = cache_len(n, 2 * E, 3 * hw * E);
	for (int s = 0; s < D->N; s++) {
		float *K = n->step_state + (size_t)(ctx->step->row0 + s) * n->step_floats;
		float *V = K + L * E;
		memcpy(K, w->c[1] + (int64_t)s * T * E, sizeof(float) * (size_t)T * E);
		memcpy(V, w->c[2] + (int64_t)s * T * E, sizeof(float) * (size_t)T * E);
		for (int t = 0; t < 3 && hw > 0; t++) {
			/* the last w - 1 rows, the ones before position 0 absent */
			float *h = K + 2 * L * E + t * hw * E;
			for (int64_t r = 0; r < hw; r++) {
				int64_t src = T - hw + r;
				if (src >= 0)
					memcpy(h + r * E, w->x[t] + ((int64_t)s * T + src) * E,
					       sizeof(float) * (size_t)E);
			}
		}
	}
}

static void mha_fwd(struct dl_node *n, const struct dl_tensor *in,
		    struct dl_tensor *out, struct dl_ctx *ctx)
{
	int fill = 0;
	if (dl_stepping(n, ctx) && n->step_state) {
		if (!step_fresh(ctx, (int)in[0].shape.d[0])) {
			mha_fwd_step(n, in, out, ctx);
			return;
		}
		fill = 1;
	}
	struct mha_dims D;
	mha_dims(n, in, &D);
	struct mha_p p;
	mha_params(n, D.I[1] != D.E || D.I[2] != D.E, &p);
	struct mha_ws w;
	struct att a;
	struct att_ws aw;
	mha_att(&a, n, &p, &D, 0);
	mha_layout(D.N, D.Tq, D.Tk, att_ws_layout(&a, 0, NULL, NULL), D.E,
		   D.w > 0, ctx->ws, &w);
	att_ws_layout(&a, 0, w.core, &aw);
	att_build(&a, &aw);
	double pd = n->hp[MH_DROPOUT].f;
	int drop = ctx->train && ctx->saved && pd > 0.0;
	struct dl_xwt_set *xwt = ctx->train ? NULL : ctx->xwt;
	mha_project(n, &p, &D, &w, xwt);
	int E = D.E;
	mha_slices(n, &a, &aw, &D, &w, in, drop ? ctx->saved : NULL, ctx->rng,
		   pd, NULL);
	proj_fwd(out->data, w.o, n->params[p.ow].data,
		 p.ob >= 0 ? n->params[p.ob].data : NULL, D.N * D.Tq, E, E, xwt);
	if (fill)
		mha_fill_cache(n, &D, &w, ctx);
}

static void mha_bwd(struct dl_node *n, const struct dl_tensor *in,
		    const struct dl_tensor *out, const float *dout,
		    float *const *din, struct dl_ctx *ctx)
{
	struct mha_dims D;
	mha_dims(n, in, &D);
	struct mha_p p;
	mha_params(n, D.I[1] != D.E || D.I[2] != D.E, &p);
	struct mha_ws w;
	struct att a;
	struct att_ws aw;
	mha_att(&a, n, &p, &D, 1);
	mha_layout(D.N, D.Tq, D.Tk, att_ws_layout(&a, 0, NULL, NULL), D.E,
		   D.w > 0, ctx->ws, &w);
	att_ws_layout(&a, 0, w.core, &aw);
	att_build(&a, &aw);
	double pd = n->hp[MH_DROPOUT].f;
	int drop = ctx->train && ctx->saved && pd > 0.0;
	int E = D.E;
	mha_project(n, &p, &D, &w, NULL);
	/* dO = dout W_o needs no O: first, so that each slice's backward can
	 * follow its forward (which recomputes O with the same dropout mask),
	 * and out_proj's own gradients after, once O is whole */
	memset(w.dO, 0, sizeof(float) * (size_t)D.N * D.Tq * E);
	proj_bwd(w.dO, NULL, NULL, dout, NULL, n->params[p.ow].data,
		 D.N * D.Tq, E, E);
	int64_t len[3] = {(int64_t)D.N * D.Tq * E, (int64_t)D.N * D.Tk * E,
			  (int64_t)D.N * D.Tk * E};
	for (int t = 0; t < 3; t++) {
		memset(w.dc[t], 0, sizeof(float) * (size_t)len[t]);
		memset(w.dx[t], 0, sizeof(float) * (size_t)len[t]);
	}
	mha_slices(n, &a, &aw, &D, &w, in, drop ? ctx->saved : NULL, NULL, pd,
		   din);
	proj_bwd(NULL, n->params[p.ow].grad,
		 p.ob >= 0 ? n->params[p.ob].grad : NULL, dout, w.o,
		 n->params[p.ow].data, D.N * D.Tq, E, E);
	for (int t = 0; t < 3; t++) {
		int T = t == 0 ? D.Tq : D.Tk;
		if (D.w > 0)
			dconv_bwd(w.dx[t], n->params[p.dw[t]].grad,
				  p.db[t] >= 0 ? n->params[p.db[t]].grad : NULL,
				  w.dc[t], w.x[t], n->params[p.dw[t]].data, D.N,
				  T, E, D.w);
		float *W, *bb, *dW, *db;
		mha_wb(n, &p, &D, t, 0, &W, &bb);
		mha_wb(n, &p, &D, t, 1, &dW, &db);
		float *dxin = din[D.ix[t]];
		proj_bwd(dxin, dW, db, w.dx[t], D.x[t]->data, W, D.N * T,
			 D.I[t], E);
	}
}

/* PyTorch's nn.MultiheadAttention(batch_first=True) */
static const struct dl_op_desc op_mha = {
	.name = "multihead_attention",
	.doc = "Y = concat_h(attention(Q W_q^h, K W_k^h, V W_v^h)) W_o^T + b_o (nn.MultiheadAttention)",
	.min_in = 1, .max_in = 5,
	.hp = mha_hp, .n_hp = MH_MASK + MK_COUNT,
	.infer = mha_infer,
	.forward = mha_fwd,
	.backward = mha_bwd,
	.step = mha_step,
	.flags = DL_OP_COMPLEX | DL_OP_BWD_NO_OUTPUT,
	.params = "in_proj_weight [3E, E] (or q_proj_weight [E, E], k_proj_weight [E, kdim], v_proj_weight [E, vdim]), in_proj_bias [3E], out_proj.weight [E, E], out_proj.bias [E]; dconv: q_dconv.weight [E, 1, dconv], q_dconv.bias [E], k_dconv.*, v_dconv.*; rel_k [2 relative_positions + 1, E / num_heads]",
};

const struct dl_op_desc *const dl_ops_attention[] = {&op_attention, &op_mha,
						     NULL};
