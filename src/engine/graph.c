/* Shape inference over the whole graph, the activation memory plan
 * (buffers reused by liveness, one arena), parameter layout and
 * initialisation, and forward execution. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "engine/graph.h"
#include "engine/fuse.h"
#include "engine/threads.h"

#define ALIGN 64

static double seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t align_up(size_t x)
{
	return (x + ALIGN - 1) / ALIGN * ALIGN;
}

/* A node's number of outputs (values out, out + 1, ...). */
static int n_outs(const struct dl_node *n)
{
	return n->n_out > 1 ? n->n_out : 1;
}

/* Views of node n's outputs in t[0 .. n_outs(n) - 1]. */
static void out_views(const struct dl_graph *g, const struct dl_node *n,
		      struct dl_tensor *t)
{
	for (int k = 0; k < n_outs(n); k++)
		t[k] = (struct dl_tensor){g->values[n->out + k].shape,
					  g->values[n->out + k].data};
}

void dl_graph_free(struct dl_graph *g)
{
	if (!g)
		return;
	dl_graph_unfuse(g);
	for (int i = 0; i < g->n_nodes; i++) {
		struct dl_node *n = &g->nodes[i];
		free((char *)n->scope);
		free(n->hp);
		free(n->params);
		free(n->priv);
		free(n->in);
		struct dl_subgraphs *sub = n->sub;
		for (int k = 0; sub && k < sub->n; k++)
			dl_graph_free(sub->g[k]);
		if (sub)
			free(sub->g);
		free(sub);
	}
	free(g->nodes);
	free(g->values);
	for (int i = 0; i < g->n_inputs; i++) {
		free(g->inputs[i].name);
		for (int k = 0; k < DL_MAX_DIMS; k++)
			free(g->inputs[i].sym[k]);
	}
	free(g->inputs);
	free(g->outputs);
	for (int i = 0; i < g->n_outputs; i++)
		free(g->output_names ? g->output_names[i] : NULL);
	free(g->output_names);
	for (int i = 0; i < g->n_rows; i++) {
		free(g->rows[i].scope);
		free(g->rows[i].label);
	}
	free(g->rows);
	for (int i = 0; i < g->n_syms; i++)
		free(g->sym_names[i]);
	free(g->sym_names);
	free(g->sym_vals);
	if (!g->borrowed) {
		free(g->param_block);
		free(g->grad_block);
		free(g->arena);
		free(g->ws);
		free(g->saved);
	}
	free(g->tin);
	free(g->last_in);
	free(g->saved_off);
	free(g->din);
	free(g->prof);
	for (int i = 0; i < g->n_train; i++) {
		free(g->train[i].key);
		free(g->train[i].val);
	}
	free(g->train);
	if (g->bind_free)
		g->bind_free(g->bind);
	for (int i = 0; i < g->n_ignore_keys; i++)
		free(g->ignore_keys[i]);
	free(g->ignore_keys);
	dl_vocab_free(g->vocab);
	free(g->data);
	free(g->file);
	free(g->name);
	free(g->weights);
	free(g);
}

static int sym_index(struct dl_graph *g, const char *name)
{
	for (int i = 0; i < g->n_syms; i++)
		if (strcmp(g->sym_names[i], name) == 0)
			return i;
	return -1;
}

/* "[N, T, 64]" for messages. */
static void spec_str(const struct dl_input_spec *s, char *buf, size_t size)
{
	size_t used = (size_t)snprintf(buf, size, "[N");
	for (int k = 0; k < s->ndim && used < size; k++) {
		if (s->sym[k])
			used += (size_t)snprintf(buf + used, size - used, ", %s", s->sym[k]);
		else
			used += (size_t)snprintf(buf + used, size - used, ", %lld",
						 (long long)s->d[k]);
	}
	if (used < size)
		snprintf(buf + used, size - used, "]");
}

static int bind_inputs(struct dl_graph *g, const struct dl_shape *in,
		       struct dl_error *err)
{
	for (int i = 0; i < g->n_syms; i++)
		g->sym_vals[i] = -1;
	for (int i = 0; i < g->n_inputs; i++) {
		const struct dl_input_spec *s = &g->inputs[i];
		char want[256], got[256];
		spec_str(s, want, sizeof want);
		dl_shape_str(&in[i], got, sizeof got);
		if (in[i].ndim == s->ndim + 1 && dl_shape_numel(&in[i]) < 0)
			return dl_error_set(err, DL_EINPUT,
				"input '%s' has shape %s: more than 2^40 elements, the "
				"most a tensor may have (%s:%d:%d)",
				s->name, got, g->file, s->line, s->col);
		if (in[i].ndim != s->ndim + 1)
			return dl_error_set(err, DL_EINPUT,
				"input '%s' has shape %s; the model needs %s (%s:%d:%d)",
				s->name, got, want, g->file, s->line, s->col);
		for (int k = 0; k < s->ndim; k++) {
			int64_t have = in[i].d[k + 1];
			if (s->sym[k]) {
				int si = sym_index(g, s->sym[k]);
				if (g->sym_vals[si] < 0) {
					g->sym_vals[si] = have;
				} else if (g->sym_vals[si] != have) {
					return dl_error_set(err, DL_EINPUT,
						"input '%s' has shape %s, but %s is %lld from an "
						"earlier input; the model needs %s (%s:%d:%d)",
						s->name, got, s->sym[k],
						(long long)g->sym_vals[si], want, g->file,
						s->line, s->col);
				}
			} else if (have != s->d[k]) {
				return dl_error_set(err, DL_EINPUT,
					"input '%s' has shape %s; the model needs %s (%s:%d:%d)",
					s->name, got, want, g->file, s->line, s->col);
			}
		}
		g->values[i].shape = in[i];
	}
	return 0;
}

