/* The attention core: scores (scaled-dot, dot, bilinear, additive, Shaw's
 * relative keys), masks (causal, an attn_mask, a key_padding_mask), the
 * sparse patterns' key lists, dropout on the weights and Shaw's relative
 * values, for one (sample, head) slice at a time.
 *
 * With no sparse pattern a slice materialises its [Tq, Tk] scores (the
 * masks make some of them -inf) and multiplies with dl_sgemm. With a
 * pattern (window with dilation, global tokens, random keys, stride, fixed,
 * their block forms and unions) each query gets a list of its allowed keys,
 * built once per call in planned scratch (CSR: row pointers and key
 * indices), and every score, probability and gradient lives on that list:
 * O(T k) time and memory for k keys per query, never T x T. Backward
 * recomputes the probabilities from the inputs. The lists' gathers read a
 * contiguous copy of the head's K and V (and dK, dV), prefetch the rows a
 * few keys ahead, and backward finishes one query before the next, so
 * scattered keys (random patterns) cost about the same per key at long T
 * as at short. A long dense slice (at
 * least 2^20 score cells) takes the flash path below: blocks and an online
 * softmax, O(T) memory, the same numbers to float rounding. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gemm.h"
#include "engine/vmath.h"
#include "ops/attention.h"

static int imin(int x, int y)
{
	return x < y ? x : y;
}

static int64_t ceildiv(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

/* ---- the key lists ---- */

/* Tokens that count as global: the first g tokens, or blocks */
static int64_t global_len(const struct att *a)
{
	int64_t g = a->global * a->block;
	return g < a->Tk ? g : a->Tk;
}

/* An upper bound on query i's keys */
static int64_t row_bound(const struct att *a, int64_t i)
{
	int64_t Tk = a->Tk, B = a->block, c = 0;
	if (a->global > 0 && i < a->global * B)
		return Tk;
	if (a->window >= 0)
		c += (2 * a->window + 1) * B;
	if (a->stride > 0)
		c += 2 * a->stride + Tk / a->stride + 1;
	if (a->fixed > 0)
		c += a->fixed + a->fsum * (Tk / a->fixed + 1);
	c += global_len(a);
	c += a->random * B;
	return c < Tk ? c : Tk;
}

/* The flash path takes dense slices of at least ATT_FLASH_MIN_CELLS
 * (2^20) score cells, scaled-dot or dot scores, without Shaw's relative
 * tables or dropout on the weights (whose mask would be Tq x Tk bytes):
 * there the materialised scores would cost 8 MB a slice (S and its
 * gradient), and the blocked loops run within a few percent of the
 * materialised ones (tools/bench/RESULTS.md); below it the materialised
 * path's one large GEMM is as fast and its memory small. */
void att_prepare(struct att *a)
{
	a->any = a->window >= 0 || a->stride > 0 || a->fixed > 0 ||
		 a->global > 0 || a->random > 0;
	a->sparse = a->any;
	a->flash = 0;
	if (!a->sparse) {
		a->cells = (int64_t)a->Tq * a->Tk;
		a->flash = a->cells >= ATT_FLASH_MIN_CELLS &&
			   (a->score == SC_SCALED || a->score == SC_DOT) &&
			   a->K == 0 && a->keep_scale == 1.0f;
		return;
	}
	int64_t c = 0;
	for (int64_t i = 0; i < a->Tq; i++)
		c += row_bound(a, i);
	a->cells = c;
}

static size_t round16(size_t b)
{
	return (b + 15) & ~(size_t)15;
}

size_t att_ws_layout(const struct att *a, int64_t tmpf, void *base,
		     struct att_ws *w)
{
	char *p = base;
	size_t off = 0;
	size_t cells = a->flash ? (size_t)ATT_FLASH_BQ * ATT_FLASH_BK
				: (size_t)a->cells;
	size_t rbf = a->K > 0 ? (size_t)(2 * (2 * a->K + 1)) : 0;
	size_t pkv = a->sparse ? sizeof(float) * (size_t)a->Tk * (a->dk + a->dv) : 0;
	int tr = a->sparse && a->cells <= INT_MAX;
	size_t sz[14] = {
		sizeof(float) * cells, sizeof(float) * cells,
		sizeof(float) * (size_t)tmpf, sizeof(float) * rbf,
		a->sparse ? sizeof(int64_t) * (size_t)(a->Tq + 1) : 0,
		a->sparse ? sizeof(int) * cells : 0,
		a->sparse ? sizeof(int) * (size_t)a->Tk : 0,
		a->sparse ? sizeof(int) * (size_t)a->Tk : 0,
		a->flash ? sizeof(float) * (size_t)ATT_FLASH_BQ * (a->dv + 3) : 0,
		pkv, pkv,
		tr ? sizeof(int64_t) * (size_t)(a->Tk + 1) : 0,
		tr ? 2 * sizeof(int) * (size_t)a->cells : 0,
		tr ? sizeof(float) * (size_t)a->Tq * (a->dq + a->dv) : 0,
	};
	void *ptr[14];
	for (int t = 0; t < 14; t++) {
		ptr[t] = p ? p + off : NULL;
		off += round16(sz[t]);
	}
	if (w) {
		w->S = ptr[0];
		w->S2 = ptr[1];
		w->tmp = ptr[2];
		w->rb = ptr[3];
		w->rowptr = ptr[4];
		w->idx = ptr[5];
		w->stamp = ptr[6];
		w->rstamp = ptr[7];
		w->F = ptr[8];
		w->KVp = ptr[9];
		w->dKVp = ptr[10];
		/* NULL when not laid out: att_build transposes only then */
		w->colptr = tr ? ptr[11] : NULL;
		w->tl = tr ? ptr[12] : NULL;
		w->QGp = tr ? ptr[13] : NULL;
	}
	return off;
}

static int cmp_int(const void *x, const void *y)
{
	int a = *(const int *)x, b = *(const int *)y;
	return (a > b) - (a < b);
}

/* Adds keys [j0, j1) to row i's list at *c (the marks drop repeats) */
static void add_range(const struct att *a, int i, int64_t j0, int64_t j1,
		      int *row, int *stamp, int64_t *c)
{
	if (j0 < 0)
		j0 = 0;
	if (j1 > a->Tk)
		j1 = a->Tk;
	if (a->causal && j1 > (int64_t)i + 1)
		j1 = (int64_t)i + 1;
	for (int64_t j = j0; j < j1; j++)
		if (stamp[j] != i) {
			stamp[j] = i;
			row[(*c)++] = (int)j;
		}
}

/* Query i's keys, unsorted, into row; returns their count. Random keys:
 * min(r, n) distinct draws per query (per query block with block_size:
 * blocks) from splitmix64 seeded by (seed, query or block index), redrawn
 * on repeats; the same in every call. */
static int64_t row_keys(const struct att *a, int i, int *row, int *stamp,
			int *rstamp)
{
	int64_t c = 0, Tk = a->Tk, B = a->block;
	int64_t nb = ceildiv(Tk, B), bi = i / B;
	if (a->global > 0 && i < a->global * B) {
		add_range(a, i, 0, Tk, row, stamp, &c);
		return c;
	}
	if (a->window >= 0) {
		int64_t d = a->dilation, w = a->window;
		for (int64_t t = -w; t <= w; t++) {
			int64_t bj = bi + t * d;
			if (bj >= 0 && bj < nb)
				add_range(a, i, bj * B, (bj + 1) * B, row,
					  stamp, &c);
		}
	}
	if (a->stride > 0) {
		int64_t l = a->stride;
		add_range(a, i, (int64_t)i - l + 1, (int64_t)i + l, row, stamp,
			  &c);
		for (int64_t j = i % l; j < Tk; j += l)
			add_range(a, i, j, j + 1, row, stamp, &c);
	}
	if (a->fixed > 0) {
		int64_t l = a->fixed;
		add_range(a, i, i / l * l, i / l * l + l, row, stamp, &c);
		for (int64_t s = 0; s < Tk; s += l)
			add_range(a, i, s + l - a->fsum, s + l, row, stamp, &c);
	}
	if (a->global > 0)
		add_range(a, i, 0, global_len(a), row, stamp, &c);
	if (a->random > 0) {
		int64_t r = a->random < nb ? a->random : nb;
		uint64_t s = a->seed * 0x9E3779B97F4A7C15ULL +
			     (uint64_t)(B > 1 ? bi : i) * 0xD1B54A32D192ED03ULL;
		for (int64_t t = 0; t < r; t++) {
			int64_t kb;
			do
				kb = (int64_t)(splitmix64(&s) % (uint64_t)nb);
			while (rstamp[kb] == i);
			rstamp[kb] = i;
			add_range(a, i, kb * B, kb * B + B, row, stamp, &c);
		}
	}
	return c;
}

