/* The attention core's flash path (src/ops/attention_core.c): a dense
 * slice run in blocks with an online softmax gives the materialised path's
 * output and gradients (q, k, v, a float attn_mask's) to float rounding,
 * with and without causal, an int or float attn_mask, key padding, rows
 * with no allowed key, dot and scaled-dot scores, Tq != Tk and partial
 * blocks; and att_prepare takes it exactly for long dense slices without
 * dropout or relative tables. The key lists' packed rows (below) change
 * no result. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check_suites.h"
#include "engine/rng.h"
#include "ops/attention.h"

/* fills x[n] with N(0, s) */
static void fill(struct dl_rng *r, float *x, int64_t n, double s)
{
	for (int64_t i = 0; i < n; i++)
		x[i] = (float)(s * dl_rng_normal(r));
}

static double maxdiff(const float *x, const float *y, int64_t n,
		      double *scale)
{
	double d = 0.0, m = 0.0;
	for (int64_t i = 0; i < n; i++) {
		double e = fabs((double)x[i] - y[i]);
		d = e > d ? e : d;
		m = fabs(y[i]) > m ? fabs(y[i]) : m;
	}
	*scale = m;
	return d;
}

/* one slice: forward and backward, materialised (flash 0) or flash */
struct run {
	float *o, *dq, *dk, *dv, *dam;
};

static void run_slice(const struct att *proto, int flash, const float *q,
		      const float *k, const float *v, const float *go,
		      struct run *out)
{
	struct att a = *proto;
	att_prepare(&a);
	a.flash = flash;
	a.dam = proto->dam ? out->dam : NULL;
	struct att_ws w;
	size_t bytes = att_ws_layout(&a, 0, NULL, NULL);
	void *base = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
	ck_assert_ptr_nonnull(base);
	att_ws_layout(&a, 0, base, &w);
	att_build(&a, &w);
	att_slice_fwd(&a, q, a.dq, k, a.dk, v, a.dv, out->o, a.dv, &w, NULL,
		      NULL, 0.0);
	att_slice_bwd(&a, q, a.dq, k, a.dk, v, a.dv, go, a.dv, out->dq, a.dq,
		      out->dk, a.dk, out->dv, a.dv, &w, NULL);
	free(base);
}

/* case i: Tq, Tk, causal, mask kind (0 none, 1 int, 2 float), padding,
 * score */
static const struct {
	int Tq, Tk, causal, mask, kpm, score;
} cases[] = {
	{150, 300, 0, 0, 0, SC_SCALED},
	{300, 300, 1, 0, 0, SC_SCALED},
	{129, 513, 0, 1, 1, SC_DOT},
	{200, 257, 1, 2, 1, SC_SCALED},
	{70, 600, 1, 2, 0, SC_SCALED},
	{65, 65, 0, 1, 1, SC_SCALED},
};