static int layout_params(struct dl_graph *g, struct dl_error *err)
{
	int rc = g->bind_params ? g->bind_params(g, err) : 0;
	if (rc)
		return rc;
	size_t total = 0;
	for (int i = 0; i < g->n_nodes; i++)
		for (int k = 0; k < g->nodes[i].n_params; k++) {
			if (g->nodes[i].params[k].tie)
				continue;
			size_t c = (size_t)dl_shape_numel(&g->nodes[i].params[k].shape);
			if (total > SIZE_MAX / 8 - c)
				return dl_error_set(err, DL_EINPUT, "%s: the model's parameters are too large",
						    g->file);
			total += c;
		}
	g->param_block = calloc(total ? total : 1, sizeof(float));
	if (!g->param_block)
		return dl_error_set(err, DL_ERUN, "out of memory for %zu parameters", total);
	g->n_param_floats = total;
	size_t off = 0;
	for (int i = 0; i < g->n_nodes; i++)
		for (int k = 0; k < g->nodes[i].n_params; k++) {
			struct dl_param *p = &g->nodes[i].params[k];
			if (p->tie)
				continue;
			p->data = g->param_block + off;
			off += (size_t)dl_shape_numel(&p->shape);
		}
	for (int i = 0; i < g->n_nodes; i++)
		for (int k = 0; k < g->nodes[i].n_params; k++) {
			struct dl_param *p = &g->nodes[i].params[k];
			if (p->tie)
				p->data = dl_param_root(p)->data;
		}
	g->params_ready = 1;
	return 0;
}

static int same_inputs(const struct dl_graph *g, const struct dl_shape *in)
{
	if (!g->shapes_ready || !g->last_in)
		return 0;
	for (int i = 0; i < g->n_inputs; i++)
		if (!dl_shape_equal(&g->last_in[i], &in[i]))
			return 0;
	return 1;
}

int dl_graph_infer(struct dl_graph *g, const struct dl_shape *in,
		   struct dl_error *err)
{
	if (same_inputs(g, in))
		return 0;
	g->shapes_ready = 0;
	int rc = bind_inputs(g, in, err);
	if (rc)
		return rc;
	struct dl_shape *ins = NULL;
	int ins_cap = 0;
	for (int i = 0; i < g->n_nodes; i++) {
		struct dl_node *n = &g->nodes[i];
		if (n->n_in > ins_cap) {
			struct dl_shape *t = realloc(ins, (size_t)n->n_in * sizeof *t);
			if (!t) {
				free(ins);
				return dl_error_set(err, DL_ERUN, "out of memory");
			}
			ins = t;
			ins_cap = n->n_in;
		}
		n->in_int = 0;
		for (int k = 0; k < n->n_in; k++) {
			ins[k] = g->values[n->in[k]].shape;
			if (g->inputs && n->in[k] < g->n_inputs && k < 32 &&
			    g->inputs[n->in[k]].is_int)
				n->in_int |= 1u << k;
		}
		int before = n->n_params;
		struct dl_shape out[DL_MAX_OUT];
		memset(out, 0, sizeof out);
		n->macs = 0;
		rc = n->op->infer(n, ins, out, err);
		if (rc == 0 && g->params_ready && n->n_params != before)
			rc = dl_node_error(err, n, -1, "internal: parameters changed after layout");
		for (int k = 0; rc == 0 && k < n_outs(n); k++)
			if (out[k].ndim < 1 || out[k].ndim > DL_MAX_DIMS || dl_shape_numel(&out[k]) < 0)
				rc = dl_node_error(err, n, -1, "the output would be too large");
		if (rc) {
			free(ins);
			return rc < 0 ? rc : DL_EINPUT;
		}
		for (int k = 0; k < n_outs(n); k++)
			g->values[n->out + k].shape = out[k];
	}
	free(ins);
	if (!g->params_ready && (rc = layout_params(g, err)) != 0)
		return rc;
	if (!g->last_in && g->n_inputs > 0 &&
	    !(g->last_in = calloc((size_t)g->n_inputs, sizeof *g->last_in)))
		return dl_error_set(err, DL_ERUN, "out of memory");
	for (int i = 0; i < g->n_inputs; i++)
		g->last_in[i] = in[i];
	g->shape_gen++;
	g->shapes_ready = 1;
	return 0;
}