/* The lists by key (a counting sort of the pairs by key, stable in the
 * query), for the backward's per-key pass */
static void transpose_lists(struct att *a, struct att_ws *w)
{
	int64_t *cp = w->colptr, n = a->rowptr[a->Tq];
	memset(cp, 0, sizeof(int64_t) * (size_t)(a->Tk + 1));
	for (int64_t p = 0; p < n; p++)
		cp[a->idx[p] + 1]++;
	for (int j = 0; j < a->Tk; j++)
		cp[j + 1] += cp[j];
	/* cp[j] runs from key j's start to its end, which is key j + 1's
	 * start; shifted back after */
	for (int i = 0; i < a->Tq; i++)
		for (int64_t p = a->rowptr[i]; p < a->rowptr[i + 1]; p++) {
			int64_t e = cp[a->idx[p]]++;
			w->tl[2 * e] = i;
			w->tl[2 * e + 1] = (int)p;
		}
	memmove(cp + 1, cp, sizeof(int64_t) * (size_t)a->Tk);
	cp[0] = 0;
	a->colptr = cp;
	a->tl = w->tl;
}

void att_build(struct att *a, struct att_ws *w)
{
	if (!a->sparse)
		return;
	for (int j = 0; j < a->Tk; j++)
		w->stamp[j] = w->rstamp[j] = -1;
	int64_t pos = 0;
	w->rowptr[0] = 0;
	for (int i = 0; i < a->Tq; i++) {
		int *row = w->idx + pos;
		int64_t c = row_keys(a, i, row, w->stamp, w->rstamp);
		qsort(row, (size_t)c, sizeof *row, cmp_int);
		pos += c;
		w->rowptr[i + 1] = pos;
	}
	a->rowptr = w->rowptr;
	a->idx = w->idx;
	a->colptr = NULL;
	a->tl = NULL;
	if (a->tlists && w->colptr && w->tl)
		transpose_lists(a, w);
}

/* ---- scores ---- */

static int rel_index(const struct att *a, int i, int j)
{
	int r = j - i;
	if (r < -a->K)
		r = -a->K;
	if (r > a->K)
		r = a->K;
	return r + a->K;
}

/* key t of a row: js[t], or t for a dense row (js NULL) */
static inline int key_at(const int *js, int t)
{
	return js ? js[t] : t;
}

/* x . y in eight independent partial sums (the key lists' inner loop: a
 * single running sum would wait on each addition) */
static inline __attribute__((always_inline)) float dot(const float *x, const float *y, int n)
{
	float p[8] = {0};
	int e = 0;
	for (; e + 8 <= n; e += 8)
		for (int u = 0; u < 8; u++)
			p[u] += x[e + u] * y[e + u];
	float acc = ((p[0] + p[4]) + (p[1] + p[5])) +
		    ((p[2] + p[6]) + (p[3] + p[7]));
	for (; e < n; e++)
		acc += x[e] * y[e];
	return acc;
}

/* One row's softmax backward, in place: g holds dL/dP of the row's c
 * weights pi (after dropout: kept cells kp scaled by ks, NULL without);
 * it becomes dL/dS = P (dP - sum P dP), the sum in double. */
DL_CLONES static void softmax_row_bwd(float *g, const float *pi, const unsigned char *kp,
			    float ks, int c)
{
	if (kp)
		for (int t = 0; t < c; t++)
			g[t] = kp[t] ? g[t] * ks : 0.0f;
	double sdot = 0.0;
	for (int t = 0; t < c; t++)
		sdot += (double)pi[t] * g[t];
	for (int t = 0; t < c; t++)
		g[t] = pi[t] * (g[t] - (float)sdot);
}

/* y += alpha x; x and y never overlap (rows of different tensors). `omp
 * simd` because GCC 12's -O2 cost model does not vectorise a loop that
 * needs a run-time overlap check, and ran this one a float at a time:
 * 7 instructions an element, 40% of a windowed layer's training step
 * (callgrind) */
static inline __attribute__((always_inline)) void axpy(float alpha, const float *x, float *y, int n)
{
	#pragma omp simd
	for (int e = 0; e < n; e++)
		y[e] += alpha * x[e];
}

/* The key lists' gathers fetch the rows of the key PF_AHEAD places ahead
 * in the lists (which run on across rows until jend) while they work on
 * this one: scattered keys (random patterns, long T) miss the caches, and
 * a loop that waits on each miss in turn grows faster than T once the
 * slice's K and V outgrow them. */
#define PF_AHEAD 8

static inline void prefetch_key(const float *x, int64_t ld, const int *js,
				int t, const int *jend, int n)
{
	if (js + t + PF_AHEAD < jend) {
		const float *r = x + (int64_t)js[t + PF_AHEAD] * ld;
		for (int e = 0; e < n; e += 16)
			__builtin_prefetch(r + e, 0, 3);
	}
}

static inline void prefetch_key_w(float *x, int64_t ld, const int *js, int t,
				  const int *jend, int n)
{
	if (js + t + PF_AHEAD < jend) {
		float *r = x + (int64_t)js[t + PF_AHEAD] * ld;
		for (int e = 0; e < n; e += 16)
			__builtin_prefetch(r + e, 1, 3);
	}
}

/* Row i's score gradient g [c] (times sc) into dQ's row dqi (+= over its
 * keys js of K) and into dK's rows of those keys (+= q_i), each when not
 * NULL; prefetching the rows of the key PF_AHEAD places on */
DL_CLONES static void ds_row(float sc, const float *g, int c, const int *js,
		   const int *jend, const float *qi, const float *k, int64_t ldk,
		   float *dqi, float *dk, int64_t lddk, int d)
{
	for (int t = 0; t < c; t++) {
		float gg = sc * g[t];
		if (dqi)
			prefetch_key(k, ldk, js, t, jend, d);
		if (dk)
			prefetch_key_w(dk, lddk, js, t, jend, d);
		if (gg == 0.0f)
			continue;
		if (dqi)
			axpy(gg, k + (int64_t)js[t] * ldk, dqi, d);
		if (dk)
			axpy(gg, qi, dk + (int64_t)js[t] * lddk, d);
	}
}

/* The end of the key lists */
static const int *lists_end(const struct att *a)
{
	return a->idx + a->rowptr[a->Tq];
}

/* A head's key rows a [T, da] (row stride *lda) and value rows b [T, db]
 * (*ldb) interleaved into buf [T, da + db]: key j's key and value are one
 * contiguous run, so a gathered key costs one scattered read, not two.
 * Either may be NULL (not packed); *a, *b and the strides then point into
 * buf. Only heads strided inside a wider tensor are packed, and never two
 * views of one tensor (attention on [x, x, x] accumulates dQ, dK and dV
 * into one buffer, which copies would split); returns whether it packed. */
static int pack_pair(float **a, int *lda, int da, float **b, int *ldb,
		     int db, int T, float *buf)
{
	if (!buf || *a == *b || ((!*a || *lda == da) && (!*b || *ldb == db)))
		return 0;
	int ld = da + db;
	for (int64_t j = 0; j < T; j++) {
		if (*a)
			memcpy(buf + j * ld, *a + j * *lda, sizeof(float) * (size_t)da);
		if (*b)
			memcpy(buf + j * ld + da, *b + j * *ldb,
			       sizeof(float) * (size_t)db);
	}
	if (*a) {
		*a = buf;
		*lda = ld;
	}
	if (*b) {
		*b = buf + da;
		*ldb = ld;
	}
	return 1;
}

