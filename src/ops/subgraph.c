/* Inner graphs of composite ops, planned by their parent: shape
 * inference, the memory plan inside the node's workspace and saved bytes,
 * and parameters that are views of the node's. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/fuse.h"
#include "ops/subgraph.h"

#define ALIGN 64

static size_t align_up(size_t x)
{
	return (x + ALIGN - 1) / ALIGN * ALIGN;
}

/* inner parameter k of node j of inner graph g */
struct view {
	int g, j, k;
};

/* The plan of one inner graph: offsets from the base its caller gives. */
struct plan {
	size_t *off;         /* [n_values] inference activations */
	size_t *foff;        /* [n_values] the same, fused (engine/fuse.c) */
	int fusable;         /* the fusion pass finds chains in the graph */
	int fused;           /* the graph's nodes are marked fused now */
	size_t *toff, *tgoff;/* [n_values] training activations, gradients */
	size_t *tsaved;      /* [n_nodes] training saved state */
};

/* n->priv: one block (freed as a whole): this header, the plans and their
 * offsets, the views, then the parameters' names. */
struct state {
	int first;           /* index of the first inner parameter in n */
	int n_views;
	struct view *views;
	struct plan *plans;  /* [s->n] */
	const char *names;   /* n_views strings, one after another */
	struct dl_sub_sizes sz;  /* of the last plan */
};

int dl_sub_infer(struct dl_graph *g, const struct dl_shape *in,
		 struct dl_error *err)
{
	struct dl_shape ins[DL_HP_MAXN * 4];
	g->shapes_ready = 0;
	for (int i = 0; i < g->n_inputs; i++)
		g->values[i].shape = in[i];
	for (int i = 0; i < g->n_nodes; i++) {
		struct dl_node *n = &g->nodes[i];
		if (n->n_in > (int)(sizeof ins / sizeof *ins))
			return dl_node_error(err, n, -1, "internal: too many inputs");
		for (int k = 0; k < n->n_in; k++)
			ins[k] = g->values[n->in[k]].shape;
		struct dl_shape out[DL_MAX_OUT];
		memset(out, 0, sizeof out);
		n->macs = 0;
		int rc = n->op->infer(n, ins, out, err);
		if (rc)
			return rc < 0 ? rc : DL_EINPUT;
		for (int k = 0; k < (n->n_out > 1 ? n->n_out : 1); k++) {
			if (out[k].ndim < 1 || out[k].ndim > DL_MAX_DIMS ||
			    dl_shape_numel(&out[k]) < 0)
				return dl_node_error(err, n, -1, "the output would be too large");
			g->values[n->out + k].shape = out[k];
		}
	}
	g->shapes_ready = 1;
	return 0;
}

static struct state *state_new(struct dl_node *n, const struct dl_subgraphs *s)
{
	int count = 0;
	size_t names = 0, offs = 0;
	for (int g = 0; g < s->n; g++) {
		const struct dl_graph *gr = s->g[g];
		offs += 4 * (size_t)gr->n_values + (size_t)gr->n_nodes;
		for (int j = 0; j < gr->n_nodes; j++)
			for (int k = 0; k < gr->nodes[j].n_params; k++) {
				count++;
				names += strlen(gr->nodes[j].scope) +
					 strlen(gr->nodes[j].params[k].name) + 2;
			}
	}
	size_t bytes = sizeof(struct state) + offs * sizeof(size_t) +
		       (size_t)s->n * sizeof(struct plan) +
		       (size_t)count * sizeof(struct view) + names;
	struct state *st = calloc(1, bytes);
	if (!st)
		return NULL;
	/* size_t arrays first: the header keeps them aligned */
	size_t *o = (size_t *)(st + 1);
	st->plans = (struct plan *)(o + offs);
	st->views = (struct view *)(st->plans + s->n);
	char *name = (char *)(st->views + count);
	st->names = name;
	st->first = n->n_params;
	for (int g = 0; g < s->n; g++) {
		const struct dl_graph *gr = s->g[g];
		struct plan *p = &st->plans[g];
		p->off = o;
		p->foff = p->off + gr->n_values;
		p->toff = p->foff + gr->n_values;
		p->tgoff = p->toff + gr->n_values;
		p->tsaved = p->tgoff + gr->n_values;
		o = p->tsaved + gr->n_nodes;
		for (int j = 0; j < gr->n_nodes; j++)
			for (int k = 0; k < gr->nodes[j].n_params; k++) {
				/* "" (the parameter op): the scope alone */
				const char *pn = gr->nodes[j].params[k].name;
				sprintf(name, *pn ? "%s.%s" : "%s%s", gr->nodes[j].scope, pn);
				st->views[st->n_views++] = (struct view){g, j, k};
				name += strlen(name) + 1;
			}
	}
	return st;
}

