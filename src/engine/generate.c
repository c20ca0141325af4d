/* Autoregressive decoding (engine/generate.h). Each sequence has its
 * tokens (prompt, then the chosen ones) and a state in the session that
 * covers tokens [start, start + pos). A call feeds the tokens past the
 * state; when a sequence would outgrow the context, its oldest tokens are
 * dropped and its state rebuilt from the kept ones, as nanoGPT crops the
 * context to its block size. Sequences that feed one token each run
 * together, in runs of neighbouring rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/generate.h"
#include "engine/rng.h"

struct seq {
	int64_t *ids;           /* [cap]: prompt then new tokens */
	size_t len, cap, plen;
	int64_t start, pos;     /* the state covers ids[start, start + pos) */
	int done;
	double score;           /* beams: summed log-probabilities */
};

struct vi {
	float v;
	int i;
};

struct dec {
	struct dl_session *s;
	const struct dl_gen_opts *o;
	int tok, out, n_in;
	int64_t rows, max_len, V;
	struct seq *q;          /* [rows] */
	int64_t *pos;           /* [rows] a call's positions */
	float *ids;             /* token floats of a call */
	struct dl_shape *shape; /* [n_in] a call's shapes */
	float **ptr;            /* [n_in] a call's inputs */
	float *const *in;       /* the other inputs, one row per sequence */
	const struct dl_shape *ishape;
	const float *logits;    /* after a call: [N, T, V] */
	int64_t lT;             /* the call's T */
	/* choosing */
	float *p;               /* [V] */
	struct vi *order;       /* [V] */
};

void dl_gen_result_free(struct dl_gen_result *r)
{
	if (!r)
		return;
	free(r->ids);
	free(r->logprobs);
	memset(r, 0, sizeof *r);
}

static int64_t max_len_of(const struct dl_graph *g, int64_t best)
{
	for (int i = 0; i < g->n_nodes; i++) {
		const struct dl_node *n = &g->nodes[i];
		for (int k = 0; k < n->op->n_hp; k++)
			if (n->hp[k].set && n->op->hp[k].type == DL_HP_INT &&
			    strcmp(n->op->hp[k].name, "max_len") == 0 &&
			    (best == 0 || n->hp[k].i < best))
				best = n->hp[k].i;
		const struct dl_subgraphs *sg = n->sub;
		for (int k = 0; sg && k < sg->n; k++)
			best = max_len_of(sg->g[k], best);
	}
	return best;
}

int64_t dl_model_max_len(const struct dl_graph *g)
{
	return max_len_of(g, 0);
}

/* Room for n ids in q (decoding reserves it all before the first step) */
static int reserve(struct seq *q, size_t n)
{
	if (n <= q->cap)
		return 0;
	int64_t *p = realloc(q->ids, n * sizeof *p);
	if (!p)
		return -1;
	q->ids = p;
	q->cap = n;
	return 0;
}

static int push(struct seq *q, int64_t id)
{
	if (q->len == q->cap) {
		size_t c = q->cap ? 2 * q->cap : 64;
		int64_t *p = realloc(q->ids, c * sizeof *p);
		if (!p)
			return -1;
		q->ids = p;
		q->cap = c;
	}
	q->ids[q->len++] = id;
	return 0;
}

/* Runs rows r0 .. r0 + N - 1, each feeding its T tokens past its state
 * (the caller has made them equal); the logits of the last position of
 * row i are then d->logits + ((i T) + T - 1) V. */
static int run(struct dec *d, int64_t r0, int64_t N, int64_t T, struct dl_error *err)
{
	struct dl_graph *g = d->s->g;
	for (int i = 0; i < d->n_in; i++) {
		if (i == d->tok)
			continue;
		const struct dl_shape *sh = &d->ishape[i];
		int64_t per = dl_shape_prod(sh, 1, sh->ndim);
		d->shape[i] = *sh;
		d->shape[i].d[0] = N;
		d->ptr[i] = d->in[i] + r0 * per;
	}
	int64_t k = 0;
	for (int64_t i = 0; i < N; i++) {
		struct seq *q = &d->q[r0 + i];
		const int64_t *src = q->ids + q->start + q->pos;
		for (int64_t t = 0; t < T; t++)
			d->ids[k++] = (float)src[t];
		d->pos[i] = q->pos;
	}
	int64_t td[2] = {N, T};
	d->shape[d->tok] = dl_shape_make(2, td);
	d->ptr[d->tok] = d->ids;
	int rc = dl_session_step(d->s, d->shape, d->ptr, r0, d->pos, err);
	if (rc)
		return rc;
	for (int64_t i = 0; i < N; i++)
		d->q[r0 + i].pos += T;
	const struct dl_value *v = &g->values[g->outputs[d->out]];
	d->logits = v->data;
	d->lT = T;
	return 0;
}