/* the rows back: a [T, da] (row stride lda) and b [T, db] (ldb) from buf,
 * as pack_pair laid them out */
static void unpack_pair(float *a, int lda, int da, float *b, int ldb, int db,
			int T, const float *buf)
{
	int ld = da + db;
	for (int64_t j = 0; j < T; j++) {
		if (a)
			memcpy(a + j * lda, buf + j * ld, sizeof(float) * (size_t)da);
		if (b)
			memcpy(b + j * ldb, buf + j * ld + da,
			       sizeof(float) * (size_t)db);
	}
}

/* s[t] += scale q_i . rel_k[clip(j - i) + K] over row i's keys */
static void rel_scores(const struct att *a, const float *qi, int i,
		       const int *js, int c, float *s)
{
	for (int t = 0; t < c; t++) {
		const float *rk = a->relk +
			(int64_t)rel_index(a, i, key_at(js, t)) * a->dq;
		double acc = 0.0;
		for (int e = 0; e < a->dq; e++)
			acc += (double)qi[e] * rk[e];
		s[t] += a->scale * (float)acc;
	}
}

/* The same keys given g = dL/ds: dqi += scale g rel_k (dqi NULL: not
 * needed), drel_k += scale g q_i */
static void rel_bwd(const struct att *a, const float *qi, int i,
		    const int *js, int c, const float *g, float *dqi)
{
	for (int t = 0; t < c; t++) {
		float gg = a->scale * g[t];
		if (gg == 0.0f)
			continue;
		int64_t r = rel_index(a, i, key_at(js, t));
		const float *rk = a->relk + r * a->dq;
		float *drk = a->drelk ? a->drelk + r * a->dq : NULL;
		for (int e = 0; e < a->dq; e++) {
			if (dqi)
				dqi[e] += gg * rk[e];
			if (drk)
				drk[e] += gg * qi[e];
		}
	}
}

/* Dense causal slices multiply in blocks of ATT_CAUSAL_ROWS queries,
 * each against the keys up to its last query, so the scores and the
 * weighted sum skip the masked triangle: 5/8 of the work at 128 tokens
 * (a GPT-2-shaped decoder's per-head products were 1.7% of its forward).
 * Other slices: one block of all the rows and keys. */
#define ATT_CAUSAL_ROWS 32

static int causal_rows(const struct att *a)
{
	return a->causal ? ATT_CAUSAL_ROWS : (a->Tq > 0 ? a->Tq : 1);
}

/* The keys that queries [.., i1) of a dense slice see end here (the
 * materialised path's blocks and the flash path's) */
static int causal_keys(const struct att *a, int i1)
{
	return a->causal && i1 < a->Tk ? i1 : a->Tk;
}

/* The block of queries from i0 of a dense slice: returns its end, and in
 * *kend the end of the keys it sees (every product of the materialised
 * path, forward and backward, runs by these blocks) */
static int causal_block(const struct att *a, int i0, int *kend)
{
	int i1 = imin(a->Tq, i0 + causal_rows(a));
	*kend = causal_keys(a, i1);
	return i1;
}

/* Row i of a dense causal slice sees keys [0, i]: its cells s past them
 * (of c, keys js: NULL for dense rows) zeroed; returns how many it sees */
static int causal_row(const struct att *a, int i, const int *js, float *s, int c)
{
	if (js || !a->causal || i + 1 >= c)
		return c;
	memset(s + i + 1, 0, sizeof(float) * (size_t)(c - i - 1));
	return i + 1;
}

/* Dense scores S[Tq, Tk] = score(q, k); tmp: bilinear [Tq, dk], additive
 * [(Tq + Tk) A] */
DL_CLONES static void dense_scores(const struct att *a, const float *q, int ldq,
			 const float *k, int ldk, float *S, float *tmp)
{
	int Tq = a->Tq, Tk = a->Tk;
	switch (a->score) {
	case SC_SCALED:
	case SC_DOT:
		/* causal: each block of rows against the keys it may see (the
		 * cells past them are row_softmax's zeros) */
		for (int i0 = 0, i1, kend; i0 < Tq; i0 = i1) {
			i1 = causal_block(a, i0, &kend);
			dl_sgemm(0, 1, i1 - i0, kend, a->dq, a->scale,
				 q + (int64_t)i0 * ldq, ldq, k, ldk, 0.0f,
				 S + (int64_t)i0 * Tk, Tk);
		}
		if (a->K > 0)
			for (int i = 0; i < Tq; i++)
				rel_scores(a, q + (int64_t)i * ldq, i, NULL, Tk,
					   S + (int64_t)i * Tk);
		break;
	case SC_BILINEAR:
		dl_sgemm(0, 0, Tq, a->dk, a->dq, 1.0f, q, ldq, a->W, a->dk,
			 0.0f, tmp, a->dk);
		dl_sgemm(0, 1, Tq, Tk, a->dk, 1.0f, tmp, a->dk, k, ldk, 0.0f, S,
			 Tk);
		break;
	case SC_ADDITIVE: {
		int A = a->A, ld = a->dq + a->dk;
		float *aq = tmp, *ak = tmp + (int64_t)Tq * A;
		dl_sgemm(0, 1, Tq, A, a->dq, 1.0f, q, ldq, a->W, ld, 0.0f, aq,
			 A);
		dl_sgemm(0, 1, Tk, A, a->dk, 1.0f, k, ldk, a->W + a->dq, ld,
			 0.0f, ak, A);
		for (int i = 0; i < Tq; i++)
			for (int j = 0; j < Tk; j++) {
				const float *x = aq + (int64_t)i * A;
				const float *y = ak + (int64_t)j * A;
				double acc = 0.0;
				for (int c = 0; c < A; c++)
					acc += (double)a->w2[c] *
					       tanh((double)x[c] + y[c]);
				S[(int64_t)i * Tk + j] = (float)acc;
			}
		break;
	}
	}
}

/* The key-list scores P[cells] (layout of a->rowptr); tmp as for
 * dense_scores */
DL_CLONES static void sparse_scores(const struct att *a, const float *q, int ldq,
			  const float *k, int ldk, float *P, float *tmp)
{
	int Tq = a->Tq, Tk = a->Tk, A = a->A;
	const float *qe = q;
	int lde = ldq, de = a->dq;
	float sc = a->scale;
	if (a->score == SC_BILINEAR) {
		dl_sgemm(0, 0, Tq, a->dk, a->dq, 1.0f, q, ldq, a->W, a->dk,
			 0.0f, tmp, a->dk);
		qe = tmp;
		lde = de = a->dk;
	} else if (a->score == SC_ADDITIVE) {
		int ld = a->dq + a->dk;
		dl_sgemm(0, 1, Tq, A, a->dq, 1.0f, q, ldq, a->W, ld, 0.0f, tmp,
			 A);
		dl_sgemm(0, 1, Tk, A, a->dk, 1.0f, k, ldk, a->W + a->dq, ld,
			 0.0f, tmp + (int64_t)Tq * A, A);
	}
	const int *jend = lists_end(a);
	for (int i = 0; i < Tq; i++) {
		int64_t r0 = a->rowptr[i];
		int c = (int)(a->rowptr[i + 1] - r0);
		const int *js = a->idx + r0;
		float *s = P + r0;
		if (a->score == SC_ADDITIVE) {
			const float *x = tmp + (int64_t)i * A;
			for (int t = 0; t < c; t++) {
				const float *y = tmp + ((int64_t)Tq + js[t]) * A;
				double acc = 0.0;
				for (int e = 0; e < A; e++)
					acc += (double)a->w2[e] *
					       tanh((double)x[e] + y[e]);
				s[t] = (float)acc;
			}
			continue;
		}
		const float *qi = qe + (int64_t)i * lde;
		for (int t = 0; t < c; t++) {
			prefetch_key(k, ldk, js, t, jend, de);
			s[t] = sc * dot(qi, k + (int64_t)js[t] * ldk, de);
		}
		if (a->K > 0)
			rel_scores(a, q + (int64_t)i * ldq, i, js, c, s);
	}
}

