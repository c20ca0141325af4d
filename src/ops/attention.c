/* Attention: the book's `attention` operator (scaled-dot, dot, bilinear and
 * additive scores) and PyTorch's nn.MultiheadAttention (batch first), with
 * the shared masks (causal; window/dilation, global tokens, random keys,
 * strided and fixed sparse patterns as a union), Shaw et al.'s relative key
 * positions and Primer's depthwise convolutions (multihead only).
 *
 * Each (sample, head) slice materialises its [Tq, Tk] score matrix in the
 * scratch space, the masked patterns included, except `window` alone (with
 * dilation, causal, relative positions) on a dot-product score: that keeps
 * a band of [Tq, 2 window + 1] scores, O(T window) time and memory
 * (att_band). Backward recomputes the
 * projections and probabilities from the inputs; forward saves only the
 * dropout mask (multihead `dropout` in training). Every matrix product goes
 * through dl_sgemm. */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/gemm.h"
#include "engine/op.h"
#include "ops/attention.h"

enum { SC_SCALED, SC_DOT, SC_BILINEAR, SC_ADDITIVE };

/* One attention problem: the scores of a [Tq, D] query block against a
 * [Tk, D] key block, masks, and the score's parameters. */
struct att {
	int score;
	int Tq, Tk, dq, dk;      /* dq = dk except for bilinear / additive */
	float scale;
	int causal, any;         /* any: some sparse pattern enabled */
	int64_t window, dilation, global, random, stride, fixed, fsum;
	uint64_t seed;
	int K;                   /* relative positions (0: none) */
	const float *relk;       /* [2K+1, dq] */
	float *drelk;
	const float *W;          /* bilinear [dq, dk]; additive w.weight
	                          * [A, dq + dk] */
	float *dW;
	const float *w2;         /* additive [1, A] */
	float *dw2;
	int A;
	float keep_scale;        /* dropout: 1 / (1 - p) */
	int band;                /* window only: scores kept as a band */
	int B;                   /* columns of a score row: Tk, or the band's
	                          * 2 window + 1 (window + 1 when causal) */
};