/* (re)declares the inner parameters: the same names and shapes each time */
static int declare(struct dl_node *n, const struct dl_subgraphs *s,
		   const struct state *st, struct dl_error *err)
{
	const char *name = st->names;
	for (int i = 0; i < st->n_views; i++) {
		const struct view *v = &st->views[i];
		const struct dl_param *p = &s->g[v->g]->nodes[v->j].params[v->k];
		int rc = p->buffer ? dl_node_buffer(n, name, &p->shape, p->init, p->init_arg, err)
				   : dl_node_param(n, name, &p->shape, p->init, p->init_arg, err);
		if (rc < 0)
			return rc;
		n->params[rc].init_zero_row = p->init_zero_row;
		n->params[rc].init_arg2 = p->init_arg2;
		name += strlen(name) + 1;
	}
	return 0;
}

/* The arrays one call of the inner graph needs, made once. */
static int arrays(struct dl_graph *g, struct dl_error *err)
{
	int max_in = 1;
	for (int i = 0; i < g->n_nodes; i++)
		if (g->nodes[i].n_in > max_in)
			max_in = g->nodes[i].n_in;
	if (!g->tin) {
		g->tin = calloc((size_t)max_in, sizeof *g->tin);
		g->din = calloc((size_t)max_in, sizeof *g->din);
		g->saved_off = calloc((size_t)g->n_nodes + 1, sizeof *g->saved_off);
		g->tin_cap = max_in;
		if (!g->tin || !g->din || !g->saved_off)
			return dl_error_set(err, DL_ERUN, "out of memory");
	}
	return 0;
}

/* The fusion pass over g and its inference layout: p->foff, *arena its
 * size; 0 and nothing fusable when the pass finds no chain or has no
 * memory (the graph then runs unfused). The marks stay (p->fused): the
 * training layout ignores them, and dl_sub_bind removes them for a run
 * that is not fused. */
static int fused_layout(struct dl_graph *g, struct plan *p, size_t *arena,
			struct dl_error *err)
{
	*arena = 0;
	p->fusable = 0;
	if (dl_graph_fuse(g) != 0) {
		p->fused = 0;
		return 0;
	}
	for (int i = 0; i < g->n_nodes; i++)
		p->fusable |= g->nodes[i].fused;
	p->fused = p->fusable;
	if (!p->fusable)
		return 0;
	int rc = dl_graph_layout(g, 0, arena, err);
	if (rc)
		return rc;
	for (int v = 0; v < g->n_values; v++)
		p->foff[v] = g->values[v].alias ? g->values[g->values[v].alias - 1].offset
						: g->values[v].offset;
	return 0;
}