/* ---- softmax with the masks ---- */

/* Row i's scores s[c] (keys js, NULL: all Tk) -> probabilities, with the
 * attn_mask, key padding (nonzero = padding, whatever the input's dtype)
 * and (dense rows) causal mask; masked keys and
 * -inf scores get 0, a row with no allowed key becomes zeros. Each mask is
 * its own loop, so the common unmasked row is three plain loops. */
DL_CLONES static void row_softmax(const struct att *a, int i, const int *js, int c,
			float *s)
{
	int n = causal_row(a, i, js, s, c);
	if (a->am) {
		const float *am = a->am + (int64_t)i * a->Tk;
		for (int t = 0; t < n; t++) {
			float m = am[key_at(js, t)];
			if (!a->am_int)
				s[t] += m;
			else if (m != 0.0f)
				s[t] = -INFINITY;
		}
	}
	if (a->kpm)
		for (int t = 0; t < n; t++)
			if (a->kpm[key_at(js, t)] != 0.0f)
				s[t] = -INFINITY;
	/* engine/vmath.h: vectorised, a masked key's -inf 0 exactly */
	float mx = dl_row_max(s, n);
	if (mx == -INFINITY) {
		memset(s, 0, sizeof(float) * (size_t)n);
		return;
	}
	float inv = 1.0f / dl_row_exp(s, s, n, mx);
	#pragma omp simd
	for (int t = 0; t < n; t++)
		s[t] *= inv;
}

/* Row i's keys and scores in a slice's cells: dense rows or key lists */
static void row_span(const struct att *a, int i, const int **js, int *c,
		     int64_t *r0)
{
	if (a->sparse) {
		*r0 = a->rowptr[i];
		*c = (int)(a->rowptr[i + 1] - *r0);
		*js = a->idx + *r0;
	} else {
		*r0 = (int64_t)i * a->Tk;
		*c = a->Tk;
		*js = NULL;
	}
}

/* P[cells]: the probabilities of one slice */
static void slice_probs(const struct att *a, const float *q, int ldq,
			const float *k, int ldk, float *P, float *tmp)
{
	if (a->sparse)
		sparse_scores(a, q, ldq, k, ldk, P, tmp);
	else
		dense_scores(a, q, ldq, k, ldk, P, tmp);
	for (int i = 0; i < a->Tq; i++) {
		const int *js;
		int c;
		int64_t r0;
		row_span(a, i, &js, &c, &r0);
		row_softmax(a, i, js, c, P + r0);
	}
}

/* ---- relative values: buckets of a row's weights by clip(j - i) ---- */

/* rb[2K+1] = sum of p[t] over the keys with each relative index */
static void rel_buckets(const struct att *a, int i, const int *js, int c,
			const float *p, float *rb)
{
	memset(rb, 0, sizeof(float) * (size_t)(2 * a->K + 1));
	for (int t = 0; t < c; t++)
		rb[rel_index(a, i, key_at(js, t))] += p[t];
}

/* ---- the flash path: long dense slices in blocks, online softmax ----
 *
 * A slice runs ATT_FLASH_BQ queries at a time against ATT_FLASH_BK keys at
 * a time (FlashAttention's loop on a CPU): one block's scores S [BQ, BK]
 * by GEMM, the masks applied on them, and a running row max m and sum l
 * rescale the output accumulated so far, so no more than one block of
 * scores is ever held. Backward recomputes each query block's forward (its
 * m, l and output O, hence D = rowsum(dO * O)), then per key block the
 * probabilities P = exp(S - m) / l, dS = P (dO V^T - D), and adds dV +=
 * P^T dO, dQ += scale dS K, dK += scale dS^T Q. Causal slices skip the key
 * blocks past a query block's last query. */

/* S [bq, bk] = the scores of queries [i0, i0 + bq) against keys [j0, j0 +
 * bk), masked cells -inf (causal, attn_mask, key padding) */
static void flash_scores(const struct att *a, const float *q, int ldq,
			 const float *k, int ldk, int i0, int bq, int j0,
			 int bk, float *S)
{
	dl_sgemm(0, 1, bq, bk, a->dq, a->scale, q + (int64_t)i0 * ldq, ldq,
		 k + (int64_t)j0 * ldk, ldk, 0.0f, S, bk);
	for (int r = 0; r < bq; r++) {
		int i = i0 + r, n = bk;
		float *s = S + (int64_t)r * bk;
		if (a->causal && j0 + bk > i + 1) {
			n = i + 1 - j0 > 0 ? i + 1 - j0 : 0;
			for (int t = n; t < bk; t++)
				s[t] = -INFINITY;
		}
		if (a->am) {
			const float *am = a->am + (int64_t)i * a->Tk + j0;
			for (int t = 0; t < n; t++) {
				if (!a->am_int)
					s[t] += am[t];
				else if (am[t] != 0.0f)
					s[t] = -INFINITY;
			}
		}
		if (a->kpm)
			for (int t = 0; t < n; t++)
				if (a->kpm[j0 + t] != 0.0f)
					s[t] = -INFINITY;
	}
}

/* o rows [bq, dv] (stride ldo) = the attention of queries [i0, i0 + bq),
 * with their final row max m[bq] and sum l[bq] (a row with no allowed key:
 * zeros, l = 0); S: one block's scratch */
DL_CLONES static void flash_rows(const struct att *a, const float *q, int ldq,
		       const float *k, int ldk, const float *v, int ldv,
		       int i0, int bq, float *o, int ldo, float *S, float *m,
		       float *l)
{
	int dv = a->dv, kend = causal_keys(a, i0 + bq);
	for (int r = 0; r < bq; r++) {
		m[r] = -INFINITY;
		l[r] = 0.0f;
		memset(o + (int64_t)r * ldo, 0, sizeof(float) * (size_t)dv);
	}
	for (int j0 = 0; j0 < kend; j0 += ATT_FLASH_BK) {
		int bk = imin(ATT_FLASH_BK, a->Tk - j0);
		flash_scores(a, q, ldq, k, ldk, i0, bq, j0, bk, S);
		for (int r = 0; r < bq; r++) {
			float *s = S + (int64_t)r * bk;
			float mx = dl_row_max(s, bk);
			mx = m[r] > mx ? m[r] : mx;
			if (mx == -INFINITY) {
				memset(s, 0, sizeof(float) * (size_t)bk);
				continue;
			}
			float sum = dl_row_exp(s, s, bk, mx);
			if (mx != m[r]) {
				float alpha = dl_exp_shifted(m[r], mx);
				float *orow = o + (int64_t)r * ldo;
				for (int e = 0; e < dv; e++)
					orow[e] *= alpha;
				l[r] *= alpha;
				m[r] = mx;
			}
			l[r] += sum;
		}
		dl_sgemm(0, 0, bq, dv, bk, 1.0f, S, bk, v + (int64_t)j0 * ldv,
			 ldv, 1.0f, o, ldo);
	}
	for (int r = 0; r < bq; r++) {
		float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
		float *orow = o + (int64_t)r * ldo;
		for (int e = 0; e < dv; e++)
			orow[e] *= inv;
	}
}

static void flash_fwd(const struct att *a, const float *q, int ldq,
		      const float *k, int ldk, const float *v, int ldv,
		      float *o, int ldo, const struct att_ws *w)
{
	float *m = w->F, *l = m + ATT_FLASH_BQ;
	for (int i0 = 0; i0 < a->Tq; i0 += ATT_FLASH_BQ) {
		int bq = imin(ATT_FLASH_BQ, a->Tq - i0);
		flash_rows(a, q, ldq, k, ldk, v, ldv, i0, bq,
			   o + (int64_t)i0 * ldo, ldo, w->S, m, l);
	}
}