static int64_t floordiv(int64_t a, int64_t b)
{
	int64_t q = a / b;
	return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* Decides the banded layout: `window` (with dilation and causal) as the
 * only pattern, a dot-product score, and a band narrower than the keys.
 * Then row i holds the keys j0 + t dilation, t = 0..c-1 (band_row). */
static void att_band(struct att *a)
{
	a->band = 0;
	a->B = a->Tk;
	if (a->window < 0 || a->stride > 0 || a->fixed > 0 || a->global > 0 ||
	    a->random > 0 || (a->score != SC_SCALED && a->score != SC_DOT))
		return;
	int64_t B = a->causal ? a->window + 1 : 2 * a->window + 1;
	if (B >= a->Tk)
		return;
	a->band = 1;
	a->B = (int)B;
}

/* The band of query i: first key j0 and count c (c <= 0: none) */
static void band_row(const struct att *a, int i, int *j0, int *c)
{
	int64_t d = a->dilation, w = a->window;
	int64_t lo = -floordiv(i, d);
	if (lo < -w)
		lo = -w;
	int64_t hi = floordiv((int64_t)a->Tk - 1 - i, d);
	int64_t top = a->causal ? 0 : w;
	if (hi > top)
		hi = top;
	*j0 = (int)(i + lo * d);
	*c = (int)(hi - lo + 1);
}

/* ---- masks ---- */

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

/* m[Tk]: 1 where query i may attend to key j. Random keys: min(r, Tk)
 * distinct keys per query from splitmix64 seeded by (seed, i), redrawn on
 * repeats; the same in every call. */
static void mask_row(const struct att *a, int i, unsigned char *m)
{
	int Tk = a->Tk;
	if (!a->any) {
		memset(m, 1, (size_t)Tk);
	} else {
		for (int j = 0; j < Tk; j++) {
			int64_t dd = (int64_t)i - j, ad = dd < 0 ? -dd : dd;
			int ok = 0;
			if (a->window >= 0 && ad <= a->window * a->dilation &&
			    dd % a->dilation == 0)
				ok = 1;
			if (a->stride > 0 &&
			    (ad < a->stride || dd % a->stride == 0))
				ok = 1;
			if (a->fixed > 0 &&
			    (j / a->fixed == i / a->fixed ||
			     j % a->fixed >= a->fixed - a->fsum))
				ok = 1;
			if (a->global > 0 && (i < a->global || j < a->global))
				ok = 1;
			m[j] = (unsigned char)ok;
		}
		if (a->random > 0) {
			int r = a->random < Tk ? (int)a->random : Tk;
			uint64_t s = a->seed * 0x9E3779B97F4A7C15ULL +
				     (uint64_t)i * 0xD1B54A32D192ED03ULL;
			for (int t = 0; t < r; t++) {
				int k;
				do
					k = (int)(splitmix64(&s) %
						  (uint64_t)Tk);
				while (m[k] & 2);
				m[k] |= 2;
			}
		}
	}
	if (a->causal)
		for (int j = i + 1; j < Tk; j++)
			m[j] = 0;
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

/* s[t] += scale q_i . rel_k[clip(j - i) + K] for the keys j = j0 + t step,
 * t < c (Shaw et al.) */
static void rel_scores(const struct att *a, const float *qi, int i, int j0,
		       int step, int c, float *s)
{
	for (int t = 0; t < c; t++) {
		const float *rk = a->relk +
			(int64_t)rel_index(a, i, j0 + t * step) * a->dq;
		double acc = 0.0;
		for (int e = 0; e < a->dq; e++)
			acc += (double)qi[e] * rk[e];
		s[t] += a->scale * (float)acc;
	}
}

/* The same keys given g = dL/ds: dqi += scale g rel_k (dqi NULL: not
 * needed), drel_k += scale g q_i */
static void rel_bwd(const struct att *a, const float *qi, int i, int j0,
		    int step, int c, const float *g, float *dqi)
{
	for (int t = 0; t < c; t++) {
		float gg = a->scale * g[t];
		if (gg == 0.0f)
			continue;
		int64_t r = rel_index(a, i, j0 + t * step);
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

/* S[Tq, Tk] = score(q, k); tmp: bilinear [Tq, dk], additive [(Tq + Tk) A] */
static void att_scores(const struct att *a, const float *q, int ldq,
		       const float *k, int ldk, float *S, float *tmp)
{
	int Tq = a->Tq, Tk = a->Tk;
	switch (a->score) {
	case SC_SCALED:
	case SC_DOT:
		dl_sgemm(0, 1, Tq, Tk, a->dq, a->scale, q, ldq, k, ldk, 0.0f, S,
			 Tk);
		if (a->K > 0)
			for (int i = 0; i < Tq; i++)
				rel_scores(a, q + (int64_t)i * ldq, i, 0, 1, Tk,
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

/* Gradients of the score given G = dL/dS [Tq, Tk]: dq, dk (NULL: not
 * needed) and the score's parameters. tmp as for att_scores plus as much
 * again. */
static void att_scores_bwd(const struct att *a, const float *q, int ldq,
			   const float *k, int ldk, const float *G, float *dq,
			   int lddq, float *dk, int lddk, float *tmp)
{
	int Tq = a->Tq, Tk = a->Tk;
	switch (a->score) {
	case SC_SCALED:
	case SC_DOT:
		if (dq)
			dl_sgemm(0, 0, Tq, a->dq, Tk, a->scale, G, Tk, k, ldk,
				 1.0f, dq, lddq);
		if (dk)
			dl_sgemm(1, 0, Tk, a->dq, Tq, a->scale, G, Tk, q, ldq,
				 1.0f, dk, lddk);
		if (a->K > 0)
			for (int i = 0; i < Tq; i++)
				rel_bwd(a, q + (int64_t)i * ldq, i, 0, 1, Tk,
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
	case SC_ADDITIVE: {
		int A = a->A, ld = a->dq + a->dk;
		float *aq = tmp, *ak = tmp + (int64_t)Tq * A;
		float *daq = ak + (int64_t)Tk * A, *dak = daq + (int64_t)Tq * A;
		dl_sgemm(0, 1, Tq, A, a->dq, 1.0f, q, ldq, a->W, ld, 0.0f, aq,
			 A);
		dl_sgemm(0, 1, Tk, A, a->dk, 1.0f, k, ldk, a->W + a->dq, ld,
			 0.0f, ak, A);
		memset(daq, 0, sizeof(float) * (size_t)(Tq + Tk) * A);
		for (int i = 0; i < Tq; i++)
			for (int j = 0; j < Tk; j++) {
				float gs = G[(int64_t)i * Tk + j];
				if (gs == 0.0f)
					continue;
				const float *x = aq + (int64_t)i * A;
				const float *y = ak + (int64_t)j * A;
				float *dx = daq + (int64_t)i * A;
				float *dy = dak + (int64_t)j * A;
				for (int c = 0; c < A; c++) {
					float t = (float)tanh((double)x[c] +
							      y[c]);
					if (a->dw2)
						a->dw2[c] += gs * t;
					float g =
						gs * a->w2[c] * (1.0f - t * t);
					dx[c] += g;
					dy[c] += g;
				}
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
		break;
	}
	}
}

/* S [Tq, Tk] -> masked softmax over each row (rows with no allowed key
 * become zeros); m: Tk bytes */
static void att_softmax(const struct att *a, float *S, unsigned char *m)
{
	for (int i = 0; i < a->Tq; i++) {
		float *s = S + (int64_t)i * a->Tk;
		mask_row(a, i, m);
		float mx = -INFINITY;
		for (int j = 0; j < a->Tk; j++)
			if (m[j] && s[j] > mx)
				mx = s[j];
		double sum = 0.0;
		for (int j = 0; j < a->Tk; j++) {
			if (m[j]) {
				s[j] = expf(s[j] - mx);
				sum += s[j];
			} else {
				s[j] = 0.0f;
			}
		}
		float inv = sum > 0.0 ? (float)(1.0 / sum) : 0.0f;
		for (int j = 0; j < a->Tk; j++)
			s[j] *= inv;
	}
}

/* Probabilities of one slice into S (dropout applied with keep when not
 * NULL). */
static void att_probs(const struct att *a, const float *q, int ldq,
		      const float *k, int ldk, float *S, float *tmp,
		      unsigned char *m)
{
	att_scores(a, q, ldq, k, ldk, S, tmp);
	att_softmax(a, S, m);
}

/* ---- the banded (window-only) slices: O(Tq * B) scores ---- */

/* S [Tq, B]: probabilities of the band rows */
static void band_probs(const struct att *a, const float *q, int ldq,
		       const float *k, int ldk, float *S)
{
	int B = a->B, dil = (int)a->dilation;
	for (int i = 0; i < a->Tq; i++) {
		int j0, c;
		band_row(a, i, &j0, &c);
		float *s = S + (int64_t)i * B;
		if (c <= 0)
			continue;
		const float *qi = q + (int64_t)i * ldq;
		dl_sgemm(0, 1, 1, c, a->dq, a->scale, qi, ldq,
			 k + (int64_t)j0 * ldk, dil * ldk, 0.0f, s, c);
		if (a->K > 0)
			rel_scores(a, qi, i, j0, dil, c, s);
		float mx = -INFINITY;
		for (int t = 0; t < c; t++)
			if (s[t] > mx)
				mx = s[t];
		double sum = 0.0;
		for (int t = 0; t < c; t++) {
			s[t] = expf(s[t] - mx);
			sum += s[t];
		}
		float inv = (float)(1.0 / sum);
		for (int t = 0; t < c; t++)
			s[t] *= inv;
	}
}

static void band_fwd(const struct att *a, const float *q, int ldq,
		     const float *k, int ldk, const float *v, int ldv, int dv,
		     float *o, int ldo, float *S, unsigned char *keep,
		     struct dl_rng *rng, double p)
{
	int B = a->B, dil = (int)a->dilation;
	band_probs(a, q, ldq, k, ldk, S);
	for (int i = 0; i < a->Tq; i++) {
		int j0, c;
		band_row(a, i, &j0, &c);
		float *oi = o + (int64_t)i * ldo;
		if (c <= 0) {
			memset(oi, 0, sizeof(float) * (size_t)dv);
			continue;
		}
		float *s = S + (int64_t)i * B;
		if (keep) {
			unsigned char *kp = keep + (int64_t)i * B;
			for (int t = 0; t < c; t++) {
				if (rng)
					kp[t] = p < 1.0 &&
						dl_rng_uniform(rng) >= p;
				s[t] = kp[t] ? s[t] * a->keep_scale : 0.0f;
			}
		}
		dl_sgemm(0, 0, 1, dv, c, 1.0f, s, c, v + (int64_t)j0 * ldv,
			 dil * ldv, 0.0f, oi, ldo);
	}
}

static void band_bwd(const struct att *a, const float *q, int ldq,
		     const float *k, int ldk, const float *v, int ldv, int dv,
		     const float *go, int ldgo, float *dq, int lddq, float *dk,
		     int lddk, float *dvv, int lddv, float *S, float *S2,
		     const unsigned char *keep)
{
	int B = a->B, dil = (int)a->dilation;
	band_probs(a, q, ldq, k, ldk, S);
	for (int i = 0; i < a->Tq; i++) {
		int j0, c;
		band_row(a, i, &j0, &c);
		if (c <= 0)
			continue;
		const float *p = S + (int64_t)i * B;
		float *g = S2 + (int64_t)i * B;
		const float *gi = go + (int64_t)i * ldgo;
		const unsigned char *kp = keep ? keep + (int64_t)i * B : NULL;
		if (dvv) {
			/* g temporarily holds the dropped-out probabilities */
			for (int t = 0; t < c; t++)
				g[t] = kp && !kp[t] ? 0.0f :
				       p[t] * (kp ? a->keep_scale : 1.0f);
			dl_sgemm(1, 0, c, dv, 1, 1.0f, g, c, gi, ldgo, 1.0f,
				 dvv + (int64_t)j0 * lddv, dil * lddv);
		}
		dl_sgemm(0, 1, 1, c, dv, 1.0f, gi, ldgo, v + (int64_t)j0 * ldv,
			 dil * ldv, 0.0f, g, c);
		if (kp)
			for (int t = 0; t < c; t++)
				g[t] = kp[t] ? g[t] * a->keep_scale : 0.0f;
		double dot = 0.0;
		for (int t = 0; t < c; t++)
			dot += (double)p[t] * g[t];
		for (int t = 0; t < c; t++)
			g[t] = p[t] * (g[t] - (float)dot);
		const float *qi = q + (int64_t)i * ldq;
		if (dq)
			dl_sgemm(0, 0, 1, a->dq, c, a->scale, g, c,
				 k + (int64_t)j0 * ldk, dil * ldk, 1.0f,
				 dq + (int64_t)i * lddq, lddq);
		if (dk)
			dl_sgemm(1, 0, c, a->dq, 1, a->scale, g, c, qi, ldq,
				 1.0f, dk + (int64_t)j0 * lddk, dil * lddk);
		if (a->K > 0)
			rel_bwd(a, qi, i, j0, dil, c, g,
				dq ? dq + (int64_t)i * lddq : NULL);
	}
}

/* Forward of one slice: o [Tq, dv] (ld ldo) = P v. keep: the dropout mask
 * of this slice, drawn here when rng is given. */
static void att_slice_fwd(const struct att *a, const float *q, int ldq,
			  const float *k, int ldk, const float *v, int ldv,
			  int dv, float *o, int ldo, float *S, float *tmp,
			  unsigned char *m, unsigned char *keep,
			  struct dl_rng *rng, double p)
{
	if (a->band) {
		band_fwd(a, q, ldq, k, ldk, v, ldv, dv, o, ldo, S, keep, rng,
			 p);
		return;
	}
	att_probs(a, q, ldq, k, ldk, S, tmp, m);
	if (keep) {
		int64_t nn = (int64_t)a->Tq * a->Tk;
		for (int64_t t = 0; t < nn; t++) {
			if (rng)
				keep[t] = p < 1.0 && dl_rng_uniform(rng) >= p;
			S[t] = keep[t] ? S[t] * a->keep_scale : 0.0f;
		}
	}
	dl_sgemm(0, 0, a->Tq, dv, a->Tk, 1.0f, S, a->Tk, v, ldv, 0.0f, o, ldo);
}

/* Backward of one slice given go = dL/do [Tq, dv]: dq, dk, dv (+=; NULL:
 * not needed). S, S2: [Tq, Tk] each. */
static void att_slice_bwd(const struct att *a, const float *q, int ldq,
			  const float *k, int ldk, const float *v, int ldv,
			  int dv, const float *go, int ldgo, float *dq,
			  int lddq, float *dk, int lddk, float *dvv, int lddv,
			  float *S, float *S2, float *tmp, unsigned char *m,
			  const unsigned char *keep)
{
	int Tq = a->Tq, Tk = a->Tk;
	int64_t nn = (int64_t)Tq * Tk;
	if (a->band) {
		band_bwd(a, q, ldq, k, ldk, v, ldv, dv, go, ldgo, dq, lddq, dk,
			 lddk, dvv, lddv, S, S2, keep);
		return;
	}
	att_probs(a, q, ldq, k, ldk, S, tmp, m);
	if (dvv) {
		const float *pd = S;
		if (keep) {
			for (int64_t t = 0; t < nn; t++)
				S2[t] = keep[t] ? S[t] * a->keep_scale : 0.0f;
			pd = S2;
		}
		dl_sgemm(1, 0, Tk, dv, Tq, 1.0f, pd, Tk, go, ldgo, 1.0f, dvv,
			 lddv);
	}
	/* S2 = dL/dP */
	dl_sgemm(0, 1, Tq, Tk, dv, 1.0f, go, ldgo, v, ldv, 0.0f, S2, Tk);
	if (keep)
		for (int64_t t = 0; t < nn; t++)
			S2[t] = keep[t] ? S2[t] * a->keep_scale : 0.0f;
	/* S2 = dL/dS = P (dP - sum_j P dP) */
	for (int i = 0; i < Tq; i++) {
		const float *p = S + (int64_t)i * Tk;
		float *g = S2 + (int64_t)i * Tk;
		double dot = 0.0;
		for (int j = 0; j < Tk; j++)
			dot += (double)p[j] * g[j];
		for (int j = 0; j < Tk; j++)
			g[j] = p[j] * (g[j] - (float)dot);
	}
	att_scores_bwd(a, q, ldq, k, ldk, S2, dq, lddq, dk, lddk, tmp);
}

/* ---- hyperparameters: the masks, shared by both ops as a tail ---- */

enum {
	MK_CAUSAL, MK_WINDOW, MK_DILATION, MK_GLOBAL, MK_RANDOM, MK_SEED,
	MK_STRIDE, MK_FIXED, MK_FSUM, MK_REL, MK_COUNT
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
	{"relative_positions", DL_HP_INT, "0", NULL, DL_HP_NONNEG}

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
	a->any = a->window >= 0 || a->stride > 0 || a->fixed > 0 ||
		 a->global > 0 || a->random > 0;
	a->K = (int)h[MK_REL].i;
}

static int seq_shape(const struct dl_node *n, const struct dl_shape *s,
		     int k, struct dl_error *err)
{
	char b[128];
	if (s->ndim != 3)
		return dl_node_error(err, n, -1,
			"input %d has shape %s; attention needs sequences [N, T, D]",
			k + 1, dl_shape_str(s, b, sizeof b));
	if (s->d[1] <= 0 || s->d[2] <= 0 || s->d[1] > INT_MAX / 4 ||
	    s->d[2] > INT_MAX / 4)
		return dl_node_error(err, n, -1,
			"input %d has shape %s; attention needs steps and features",
			k + 1, dl_shape_str(s, b, sizeof b));
	return 0;
}

/* q, k, v shapes and their batch / length agreement */
static int qkv_shapes(const struct dl_node *n, const struct dl_shape *in,
		      const struct dl_shape **q, const struct dl_shape **k,
		      const struct dl_shape **v, struct dl_error *err)
{
	char b[128], c[128];
	for (int i = 0; i < n->n_in; i++) {
		int rc = seq_shape(n, &in[i], i, err);
		if (rc < 0)
			return rc;
	}
	*q = &in[0];
	*k = &in[n->n_in > 1 ? 1 : 0];
	*v = &in[n->n_in - 1];
	for (int i = 1; i < n->n_in; i++)
		if (in[i].d[0] != in[0].d[0])
			return dl_node_error(err, n, -1,
				"the inputs have batch sizes %lld and %lld; they must be equal",
				(long long)in[0].d[0], (long long)in[i].d[0]);
	if ((*k)->d[1] != (*v)->d[1])
		return dl_node_error(err, n, -1,
			"keys %s and values %s have different lengths",
			dl_shape_str(*k, b, sizeof b),
			dl_shape_str(*v, c, sizeof c));
	return 0;
}

/* ---- attention ---- */

enum { AT_SCORE, AT_SIZE, AT_MASK };

static const struct dl_hp_desc attention_hp[] = {
	[AT_SCORE] = {"score", DL_HP_ENUM, "scaled_dot",
		      "scaled_dot|dot|bilinear|additive", 0},
	[AT_SIZE] = {"attention_size", DL_HP_INT, "none", NULL,
		     DL_HP_DERIVED | DL_HP_POSITIVE},
	MASK_HPS,
};

/* scratch of the attention op, in floats: S, S2, tmp (4 blocks), mask */
static void attention_sizes(const struct dl_node *n, const struct dl_shape *q,
			    const struct dl_shape *k, int64_t *tmpf)
{
	int64_t Tq = q->d[1], Tk = k->d[1], Dk = k->d[2];
	int64_t A = n->hp[AT_SIZE].set ? n->hp[AT_SIZE].i : 0;
	*tmpf = 2 * (Tq * Dk > (Tq + Tk) * A ? Tq * Dk : (Tq + Tk) * A);
}

static int attention_infer(struct dl_node *n, const struct dl_shape *in,
			   struct dl_shape *out, struct dl_error *err)
{
	char b[128], c[128];
	const struct dl_shape *q, *k, *v;
	int rc = qkv_shapes(n, in, &q, &k, &v, err);
	if (rc < 0)
		return rc;
	rc = mask_check(n, AT_MASK, err);
	if (rc < 0)
		return rc;
	int score = (int)n->hp[AT_SCORE].i;
	int64_t Dq = q->d[2], Dk = k->d[2];
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
	int64_t Tq = q->d[1], Tk = k->d[1], tmpf;
	attention_sizes(n, q, k, &tmpf);
	int64_t A = n->hp[AT_SIZE].set ? n->hp[AT_SIZE].i : 0;
	struct att a;
	memset(&a, 0, sizeof a);
	a.score = score;
	a.Tk = (int)Tk;
	mask_fill(&a, n, AT_MASK);
	att_band(&a);
	int64_t B = a.B;
	if ((double)Tq * B > 1e9 || (double)(Tq + Tk) * A > 1e9)
		return dl_node_error(err, n, -1, "the inputs are too long");
	*out = *q;
	out->d[2] = v->d[2];
	n->ws_bytes = sizeof(float) * (size_t)(2 * Tq * B + tmpf) + (size_t)Tk;
	n->saved_bytes = 0;
	int64_t N = q->d[0], Dv = v->d[2];
	n->macs = N * (Tq * B * (Dq + Dv) +
		       (score == SC_BILINEAR ? Tq * Dq * Dk : 0) +
		       (score == SC_ADDITIVE ? (Tq * Dq + Tk * Dk + Tq * Tk) * A
					     : 0));
	return 0;
}

/* The att of the attention op; param gradients when grads */
static void attention_att(struct att *a, const struct dl_node *n,
			  const struct dl_shape *q, const struct dl_shape *k,
			  int grads)
{
	memset(a, 0, sizeof *a);
	a->score = (int)n->hp[AT_SCORE].i;
	a->Tq = (int)q->d[1];
	a->Tk = (int)k->d[1];
	a->dq = (int)q->d[2];
	a->dk = (int)k->d[2];
	a->scale = a->score == SC_SCALED ? (float)(1.0 / sqrt((double)a->dq))
					 : 1.0f;
	a->keep_scale = 1.0f;
	mask_fill(a, n, AT_MASK);
	att_band(a);
	int p = 0;
	if (a->score == SC_BILINEAR || a->score == SC_ADDITIVE) {
		a->W = n->params[p].data;
		a->dW = grads ? n->params[p].grad : NULL;
		p++;
	}
	if (a->score == SC_ADDITIVE) {
		a->A = (int)n->hp[AT_SIZE].i;
		a->w2 = n->params[p].data;
		a->dw2 = grads ? n->params[p].grad : NULL;
		p++;
	}
	if (a->K > 0) {
		a->relk = n->params[p].data;
		a->drelk = grads ? n->params[p].grad : NULL;
	}
}

static void attention_fwd(struct dl_node *n, const struct dl_tensor *in,
			  struct dl_tensor *out, struct dl_ctx *ctx)
{
	const struct dl_tensor *q = &in[0], *k = &in[n->n_in > 1 ? 1 : 0];
	const struct dl_tensor *v = &in[n->n_in - 1];
	struct att a;
	attention_att(&a, n, &q->shape, &k->shape, 0);
	int64_t tmpf;
	attention_sizes(n, &q->shape, &k->shape, &tmpf);
	int N = (int)q->shape.d[0], Dv = (int)v->shape.d[2];
	float *S = ctx->ws, *tmp = S + 2 * (int64_t)a.Tq * a.B;
	unsigned char *m = (unsigned char *)(tmp + tmpf);
	for (int b = 0; b < N; b++)
		att_slice_fwd(&a, q->data + (int64_t)b * a.Tq * a.dq, a.dq,
			      k->data + (int64_t)b * a.Tk * a.dk, a.dk,
			      v->data + (int64_t)b * a.Tk * Dv, Dv, Dv,
			      out->data + (int64_t)b * a.Tq * Dv, Dv, S, tmp, m,
			      NULL, NULL, 0.0);
}

static void attention_bwd(struct dl_node *n, const struct dl_tensor *in,
			  const struct dl_tensor *out, const float *dout,
			  float *const *din, struct dl_ctx *ctx)
{
	int iq = 0, ik = n->n_in > 1 ? 1 : 0, iv = n->n_in - 1;
	const struct dl_tensor *q = &in[iq], *k = &in[ik], *v = &in[iv];
	struct att a;
	attention_att(&a, n, &q->shape, &k->shape, 1);
	int64_t tmpf;
	attention_sizes(n, &q->shape, &k->shape, &tmpf);
	int N = (int)q->shape.d[0], Dv = (int)v->shape.d[2];
	float *S = ctx->ws, *S2 = S + (int64_t)a.Tq * a.B;
	float *tmp = S2 + (int64_t)a.Tq * a.B;
	unsigned char *m = (unsigned char *)(tmp + tmpf);
	for (int b = 0; b < N; b++) {
		int64_t oq = (int64_t)b * a.Tq * a.dq,
			ok = (int64_t)b * a.Tk * a.dk;
		int64_t ov = (int64_t)b * a.Tk * Dv;
		att_slice_bwd(&a, q->data + oq, a.dq, k->data + ok, a.dk,
			      v->data + ov, Dv, Dv,
			      dout + (int64_t)b * a.Tq * Dv, Dv,
			      din[iq] ? din[iq] + oq : NULL, a.dq,
			      din[ik] ? din[ik] + ok : NULL, a.dk,
			      din[iv] ? din[iv] + ov : NULL, Dv, S, S2, tmp, m,
			      NULL);
	}
}

/* Y = softmax(score(Q, K) + mask) V */
static const struct dl_op_desc op_attention = {
	.name = "attention",
	.doc = "Y = softmax(score(Q, K) + mask) V; in: x, [q, kv] or [q, k, v]",
	.min_in = 1, .max_in = 3,
	.hp = attention_hp, .n_hp = AT_MASK + MK_COUNT,
	.infer = attention_infer,
	.forward = attention_fwd,
	.backward = attention_bwd,
	.flags = DL_OP_COMPLEX | DL_OP_BWD_NO_OUTPUT,
	.params = "bilinear: weight [D_q, D_k]; additive: w.weight [attention_size, D_q + D_k], w2.weight [1, attention_size]; rel_k [2 relative_positions + 1, D_q]",
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
	int inw, qw, kw, vw, inb, ow, ob, dw[3], db[3], rel;
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
}

/* scratch in floats: X[3] projections, C[3] after dconv, O, then backward's
 * dX[3], dC[3], dO, then S, S2 (Tq B each: B = Tk, or the band's width),
 * then Tk mask bytes */
struct mha_ws {
	float *x[3], *c[3], *o, *dx[3], *dc[3], *dO, *S, *S2;
	unsigned char *m;
};

static size_t mha_layout(int64_t N, int64_t Tq, int64_t Tk, int64_t B,
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
	if (w) {
		w->S = f + off;
		w->S2 = f + off + Tq * B;
		w->m = (unsigned char *)(f + off + 2 * Tq * B);
	}
	off += 2 * Tq * B;
	return sizeof(float) * (size_t)off + (size_t)Tk;
}

static int mha_infer(struct dl_node *n, const struct dl_shape *in,
		     struct dl_shape *out, struct dl_error *err)
{
	const struct dl_shape *q, *k, *v;
	int rc = qkv_shapes(n, in, &q, &k, &v, err);
	if (rc < 0)
		return rc;
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
	a.Tk = (int)Tk;
	mask_fill(&a, n, MH_MASK);
	att_band(&a);
	int64_t B = a.B;
	if ((double)Tq * B * H > 1e10 || (double)N * (Tq + 2 * Tk) * E > 1e10)
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
	*out = *q;
	n->ws_bytes = mha_layout(N, Tq, Tk, B, E, w > 0, NULL, NULL);
	n->saved_bytes = p > 0.0 ? (size_t)(N * H * Tq * B) : 0;
	n->macs = N * (Tq * E * E + Tk * E * (KD + VD) + 2 * Tq * B * E +
		       Tq * E * E + (Tq + 2 * Tk) * E * w);
	return 0;
}

/* out[M, E] = x[M, I] W^T (W rows of ld I) + b */
static void proj_fwd(float *out, const float *x, const float *W,
		     const float *b, int M, int I, int E)
{
	dl_sgemm(0, 1, M, E, I, 1.0f, x, I, W, I, 0.0f, out, E);
	if (b)
		for (int m = 0; m < M; m++)
			for (int j = 0; j < E; j++)
				out[(int64_t)m * E + j] += b[j];
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
};

static void mha_dims(const struct dl_node *n, const struct dl_tensor *in,
		     struct mha_dims *D)
{
	D->ix[0] = 0;
	D->ix[1] = n->n_in > 1 ? 1 : 0;
	D->ix[2] = n->n_in - 1;
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
	a->dq = a->dk = D->d;
	a->scale = (float)(1.0 / sqrt((double)D->d));
	double pd = n->hp[MH_DROPOUT].f;
	a->keep_scale = pd < 1.0 ? (float)(1.0 / (1.0 - pd)) : 0.0f;
	mask_fill(a, n, MH_MASK);
	att_band(a);
	if (a->K > 0) {
		a->relk = n->params[p->rel].data;
		a->drelk = grads ? n->params[p->rel].grad : NULL;
	}
}

/* projections (and dconv) of the inputs, into w->x and w->c */
static void mha_project(const struct dl_node *n, const struct mha_p *p,
			const struct mha_dims *D, struct mha_ws *w)
{
	for (int t = 0; t < 3; t++) {
		float *W, *b;
		mha_wb(n, p, D, t, 0, &W, &b);
		int T = t == 0 ? D->Tq : D->Tk;
		proj_fwd(w->x[t], D->x[t]->data, W, b, D->N * T, D->I[t], D->E);
		if (D->w > 0)
			dconv_fwd(w->c[t], w->x[t], n->params[p->dw[t]].data,
				  p->db[t] >= 0 ? n->params[p->db[t]].data
						: NULL,
				  D->N, T, D->E, D->w);
	}
}

static void mha_fwd(struct dl_node *n, const struct dl_tensor *in,
		    struct dl_tensor *out, struct dl_ctx *ctx)
{
	struct mha_dims D;
	mha_dims(n, in, &D);
	struct mha_p p;
	mha_params(n, D.I[1] != D.E || D.I[2] != D.E, &p);
	struct mha_ws w;
	struct att a;
	mha_att(&a, n, &p, &D, 0);
	mha_layout(D.N, D.Tq, D.Tk, a.B, D.E, D.w > 0, ctx->ws, &w);
	double pd = n->hp[MH_DROPOUT].f;
	int drop = ctx->train && ctx->saved && pd > 0.0;
	mha_project(n, &p, &D, &w);
	int E = D.E;
	int64_t nn = (int64_t)D.Tq * a.B;
	for (int b = 0; b < D.N; b++)
		for (int h = 0; h < D.H; h++) {
			int64_t oq = (int64_t)b * D.Tq * E + (int64_t)h * D.d;
			int64_t ok = (int64_t)b * D.Tk * E + (int64_t)h * D.d;
			unsigned char *keep =
				drop ? (unsigned char *)ctx->saved +
						((int64_t)b * D.H + h) * nn
				     : NULL;
			att_slice_fwd(&a, w.c[0] + oq, E, w.c[1] + ok, E,
				      w.c[2] + ok, E, D.d, w.o + oq, E, w.S,
				      w.S2, w.m, keep, ctx->rng, pd);
		}
	proj_fwd(out->data, w.o, n->params[p.ow].data,
		 p.ob >= 0 ? n->params[p.ob].data : NULL, D.N * D.Tq, E, E);
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
	mha_att(&a, n, &p, &D, 1);
	mha_layout(D.N, D.Tq, D.Tk, a.B, D.E, D.w > 0, ctx->ws, &w);
	double pd = n->hp[MH_DROPOUT].f;
	int drop = ctx->train && ctx->saved && pd > 0.0;
	int E = D.E;
	int64_t nn = (int64_t)D.Tq * a.B;
	mha_project(n, &p, &D, &w);
	/* recompute the heads' output O (with the same dropout mask) */
	for (int b = 0; b < D.N; b++)
		for (int h = 0; h < D.H; h++) {
			int64_t oq = (int64_t)b * D.Tq * E + (int64_t)h * D.d;
			int64_t ok = (int64_t)b * D.Tk * E + (int64_t)h * D.d;
			unsigned char *keep =
				drop ? (unsigned char *)ctx->saved +
						((int64_t)b * D.H + h) * nn
				     : NULL;
			att_slice_fwd(&a, w.c[0] + oq, E, w.c[1] + ok, E,
				      w.c[2] + ok, E, D.d, w.o + oq, E, w.S,
				      w.S2, w.m, keep, NULL, pd);
		}
	memset(w.dO, 0, sizeof(float) * (size_t)D.N * D.Tq * E);
	proj_bwd(w.dO, n->params[p.ow].grad,
		 p.ob >= 0 ? n->params[p.ob].grad : NULL, dout, w.o,
		 n->params[p.ow].data, D.N * D.Tq, E, E);
	int64_t len[3] = {(int64_t)D.N * D.Tq * E, (int64_t)D.N * D.Tk * E,
			  (int64_t)D.N * D.Tk * E};
	for (int t = 0; t < 3; t++) {
		memset(w.dc[t], 0, sizeof(float) * (size_t)len[t]);
		memset(w.dx[t], 0, sizeof(float) * (size_t)len[t]);
	}
	for (int b = 0; b < D.N; b++)
		for (int h = 0; h < D.H; h++) {
			int64_t oq = (int64_t)b * D.Tq * E + (int64_t)h * D.d;
			int64_t ok = (int64_t)b * D.Tk * E + (int64_t)h * D.d;
			const unsigned char *keep =
				drop ? (unsigned char *)ctx->saved +
						((int64_t)b * D.H + h) * nn
				     : NULL;
			att_slice_bwd(&a, w.c[0] + oq, E, w.c[1] + ok, E,
				      w.c[2] + ok, E, D.d, w.dO + oq, E,
				      w.dc[0] + oq, E, w.dc[1] + ok, E,
				      w.dc[2] + ok, E, w.S, w.S2, NULL, w.m,
				      keep);
		}
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
	.min_in = 1, .max_in = 3,
	.hp = mha_hp, .n_hp = MH_MASK + MK_COUNT,
	.infer = mha_infer,
	.forward = mha_fwd,
	.backward = mha_bwd,
	.flags = DL_OP_COMPLEX | DL_OP_BWD_NO_OUTPUT,
	.params = "in_proj_weight [3E, E] (or q_proj_weight [E, E], k_proj_weight [E, kdim], v_proj_weight [E, vdim]), in_proj_bias [3E], out_proj.weight [E, E], out_proj.bias [E]; dconv: q_dconv.weight [E, 1, dconv], q_dconv.bias [E], k_dconv.*, v_dconv.*; rel_k [2 relative_positions + 1, E / num_heads]",
};

const struct dl_op_desc *const dl_ops_attention[] = {&op_attention, &op_mha,
						     NULL};

/* ---- the scores for other ops (src/ops/attention.h) ---- */

static void score_att(const struct dl_score *s, struct att *a)
{
	memset(a, 0, sizeof *a);
	a->score = s->score;
	a->Tq = s->Tq;
	a->Tk = s->Tk;
	a->dq = s->dq;
	a->dk = s->dk;
	a->scale = s->score == SC_SCALED ? (float)(1.0 / sqrt((double)s->dq))
					 : 1.0f;
	a->keep_scale = 1.0f;
	a->window = -1;
	a->B = s->Tk;
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
	att_scores(&a, q, ldq, k, ldk, S, tmp);
}

void dl_score_backward(const struct dl_score *s, const float *q, int ldq,
		       const float *k, int ldk, const float *G, float *dq,
		       int lddq, float *dk, int lddk, float *tmp)
{
	struct att a;
	score_att(s, &a);
	att_scores_bwd(&a, q, ldq, k, ldk, G, dq, lddq, dk, lddk, tmp);
}

_Static_assert((int)SC_SCALED == (int)DL_SCORE_SCALED_DOT &&
	       (int)SC_DOT == (int)DL_SCORE_DOT &&
	       (int)SC_BILINEAR == (int)DL_SCORE_BILINEAR &&
	       (int)SC_ADDITIVE == (int)DL_SCORE_ADDITIVE,
	       "attention.h numbers the scores as attention's `score`");
