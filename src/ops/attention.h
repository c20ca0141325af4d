/* The attention core shared by `attention` and `multihead_attention`
 * (attention_core.c): scores, masks, key lists and one (sample, head)
 * slice's forward and backward. The ops (attention.c) read hyperparameters
 * and inputs and call these per slice; ops that attend step by step
 * (attention_decoder) use the scores alone (dl_score_*). */
#ifndef DL_OPS_ATTENTION_H
#define DL_OPS_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "engine/rng.h"

enum { SC_SCALED, SC_DOT, SC_BILINEAR, SC_ADDITIVE };

/* One attention problem: a [Tq, dq] query block against [Tk, dk] keys and
 * [Tk, dv] values, its masks and the score's parameters. */
struct att {
	int score;
	int Tq, Tk, dq, dk, dv;  /* dq = dk except for bilinear / additive */
	float scale;
	int causal, any;         /* any: some sparse pattern enabled */
	int64_t window, dilation, global, random, stride, fixed, fsum;
	int64_t block;           /* block_size (1: patterns count tokens) */
	uint64_t seed;
	int K;                   /* relative positions (0: none) */
	const float *relk;       /* [2K+1, dq] */
	float *drelk;
	const float *relv;       /* [2K+1, dv] relative values, or NULL */
	float *drelv;
	const float *W;          /* bilinear [dq, dk]; additive w.weight
	                          * [A, dq + dk] */
	float *dW;
	const float *w2;         /* additive [1, A] */
	float *dw2;
	int A;
	float keep_scale;        /* dropout: 1 / (1 - p) */

	/* The current sample's mask inputs (NULL: none), set per sample. */
	const float *am;         /* attn_mask [Tq, Tk] */
	int am_int;              /* nonzero = masked (else added) */
	float *dam;              /* gradient of a float attn_mask */
	const float *kpm;        /* key_padding_mask [Tk]: nonzero = padding */

	/* Set by att_prepare: sparse patterns use key lists, row i's keys
	 * idx[rowptr[i] .. rowptr[i + 1]); cells = the score cells of one
	 * slice (Tq Tk dense, a bound on the keys listed when sparse). flash:
	 * a long dense slice runs in blocks of ATT_FLASH_BQ queries by
	 * ATT_FLASH_BK keys with an online softmax, never holding its Tq x Tk
	 * scores (see att_prepare for when). */
	int sparse, flash;
	int64_t cells;
	const int64_t *rowptr;
	const int *idx;

	/* Backward of the key lists: tlists asks att_build for the lists
	 * transposed, key j's pairs tl[2 colptr[j] .. 2 colptr[j + 1]) as
	 * (query i, position of j in idx) with i increasing (NULL: not
	 * built, or more than INT_MAX cells) */
	int tlists;
	const int64_t *colptr;
	const int *tl;

	/* Set by a caller that runs att_slice_fwd and then att_slice_bwd on
	 * the same slice without dropout: the key lists' backward takes the
	 * weights the forward left in the scratch's S instead of computing
	 * them again (the same bits: the same scores and softmax code). */
	int p_ready;
};

/* The blocks of the flash path, and the dense slices that take it: at
 * least ATT_FLASH_MIN_CELLS score cells (Tq Tk). */
#define ATT_FLASH_BQ 64
#define ATT_FLASH_BK 256
#define ATT_FLASH_MIN_CELLS ((int64_t)1 << 20)

/* Scratch of one call: scores S and S2 [cells] each (flash: one block,
 * [BQ BK] each), tmp [tmpf] for bilinear / additive scores, rb [2 (2K+1)]
 * relative-value buckets, the key lists and their build's marks; flash:
 * F [BQ (dv + 3)], a query block's output and its running max, sum and
 * backward's row dots; key lists: one slice's keys and values packed
 * into contiguous rows, key j's key beside its value, KVp and dKVp
 * [Tk, dk + dv] (a head of [N, T, E] is strided by E: gathering scattered
 * rows from it touches E / d times the pages and cache sets, and separate
 * K and V rows are two scattered reads a key); the transposed lists
 * colptr [Tk + 1] and tl [2 cells], and QGp [Tq, dq + dv]: one slice's
 * query rows beside its output gradient's, which the backward's per-key
 * pass gathers. */