DL_CLONES static void flash_bwd(const struct att *a, const float *q, int ldq,
		      const float *k, int ldk, const float *v, int ldv,
		      const float *go, int ldgo, float *dq, int lddq,
		      float *dk, int lddk, float *dvv, int lddv,
		      const struct att_ws *w)
{
	int dv = a->dv, d = a->dq;
	float *P = w->S, *G = w->S2;
	float *m = w->F, *l = m + ATT_FLASH_BQ, *D = l + ATT_FLASH_BQ;
	float *O = D + ATT_FLASH_BQ;
	for (int i0 = 0; i0 < a->Tq; i0 += ATT_FLASH_BQ) {
		int bq = imin(ATT_FLASH_BQ, a->Tq - i0);
		int kend = causal_keys(a, i0 + bq);
		const float *gb = go + (int64_t)i0 * ldgo;
		flash_rows(a, q, ldq, k, ldk, v, ldv, i0, bq, O, dv, P, m, l);
		for (int r = 0; r < bq; r++)
			D[r] = dot(gb + (int64_t)r * ldgo, O + (int64_t)r * dv,
				   dv);
		for (int j0 = 0; j0 < kend; j0 += ATT_FLASH_BK) {
			int bk = imin(ATT_FLASH_BK, a->Tk - j0);
			flash_scores(a, q, ldq, k, ldk, i0, bq, j0, bk, P);
			for (int r = 0; r < bq; r++) {
				float *p = P + (int64_t)r * bk;
				float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f, mr = m[r];
				if (inv == 0.0f) {
					memset(p, 0, sizeof(float) * (size_t)bk);
					continue;
				}
				#pragma omp simd
				for (int t = 0; t < bk; t++)
					p[t] = dl_exp_shifted(p[t], mr) * inv;
			}
			if (dvv)
				dl_sgemm(1, 0, bk, dv, bq, 1.0f, P, bk, gb, ldgo,
					 1.0f, dvv + (int64_t)j0 * lddv, lddv);
			dl_sgemm(0, 1, bq, bk, dv, 1.0f, gb, ldgo,
				 v + (int64_t)j0 * ldv, ldv, 0.0f, G, bk);
			for (int r = 0; r < bq; r++) {
				const float *p = P + (int64_t)r * bk;
				float *g = G + (int64_t)r * bk;
				for (int t = 0; t < bk; t++)
					g[t] = p[t] * (g[t] - D[r]);
				if (a->dam)
					axpy(1.0f, g, a->dam + (int64_t)(i0 + r) * a->Tk + j0,
					     bk);
			}
			if (dq)
				dl_sgemm(0, 0, bq, d, bk, a->scale, G, bk,
					 k + (int64_t)j0 * ldk, ldk, 1.0f,
					 dq + (int64_t)i0 * lddq, lddq);
			if (dk)
				dl_sgemm(1, 0, bk, d, bq, a->scale, G, bk,
					 q + (int64_t)i0 * ldq, ldq, 1.0f,
					 dk + (int64_t)j0 * lddk, lddk);
		}
	}
}

/* ---- one slice ---- */

DL_CLONES void att_slice_fwd(const struct att *a, const float *q, int ldq,
		   const float *k, int ldk, const float *v, int ldv, float *o,
		   int ldo, const struct att_ws *w, unsigned char *keep,
		   struct dl_rng *rng, double p)
{
	float *P = w->S;
	int dv = a->dv;
	if (a->flash) {
		flash_fwd(a, q, ldq, k, ldk, v, ldv, o, ldo, w);
		return;
	}
	if (a->sparse) {
		pack_pair((float **)&k, &ldk, a->dk, (float **)&v, &ldv, dv,
			  a->Tk, w->KVp);
	}
	slice_probs(a, q, ldq, k, ldk, P, w->tmp);
	if (keep) {
		int64_t n = a->sparse ? a->rowptr[a->Tq] : a->cells;
		for (int64_t t = 0; t < n; t++) {
			if (rng)
				keep[t] = p < 1.0 && dl_rng_uniform(rng) >= p;
			P[t] = keep[t] ? P[t] * a->keep_scale : 0.0f;
		}
	}
	for (int i0 = 0, i1, kend; !a->sparse && i0 < a->Tq; i0 = i1) {
		i1 = causal_block(a, i0, &kend);
		dl_sgemm(0, 0, i1 - i0, dv, kend, 1.0f,
			 P + (int64_t)i0 * a->Tk, a->Tk, v, ldv, 0.0f,
			 o + (int64_t)i0 * ldo, ldo);
	}
	for (int i = 0; i < a->Tq; i++) {
		const int *js;
		int c;
		int64_t r0;
		row_span(a, i, &js, &c, &r0);
		float *oi = o + (int64_t)i * ldo;
		const float *pi = P + r0;
		if (a->sparse) {
			memset(oi, 0, sizeof(float) * (size_t)dv);
			for (int t = 0; t < c; t++) {
				prefetch_key(v, ldv, js, t, lists_end(a), dv);
				if (pi[t] != 0.0f)
					axpy(pi[t], v + (int64_t)js[t] * ldv,
					     oi, dv);
			}
		}
		if (a->relv) {
			rel_buckets(a, i, js, c, pi, w->rb);
			for (int r = 0; r <= 2 * a->K; r++)
				if (w->rb[r] != 0.0f)
					axpy(w->rb[r],
					     a->relv + (int64_t)r * dv, oi, dv);
		}
	}
}

/* Score gradients of a dense slice given G = dL/dS [Tq, Tk]; tmp as for
 * dense_scores plus as much again */
DL_CLONES static void dense_scores_bwd(const struct att *a, const float *q, int ldq,
			     const float *k, int ldk, const float *G,
			     float *dq, int lddq, float *dk, int lddk,
			     float *tmp)
{
	int Tq = a->Tq, Tk = a->Tk;
	switch (a->score) {
	case SC_SCALED:
	case SC_DOT:
		/* causal: by blocks of queries, each with the keys it sees
		 * (G is 0 past them), as dense_scores */
		for (int i0 = 0, i1, kend; i0 < Tq; i0 = i1) {
			i1 = causal_block(a, i0, &kend);
			const float *gb = G + (int64_t)i0 * Tk;
			if (dq)
				dl_sgemm(0, 0, i1 - i0, a->dq, kend, a->scale, gb, Tk, k, ldk,
					 1.0f, dq + (int64_t)i0 * lddq, lddq);
			if (dk)
				dl_sgemm(1, 0, kend, a->dq, i1 - i0, a->scale, gb, Tk,
					 q + (int64_t)i0 * ldq, ldq, 1.0f, dk, lddk);
		}
		if (a->K > 0)
			for (int i = 0; i < Tq; i++)
				rel_bwd(a, q + (int64_t)i * ldq, i, NULL, Tk,
					G + (int64_t)i * Tk,
					dq ? dq + (int64_t)i * lddq : NULL);
		break;
	case SC_BILINEAR: {
		float *qw = tmp, *dqw = tmp + (int64_t)Tq * a->dk;
		dl_sgemm(0, 0, Tq, a->dk, a->dq, 1.0f, q, ldq, a->W, a->dk,
			 0.0f, qw, a->dk);
		if (dk)
			dl_sgemm(1, 0, Tk, a->dk, Tq, 1.0f, G, Tk, qw, a->dk,
				 1.0f, dk, lddk);
		dl_sgemm(0, 0, Tq, a->dk, Tk, 1.0f, G, Tk, k, ldk, 0.0f, dqw,
			 a->dk);
		if (dq)
			dl_sgemm(0, 1, Tq, a->dq, a->dk, 1.0f, dqw, a->dk, a->W,
				 a->dk, 1.0f, dq, lddq);
		if (a->dW)
			dl_sgemm(1, 0, a->dq, a->dk, Tq, 1.0f, q, ldq, dqw,
				 a->dk, 1.0f, a->dW, a->dk);
		break;
	}
	case SC_ADDITIVE:
		break; /* shared with the key lists: pairs_additive_bwd */
	}
}