START_TEST(test_flash_matches_materialised)
{
	int Tq = cases[_i].Tq, Tk = cases[_i].Tk, d = 8, dv = 5;
	struct dl_rng r;
	dl_rng_seed(&r, 77 + (uint64_t)_i);
	struct att a;
	memset(&a, 0, sizeof a);
	a.score = cases[_i].score;
	a.Tq = Tq;
	a.Tk = Tk;
	a.dq = a.dk = d;
	a.dv = dv;
	a.scale = a.score == SC_SCALED ? 1.0f / sqrtf((float)d) : 1.0f;
	a.causal = cases[_i].causal;
	a.window = -1;
	a.dilation = 1;
	a.block = 1;
	a.keep_scale = 1.0f;
	int64_t nq = (int64_t)Tq * d, nk = (int64_t)Tk * d, nv = (int64_t)Tk * dv;
	int64_t no = (int64_t)Tq * dv, nm = (int64_t)Tq * Tk;
	float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nk);
	float *v = malloc(sizeof(float) * nv), *go = malloc(sizeof(float) * no);
	float *am = malloc(sizeof(float) * nm), *kpm = malloc(sizeof(float) * Tk);
	fill(&r, q, nq, 1.5);
	fill(&r, k, nk, 1.5);
	fill(&r, v, nv, 1.0);
	fill(&r, go, no, 1.0);
	for (int64_t t = 0; t < nm; t++)
		am[t] = cases[_i].mask == 1 ? (float)(dl_rng_uniform(&r) < 0.3)
					    : (float)dl_rng_normal(&r);
	if (cases[_i].mask == 1) /* query 3 has no allowed key */
		for (int j = 0; j < Tk; j++)
			am[3 * (int64_t)Tk + j] = 1.0f;
	for (int j = 0; j < Tk; j++)
		kpm[j] = (float)(dl_rng_uniform(&r) < 0.25);
	if (cases[_i].mask) {
		a.am = am;
		a.am_int = cases[_i].mask == 1;
	}
	if (cases[_i].kpm)
		a.kpm = kpm;
	struct run res[2];
	for (int f = 0; f < 2; f++) {
		res[f].o = calloc((size_t)no, sizeof(float));
		res[f].dq = calloc((size_t)nq, sizeof(float));
		res[f].dk = calloc((size_t)nk, sizeof(float));
		res[f].dv = calloc((size_t)nv, sizeof(float));
		res[f].dam = calloc((size_t)nm, sizeof(float));
		a.dam = cases[_i].mask == 2 ? res[f].dam : NULL;
		run_slice(&a, f, q, k, v, go, &res[f]);
	}
	const char *what[5] = {"output", "dq", "dk", "dv", "dattn_mask"};
	for (int t = 0; t < 5; t++) {
		float *x[2];
		int64_t n = t == 0 ? no : t == 1 ? nq : t == 2 ? nk : t == 3 ? nv : nm;
		for (int f = 0; f < 2; f++)
			x[f] = t == 0 ? res[f].o : t == 1 ? res[f].dq : t == 2 ? res[f].dk
			       : t == 3 ? res[f].dv : res[f].dam;
		double sc, df = maxdiff(x[1], x[0], n, &sc);
		ck_assert_msg(df <= 1e-5 * (sc > 1.0 ? sc : 1.0),
			      "case %d: %s differs by %g (scale %g)", _i, what[t], df, sc);
	}
	if (cases[_i].mask == 1)
		for (int e = 0; e < dv; e++)
			ck_assert(res[1].o[3 * dv + e] == 0.0f);
	for (int f = 0; f < 2; f++) {
		free(res[f].o);
		free(res[f].dq);
		free(res[f].dk);
		free(res[f].dv);
		free(res[f].dam);
	}
	free(q);
	free(k);
	free(v);
	free(go);
	free(am);
	free(kpm);
}
END_TEST

/* the rule: dense, at least 2^20 cells, scaled-dot or dot, no relative
 * table, no dropout; its scratch is one block, not Tq x Tk */
START_TEST(test_flash_rule)
{
	struct att a;
	memset(&a, 0, sizeof a);
	a.score = SC_SCALED;
	a.Tq = a.Tk = 1024;
	a.dq = a.dk = a.dv = 64;
	a.window = -1;
	a.dilation = 1;
	a.block = 1;
	a.keep_scale = 1.0f;
	att_prepare(&a);
	ck_assert_int_eq(a.flash, 1);
	ck_assert(att_ws_layout(&a, 0, NULL, NULL) < (size_t)1 << 20);
	a.Tk = 1023;
	att_prepare(&a);
	ck_assert_int_eq(a.flash, 0);
	a.Tq = a.Tk = 16384;
	a.keep_scale = 1.25f;
	att_prepare(&a);
	ck_assert_int_eq(a.flash, 0);
	a.keep_scale = 1.0f;
	a.K = 2;
	att_prepare(&a);
	ck_assert_int_eq(a.flash, 0);
	a.K = 0;
	a.score = SC_BILINEAR;
	att_prepare(&a);
	ck_assert_int_eq(a.flash, 0);
	a.score = SC_DOT;
	att_prepare(&a);
	ck_assert_int_eq(a.flash, 1);
	a.window = 4;
	att_prepare(&a);
	ck_assert_int_eq(a.flash, 0);
	ck_assert_int_eq(a.sparse, 1);
}
END_TEST

/* Key lists over a head of [T, E] rows (row stride E > d, as
 * multihead_attention passes its heads) are packed into contiguous rows
 * before their gathers: the same output and gradients, bit for bit, as
 * the same slice given contiguous rows, for random keys, global tokens
 * with a window, and their union with causal, dropout and bilinear
 * scores; dk and dv keep what they held before (+=). The same again with
 * the lists transposed (a.tlists), whose backward sums dK and dV by key
 * in a second pass: the same bits as the pass by query. */