/* ---- the memory plan ---- */

/* The free gaps below the arena's top, a treap keyed by offset whose nodes
 * carry their subtree's largest gap, so first fit (the lowest gap that
 * holds a size) and the merges on release take O(log n). */
struct gap {
	size_t off, len, max;   /* max: the largest len in this subtree */
	unsigned prio;
	int l, r;               /* child indices, -1 for none */
};

struct gaps {
	struct gap *g;
	int n, cap, root, free_list;
	unsigned seed;
	size_t top;             /* the end of the highest live block */
};

static size_t gap_max(const struct gaps *s, int i)
{
	return i < 0 ? 0 : s->g[i].max;
}

static void gap_fix(struct gaps *s, int i)
{
	struct gap *x = &s->g[i];
	size_t m = x->len, a = gap_max(s, x->l), b = gap_max(s, x->r);
	x->max = m > a ? (m > b ? m : b) : (a > b ? a : b);
}

/* Splits t into keys < off (*a) and keys >= off (*b). */
static void gap_split(struct gaps *s, int t, size_t off, int *a, int *b)
{
	if (t < 0) {
		*a = *b = -1;
		return;
	}
	if (s->g[t].off < off) {
		gap_split(s, s->g[t].r, off, &s->g[t].r, b);
		*a = t;
	} else {
		gap_split(s, s->g[t].l, off, a, &s->g[t].l);
		*b = t;
	}
	gap_fix(s, t);
}

static int gap_merge(struct gaps *s, int a, int b)
{
	if (a < 0)
		return b;
	if (b < 0)
		return a;
	if (s->g[a].prio > s->g[b].prio) {
		s->g[a].r = gap_merge(s, s->g[a].r, b);
		gap_fix(s, a);
		return a;
	}
	s->g[b].l = gap_merge(s, a, s->g[b].l);
	gap_fix(s, b);
	return b;
}

static void gap_insert(struct gaps *s, size_t off, size_t len)
{
	int i = s->free_list;
	if (i >= 0) {
		s->free_list = s->g[i].l;
	} else {
		i = s->n++;    /* the caller sized g for every gap there can be */
	}
	s->seed = s->seed * 1103515245u + 12345u;
	s->g[i] = (struct gap){off, len, len, s->seed >> 8, -1, -1};
	int a, b;
	gap_split(s, s->root, off, &a, &b);
	s->root = gap_merge(s, gap_merge(s, a, i), b);
}

/* Removes the gap at off, if any; returns its length, or 0. */
static size_t gap_remove(struct gaps *s, size_t off)
{
	int a, b, c, d;
	gap_split(s, s->root, off, &a, &b);
	gap_split(s, b, off + 1, &c, &d);
	size_t len = 0;
	if (c >= 0) {   /* one gap at most starts at off */
		len = s->g[c].len;
		s->g[c].l = s->free_list;
		s->free_list = c;
	}
	s->root = gap_merge(s, a, d);
	return len;
}

/* The gap that ends exactly at off, if any: its offset in *at. */
static int gap_ending_at(const struct gaps *s, size_t off, size_t *at)
{
	int t = s->root, best = -1;
	while (t >= 0) {
		if (s->g[t].off < off) {
			best = t;
			t = s->g[t].r;
		} else {
			t = s->g[t].l;
		}
	}
	if (best < 0 || s->g[best].off + s->g[best].len != off)
		return 0;
	*at = s->g[best].off;
	return 1;
}

/* First fit: the lowest gap of at least size bytes, else the top. */
static size_t place(struct gaps *s, size_t size)
{
	if (size == 0)
		return 0;
	if (gap_max(s, s->root) >= size) {
		int t = s->root;
		for (;;) {
			if (gap_max(s, s->g[t].l) >= size)
				t = s->g[t].l;
			else if (s->g[t].len >= size)
				break;
			else
				t = s->g[t].r;
		}
		size_t off = s->g[t].off, len = s->g[t].len;
		gap_remove(s, off);
		if (len > size)
			gap_insert(s, off + size, len - size);
		return off;
	}
	size_t off = s->top;
	s->top += size;
	return off;
}

/* Frees [off, off + size), merging it with the gaps on either side. */
static void release(struct gaps *s, size_t off, size_t size)
{
	if (size == 0)
		return;
	size_t start = off, end = off + size, before;
	if (gap_ending_at(s, off, &before)) {
		gap_remove(s, before);
		start = before;
	}
	if (end == s->top) {
		s->top = start;
		return;
	}
	end += gap_remove(s, end);
	gap_insert(s, start, end - start);
}