/* Brings rows [r0, r1) up to their last token, so that each row's last
 * logits are in the call that ran it; calls back row by row. A row that
 * would outgrow the context is rebuilt from its last max_len tokens. */
typedef int (*row_fn)(struct dec *d, int64_t r, const float *logits, struct dl_error *err);

static int advance(struct dec *d, int64_t r0, int64_t r1, row_fn fn, struct dl_error *err)
{
	int64_t r = r0;
	while (r < r1) {
		struct seq *q = &d->q[r];
		if (q->done) {
			r++;
			continue;
		}
		int64_t need = (int64_t)q->len - (q->start + q->pos);
		if (q->pos + need > d->max_len) {
			q->start = (int64_t)q->len - d->max_len;
			q->pos = 0;
			need = d->max_len;
		}
		/* a run of neighbours that each feed one token */
		int64_t e = r + 1;
		if (need == 1 && q->pos > 0)
			while (e < r1) {
				struct seq *u = &d->q[e];
				if (u->done || u->pos == 0 || u->pos + 1 > d->max_len ||
				    (int64_t)u->len - (u->start + u->pos) != 1)
					break;
				e++;
			}
		int rc = run(d, r, e - r, need, err);
		for (int64_t i = 0; rc == 0 && i < e - r; i++)
			rc = fn(d, r + i, d->logits + ((i * need) + need - 1) * d->V, err);
		if (rc)
			return rc;
		r = e;
	}
	return 0;
}

/* log sum_j exp(l[j]), in double */
static double logsumexp(const float *l, int64_t V)
{
	float m = -INFINITY;
	for (int64_t j = 0; j < V; j++)
		if (l[j] > m)
			m = l[j];
	double s = 0.0;
	for (int64_t j = 0; j < V; j++)
		s += exp((double)l[j] - m);
	return m + log(s);
}

/* log softmax of logits at id */
static double logprob(const float *l, int64_t V, int64_t id)
{
	return (double)l[id] - logsumexp(l, V);
}

static int64_t argmax(const float *l, int64_t V)
{
	int64_t b = 0;
	for (int64_t j = 1; j < V; j++)
		if (l[j] > l[b])
			b = j;
	return b;
}

static int by_prob_desc(const void *x, const void *y)
{
	const struct vi *a = x, *b = y;
	if (a->v != b->v)
		return a->v > b->v ? -1 : 1;
	return (a->i > b->i) - (a->i < b->i);
}

/* d->order = the ids by p, largest first (ties: lower id first) */
static void order_by(struct dec *d, const float *p)
{
	for (int64_t j = 0; j < d->V; j++)
		d->order[j] = (struct vi){p[j], (int)j};
	qsort(d->order, (size_t)d->V, sizeof *d->order, by_prob_desc);
}

/* Samples from softmax(logits / T) kept to the top k, then to the
 * smallest set whose probability reaches top_p (the most likely first,
 * always one). */
static int64_t sample(struct dec *d, const float *l, struct dl_rng *rng)
{
	const struct dl_gen_opts *o = d->o;
	int64_t V = d->V;
	float *p = d->p;
	float m = -INFINITY;
	for (int64_t j = 0; j < V; j++) {
		p[j] = (float)((double)l[j] / o->temperature);
		if (p[j] > m)
			m = p[j];
	}
	if (o->top_k > 0 && o->top_k < V) {
		/* the k-th largest value: ties with it stay, as nanoGPT's
		 * logits < v[-1] */
		order_by(d, p);
		float kth = d->order[o->top_k - 1].v;
		for (int64_t j = 0; j < V; j++)
			if (p[j] < kth)
				p[j] = -INFINITY;
	}
	double s = 0.0;
	for (int64_t j = 0; j < V; j++) {
		double e = p[j] == -INFINITY ? 0.0 : exp((double)p[j] - m);
		p[j] = (float)e;
		s += e;
	}
	for (int64_t j = 0; j < V; j++)
		p[j] = (float)(p[j] / s);
	if (o->top_p < 1.0) {
		order_by(d, p);
		double c = 0.0;
		int64_t keep = 0;
		while (keep < V && (keep == 0 || c < o->top_p)) {
			c += d->order[keep].v;
			keep++;
		}
		double t = 0.0;
		for (int64_t j = keep; j < V; j++)
			p[d->order[j].i] = 0.0f;
		for (int64_t j = 0; j < keep; j++)
			t += p[d->order[j].i];
		for (int64_t j = 0; j < V; j++)
			p[j] = (float)(p[j] / t);
	}
	double u = dl_rng_uniform(rng), c = 0.0;
	int64_t last = -1;
	for (int64_t j = 0; j < V; j++) {
		if (p[j] <= 0.0f)
			continue;
		last = j;
		c += p[j];
		if (u < c)
			return j;
	}
	return last >= 0 ? last : argmax(l, V);
}