static const struct {
	int T, window, global, random, causal, score, drop;
} packs[] = {
	{300, -1, 0, 7, 0, SC_SCALED, 0},
	{257, 5, 2, 0, 0, SC_SCALED, 0},
	{190, 3, 1, 4, 1, SC_DOT, 1},
	{131, 2, 0, 3, 0, SC_BILINEAR, 0},
};

START_TEST(test_sparse_packed_rows)
{
	int T = packs[_i].T, d = 8, E = 3 * d + 5, h = 1;
	struct dl_rng r;
	dl_rng_seed(&r, 901 + (uint64_t)_i);
	struct att a;
	memset(&a, 0, sizeof a);
	a.score = packs[_i].score;
	a.Tq = a.Tk = T;
	a.dq = a.dk = a.dv = d;
	a.scale = a.score == SC_SCALED ? 1.0f / sqrtf((float)d) : 1.0f;
	a.causal = packs[_i].causal;
	a.window = packs[_i].window;
	a.dilation = 1;
	a.global = packs[_i].global;
	a.random = packs[_i].random;
	a.seed = 5;
	a.block = 1;
	a.keep_scale = packs[_i].drop ? 1.25f : 1.0f;
	float W[64], dW[4][64];
	fill(&r, W, d * d, 0.3);
	if (a.score == SC_BILINEAR)
		a.W = W;
	att_prepare(&a);
	size_t bytes = att_ws_layout(&a, 2 * (int64_t)T * d, NULL, NULL);
	void *base = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
	ck_assert_ptr_nonnull(base);
	struct att_ws w;
	att_ws_layout(&a, 2 * (int64_t)T * d, base, &w);
	att_build(&a, &w);
	int64_t nw = (int64_t)T * E, nc = (int64_t)T * d;
	float *x[4], *gx[4][4], *o[4];
	for (int t = 0; t < 4; t++) { /* q, k, v, go: [T, E] */
		x[t] = malloc(sizeof(float) * nw);
		fill(&r, x[t], nw, 1.0);
	}
	float *init = malloc(sizeof(float) * nw);
	fill(&r, init, nw, 0.5);
	unsigned char *keep = malloc((size_t)a.cells + 1);
	for (int64_t t = 0; t < a.cells; t++)
		keep[t] = dl_rng_uniform(&r) >= 0.2;
	for (int f = 0; f < 4; f++) {
		/* f 0: the head at column h d of [T, E]; f 1: its copy [T, d];
		 * f 2, 3: the same with the lists transposed */
		int ld = f % 2 == 0 ? E : d;
		int64_t off = f % 2 == 0 ? (int64_t)h * d : 0;
		a.tlists = f >= 2;
		att_build(&a, &w);
		ck_assert(f < 2 ? a.tl == NULL : a.tl != NULL);
		float *c[4];
		for (int t = 0; t < 4; t++) {
			c[t] = malloc(sizeof(float) * nw);
			for (int j = 0; j < T; j++)
				memcpy(c[t] + (int64_t)j * ld + off,
				       x[t] + (int64_t)j * E + h * d,
				       sizeof(float) * (size_t)d);
		}
		o[f] = calloc((size_t)nw, sizeof(float));
		for (int t = 0; t < 3; t++) {
			gx[f][t] = malloc(sizeof(float) * nw);
			for (int j = 0; j < T; j++)
				memcpy(gx[f][t] + (int64_t)j * ld + off,
				       init + (int64_t)j * E + h * d,
				       sizeof(float) * (size_t)d);
		}
		memset(dW[f], 0, sizeof dW[f]);
		a.dW = a.score == SC_BILINEAR ? dW[f] : NULL;
		att_slice_fwd(&a, c[0] + off, ld, c[1] + off, ld, c[2] + off, ld,
			      o[f] + off, ld, &w, packs[_i].drop ? keep : NULL,
			      NULL, 0.0);
		att_slice_bwd(&a, c[0] + off, ld, c[1] + off, ld, c[2] + off, ld,
			      c[3] + off, ld, gx[f][0] + off, ld, gx[f][1] + off,
			      ld, gx[f][2] + off, ld, &w,
			      packs[_i].drop ? keep : NULL);
		/* compare as [T, d] */
		float *y[4] = {o[f], gx[f][0], gx[f][1], gx[f][2]};
		for (int t = 0; t < 4; t++)
			for (int j = 0; j < T; j++)
				memmove(y[t] + (int64_t)j * d,
					y[t] + (int64_t)j * ld + off,
					sizeof(float) * (size_t)d);
		for (int t = 0; t < 4; t++)
			free(c[t]);
	}
	const char *what[4] = {"output", "dq", "dk", "dv"};
	for (int f = 1; f < 4; f++) {
		for (int t = 0; t < 4; t++) {
			float *y0 = t == 0 ? o[0] : gx[0][t - 1];
			float *y1 = t == 0 ? o[f] : gx[f][t - 1];
			ck_assert_msg(memcmp(y0, y1, sizeof(float) * (size_t)nc) == 0,
				      "case %d: %s of %s rows%s differs", _i,
				      what[t], f % 2 ? "contiguous" : "strided",
				      f >= 2 ? " by key" : "");
		}
		ck_assert(memcmp(dW[0], dW[f], sizeof dW[0]) == 0);
	}
	for (int f = 0; f < 4; f++) {
		free(o[f]);
		for (int t = 0; t < 3; t++)
			free(gx[f][t]);
	}
	for (int t = 0; t < 4; t++)
		free(x[t]);
	free(init);
	free(keep);
	free(base);
}
END_TEST