/* Additive score gradients over row i's keys given g = dL/ds */
static void additive_row_bwd(const struct att *a, int i, const int *js,
			     int c, const float *g, const float *aq,
			     const float *ak, float *daq, float *dak)
{
	int A = a->A;
	const float *x = aq + (int64_t)i * A;
	float *dx = daq + (int64_t)i * A;
	for (int t = 0; t < c; t++) {
		float gs = g[t];
		if (gs == 0.0f)
			continue;
		int j = key_at(js, t);
		const float *y = ak + (int64_t)j * A;
		float *dy = dak + (int64_t)j * A;
		for (int e = 0; e < A; e++) {
			float th = (float)tanh((double)x[e] + y[e]);
			if (a->dw2)
				a->dw2[e] += gs * th;
			float gg = gs * a->w2[e] * (1.0f - th * th);
			dx[e] += gg;
			dy[e] += gg;
		}
	}
}

/* The per-key pass of the key lists' backward: key j's dV and dK rows
 * summed over the queries that attend it, in query order, from the
 * probabilities P and score gradients G that the per-query pass left at
 * the pairs' positions and the query and output-gradient rows packed in
 * w->QGp. Each row of dK and dV is written once, in order, where the
 * per-query pass would add into scattered rows, a read-modify-write of
 * rows that miss the caches once a head's K and V outgrow them. The same
 * additions in the same order per row: a key's additions come one query
 * after another either way, dV's before dK's. */
DL_CLONES static void keys_bwd(const struct att *a, float *dk, int lddk,
		     float *dvv, int lddv, const struct att_ws *w,
		     const unsigned char *keep)
{
	int d = a->dq, dv = a->dv, ld = d + dv;
	float sc = a->scale, ks = a->keep_scale;
	const float *P = w->S, *G = w->S2, *QG = w->QGp;
	const int *tl = a->tl;
	int64_t n = a->colptr[a->Tk];
	for (int j = 0; j < a->Tk; j++) {
		float *dkj = dk ? dk + (int64_t)j * lddk : NULL;
		float *dvj = dvv ? dvv + (int64_t)j * lddv : NULL;
		for (int64_t e = a->colptr[j]; e < a->colptr[j + 1]; e++) {
			if (e + PF_AHEAD < n) {
				const int *f = tl + 2 * (e + PF_AHEAD);
				const float *r = QG + (int64_t)f[0] * ld;
				for (int u = 0; u < ld; u += 16)
					__builtin_prefetch(r + u, 0, 3);
				__builtin_prefetch(P + f[1], 0, 3);
				__builtin_prefetch(G + f[1], 0, 3);
			}
			const float *qg = QG + (int64_t)tl[2 * e] * ld;
			int pos = tl[2 * e + 1];
			float pd = keep ? (keep[pos] ? P[pos] * ks : 0.0f)
					: P[pos];
			if (dvj && pd != 0.0f)
				axpy(pd, qg + d, dvj, dv);
			float gg = sc * G[pos];
			if (dkj && gg != 0.0f)
				axpy(gg, qg, dkj, d);
		}
	}
}

/* The key lists' backward for dot-product scores without relative
 * tables, row by row: a row's scores, probabilities, dV, dS, dQ and dK
 * while its keys' rows are in cache (the general loop below runs each
 * step over every row in turn, gathering K twice). The same arithmetic in
 * the same order: the rows are independent until dK and dV, which get
 * their additions row after row either way. bykey: dK and dV are left to
 * keys_bwd's pass over the transposed lists instead. */
DL_CLONES static void lists_bwd(const struct att *a, const float *q, int ldq,
		      const float *k, int ldk, const float *v, int ldv,
		      const float *go, int ldgo, float *dq, int lddq,
		      float *dk, int lddk, float *dvv, int lddv,
		      const struct att_ws *w, const unsigned char *keep,
		      int bykey)
{
	int d = a->dq, dv = a->dv;
	float sc = a->scale, ks = a->keep_scale;
	const int *jend = lists_end(a);
	float *rdk = bykey ? NULL : dk, *rdv = bykey ? NULL : dvv;
	for (int i = 0; i < a->Tq; i++) {
		int64_t r0 = a->rowptr[i];
		int c = (int)(a->rowptr[i + 1] - r0);
		const int *js = a->idx + r0;
		const float *qi = q + (int64_t)i * ldq;
		const float *gi = go + (int64_t)i * ldgo;
		float *pi = w->S + r0, *g = w->S2 + r0;
		const unsigned char *kp = keep ? keep + r0 : NULL;
		if (!a->p_ready) {
			for (int t = 0; t < c; t++) {
				prefetch_key(k, ldk, js, t, jend, d);
				pi[t] = sc * dot(qi, k + (int64_t)js[t] * ldk, d);
			}
			row_softmax(a, i, js, c, pi);
		}
		for (int t = 0; t < c; t++) {
			const float *vj = v + (int64_t)js[t] * ldv;
			prefetch_key(v, ldv, js, t, jend, dv);
			if (rdv)
				prefetch_key_w(rdv, lddv, js, t, jend, dv);
			g[t] = dot(gi, vj, dv);
			float pd = kp ? (kp[t] ? pi[t] * ks : 0.0f) : pi[t];
			if (rdv && pd != 0.0f)
				axpy(pd, gi, rdv + (int64_t)js[t] * lddv, dv);
		}
		softmax_row_bwd(g, pi, kp, ks, c);
		if (a->dam) {
			float *dm = a->dam + (int64_t)i * a->Tk;
			for (int t = 0; t < c; t++)
				dm[js[t]] += g[t];
		}
		if (dq || rdk)
			ds_row(sc, g, c, js, jend, qi, k, ldk,
			       dq ? dq + (int64_t)i * lddq : NULL, rdk, lddk,
			       d);
	}
	if (!bykey || (!dk && !dvv))
		return;
	int ld = d + dv;
	for (int i = 0; i < a->Tq; i++) {
		memcpy(w->QGp + (int64_t)i * ld, q + (int64_t)i * ldq,
		       sizeof(float) * (size_t)d);
		memcpy(w->QGp + (int64_t)i * ld + d, go + (int64_t)i * ldgo,
		       sizeof(float) * (size_t)dv);
	}
	keys_bwd(a, dk, lddk, dvv, lddv, w, keep);
}

