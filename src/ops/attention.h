/* The scores of the `attention` op (src/ops/attention.c), for ops that
 * attend with them step by step (attention_decoder): one block of queries
 * against one block of keys, no masks, no softmax. */
#ifndef DL_OPS_ATTENTION_H
#define DL_OPS_ATTENTION_H

#include <stddef.h>

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
