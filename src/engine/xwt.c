/* y = x W^T on weights packed once, in place. See xwt.h. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gemm.h"
#include "engine/graph.h"
#include "engine/op.h"
#include "engine/xwt.h"

/* A weight's state, by its first float's address (open addressing). */
struct slot {
	const float *w;   /* NULL: empty */
	int packed;       /* 1: panels in place (and tail); 0: left as rows */
	int O, I;         /* W's shape */
	float *tail;      /* the last O % DL_ROWS_W rows' panel, or NULL */
};

struct range {
	const float *lo, *hi;
};

struct dl_xwt_set {
	struct slot *slot;
	size_t cap, used;     /* cap a power of two */
	struct range *shared; /* storage of tied parameters */
	int n_shared, n_packed;
	void *(*alloc)(size_t); /* packing's and restoring's scratch */
};

static size_t hash(const float *w, size_t cap)
{
	uint64_t h = (uint64_t)(uintptr_t)w * 0x9E3779B97F4A7C15ull;
	return (size_t)(h >> 20) & (cap - 1);
}

static struct slot *find(struct dl_xwt_set *s, const float *w)
{
	size_t i = hash(w, s->cap);
	while (s->slot[i].w && s->slot[i].w != w)
		i = (i + 1) & (s->cap - 1);
	return &s->slot[i];
}

static int grow(struct dl_xwt_set *s)
{
	size_t cap = s->cap ? 2 * s->cap : 64;
	struct slot *old = s->slot, *t = calloc(cap, sizeof *t);
	if (!t)
		return -1;
	size_t ocap = s->cap;
	s->slot = t;
	s->cap = cap;
	for (size_t i = 0; i < ocap; i++)
		if (old[i].w)
			*find(s, old[i].w) = old[i];
	free(old);
	return 0;
}

/* Every parameter of g whose storage two of them use (a tie and its
 * owner): its owner's whole tensor. Ties are made among the top graph's
 * parameters only; an inner graph's parameters (a transformer layer's,
 * an expert's) are each a view of one of its composite's, one to one. */
struct dl_xwt_set *dl_xwt_set_new(const struct dl_graph *g)
{
	struct dl_xwt_set *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->alloc = malloc;
	int n = 0;
	for (int i = 0; i < g->n_nodes; i++)
		for (int k = 0; k < g->nodes[i].n_params; k++)
			n += g->nodes[i].params[k].tie != NULL;
	s->shared = calloc((size_t)n + 1, sizeof *s->shared);
	if (!s->shared || grow(s)) {
		dl_xwt_set_free(s);
		return NULL;
	}
	for (int i = 0; i < g->n_nodes; i++)
		for (int k = 0; k < g->nodes[i].n_params; k++) {
			const struct dl_param *p = &g->nodes[i].params[k];
			if (!p->tie)
				continue;
			p = dl_param_root(p);
			s->shared[s->n_shared++] =
				(struct range){p->data, p->data + dl_shape_numel(&p->shape)};
		}
	return s;
}

void dl_xwt_set_free(struct dl_xwt_set *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->cap; i++)
		free(s->slot[i].tail);
	free(s->slot);
	free(s->shared);
	free(s);
}

void dl_xwt_test_alloc(struct dl_xwt_set *s, void *(*fn)(size_t))
{
	s->alloc = fn ? fn : malloc;
}

/* Rows again from W's full panels (W [O, I], rows I apart); the tail's
 * rows were never moved. 0, or -1 (out of memory: W untouched). */
static int unpack(const struct dl_xwt_set *s, float *W, int O, int I)
{
	size_t panel = (size_t)DL_ROWS_W * (size_t)I;
	float *p = s->alloc(panel * sizeof *p);
	if (!p)
		return -1;
	for (int n0 = 0; n0 + DL_ROWS_W <= O; n0 += DL_ROWS_W) {
		float *w = W + (size_t)n0 * (size_t)I;
		memcpy(p, w, panel * sizeof *p);
		for (int j = 0; j < DL_ROWS_W; j++)
			for (int k = 0; k < I; k++)
				w[(size_t)j * (size_t)I + (size_t)k] = p[(size_t)k * DL_ROWS_W + (size_t)j];
	}
	free(p);
	return 0;
}