static int is_stop(const struct dl_gen_opts *o, int64_t id)
{
	if (o->eos >= 0 && id == o->eos)
		return DL_GEN_EOS;
	for (int k = 0; k < o->n_stop; k++)
		if (o->stop[k] == id)
			return DL_GEN_STOP;
	return 0;
}

/* ---- sampling and greedy ---- */

struct samp {
	struct dec d;
	struct dl_rng *rng;     /* [rows] */
	struct dl_gen_result *res;
	int stop_rc;            /* a callback's nonzero result */
};

/* r holds room for max_new ids (dl_generate reserves it) */
static int add_result(struct dl_gen_result *r, int64_t id, double lp)
{
	r->ids[r->n] = id;
	r->logprobs[r->n] = lp;
	r->n++;
	return 0;
}

static int choose_row(struct dec *d, int64_t r, const float *l, struct dl_error *err)
{
	struct samp *S = (struct samp *)d;
	struct seq *q = &d->q[r];
	int64_t id = d->o->greedy ? argmax(l, d->V) : sample(d, l, &S->rng[r]);
	double lp = logprob(l, d->V, id);
	int why = is_stop(d->o, id);
	if (why) {
		q->done = 1;
		S->res[r].why = why;
		return 0;
	}
	if (push(q, id) || add_result(&S->res[r], id, lp))
		return dl_error_set(err, DL_ERUN, "out of memory");
	if (d->o->on_token) {
		int rc = d->o->on_token(d->o->arg, r, id, lp);
		if (rc) {
			S->stop_rc = rc;
			return rc;
		}
	}
	if ((int64_t)S->res[r].n >= d->o->max_new) {
		q->done = 1;
		S->res[r].why = DL_GEN_LENGTH;
	}
	return 0;
}

static int decode_sampled(struct samp *S, struct dl_error *err)
{
	struct dec *d = &S->d;
	for (int64_t r = 0; r < d->rows; r++)
		if (d->o->max_new <= 0)
			d->q[r].done = 1;
	for (;;) {
		int live = 0;
		for (int64_t r = 0; r < d->rows; r++)
			live |= !d->q[r].done;
		if (!live)
			return 0;
		if (d->o->interrupt && *d->o->interrupt)
			return 0;
		int rc = advance(d, 0, d->rows, choose_row, err);
		if (rc)
			return rc;
	}
}

/* ---- beam search ---- */

struct cand {
	double score;
	int64_t beam, id;
	double lp;
};

static int by_score(const void *x, const void *y)
{
	const struct cand *a = x, *b = y;
	if (a->score != b->score)
		return a->score > b->score ? -1 : 1;
	if (a->beam != b->beam)
		return (a->beam > b->beam) - (a->beam < b->beam);
	return (a->id > b->id) - (a->id < b->id);
}

struct beam {
	struct dec d;
	int B;
	float *last;            /* [rows, V] each beam's last logits */
	struct cand *c;         /* [B * B] candidates of a prompt */
	struct seq *tmp;        /* [B] reordered sequences */
	double **lps;           /* [rows] log-probabilities of the new tokens */
	double **tlps;          /* [B] */
	/* per prompt, the best finished hypothesis */
	double *best;           /* normalised score, -inf: none */
	int64_t **best_ids;
	double **best_lps;
	size_t *best_n;
	int *best_why;
};