DL_CLONES static void slice_bwd(const struct att *a, const float *q, int ldq,
		      const float *k, int ldk, const float *v, int ldv,
		      const float *go, int ldgo, float *dq, int lddq, float *dk,
		      int lddk, float *dvv, int lddv, const struct att_ws *w,
		      const unsigned char *keep, int bykey)
{
	int Tq = a->Tq, Tk = a->Tk, dv = a->dv, A = a->A;
	float *P = w->S, *G = w->S2, *tmp = w->tmp;
	float ks = a->keep_scale;
	const int *jend = a->sparse ? lists_end(a) : NULL;
	if (a->sparse && (a->score == SC_SCALED || a->score == SC_DOT) &&
	    a->K == 0 && !a->relv) {
		lists_bwd(a, q, ldq, k, ldk, v, ldv, go, ldgo, dq, lddq, dk,
			  lddk, dvv, lddv, w, keep, bykey);
		return;
	}
	slice_probs(a, q, ldq, k, ldk, P, tmp);
	if (!a->sparse) {
		/* dV += Pd^T go, with G holding the dropped-out weights */
		const float *pd = P;
		if (keep) {
			for (int64_t t = 0; t < a->cells; t++)
				G[t] = keep[t] ? P[t] * ks : 0.0f;
			pd = G;
		}
		/* causal: each block of queries with the keys it sees, as
		 * forward (the cells past them are zeros in pd) */
		for (int i0 = 0, i1, kend; dvv && i0 < Tq; i0 = i1) {
			i1 = causal_block(a, i0, &kend);
			dl_sgemm(1, 0, kend, dv, i1 - i0, 1.0f,
				 pd + (int64_t)i0 * Tk, Tk, go + (int64_t)i0 * ldgo, ldgo,
				 1.0f, dvv, lddv);
		}
		if (a->drelv)
			for (int i = 0; i < Tq; i++) {
				rel_buckets(a, i, NULL, Tk,
					    pd + (int64_t)i * Tk, w->rb);
				for (int r = 0; r <= 2 * a->K; r++)
					axpy(w->rb[r], go + (int64_t)i * ldgo,
					     a->drelv + (int64_t)r * dv, dv);
			}
		/* G = dL/dPd; causal: its cells past a block's keys are
		 * left out, and zeroed with the masked ones below */
		for (int i0 = 0, i1, kend; i0 < Tq; i0 = i1) {
			i1 = causal_block(a, i0, &kend);
			dl_sgemm(0, 1, i1 - i0, kend, dv, 1.0f,
				 go + (int64_t)i0 * ldgo, ldgo, v, ldv, 0.0f,
				 G + (int64_t)i0 * Tk, Tk);
		}
	}
	float *u = w->rb + (a->K > 0 ? 2 * a->K + 1 : 0);
	for (int i = 0; i < Tq; i++) {
		const int *js;
		int c;
		int64_t r0;
		row_span(a, i, &js, &c, &r0);
		const float *gi = go + (int64_t)i * ldgo;
		const float *pi = P + r0;
		float *g = G + r0;
		const unsigned char *kp = keep ? keep + r0 : NULL;
		if (a->sparse) {
			for (int t = 0; t < c; t++) {
				const float *vj = v + (int64_t)js[t] * ldv;
				prefetch_key(v, ldv, js, t, jend, dv);
				if (dvv)
					prefetch_key_w(dvv, lddv, js, t, jend,
						       dv);
				g[t] = dot(gi, vj, dv);
				float pd = kp ? (kp[t] ? pi[t] * ks : 0.0f)
					      : pi[t];
				if (dvv && pd != 0.0f)
					axpy(pd, gi,
					     dvv + (int64_t)js[t] * lddv, dv);
			}
			if (a->drelv) {
				for (int t = 0; t < c; t++) {
					int r = rel_index(a, i, js[t]);
					float pd = kp ? (kp[t] ? pi[t] * ks
							       : 0.0f)
						      : pi[t];
					if (pd != 0.0f)
						axpy(pd, gi,
						     a->drelv + (int64_t)r * dv,
						     dv);
				}
			}
		}
		/* the masked keys: dL/dS is 0 there (P is) */
		c = causal_row(a, i, js, g, c);
		if (a->relv) {
			/* dL/dPd += go_i . rel_v[clip(j - i) + K] */
			for (int r = 0; r <= 2 * a->K; r++)
				u[r] = dot(gi, a->relv + (int64_t)r * dv, dv);
			for (int t = 0; t < c; t++)
				g[t] += u[rel_index(a, i, key_at(js, t))];
		}
		softmax_row_bwd(g, pi, kp, ks, c);
		if (a->dam) {
			float *dm = a->dam + (int64_t)i * Tk;
			for (int t = 0; t < c; t++)
				dm[key_at(js, t)] += g[t];
		}
	}
	if (a->score == SC_ADDITIVE) {
		int ld = a->dq + a->dk;
		float *aq = tmp, *ak = tmp + (int64_t)Tq * A;
		float *daq = ak + (int64_t)Tk * A, *dak = daq + (int64_t)Tq * A;
		dl_sgemm(0, 1, Tq, A, a->dq, 1.0f, q, ldq, a->W, ld, 0.0f, aq,
			 A);
		dl_sgemm(0, 1, Tk, A, a->dk, 1.0f, k, ldk, a->W + a->dq, ld,
			 0.0f, ak, A);
		memset(daq, 0, sizeof(float) * (size_t)(Tq + Tk) * A);
		for (int i = 0; i < Tq; i++) {
			const int *js;
			int c;
			int64_t r0;
			row_span(a, i, &js, &c, &r0);
			additive_row_bwd(a, i, js, c, G + r0, aq, ak, daq, dak);
		}
		if (dq)
			dl_sgemm(0, 0, Tq, a->dq, A, 1.0f, daq, A, a->W, ld,
				 1.0f, dq, lddq);
		if (dk)
			dl_sgemm(0, 0, Tk, a->dk, A, 1.0f, dak, A, a->W + a->dq,
				 ld, 1.0f, dk, lddk);
		if (a->dW) {
			dl_sgemm(1, 0, A, a->dq, Tq, 1.0f, daq, A, q, ldq, 1.0f,
				 a->dW, ld);
			dl_sgemm(1, 0, A, a->dk, Tk, 1.0f, dak, A, k, ldk, 1.0f,
				 a->dW + a->dq, ld);
		}
		return;
	}
	if (!a->sparse) {
		dense_scores_bwd(a, q, ldq, k, ldk, G, dq, lddq, dk, lddk, tmp);
		return;
	}
	/* key lists: scaled-dot, dot (query side q) or bilinear (q W) */
	const float *qe = q;
	float *dqe = dq;
	int lde = ldq, ldde = lddq, de = a->dq;
	float sc = a->scale;
	if (a->score == SC_BILINEAR) {
		float *qw = tmp, *dqw = tmp + (int64_t)Tq * a->dk;
		dl_sgemm(0, 0, Tq, a->dk, a->dq, 1.0f, q, ldq, a->W, a->dk,
			 0.0f, qw, a->dk);
		memset(dqw, 0, sizeof(float) * (size_t)Tq * a->dk);
		qe = qw;
		dqe = dqw;
		lde = ldde = de = a->dk;
	}
	for (int i = 0; i < Tq; i++) {
		int64_t r0 = a->rowptr[i];
		int c = (int)(a->rowptr[i + 1] - r0);
		const int *js = a->idx + r0;
		const float *g = G + r0;
		const float *qi = qe + (int64_t)i * lde;
		ds_row(sc, g, c, js, jend, qi, k, ldk,
		       dqe ? dqe + (int64_t)i * ldde : NULL, dk, lddk, de);
		if (a->K > 0)
			rel_bwd(a, q + (int64_t)i * ldq, i, js, c, g,
				dq ? dq + (int64_t)i * lddq : NULL);
	}
	if (a->score == SC_BILINEAR) {
		float *dqw = tmp + (int64_t)Tq * a->dk;
		if (dq)
			dl_sgemm(0, 1, Tq, a->dq, a->dk, 1.0f, dqw, a->dk, a->W,
				 a->dk, 1.0f, dq, lddq);
		if (a->dW)
			dl_sgemm(1, 0, a->dq, a->dk, Tq, 1.0f, q, ldq, dqw,
				 a->dk, 1.0f, a->dW, a->dk);
	}
}

/* Whether rows [0, ra) of a (row stride lda, da floats a row) and [0,
 * rb) of b may share memory (NULL shares none) */
static int overlap(const float *a, int64_t ra, int64_t lda, int da,
		   const float *b, int64_t rb, int64_t ldb, int db)
{
	if (!a || !b || ra <= 0 || rb <= 0)
		return 0;
	uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
	uintptr_t a1 = (uintptr_t)(a + (ra - 1) * lda + da);
	uintptr_t b1 = (uintptr_t)(b + (rb - 1) * ldb + db);
	return a0 < b1 && b0 < a1;
}

/* Key lists gather rows of K, V, dK and dV: a head's rows are packed
 * first, each key's key and value rows side by side (dK and dV with what
 * they hold, unpacked after), which changes no arithmetic */