int dl_sub_plan(struct dl_node *n, const struct dl_subgraphs *s,
		struct dl_sub_sizes *sz, struct dl_error *err)
{
	struct state *st = n->priv;
	if (!st) {
		if (!(st = state_new(n, s)))
			return dl_error_set(err, DL_ERUN, "out of memory");
		n->priv = st;
	}
	int rc = declare(n, s, st, err);
	if (rc)
		return rc;
	memset(sz, 0, sizeof *sz);
	for (int gi = 0; gi < s->n; gi++) {
		struct dl_graph *g = s->g[gi];
		struct plan *p = &st->plans[gi];
		size_t arena, train;
		if ((rc = arrays(g, err)) != 0)
			return rc;
		/* the inference layouts, plain and fused (the arena holds
		 * either), then the training one, whose lifetimes the inner
		 * backward reads (when a gradient starts) */
		dl_graph_unfuse(g);
		if ((rc = dl_graph_layout(g, 0, &arena, err)) != 0)
			return rc;
		for (int v = 0; v < g->n_values; v++)
			p->off[v] = g->values[v].offset;
		size_t fused;
		if ((rc = fused_layout(g, p, &fused, err)) != 0)
			return rc;
		if (fused > arena)
			arena = fused;
		if ((rc = dl_graph_layout(g, 1, &train, err)) != 0)
			return rc;
		for (int v = 0; v < g->n_values; v++) {
			p->toff[v] = g->values[v].offset;
			p->tgoff[v] = g->values[v].goffset;
		}
		train = align_up(train);
		for (int j = 0; j < g->n_nodes; j++) {
			p->tsaved[j] = train;
			train += align_up(g->nodes[j].saved_bytes);
			if (g->nodes[j].ws_bytes > sz->ws)
				sz->ws = g->nodes[j].ws_bytes;
		}
		if (arena > sz->arena)
			sz->arena = arena;
		if (train > sz->train)
			sz->train = train;
	}
	sz->arena = align_up(sz->arena);
	sz->ws = align_up(sz->ws);
	st->sz = *sz;
	return 0;
}

const struct dl_sub_sizes *dl_sub_planned(const struct dl_node *n)
{
	const struct state *st = n->priv;
	return &st->sz;
}

void dl_sub_link(struct dl_node *n, const struct dl_subgraphs *s)
{
	const struct state *st = n->priv;
	for (int i = 0; i < st->n_views; i++) {
		const struct view *v = &st->views[i];
		struct dl_param *p = &s->g[v->g]->nodes[v->j].params[v->k];
		p->data = n->params[st->first + i].data;
		p->grad = n->params[st->first + i].grad;
	}
}

void dl_sub_bind(struct dl_node *n, const struct dl_subgraphs *s, int i,
		 int train, int fuse, char *base, char *ws)
{
	struct state *st = n->priv;
	struct plan *p = &st->plans[i];
	struct dl_graph *g = s->g[i];
	/* the marks say how the graph runs: made or removed to match (once,
	 * when the wish changes) */
	int want = !train && fuse && p->fusable;
	if (want != p->fused) {
		if (want && dl_graph_fuse(g) != 0)
			want = 0;
		if (!want)
			dl_graph_unfuse(g);
		p->fused = want;
	}
	const size_t *off = train ? p->toff : want ? p->foff : p->off;
	for (int v = g->n_inputs; v < g->n_values; v++) {
		g->values[v].data = (float *)(base + off[v]);
		g->values[v].grad = train ? (float *)(base + p->tgoff[v]) : NULL;
	}
	g->arena = base;
	g->ws = ws;
	g->saved = train ? base : NULL;
	if (train)
		memcpy(g->saved_off, p->tsaved, (size_t)g->n_nodes * sizeof *g->saved_off);
	g->train_plan = train;
}

size_t dl_sub_packed_bytes(const struct dl_graph *g, int aligned, int *terms)
{
	size_t bytes = 0;
	int t = 0;
	for (int v = g->n_inputs; v < g->n_values; v++) {
		size_t x = (size_t)dl_shape_numel(&g->values[v].shape) * sizeof(float);
		bytes += 2 * (aligned ? align_up(x) : x);
		t += 2;
	}
	for (int j = 0; j < g->n_nodes; j++) {
		size_t x = g->nodes[j].saved_bytes;
		bytes += aligned ? align_up(x) : x;
		t++;
	}
	if (terms)
		*terms = t;
	return bytes;
}

size_t dl_sub_bind_packed(struct dl_graph *g, char *base, char *ws)
{
	size_t at = 0;
	for (int v = g->n_inputs; v < g->n_values; v++) {
		size_t x = align_up((size_t)dl_shape_numel(&g->values[v].shape) * sizeof(float));
		g->values[v].data = (float *)(base + at);
		g->values[v].grad = (float *)(base + at + x);
		at += 2 * x;
	}
	for (int j = 0; j < g->n_nodes; j++) {
		g->saved_off[j] = at;
		at += align_up(g->nodes[j].saved_bytes);
	}
	g->arena = base;
	g->ws = ws;
	g->saved = base;
	g->train_plan = 1;
	return at;
}