int dl_xwt_restore(struct dl_xwt_set *s)
{
	if (!s)
		return 0;
	/* each weight marked as rows once it is (a failure leaves every
	 * slot right), then the table emptied */
	for (size_t i = 0; i < s->cap; i++) {
		struct slot *e = &s->slot[i];
		if (!e->w || !e->packed)
			continue;
		if (unpack(s, (float *)e->w, e->O, e->I) != 0)
			return -1;
		e->packed = 0;
		s->n_packed--;
	}
	for (size_t i = 0; i < s->cap; i++) {
		free(s->slot[i].tail);
		s->slot[i] = (struct slot){0};
	}
	s->used = 0;
	return 0;
}

int dl_xwt_packed(const struct dl_xwt_set *s)
{
	return s ? s->n_packed : 0;
}

/* W's full panels in place, each from a copy of its rows; the tail's
 * into its own buffer. 0, or -1 (out of memory: W untouched). */
static int pack(const struct dl_xwt_set *s, struct slot *e, float *W, int O, int I)
{
	int full = O / DL_ROWS_W * DL_ROWS_W;
	float *rows = s->alloc((size_t)DL_ROWS_W * (size_t)I * sizeof *rows);
	float *tail = full < O ? s->alloc((size_t)dl_sgemm_rows_floats(O - full, I) * sizeof *tail)
			       : NULL;
	if (!rows || (full < O && !tail)) {
		free(rows);
		free(tail);
		return -1;
	}
	size_t panel = (size_t)DL_ROWS_W * (size_t)I;
	for (int n0 = 0; n0 < full; n0 += DL_ROWS_W) {
		float *p = W + (size_t)n0 * (size_t)I;
		memcpy(rows, p, panel * sizeof *rows);
		dl_sgemm_rows_pack(p, 1, rows, I, DL_ROWS_W, I);
	}
	if (tail)
		dl_sgemm_rows_pack(tail, 1, W + (size_t)full * (size_t)I, I, O - full, I);
	free(rows);
	e->tail = tail;
	return 0;
}

/* packed's body, one thread at a time */
static int lookup(struct dl_xwt_set *s, float *W, int O, int I, const float **tail)
{
	struct slot *e = find(s, W);
	if (!e->w) {
		int shared = 0;
		for (int i = 0; i < s->n_shared && !shared; i++)
			shared = W >= s->shared[i].lo && W < s->shared[i].hi;
		if ((s->used + 1) * 2 > s->cap && grow(s) == 0)
			e = find(s, W);
		if ((s->used + 1) * 2 <= s->cap) {
			e->w = W;
			e->O = O;
			e->I = I;
			e->packed = !shared && dl_sgemm_rows_level() == 2 &&
				    pack(s, e, W, O, I) == 0;
			s->used++;
			s->n_packed += e->packed;
		}
	}
	*tail = e->tail;
	return e->w && e->packed;
}

/* Whether W is packed (its tail panel in *tail), packing it at its first
 * call when it may be; 0: use rows (shared, no AVX-512 at that call, or
 * out of memory). A weight packed
 * stays packed whatever kernels dl_sgemm_rows uses later (the tests
 * change them): all give the same bits. */
static int packed(struct dl_xwt_set *s, float *W, int O, int I, const float **tail)
{
	int r;
#pragma omp critical(dl_xwt)
	r = lookup(s, W, O, I, tail);
	return r;
}

void dl_xwt(struct dl_xwt_set *s, float *out, const float *x, int ldx, int M, int I, float *W,
	    int O)
{
	const float *tail = NULL;
	if (!s || M <= 0 || O <= 0 || I <= 0 || !packed(s, W, O, I, &tail)) {
		dl_sgemm(0, 1, M, O, I, 1.0f, x, ldx, W, I, 0.0f, out, O);
		return;
	}
	int full = O / DL_ROWS_W * DL_ROWS_W;
	if (full > 0)
		dl_sgemm_rows_shared(M, full, I, x, ldx, W, out, O);
	if (full < O)
		dl_sgemm_rows(M, O - full, I, x, ldx, tail, out + full, O);
}