void att_slice_bwd(const struct att *a, const float *q, int ldq,
		   const float *k, int ldk, const float *v, int ldv,
		   const float *go, int ldgo, float *dq, int lddq, float *dk,
		   int lddk, float *dvv, int lddv, const struct att_ws *w,
		   const unsigned char *keep)
{
	if (a->flash) {
		flash_bwd(a, q, ldq, k, ldk, v, ldv, go, ldgo, dq, lddq, dk,
			  lddk, dvv, lddv, w);
		return;
	}
	if (!a->sparse) {
		slice_bwd(a, q, ldq, k, ldk, v, ldv, go, ldgo, dq, lddq, dk,
			  lddk, dvv, lddv, w, keep, 0);
		return;
	}
	int Tk = a->Tk, dk0 = lddk, dv0 = lddv;
	float *pdk = dk, *pdv = dvv;
	pack_pair((float **)&k, &ldk, a->dk, (float **)&v, &ldv, a->dv, Tk,
		  w->KVp);
	int packed = dq != dk && dq != dvv &&
		     pack_pair(&pdk, &lddk, a->dk, &pdv, &lddv, a->dv, Tk,
			       w->dKVp);
	/* dK and dV by key only when dQ shares no memory with them (then
	 * its additions interleave with theirs) and they share none with
	 * each other unless as one tensor (k and v the same input) or packed
	 * side by side */
	int bykey = a->tl && !overlap(dq, a->Tq, lddq, a->dq, dk, Tk, dk0, a->dk) &&
		    !overlap(dq, a->Tq, lddq, a->dq, dvv, Tk, dv0, a->dv) &&
		    (packed || (dk == dvv && dk0 == dv0) ||
		     !overlap(dk, Tk, dk0, a->dk, dvv, Tk, dv0, a->dv));
	slice_bwd(a, q, ldq, k, ldk, v, ldv, go, ldgo, dq, lddq, pdk, lddk,
		  pdv, lddv, w, keep, bykey);
	if (packed)
		unpack_pair(dk, dk0, a->dk, dvv, dv0, a->dv, Tk, w->dKVp);
}

/* ---- the scores alone (attention.h, dl_score_*) ---- */

_Static_assert((int)SC_SCALED == (int)DL_SCORE_SCALED_DOT &&
	       (int)SC_DOT == (int)DL_SCORE_DOT &&
	       (int)SC_BILINEAR == (int)DL_SCORE_BILINEAR &&
	       (int)SC_ADDITIVE == (int)DL_SCORE_ADDITIVE,
	       "attention.h numbers the scores as attention's `score`");

static void score_att(const struct dl_score *s, struct att *a)
{
	memset(a, 0, sizeof *a);
	a->score = s->score;
	a->Tq = s->Tq;
	a->Tk = s->Tk;
	a->dq = s->dq;
	a->dk = s->dk;
	a->scale = s->score == SC_SCALED ? (float)(1.0 / sqrt((double)s->dq)) : 1.0f;
	a->keep_scale = 1.0f;
	a->block = 1;
	a->W = s->W;
	a->dW = s->dW;
	a->w2 = s->w2;
	a->dw2 = s->dw2;
	a->A = s->A;
}

size_t dl_score_tmp(const struct dl_score *s)
{
	size_t b = (size_t)s->Tq * s->dk, c = (size_t)(s->Tq + s->Tk) * s->A;
	return 2 * (b > c ? b : c);
}

void dl_score_forward(const struct dl_score *s, const float *q, int ldq,
		      const float *k, int ldk, float *S, float *tmp)
{
	struct att a;
	score_att(s, &a);
	dense_scores(&a, q, ldq, k, ldk, S, tmp);
}

void dl_score_backward(const struct dl_score *s, const float *q, int ldq,
		       const float *k, int ldk, const float *G, float *dq,
		       int lddq, float *dk, int lddk, float *tmp)
{
	struct att a;
	score_att(s, &a);
	if (a.score != SC_ADDITIVE) {
		dense_scores_bwd(&a, q, ldq, k, ldk, G, dq, lddq, dk, lddk, tmp);
		return;
	}
	int Tq = a.Tq, Tk = a.Tk, A = a.A, ld = a.dq + a.dk;
	float *aq = tmp, *ak = tmp + (int64_t)Tq * A;
	float *daq = ak + (int64_t)Tk * A, *dak = daq + (int64_t)Tq * A;
	dl_sgemm(0, 1, Tq, A, a.dq, 1.0f, q, ldq, a.W, ld, 0.0f, aq, A);
	dl_sgemm(0, 1, Tk, A, a.dk, 1.0f, k, ldk, a.W + a.dq, ld, 0.0f, ak, A);
	memset(daq, 0, sizeof(float) * (size_t)(Tq + Tk) * A);
	for (int i = 0; i < Tq; i++)
		additive_row_bwd(&a, i, NULL, Tk, G + (int64_t)i * Tk, aq, ak, daq, dak);
	if (dq)
		dl_sgemm(0, 0, Tq, a.dq, A, 1.0f, daq, A, a.W, ld, 1.0f, dq, lddq);
	if (dk)
		dl_sgemm(0, 0, Tk, a.dk, A, 1.0f, dak, A, a.W + a.dq, ld, 1.0f, dk, lddk);
	if (a.dW) {
		dl_sgemm(1, 0, A, a.dq, Tq, 1.0f, daq, A, q, ldq, 1.0f, a.dW, ld);
		dl_sgemm(1, 0, A, a.dk, Tk, 1.0f, dak, A, k, ldk, 1.0f, a.dW + a.dq, ld);
	}
}

/* ---- one stepped slice: queries at absolute positions against a cache ---- */

/* Whether a causal query at position i may see key j <= i under a's
 * patterns: the union row_keys builds, for keys that are all in the past
 * (so the sizes of the whole sequence do not enter). */
static int step_allowed(const struct att *a, int64_t i, int64_t j)
{
	if (!a->any)
		return 1;
	int64_t B = a->block;
	if (a->global > 0 && (i < a->global * B || j < a->global * B))
		return 1;
	if (a->window >= 0) {
		int64_t t = i / B - j / B;
		if (t % a->dilation == 0 && t <= a->window * a->dilation)
			return 1;
	}
	if (a->stride > 0 && (i - j < a->stride || (i - j) % a->stride == 0))
		return 1;
	if (a->fixed > 0 &&
	    (j / a->fixed == i / a->fixed || j % a->fixed >= a->fixed - a->fsum))
		return 1;
	return 0;
}

DL_CLONES void att_step_fwd(const struct att *a, const float *q, int ldq,
			    int T, int64_t p0, const float *K, int ldk,
			    const float *V, int ldv, float *o, int ldo, float *s)
{
	int dq = a->dq, dv = a->dv;
	for (int r = 0; r < T; r++) {
		int64_t i = p0 + r;
		const float *qi = q + (int64_t)r * ldq;
		float *oi = o + (int64_t)r * ldo;
		float m = -INFINITY;
		for (int64_t j = 0; j <= i; j++) {
			if (!step_allowed(a, i, j)) {
				s[j] = -INFINITY;
				continue;
			}
			float v = a->scale * dot(qi, K + j * ldk, dq);
			if (a->K > 0) {
				const float *rk = a->relk + (int64_t)rel_index(a, (int)i, (int)j) * dq;
				double acc = 0.0;
				for (int e = 0; e < dq; e++)
					acc += (double)qi[e] * rk[e];
				v += a->scale * (float)acc;
			}
			s[j] = v;
			if (v > m)
				m = v;
		}
		for (int e = 0; e < dv; e++)
			oi[e] = 0.0f;
		if (m == -INFINITY)
			continue;
		double sum = 0.0;
		for (int64_t j = 0; j <= i; j++) {
			float e = s[j] == -INFINITY ? 0.0f : expf(s[j] - m);
			s[j] = e;
			sum += e;
		}
		float inv = (float)(1.0 / sum);
		for (int64_t j = 0; j <= i; j++) {
			float p = s[j] * inv;
			if (p == 0.0f)
				continue;
			axpy(p, V + j * ldv, oi, dv);
			if (a->relv)
				axpy(p, a->relv + (int64_t)rel_index(a, (int)i, (int)j) * dv, oi, dv);
		}
	}
}