static int keep_logits(struct dec *d, int64_t r, const float *l, struct dl_error *err)
{
	struct beam *Bm = (struct beam *)d;
	memcpy(Bm->last + r * d->V, l, (size_t)d->V * sizeof(float));
	return 0;
}

static double norm_score(const struct beam *Bm, double score, size_t n)
{
	double len = n > 0 ? (double)n : 1.0;
	return score / pow(len, Bm->d.o->length_penalty);
}

static int finish(struct beam *Bm, int64_t p, const struct seq *q, const double *lps,
		  double score, int why)
{
	size_t n = q->len - q->plen;
	double ns = norm_score(Bm, score, n);
	if (ns <= Bm->best[p])
		return 0;
	int64_t *ids = malloc((n + 1) * sizeof *ids);
	double *l = malloc((n + 1) * sizeof *l);
	if (!ids || !l) {
		free(ids);
		free(l);
		return -1;
	}
	memcpy(ids, q->ids + q->plen, n * sizeof *ids);
	memcpy(l, lps, n * sizeof *l);
	free(Bm->best_ids[p]);
	free(Bm->best_lps[p]);
	Bm->best_ids[p] = ids;
	Bm->best_lps[p] = l;
	Bm->best_n[p] = n;
	Bm->best[p] = ns;
	Bm->best_why[p] = why;
	return 0;
}

/* One step of prompt p's beams (rows p B .. p B + B - 1, whose last
 * logits are in Bm->last): the B best continuations by summed
 * log-probability; finished ones (eos, stop, length) are kept aside. */
static int beam_step(struct beam *Bm, int64_t p, int first, struct dl_error *err)
{
	struct dec *d = &Bm->d;
	int B = Bm->B;
	int64_t V = d->V, nc = 0;
	int64_t r0 = p * B;
	int nb = first ? 1 : B;
	for (int b = 0; b < nb; b++) {
		struct seq *q = &d->q[r0 + b];
		if (q->done)
			continue;
		const float *l = Bm->last + (r0 + b) * V;
		/* each beam's B best tokens suffice for the B best overall */
		double lse = logsumexp(l, V);
		for (int k = 0; k < B && k < V; k++) {
			int64_t best = -1;
			for (int64_t j = 0; j < V; j++) {
				int taken = 0;
				for (int64_t t = nc - k; t < nc; t++)
					taken |= Bm->c[t].id == j;
				if (!taken && (best < 0 || l[j] > l[best]))
					best = j;
			}
			double lp = (double)l[best] - lse;
			Bm->c[nc++] = (struct cand){q->score + lp, b, best, lp};
		}
	}
	qsort(Bm->c, (size_t)nc, sizeof *Bm->c, by_score);
	int kept = 0;
	for (int64_t t = 0; t < nc && kept < B; t++) {
		struct cand *c = &Bm->c[t];
		const struct seq *src = &d->q[r0 + c->beam];
		size_t n = src->len - src->plen;
		int why = is_stop(d->o, c->id);
		if (why) {
			if (finish(Bm, p, src, Bm->lps[r0 + c->beam], c->score, why))
				return dl_error_set(err, DL_ERUN, "out of memory");
			continue;
		}
		struct seq *dst = &Bm->tmp[kept];
		dst->len = 0;
		dst->plen = src->plen;
		for (size_t i = 0; i < src->len; i++)
			if (push(dst, src->ids[i]))
				return dl_error_set(err, DL_ERUN, "out of memory");
		if (push(dst, c->id))
			return dl_error_set(err, DL_ERUN, "out of memory");
		dst->start = src->start;
		dst->pos = src->pos;
		dst->score = c->score;
		dst->done = 0;
		double *lt = Bm->tlps[kept];
		memcpy(lt, Bm->lps[r0 + c->beam], n * sizeof *lt);
		lt[n] = c->lp;
		/* the state travels with the sequence: into the spare rows */
		dl_session_step_copy(d->s, d->rows + kept, r0 + c->beam);
		kept++;
	}
	for (int b = 0; b < B; b++) {
		struct seq *q = &d->q[r0 + b];
		if (b >= kept) {
			q->done = 1;
			continue;
		}
		struct seq t = *q;
		*q = Bm->tmp[b];
		Bm->tmp[b] = t;
		double *lt = Bm->lps[r0 + b];
		Bm->lps[r0 + b] = Bm->tlps[b];
		Bm->tlps[b] = lt;
		dl_session_step_copy(d->s, r0 + b, d->rows + b);
		if ((int64_t)(q->len - q->plen) >= d->o->max_new) {
			if (finish(Bm, p, q, Bm->lps[r0 + b], q->score, DL_GEN_LENGTH))
				return dl_error_set(err, DL_ERUN, "out of memory");
			q->done = 1;
		}
	}
	/* done once no live beam can beat the best finished one (scores
	 * only fall as tokens are added, with length_penalty 0 exactly) */
	int live = 0;
	for (int b = 0; b < B; b++)
		live |= !d->q[r0 + b].done;
	if (!live)
		return 0;
	if (Bm->best[p] > -INFINITY && d->o->length_penalty <= 0.0) {
		double top = -INFINITY;
		for (int b = 0; b < B; b++)
			if (!d->q[r0 + b].done && d->q[r0 + b].score > top)
				top = d->q[r0 + b].score;
		if (norm_score(Bm, top, 1) <= Bm->best[p])
			for (int b = 0; b < B; b++)
				d->q[r0 + b].done = 1;
	}
	return 0;
}