/* Self-attention on one tensor, its gradient one buffer too (dq, dk and
 * dv the same rows, as attention on [x, x, x] could be given): dQ's
 * additions interleave with dK's and dV's row by row, so the backward by
 * key (a.tlists) must not run, and the gradient is the same bits with
 * the lists transposed or not. Also dk and dv one buffer apart from dq
 * (k and v one input), where the pass by key keeps each row's order. */
START_TEST(test_sparse_bykey_aliases)
{
	int T = 97, d = 8;
	struct dl_rng r;
	dl_rng_seed(&r, 77);
	struct att a;
	memset(&a, 0, sizeof a);
	a.score = SC_SCALED;
	a.Tq = a.Tk = T;
	a.dq = a.dk = a.dv = d;
	a.scale = 1.0f / sqrtf((float)d);
	a.window = 2;
	a.dilation = 1;
	a.random = 5;
	a.seed = 3;
	a.block = 1;
	a.keep_scale = 1.0f;
	att_prepare(&a);
	size_t bytes = att_ws_layout(&a, 0, NULL, NULL);
	void *base = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
	ck_assert_ptr_nonnull(base);
	struct att_ws w;
	att_ws_layout(&a, 0, base, &w);
	int64_t n = (int64_t)T * d;
	float *x = malloc(sizeof(float) * n), *go = malloc(sizeof(float) * n);
	float *o = malloc(sizeof(float) * n), *g[2][2];
	fill(&r, x, n, 1.0);
	fill(&r, go, n, 1.0);
	for (int mode = 0; mode < 2; mode++) {
		/* mode 0: dq = dk = dv; mode 1: dq apart, dk = dv */
		for (int f = 0; f < 2; f++) {
			g[mode][f] = calloc((size_t)(2 * n), sizeof(float));
			float *gq = g[mode][f], *gkv = mode == 0 ? gq : gq + n;
			a.tlists = f;
			att_build(&a, &w);
			ck_assert(f == 0 ? a.tl == NULL : a.tl != NULL);
			att_slice_fwd(&a, x, d, x, d, x, d, o, d, &w, NULL, NULL, 0.0);
			att_slice_bwd(&a, x, d, x, d, x, d, go, d, gq, d, gkv, d,
				      gkv, d, &w, NULL);
		}
		ck_assert_msg(memcmp(g[mode][0], g[mode][1], sizeof(float) * (size_t)(2 * n)) == 0,
			      "%s: the gradient with the lists transposed differs",
			      mode == 0 ? "dq = dk = dv" : "dk = dv");
	}
	for (int mode = 0; mode < 2; mode++)
		for (int f = 0; f < 2; f++)
			free(g[mode][f]);
	free(x);
	free(go);
	free(o);
	free(base);
}
END_TEST

Suite *make_attention_suite(void)
{
	Suite *s = suite_create("attention");
	TCase *tc = tcase_create("flash");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_flash_matches_materialised, 0,
			    (int)(sizeof cases / sizeof cases[0]));
	tcase_add_test(tc, test_flash_rule);
	suite_add_tcase(s, tc);
	TCase *tp = tcase_create("packed");
	tcase_set_timeout(tp, 60);
	tcase_add_loop_test(tp, test_sparse_packed_rows, 0,
			    (int)(sizeof packs / sizeof packs[0]));
	tcase_add_test(tp, test_sparse_bykey_aliases);
	suite_add_tcase(s, tp);
	return s;
}