struct att_ws {
	float *S, *S2, *tmp, *rb, *F, *KVp, *dKVp, *QGp;
	int64_t *rowptr, *colptr;
	int *idx, *stamp, *rstamp, *tl;
};

/* Derives a->any, a->sparse and a->cells from the pattern and sizes. */
void att_prepare(struct att *a);
/* Lays out the scratch at base (NULL: only measure); returns its bytes. */
size_t att_ws_layout(const struct att *a, int64_t tmpf, void *base,
		     struct att_ws *w);
/* Builds the key lists (sparse patterns) into w and points a at them. */
void att_build(struct att *a, struct att_ws *w);

/* o [Tq, dv] (row stride ldo) = attention of one slice. keep: the slice's
 * dropout mask [cells], drawn here when rng is given. */
void att_slice_fwd(const struct att *a, const float *q, int ldq,
		   const float *k, int ldk, const float *v, int ldv, float *o,
		   int ldo, const struct att_ws *w, unsigned char *keep,
		   struct dl_rng *rng, double p);
/* Adds the gradients of one slice given go = dL/do: dq, dk, dvv (NULL: not
 * needed), the score's and relative tables' parameters, a float
 * attn_mask's. */
void att_slice_bwd(const struct att *a, const float *q, int ldq,
		   const float *k, int ldk, const float *v, int ldv,
		   const float *go, int ldgo, float *dq, int lddq, float *dk,
		   int lddk, float *dvv, int lddv, const struct att_ws *w,
		   const unsigned char *keep);

/* Stepped decoding: o [T, dv] (row stride ldo) for T causal queries q
 * [T, dq] at positions p0 .. p0 + T - 1, against the keys K and values V
 * of positions 0 .. p0 + T - 1 (rows ldk, ldv apart), under a's patterns
 * and relative tables (no masks inputs, no dropout); s: [p0 + T] floats of
 * scratch. */
void att_step_fwd(const struct att *a, const float *q, int ldq, int T,
		  int64_t p0, const float *K, int ldk, const float *V, int ldv,
		  float *o, int ldo, float *s);

/* ---- the scores alone: one block of queries against one block of keys,
 * no masks, no softmax (attention_decoder) ---- */

/* The order of attention's `score` choices. */
enum { DL_SCORE_SCALED_DOT, DL_SCORE_DOT, DL_SCORE_BILINEAR, DL_SCORE_ADDITIVE };

struct dl_score {
	int score;            /* DL_SCORE_* */
	int Tq, Tk, dq, dk;   /* dq == dk for the dot-product scores */
	int A;                /* additive: attention_size */
	const float *W;       /* bilinear weight [dq, dk]; additive w.weight
	                       * [A, dq + dk]; else NULL */
	float *dW;            /* its gradient (+=), NULL: not wanted */
	const float *w2;      /* additive w2.weight [1, A] */
	float *dw2;
};

/* Scratch floats of one dl_score_forward or dl_score_backward call. */
size_t dl_score_tmp(const struct dl_score *s);
/* S [Tq, Tk] = score(q [Tq, dq] (row stride ldq), k [Tk, dk] (ldk)). */
void dl_score_forward(const struct dl_score *s, const float *q, int ldq,
		      const float *k, int ldk, float *S, float *tmp);
/* Given G = dL/dS [Tq, Tk]: dq, dk (+=; NULL: not needed) and the
 * parameters' gradients. */
void dl_score_backward(const struct dl_score *s, const float *q, int ldq,
		       const float *k, int ldk, const float *G, float *dq,
		       int lddq, float *dk, int lddk, float *tmp);

#endif