static int decode_beams(struct beam *Bm, int64_t n, struct dl_gen_result *res,
			struct dl_error *err)
{
	struct dec *d = &Bm->d;
	const struct dl_gen_opts *o = d->o;
	int B = Bm->B;
	int rc = 0;
	if (o->max_new <= 0)
		return 0;
	/* the prompts: beam 0 of each (prompt 0's logits are in already),
	 * whose state the first step copies to the others */
	for (int64_t p = 0; p < n && rc == 0; p++) {
		for (int b = 1; b < B; b++)
			d->q[p * B + b].done = 1;
		if (p > 0)
			rc = advance(d, p * B, p * B + 1, keep_logits, err);
		if (rc == 0)
			rc = beam_step(Bm, p, 1, err);
	}
	while (rc == 0) {
		int live = 0;
		for (int64_t r = 0; r < d->rows; r++)
			live |= !d->q[r].done;
		if (!live || (o->interrupt && *o->interrupt))
			break;
		rc = advance(d, 0, d->rows, keep_logits, err);
		for (int64_t p = 0; p < n && rc == 0; p++)
			rc = beam_step(Bm, p, 0, err);
	}
	for (int64_t p = 0; p < n && rc == 0; p++) {
		/* live beams count as finished by length */
		for (int b = 0; b < B; b++) {
			struct seq *q = &d->q[p * B + b];
			if (q->len > q->plen && !q->done &&
			    finish(Bm, p, q, Bm->lps[p * B + b], q->score, DL_GEN_LENGTH))
				return dl_error_set(err, DL_ERUN, "out of memory");
		}
		res[p].ids = Bm->best_ids[p];
		res[p].logprobs = Bm->best_lps[p];
		res[p].n = Bm->best_n[p];
		res[p].why = Bm->best_why[p];
		Bm->best_ids[p] = NULL;
		Bm->best_lps[p] = NULL;
		for (size_t i = 0; o->on_token && i < res[p].n && rc == 0; i++)
			rc = o->on_token(o->arg, p, res[p].ids[i], res[p].logprobs[i]);
	}
	return rc;
}