/* Lifetimes of every activation (and, training, its gradient) in steps:
 * forward of node i is step i, the loss step n, backward of node i step
 * 2n - i. */
static void lifetimes(struct dl_graph *g, int train)
{
	int n = g->n_nodes, forever = 2 * n + 1;
	for (int v = 0; v < g->n_values; v++) {
		struct dl_value *x = &g->values[v];
		x->last_use = -1;
		x->g1 = -1;     /* max consumer, for now */
	}
	for (int i = 0; i < n; i++)
		for (int k = 0; k < g->nodes[i].n_in; k++)
			g->values[g->nodes[i].in[k]].last_use = i;
	for (int v = g->n_inputs; v < g->n_values; v++) {
		struct dl_value *x = &g->values[v];
		int p = x->producer;
		x->t0 = x->born && !train ? x->born - 1 : p;
		x->t1 = x->last_use >= 0 ? x->last_use : p;
		if (x->pinned)
			x->t1 = train ? (x->t1 > n ? x->t1 : n) : forever;
		if (!train)
			continue;
		if (!(g->nodes[p].op->flags & DL_OP_BWD_NO_OUTPUT) && 2 * n - p > x->t1)
			x->t1 = 2 * n - p;
		if (x->pinned && x->t1 < 2 * n - p)
			x->t1 = 2 * n - p;    /* the caller may read outputs after backward */
		/* gradient: written first by the last consumer's backward (or the
		 * loss, for an output), read last by the producer's */
		x->g0 = x->last_use >= 0 ? 2 * n - x->last_use : 2 * n - p;
		if (x->pinned)
			x->g0 = n;
		x->g1 = 2 * n - p;
	}
	if (!train)
		return;
	for (int c = 0; c < n; c++) {
		if (g->nodes[c].op->flags & DL_OP_BWD_NO_INPUTS)
			continue;
		for (int k = 0; k < g->nodes[c].n_in; k++) {
			struct dl_value *x = &g->values[g->nodes[c].in[k]];
			if (x->producer >= 0 && 2 * n - c > x->t1)
				x->t1 = 2 * n - c;
		}
	}
}

/* The first step of item it (activation v is item 2v, its gradient
 * 2v + 1), or -1 for what has no place in the arena: model inputs, and
 * gradients outside training. */
static int item_start(const struct dl_graph *g, int it, int train)
{
	int v = it / 2;
	if (v < g->n_inputs || (it % 2 && !train) || (g->values[v].alias && !train))
		return -1;
	return it % 2 ? g->values[v].g0 : g->values[v].t0;
}

/* The arena: items (activation v is item 2v, its gradient 2v + 1) are
 * placed at their first step and released after their last, so buffers
 * whose lifetimes do not meet share memory. Items are bucketed by the step
 * they start and by the step they are released (counting sorts), and the
 * gaps are a treap: O(n log n) in the number of items. Returns the
 * arena's size. */
static int layout(struct dl_graph *g, int train, size_t *top, struct dl_error *err)
{
	int steps = 2 * g->n_nodes + 2, n_items = 2 * g->n_values;
	int *order = malloc((size_t)(n_items + 1) * sizeof *order);
	int *ends = malloc((size_t)(n_items + 1) * sizeof *ends);
	int *first = calloc((size_t)steps + 1, sizeof *first);
	int *last = calloc((size_t)steps + 1, sizeof *last);
	int *fill = calloc((size_t)steps + 1, sizeof *fill);
	struct gaps s = {.n = 0, .root = -1, .free_list = -1, .seed = 1};
	s.g = malloc((size_t)(n_items + 2) * sizeof *s.g);
	if (!order || !ends || !first || !last || !fill || !s.g) {
		free(order);
		free(ends);
		free(first);
		free(last);
		free(fill);
		free(s.g);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	/* items bucketed by start step and by release step: an item is
	 * released at the end of step max(start, end), after what starts
	 * there was placed */
	for (int it = 0; it < n_items; it++) {
		int start = item_start(g, it, train);
		if (start < 0)
			continue;
		const struct dl_value *x = &g->values[it / 2];
		int end = it % 2 ? x->g1 : x->t1;
		first[start + 1]++;
		if (end < start)
			end = start;
		if (end < steps)
			last[end + 1]++;
	}
	for (int st = 0; st < steps; st++) {
		first[st + 1] += first[st];
		last[st + 1] += last[st];
	}
	for (int it = 0; it < n_items; it++) {
		int start = item_start(g, it, train);
		if (start < 0)
			continue;
		order[first[start] + fill[start]++] = it;
	}
	memset(fill, 0, (size_t)(steps + 1) * sizeof *fill);
	for (int it = 0; it < n_items; it++) {
		int start = item_start(g, it, train);
		if (start < 0)
			continue;
		const struct dl_value *x = &g->values[it / 2];
		int end = it % 2 ? x->g1 : x->t1;
		if (end < start)
			end = start;
		if (end < steps)
			ends[last[end] + fill[end]++] = it;
	}
	size_t bytes = 0, peak = 0;
	*top = 0;
	for (int st = 0; st < steps; st++) {
		for (int j = first[st]; j < first[st + 1]; j++) {
			int it = order[j];
			struct dl_value *x = &g->values[it / 2];
			size_t off = place(&s, x->bytes);
			if (it % 2)
				x->goffset = off;
			else
				x->offset = off;
			if (off + x->bytes > *top)
				*top = off + x->bytes;
			bytes += x->bytes;
			if (bytes > peak)
				peak = bytes;
		}
		for (int j = last[st]; j < last[st + 1]; j++) {
			int it = ends[j];
			const struct dl_value *x = &g->values[it / 2];
			bytes -= x->bytes;
			release(&s, it % 2 ? x->goffset : x->offset, x->bytes);
		}
	}
	g->act_bytes = peak;
	free(order);
	free(ends);
	free(first);
	free(last);
	free(fill);
	free(s.g);
	return 0;
}

/* A training plan's saved state and input-gradient pointers. */
static int plan_training(struct dl_graph *g, int max_in, struct dl_error *err)
{
	if (!g->saved_off && !(g->saved_off = calloc((size_t)g->n_nodes + 1, sizeof *g->saved_off)))
		return dl_error_set(err, DL_ERUN, "out of memory");
	size_t saved = 0;
	for (int i = 0; i < g->n_nodes; i++) {
		g->saved_off[i] = saved;
		saved += align_up(g->nodes[i].saved_bytes);
	}
	if (saved > g->saved_cap) {
		free(g->saved);
		g->saved = aligned_alloc(ALIGN, saved);
		if (!g->saved) {
			g->saved_cap = 0;
			return dl_error_set(err, DL_ERUN, "out of memory for saved state");
		}
		g->saved_cap = saved;
	}
	free(g->din);
	if (!(g->din = calloc((size_t)max_in, sizeof *g->din)))
		return dl_error_set(err, DL_ERUN, "out of memory");
	return 0;
}

int dl_graph_layout(struct dl_graph *g, int train, size_t *arena_bytes,
		    struct dl_error *err)
{
	for (int v = 0; v < g->n_values; v++)
		g->values[v].bytes = align_up((size_t)dl_shape_numel(&g->values[v].shape) * sizeof(float));
	lifetimes(g, train);
	return layout(g, train, arena_bytes, err);
}

static size_t max_memory;

void dl_set_max_memory(size_t bytes)
{
	max_memory = bytes;
}

static size_t physical_memory(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	if (pages <= 0 || page <= 0)
		return (size_t)4 << 30;
	return (size_t)pages * (size_t)page;
}

size_t dl_max_memory(void)
{
	return max_memory ? max_memory : physical_memory() / 5 * 4;
}

/* b bytes for a message: "512 B", "3.2 KiB", "1.5 GiB". */
static const char *human(double b, char *buf, size_t size)
{
	static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	int u = 0;
	while (b >= 1024 && u < 5) {
		b /= 1024;
		u++;
	}
	snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
	return buf;
}

/* The plan's memory against dl_max_memory(), before anything is
 * allocated for it. */
static int check_memory(const struct dl_graph *g, int train, size_t top,
			size_t ws, struct dl_error *err)
{
	size_t weights = g->n_param_floats * sizeof(float), saved = 0;
	for (int i = 0; train && i < g->n_nodes; i++)
		saved += align_up(g->nodes[i].saved_bytes);
	double total = (double)weights * (train ? 2 : 1) + (double)top + (double)ws +
		       (double)saved;
	size_t max = dl_max_memory();
	if (total <= (double)max)
		return 0;
	char lim[128], h[6][32];
	if (max_memory)
		snprintf(lim, sizeof lim, "--max-memory is %s",
			 human((double)max, h[0], sizeof h[0]));
	else
		snprintf(lim, sizeof lim, "the default --max-memory is %s (80%% of the "
			 "%s of physical memory)", human((double)max, h[0], sizeof h[0]),
			 human((double)physical_memory(), h[1], sizeof h[1]));
	return dl_error_set(err, DL_ERUN, "%s: the plan needs %s (%s weights%s, %s "
		"activations, %s workspace, %s saved for backward) but %s; lower "
		"--batch-size or raise --max-memory", g->file,
		human(total, h[2], sizeof h[2]), human((double)weights, h[3], sizeof h[3]),
		train ? " and gradients" : "", human((double)top, h[4], sizeof h[4]),
		human((double)ws, h[5], sizeof h[5]), human((double)saved, h[0], sizeof h[0]),
		lim);
}

static int keep_cmp(const void *a, const void *b)
{
	const struct dl_node *x = *(const struct dl_node *const *)a;
	const struct dl_node *y = *(const struct dl_node *const *)b;
	/* multiply-adds per kept byte, fewest first */
	double rx = (double)x->macs / (double)x->keep_bytes;
	double ry = (double)y->macs / (double)y->keep_bytes;
	return rx < ry ? -1 : rx > ry;
}

/* Which nodes may keep transformed weights at inference (node->keep): at
 * most `budget` bytes of them, the planned activations and workspace, so
 * that an inference's memory stays within the weights, twice the planned
 * set and the program itself. The nodes that gain most per byte (fewest
 * multiply-adds per kept byte: the transform is the largest share of
 * their call) come first. Returns the bytes kept. */
static size_t plan_keep(struct dl_graph *g, size_t budget)
{
	int n = 0;
	for (int i = 0; i < g->n_nodes; i++) {
		g->nodes[i].keep = 0;
		n += g->nodes[i].keep_bytes > 0;
	}
	if (n == 0)
		return 0;
	struct dl_node **by = malloc((size_t)n * sizeof *by);
	if (!by)
		return 0;   /* nothing kept: each call transforms again */
	n = 0;
	for (int i = 0; i < g->n_nodes; i++)
		if (g->nodes[i].keep_bytes > 0)
			by[n++] = &g->nodes[i];
	qsort(by, (size_t)n, sizeof *by, keep_cmp);
	size_t kept = 0;
	for (int i = 0; i < n; i++)
		if (by[i]->keep_bytes <= budget - kept) {
			by[i]->keep = 1;
			kept += by[i]->keep_bytes;
		}
	free(by);
	return kept;
}

int dl_graph_plan(struct dl_graph *g, int train, struct dl_error *err)
{
	if (!g->shapes_ready)
		return dl_error_set(err, DL_ERUN, "internal: plan before shape inference");
	if (g->plan_gen == g->shape_gen && g->plan_train == train)
		return 0;
	g->plan_gen = 0;
	g->train_plan = train;
	size_t top = 0, ws = 0;
	if (!train && g->fuse) {
		if (dl_graph_fuse(g) != 0)
			return dl_error_set(err, DL_ERUN, "out of memory");
	} else {
		dl_graph_unfuse(g);
	}
	int rc = dl_graph_layout(g, train, &top, err);
	if (rc)
		return rc;
	int max_in = 1;
	for (int i = 0; i < g->n_nodes; i++) {
		if (g->nodes[i].ws_bytes > ws)
			ws = g->nodes[i].ws_bytes;
		if (g->nodes[i].n_in > max_in)
			max_in = g->nodes[i].n_in;
	}
	if ((rc = check_memory(g, train, top, ws, err)) != 0)
		return rc;
	g->keep_bytes = train ? 0 : plan_keep(g, top + ws);
	if (top + ALIGN > g->arena_cap) {
		free(g->arena);
		g->arena_cap = top + ALIGN;
		g->arena = aligned_alloc(ALIGN, align_up(g->arena_cap));
		if (!g->arena) {
			g->arena_cap = 0;
			return dl_error_set(err, DL_ERUN, "out of memory for %zu bytes of activations", top);
		}
	}
	g->arena_bytes = top;
	if (ws > g->ws_cap) {
		free(g->ws);
		g->ws = aligned_alloc(ALIGN, align_up(ws));
		if (!g->ws) {
			g->ws_cap = 0;
			return dl_error_set(err, DL_ERUN, "out of memory for %zu bytes of workspace", ws);
		}
		g->ws_cap = ws;
	}
	g->ws_bytes = ws;
	if (max_in > g->tin_cap) {
		free(g->tin);
		g->tin = calloc((size_t)max_in, sizeof *g->tin);
		if (!g->tin)
			return dl_error_set(err, DL_ERUN, "out of memory");
		g->tin_cap = max_in;
	}
	for (int v = g->n_inputs; v < g->n_values; v++) {
		g->values[v].data = (float *)(g->arena + g->values[v].offset);
		g->values[v].grad = train ? (float *)(g->arena + g->values[v].goffset) : NULL;
	}
	for (int v = g->n_inputs; !train && v < g->n_values; v++)
		if (g->values[v].alias)
			g->values[v].data = g->values[g->values[v].alias - 1].data;
	if (train && (rc = plan_training(g, max_in, err)) != 0)
		return rc;
	g->plan_gen = g->shape_gen;
	g->plan_train = train;
	return 0;
}

/* A stepped call's kept values (dl_step_call.konst_off): value v's rows
 * of this call from (put) or into (keep) each sequence's store. Its
 * buffer is the value's own for its whole life, so putting it back
 * before a reader runs is as good as computing it. */
static void konst_rows(const struct dl_graph *g, const struct dl_step_call *st, int v,
		       int put)
{
	const struct dl_value *x = &g->values[v];
	int64_t N = x->shape.d[0], per = N > 0 ? dl_shape_numel(&x->shape) / N : 0;
	for (int64_t r = 0; r < N; r++) {
		float *row = st->konst + (size_t)(st->row0 + r) * st->konst_floats +
			     st->konst_off[v];
		if (put)
			memcpy(x->data + r * per, row, sizeof(float) * (size_t)per);
		else
			memcpy(row, x->data + r * per, sizeof(float) * (size_t)per);
	}
}

void dl_graph_forward(struct dl_graph *g, float *const *in, struct dl_ctx *ctx)
{
	g->first_bad = -1;
	for (int i = 0; i < g->n_inputs; i++)
		g->values[i].data = in[i];
	ctx->ws = g->ws;
	const struct dl_step_call *st = ctx->step && ctx->step->konst_off && !g->borrowed
					? ctx->step : NULL;
	for (int i = 0; i < g->n_nodes; i++) {
		struct dl_node *n = &g->nodes[i];
		if (n->fused && !ctx->train)
			continue;   /* an earlier node's epilogue computed it */
		if (st && st->warm && n->step_axis == 0)
			continue;   /* no token input: its values are kept */
		for (int k = 0; st && st->warm && k <= n->n_in; k++) {
			int v = k < n->n_in ? n->in[k] : n->epi ? n->epi->res : -1;
			if (v >= 0 && st->konst_off[v] >= 0)
				konst_rows(g, st, v, 1);
		}
		if (n->epi && !ctx->train) {
			if (!n->epi->ready)
				dl_epilogue_prepare(g, n);
			n->epi->resp = n->epi->res >= 0 ? g->values[n->epi->res].data : NULL;
		}
		for (int k = 0; k < n->n_in; k++) {
			g->tin[k].shape = g->values[n->in[k]].shape;
			g->tin[k].data = g->values[n->in[k]].data;
		}
		struct dl_tensor out[DL_MAX_OUT];
		out_views(g, n, out);
		ctx->saved = ctx->train && g->saved ? g->saved + g->saved_off[i] : NULL;
		dl_threads_check();
		double t0 = g->prof ? seconds() : 0;
		n->op->forward(n, g->tin, out, ctx);
		if (g->prof)
			g->prof[i] += seconds() - t0;
		if (g->on_forward)
			g->on_forward(g->on_forward_arg, n, g->tin, out);
		/* keep what the token entries will read of a sequence's first
		 * call (for a fused chain, every value it wrote) */
		int last = n->epi && !ctx->train ? n->epi->last : i;
		for (int j = i; st && !st->warm && n->step_axis == 0 && j <= last; j++)
			for (int k = 0; k < n_outs(&g->nodes[j]); k++) {
				int v = g->nodes[j].out + k;
				if (st->konst_off[v] >= 0)
					konst_rows(g, st, v, 0);
			}
		for (int k = 0; g->watch_finite && g->first_bad < 0 && k < n_outs(n); k++) {
			int64_t c = dl_shape_numel(&out[k].shape);
			for (int64_t j = 0; j < c; j++)
				if (!isfinite(out[k].data[j])) {
					g->first_bad = i;
					break;
				}
		}
	}
}

int dl_graph_train_setup(struct dl_graph *g, struct dl_error *err)
{
	for (int i = 0; i < g->n_nodes; i++)
		if (!g->nodes[i].op->backward)
			return dl_node_error(err, &g->nodes[i], -1,
					     "cannot be trained yet (it has no backward)");
	if (!g->grad_block) {
		g->grad_block = calloc(g->n_param_floats ? g->n_param_floats : 1, sizeof(float));
		if (!g->grad_block)
			return dl_error_set(err, DL_ERUN, "out of memory for gradients");
	}
	for (int i = 0; i < g->n_nodes; i++)
		for (int k = 0; k < g->nodes[i].n_params; k++) {
			struct dl_param *p = &g->nodes[i].params[k];
			p->grad = p->buffer ? NULL : g->grad_block + (p->data - g->param_block);
		}
	return 0;
}

void dl_graph_zero_grad(struct dl_graph *g)
{
	if (g->grad_block)
		memset(g->grad_block, 0, g->n_param_floats * sizeof(float));
}

/* Zeroes the gradient of value v when its lifetime starts at `step` (its
 * buffer may hold another value's bytes until then). */
static void zero_grad_at(struct dl_graph *g, int v, int step)
{
	struct dl_value *x = &g->values[v];
	if (v >= g->n_inputs && x->g0 == step)
		memset(x->grad, 0, (size_t)dl_shape_numel(&x->shape) * sizeof(float));
}

void dl_graph_backward(struct dl_graph *g, const float *const *dout,
		       float *const *din_in, struct dl_ctx *ctx)
{
	int n = g->n_nodes;
	/* the outputs' slots: one written after the forward as dout[k]
	 * itself (in place) is kept, any other zeroed (at the first listing
	 * of its value, unless a later listing is in place); then the other
	 * dout[k] are added, in output order */
	for (int k = 0; k < g->n_outputs; k++) {
		int v = g->outputs[k];
		if (v < g->n_inputs)
			continue;
		float *gv = g->values[v].grad;
		const float *d = dout ? dout[k] : NULL;
		int in_place = d && d == gv, first = 1;
		for (int j = 0; j < k; j++)
			first &= g->outputs[j] != v;
		for (int j = k + 1; first && !in_place && j < g->n_outputs; j++)
			in_place = g->outputs[j] == v && dout && dout[j] && dout[j] == gv;
		if (first && !in_place)
			zero_grad_at(g, v, n);
		if (!d || d == gv)
			continue;
		int64_t c = dl_shape_numel(&g->values[v].shape);
		for (int64_t j = 0; j < c; j++)
			gv[j] += d[j];
	}
	ctx->ws = g->ws;
	for (int i = n - 1; i >= 0; i--) {
		struct dl_node *nd = &g->nodes[i];
		int step = 2 * n - i;
		for (int k = 0; k < n_outs(nd); k++)
			zero_grad_at(g, nd->out + k, step);  /* an output nobody reads */
		for (int k = 0; k < nd->n_in; k++) {
			int v = nd->in[k], dup = 0;
			for (int j = 0; j < k; j++)
				dup |= nd->in[j] == v;
			if (!dup)
				zero_grad_at(g, v, step);
			g->tin[k].shape = g->values[v].shape;
			g->tin[k].data = g->values[v].data;
			g->din[k] = v < g->n_inputs ? (din_in ? din_in[v] : NULL) : g->values[v].grad;
		}
		struct dl_tensor out[DL_MAX_OUT];
		const float *dout_k[DL_MAX_OUT];
		out_views(g, nd, out);
		for (int k = 0; k < n_outs(nd); k++)
			dout_k[k] = g->values[nd->out + k].grad;
		ctx->dout = dout_k;
		ctx->saved = g->saved ? g->saved + g->saved_off[i] : NULL;
		dl_threads_check();
		double t0 = g->prof ? seconds() : 0;
		nd->op->backward(nd, g->tin, out, dout_k[0], g->din, ctx);
		ctx->dout = NULL;
		if (g->prof)
			g->prof[i] += seconds() - t0;
	}
}

float *dl_graph_output_grad(struct dl_graph *g, int k)
{
	int v = g->outputs[k];
	return v < g->n_inputs ? NULL : g->values[v].grad;
}

int dl_graph_first_nonfinite(const struct dl_graph *g)
{
	return g->first_bad;
}

/* ---- parameters ---- */

char *dl_param_key(const struct dl_node *n, const struct dl_param *p,
		   char *buf, size_t size)
{
	if (p->name[0])
		snprintf(buf, size, "%s.%s", n->scope, p->name);
	else
		snprintf(buf, size, "%s", n->scope);
	return buf;
}

struct dl_param *dl_graph_param(struct dl_graph *g, const char *key,
				struct dl_node **node)
{
	char buf[512];
	for (int i = 0; i < g->n_nodes; i++)
		for (int k = 0; k < g->nodes[i].n_params; k++) {
			struct dl_param *p = &g->nodes[i].params[k];
			if (strcmp(dl_param_key(&g->nodes[i], p, buf, sizeof buf), key) == 0) {
				if (node)
					*node = &g->nodes[i];
				return p;
			}
		}
	return NULL;
}

void dl_graph_init_params(struct dl_graph *g, uint64_t seed)
{
	struct dl_rng rng;
	dl_rng_seed(&rng, seed);
	for (int i = 0; i < g->n_nodes; i++)
		for (int k = 0; k < g->nodes[i].n_params; k++) {
			struct dl_param *p = &g->nodes[i].params[k];
			int64_t c = dl_shape_numel(&p->shape);
			if (p->tie)
				continue;
			for (int64_t j = 0; j < c; j++) {
				double x = 0;
				switch (p->init) {
				case DL_INIT_ZEROS:
					x = 0;
					break;
				case DL_INIT_ONES:
					x = 1;
					break;
				case DL_INIT_CONST:
					x = p->init_arg;
					break;
				case DL_INIT_UNIFORM:
					x = (2 * dl_rng_uniform(&rng) - 1) * p->init_arg;
					break;
				case DL_INIT_UNIFORM01:
					x = p->init_arg + dl_rng_uniform(&rng) * (p->init_arg2 - p->init_arg);
					break;
				case DL_INIT_NORMAL:
					x = dl_rng_normal(&rng) * p->init_arg;
					break;
				}
				p->data[j] = (float)x;
			}
			if (p->init_zero_row >= 0 && p->shape.ndim > 0 &&
			    p->init_zero_row < p->shape.d[0]) {
				int64_t row = c / p->shape.d[0];
				memset(p->data + p->init_zero_row * row, 0, (size_t)row * sizeof(float));
			}
		}
}