int dl_generate(struct dl_session *s, int tok, int64_t n, const int64_t *const *prompt,
		const size_t *len, float *const *in, const struct dl_shape *shape,
		const struct dl_gen_opts *o, struct dl_gen_result *res,
		struct dl_error *err)
{
	struct dl_graph *g = s->g;
	int B = o->beams > 1 ? o->beams : 1;
	struct beam Bm;
	struct samp S;
	memset(&Bm, 0, sizeof Bm);
	memset(&S, 0, sizeof S);
	struct dec *d = B > 1 ? &Bm.d : &S.d;
	d->s = s;
	d->o = o;
	d->tok = tok;
	d->out = o->out;
	d->n_in = g->n_inputs;
	d->rows = n * B;
	d->ishape = NULL;
	for (int64_t p = 0; p < n; p++)
		memset(&res[p], 0, sizeof res[p]);
	if (n < 1)
		return 0;
	size_t longest = 0;
	for (int64_t p = 0; p < n; p++) {
		if (len[p] < 1)
			return dl_error_set(err, DL_EINPUT, "prompt %lld is empty; a prompt needs "
					    "at least one token", (long long)p + 1);
		if (len[p] > longest)
			longest = len[p];
	}
	d->max_len = o->context > 0 ? o->context : (int64_t)longest + (o->max_new > 0 ? o->max_new : 0);
	int rc = 0;
	/* the other inputs, one row per sequence */
	float **rowsin = calloc((size_t)d->n_in + 1, sizeof *rowsin);
	struct dl_shape *rshape = calloc((size_t)d->n_in + 1, sizeof *rshape);
	d->shape = calloc((size_t)d->n_in + 1, sizeof *d->shape);
	d->ptr = calloc((size_t)d->n_in + 1, sizeof *d->ptr);
	d->q = calloc((size_t)d->rows, sizeof *d->q);
	d->pos = calloc((size_t)d->rows, sizeof *d->pos);
	d->ids = malloc(sizeof(float) * (size_t)(d->rows > d->max_len ? d->rows : d->max_len));
	if (!rowsin || !rshape || !d->shape || !d->ptr || !d->q || !d->pos || !d->ids)
		rc = dl_error_set(err, DL_ERUN, "out of memory");
	for (int i = 0; rc == 0 && i < d->n_in; i++) {
		if (i == tok)
			continue;
		const struct dl_shape *sh = &shape[i];
		int64_t per = dl_shape_prod(sh, 1, sh->ndim);
		if (sh->d[0] != 1 && sh->d[0] != n) {
			rc = dl_error_set(err, DL_EINPUT, "input '%s' has %lld rows for %lld "
					  "prompts; give one row per prompt, or one for all",
					  g->inputs[i].name, (long long)sh->d[0], (long long)n);
			break;
		}
		rshape[i] = *sh;
		rshape[i].d[0] = d->rows;
		rowsin[i] = malloc(sizeof(float) * (size_t)(per * d->rows + 1));
		if (!rowsin[i]) {
			rc = dl_error_set(err, DL_ERUN, "out of memory");
			break;
		}
		for (int64_t r = 0; r < d->rows; r++)
			memcpy(rowsin[i] + r * per, in[i] + (sh->d[0] == 1 ? 0 : r / B) * per,
			       sizeof(float) * (size_t)per);
	}
	d->in = rowsin;
	d->ishape = rshape;
	size_t room = (size_t)(o->max_new > 0 ? o->max_new : 0) + 1;
	for (int64_t p = 0; rc == 0 && B == 1 && p < n; p++) {
		res[p].ids = malloc(room * sizeof *res[p].ids);
		res[p].logprobs = malloc(room * sizeof *res[p].logprobs);
		if (!res[p].ids || !res[p].logprobs)
			rc = dl_error_set(err, DL_ERUN, "out of memory");
	}
	for (int64_t r = 0; rc == 0 && r < d->rows; r++) {
		struct seq *q = &d->q[r];
		q->plen = len[r / B];
		if (reserve(q, q->plen + room))
			rc = dl_error_set(err, DL_ERUN, "out of memory");
		for (size_t t = 0; t < q->plen && rc == 0; t++)
			if (push(q, prompt[r / B][t]))
				rc = dl_error_set(err, DL_ERUN, "out of memory");
	}
	/* the state: beams get B spare rows for reordering */
	if (rc == 0)
		rc = dl_session_step_begin(s, tok, d->rows + (B > 1 ? B : 0), d->max_len, err);
	if (rc == 0) {
		S.res = res;
		if (B > 1) {
			Bm.B = B;
			Bm.c = calloc((size_t)B * B, sizeof *Bm.c);
			Bm.tmp = calloc((size_t)B, sizeof *Bm.tmp);
			Bm.lps = calloc((size_t)d->rows, sizeof *Bm.lps);
			Bm.tlps = calloc((size_t)B, sizeof *Bm.tlps);
			Bm.best = malloc((size_t)n * sizeof *Bm.best);
			Bm.best_ids = calloc((size_t)n, sizeof *Bm.best_ids);
			Bm.best_lps = calloc((size_t)n, sizeof *Bm.best_lps);
			Bm.best_n = calloc((size_t)n, sizeof *Bm.best_n);
			Bm.best_why = calloc((size_t)n, sizeof *Bm.best_why);
			if (!Bm.c || !Bm.tmp || !Bm.lps || !Bm.tlps || !Bm.best || !Bm.best_ids ||
			    !Bm.best_lps || !Bm.best_n || !Bm.best_why)
				rc = dl_error_set(err, DL_ERUN, "out of memory");
			for (int64_t p = 0; rc == 0 && p < n; p++)
				Bm.best[p] = -INFINITY;
			for (int b = 0; rc == 0 && b < B; b++) {
				Bm.tlps[b] = malloc(room * sizeof *Bm.tlps[b]);
				if (!Bm.tlps[b] || reserve(&Bm.tmp[b], longest + room))
					rc = dl_error_set(err, DL_ERUN, "out of memory");
			}
			for (int64_t r = 0; rc == 0 && r < d->rows; r++)
				if (!(Bm.lps[r] = malloc(room * sizeof *Bm.lps[r])))
					rc = dl_error_set(err, DL_ERUN, "out of memory");
		} else {
			S.rng = calloc((size_t)d->rows, sizeof *S.rng);
			if (!S.rng)
				rc = dl_error_set(err, DL_ERUN, "out of memory");
			for (int64_t r = 0; rc == 0 && r < d->rows; r++)
				dl_rng_seed(&S.rng[r], o->seed * 0x9E3779B97F4A7C15ULL + (uint64_t)r);
		}
	}
	/* the first call (prompt 0 alone) checks that the model can be
	 * stepped and gives the logits' size */
	if (rc == 0) {
		struct seq *q = &d->q[0];
		int64_t need = (int64_t)q->len;
		if (need > d->max_len) {
			q->start = need - d->max_len;
			need = d->max_len;
		}
		rc = run(d, 0, 1, need, err);
		if (rc == 0) {
			const struct dl_value *v = &g->values[g->outputs[o->out]];
			if (v->shape.ndim != 3 || s->out_axis[o->out] != 2)
				rc = dl_error_set(err, DL_EINPUT,
						  "%s: output '%s' is not logits [T, V] over the token "
						  "positions, so the model cannot be decoded",
						  g->file, g->output_names[o->out]);
			d->V = v->shape.d[2];
		}
		if (rc == 0 && o->check)
			rc = o->check(o->arg, err);
		if (rc == 0) {
			d->p = malloc(sizeof(float) * (size_t)d->V);
			d->order = malloc(sizeof *d->order * (size_t)d->V);
			if (!d->p || !d->order)
				rc = dl_error_set(err, DL_ERUN, "out of memory");
		}
		/* that call's logits serve row 0 */
		if (rc == 0 && o->max_new > 0) {
			const float *l = d->logits + (need - 1) * d->V;
			if (B > 1) {
				Bm.last = malloc(sizeof(float) * (size_t)(d->rows * d->V));
				if (!Bm.last)
					rc = dl_error_set(err, DL_ERUN, "out of memory");
				else
					memcpy(Bm.last, l, sizeof(float) * (size_t)d->V);
			} else {
				rc = choose_row(d, 0, l, err);
			}
		}
	}
	if (rc == 0 && B > 1)
		rc = decode_beams(&Bm, n, res, err);
	else if (rc == 0)
		rc = decode_sampled(&S, err);
	dl_session_step_end(s);
	for (int i = 0; rowsin && i < d->n_in; i++)
		free(rowsin[i]);
	free(rowsin);
	free(rshape);
	free(d->shape);
	free(d->ptr);
	for (int64_t r = 0; d->q && r < d->rows; r++)
		free(d->q[r].ids);
	free(d->q);
	free(d->pos);
	free(d->ids);
	free(d->p);
	free(d->order);
	free(S.rng);
	free(Bm.last);
	free(Bm.c);
	for (int b = 0; Bm.tmp && b < B; b++)
		free(Bm.tmp[b].ids);
	free(Bm.tmp);
	for (int64_t r = 0; Bm.lps && r < d->rows; r++)
		free(Bm.lps[r]);
	free(Bm.lps);
	for (int b = 0; Bm.tlps && b < B; b++)
		free(Bm.tlps[b]);
	free(Bm.tlps);
	for (int64_t p = 0; Bm.best_ids && p < n; p++) {
		free(Bm.best_ids[p]);
		free(Bm.best_lps[p]);
	}
	free(Bm.best);
	free(Bm.best_ids);
	free(Bm.best_lps);
	free(Bm.best_n);
	free(Bm.best_why);
	if (rc && rc == S.stop_rc && S.stop_rc)
		return rc;
	if (rc)
		for (int64_t p = 0; p < n; p++)
			dl_gen_result_free(&res[p]);
	return rc;
}
