/* A loaded model's weights (load, check, save), default paths, training
 * defaults, and shape inference from user-given per-sample shapes. */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "io/safetensors.h"
#include "model/yamlutil.h"

const char *dl_model_train_default(const struct dl_graph *g, const char *key,
				   int *line, int *col)
{
	for (int i = 0; i < g->n_train; i++)
		if (strcmp(g->train[i].key, key) == 0) {
			if (line)
				*line = g->train[i].line;
			if (col)
				*col = g->train[i].col;
			return g->train[i].val;
		}
	return NULL;
}

char *dl_model_default_weights(const struct dl_graph *g)
{
	if (g->weights)
		return strdup(g->weights);
	size_t len = strlen(g->file);
	const char *dot = strrchr(g->file, '.');
	const char *slash = strrchr(g->file, '/');
	if (dot && (!slash || dot > slash) &&
	    (strcmp(dot, ".yaml") == 0 || strcmp(dot, ".yml") == 0))
		len = (size_t)(dot - g->file);
	char *out = malloc(len + sizeof ".safetensors");
	if (out)
		sprintf(out, "%.*s.safetensors", (int)len, g->file);
	return out;
}

int dl_model_infer_spec(struct dl_graph *g, const char *const *specs,
			int n_specs, int64_t batch, struct dl_error *err)
{
	return dl_model_infer_spec_fill(g, specs, n_specs, batch, 0, NULL, err);
}

int dl_model_infer_spec_fill(struct dl_graph *g, const char *const *specs,
			     int n_specs, int64_t batch, int64_t fill,
			     int *unbound, struct dl_error *err)
{
	struct dl_shape *in = calloc((size_t)g->n_inputs + 1, sizeof *in);
	if (!in)
		return dl_error_set(err, DL_ERUN, "out of memory");
	int rc = 0;
	for (int i = 0; i < g->n_inputs; i++) {
		const struct dl_input_spec *s = &g->inputs[i];
		in[i].ndim = s->ndim + 1;
		in[i].d[0] = batch;
		for (int d = 0; d < s->ndim; d++)
			in[i].d[d + 1] = s->d[d];
	}
	for (int k = 0; rc == 0 && k < n_specs; k++) {
		const char *eq = strchr(specs[k], '=');
		int i = -1;
		for (int j = 0; eq && j < g->n_inputs; j++)
			if (strlen(g->inputs[j].name) == (size_t)(eq - specs[k]) &&
			    strncmp(g->inputs[j].name, specs[k], (size_t)(eq - specs[k])) == 0)
				i = j;
		if (!eq && g->n_inputs == 1)
			i = 0;
		if (i < 0) {
			rc = dl_error_set(err, DL_EINPUT,
					  "--input-shape '%s': write NAME=d1,d2,... with NAME a model input",
					  specs[k]);
			break;
		}
		char *copy = strdup(eq ? eq + 1 : specs[k]);
		if (!copy) {
			rc = dl_error_set(err, DL_ERUN, "out of memory");
			break;
		}
		int nd = 0;
		for (char *tok = strtok(copy, ",x "); tok; tok = strtok(NULL, ",x ")) {
			int64_t v;
			if (nd >= DL_MAX_DIMS - 1 || dl_parse_int(tok, &v) || v < 0) {
				rc = dl_error_set(err, DL_EINPUT,
						  "--input-shape '%s': sizes are non-negative integers",
						  specs[k]);
				break;
			}
			in[i].d[++nd] = v;
		}
		free(copy);
		if (rc == 0 && nd != g->inputs[i].ndim)
			rc = dl_error_set(err, DL_EINPUT,
					  "--input-shape '%s': input '%s' has %d per-sample dimensions",
					  specs[k], g->inputs[i].name, g->inputs[i].ndim);
	}
	/* a symbol that one spec binds has that size in every input */
	for (int i = 0; rc == 0 && i < g->n_inputs; i++)
		for (int d = 0; d < g->inputs[i].ndim; d++)
			for (int j = 0; in[i].d[d + 1] < 0 && j < g->n_inputs; j++)
				for (int e = 0; e < g->inputs[j].ndim; e++)
					if (in[j].d[e + 1] >= 0 && g->inputs[j].sym[e] &&
					    strcmp(g->inputs[j].sym[e], g->inputs[i].sym[d]) == 0)
						in[i].d[d + 1] = in[j].d[e + 1];
	for (int i = 0; rc == 0 && i < g->n_inputs; i++)
		for (int d = 0; d < g->inputs[i].ndim; d++)
			if (in[i].d[d + 1] < 0 && fill > 0) {
				in[i].d[d + 1] = fill;
			} else if (in[i].d[d + 1] < 0) {
				if (unbound)
					*unbound = 1;
				rc = dl_error_set(err, DL_EINPUT,
						  "input '%s' has the symbolic size %s: give it with "
						  "--input-shape %s=...", g->inputs[i].name,
						  g->inputs[i].sym[d], g->inputs[i].name);
				break;
			}
	if (rc == 0)
		rc = dl_graph_infer(g, in, err);
	free(in);
	return rc;
}

/* Tensors a weights file may hold beyond the model's: PyTorch's batch
 * counters, and a checkpoint's optimizer state and best epoch's state. */
static int ignored_extra(const char *name)
{
	if (strncmp(name, "__optim__.", 10) == 0 || strncmp(name, "__best__.", 9) == 0)
		return 1;
	const char *suffix = "num_batches_tracked";
	size_t l = strlen(name), s = strlen(suffix);
	return l >= s && strcmp(name + l - s, suffix) == 0 &&
	       (l == s || name[l - s - 1] == '.');
}

/* An unused key the model lets pass: an `ignore_keys:` glob names it, or
 * --ignore-extra. */
static int ignored_by_model(const struct dl_graph *g, const char *name,
			    int ignore_extra)
{
	if (ignore_extra)
		return 1;
	for (int i = 0; i < g->n_ignore_keys; i++)
		if (fnmatch(g->ignore_keys[i], name, 0) == 0)
			return 1;
	return 0;
}

/* The problems of one weights file, each key once. */
struct wproblems {
	int n_missing, n_unexpected, n_shape;
	int cap;
	struct wprob {
		int kind;                      /* 0 missing, 1 unexpected, 2 shape */
		char key[256];
		const struct dl_node *node;    /* missing, shape */
		const struct dl_param *param;  /* missing, shape */
		int t;                         /* the file's tensor (unexpected, shape) */
	} *p;
};

static int add_problem(struct wproblems *w, int kind, const char *key,
		       const struct dl_node *n, const struct dl_param *p, int t)
{
	int total = w->n_missing + w->n_unexpected + w->n_shape;
	if (total >= w->cap) {
		int c = w->cap ? 2 * w->cap : 16;
		struct wprob *q = realloc(w->p, (size_t)c * sizeof *q);
		if (!q)
			return -1;
		w->p = q;
		w->cap = c;
	}
	struct wprob *r = &w->p[total];
	r->kind = kind;
	snprintf(r->key, sizeof r->key, "%s", key);
	r->node = n;
	r->param = p;
	r->t = t;
	if (kind == 0)
		w->n_missing++;
	else if (kind == 1)
		w->n_unexpected++;
	else
		w->n_shape++;
	return 0;
}

/* The one-problem messages (kept as they were before several were listed). */
static int one_problem(struct dl_graph *g, const struct dl_safetensors *st,
		       const char *path, const struct wprob *r,
		       struct dl_error *err)
{
	char key[512], a[512], b[128];
	const struct dl_node *n = r->node;
	if (r->kind == 0) {
		/* a near-twin in the file is likely the same tensor misspelled */
		const char *twin = NULL;
		for (int j = 0; j < st->n && !twin; j++)
			if (!dl_graph_param(g, st->t[j].name, NULL) &&
			    dl_edit_distance(st->t[j].name, r->key) <= 2)
				twin = st->t[j].name;
		dl_shape_str(&r->param->shape, a, sizeof a);
		if (twin)
			return dl_error_set(err, DL_EINPUT,
					    "%s: tensor '%s' is missing (the model needs %s, %s:%d:%d); "
					    "the file has '%s' instead: a misspelling?",
					    path, r->key, a, g->file, n->line, n->col, twin);
		return dl_error_set(err, DL_EINPUT,
				    "%s: tensor '%s' is missing; the model needs %s (%s:%d:%d)",
				    path, r->key, a, g->file, n->line, n->col);
	}
	if (r->kind == 2)
		return dl_error_set(err, DL_EINPUT,
				    "%s: tensor '%s' has shape %s, the model needs %s (%s:%d:%d)",
				    path, r->key, dl_shape_str(&st->t[r->t].shape, a, sizeof a),
				    dl_shape_str(&r->param->shape, b, sizeof b), g->file,
				    n->line, n->col);
	const char *near = NULL;
	int best = 4;
	for (int i = 0; i < g->n_nodes; i++)
		for (int k = 0; k < g->nodes[i].n_params; k++) {
			dl_param_key(&g->nodes[i], &g->nodes[i].params[k], key, sizeof key);
			int d = dl_edit_distance(r->key, key);
			if (d < best) {
				best = d;
				near = g->nodes[i].params[k].name;
				snprintf(a, sizeof a, "%s", key);
			}
		}
	if (near)
		return dl_error_set(err, DL_EINPUT,
				    "%s: tensor '%s' is not a parameter of %s; did you mean '%s'?",
				    path, r->key, g->file, a);
	return dl_error_set(err, DL_EINPUT,
			    "%s: tensor '%s' is not a parameter of %s (see 'dlrun summary')",
			    path, r->key, g->file);
}

/* Appends s to buf[*used..size) while it fits; returns 0, or -1 when full. */
static int put(char *buf, size_t size, size_t *used, const char *s)
{
	size_t l = strlen(s);
	if (*used + l + 1 > size)
		return -1;
	memcpy(buf + *used, s, l + 1);
	*used += l;
	return 0;
}

/* Every problem on one line: "N missing keys (a, b); M unexpected keys
 * (c); K mis-shaped keys (d [2, 3], the model needs [3, 2])". */
static int all_problems(struct dl_graph *g, const struct dl_safetensors *st,
			const char *path, const struct wproblems *w,
			struct dl_error *err)
{
	char msg[sizeof err->msg - 16];
	size_t used = 0;
	msg[0] = 0;
	static const char *const what[3] = {"missing", "unexpected", "mis-shaped"};
	int counts[3] = {w->n_missing, w->n_unexpected, w->n_shape};
	int total = counts[0] + counts[1] + counts[2], shown = 0, full = 0;
	for (int kind = 0; kind < 3; kind++) {
		if (!counts[kind])
			continue;
		char head[96];
		snprintf(head, sizeof head, "%s%d %s key%s (", used ? "; " : "",
			 counts[kind], what[kind], counts[kind] == 1 ? "" : "s");
		if (full || put(msg, sizeof msg, &used, head)) {
			full = 1;
			break;
		}
		int first = 1;
		for (int i = 0; i < total && !full; i++) {
			const struct wprob *r = &w->p[i];
			if (r->kind != kind)
				continue;
			char item[640], a[128], b[128], twin[300] = "";
			/* a missing key next to an unexpected near-twin of its shape
			 * that no earlier missing key claimed: a misspelling */
			for (int j = 0; kind == 0 && j < total && !twin[0]; j++) {
				const struct wprob *u = &w->p[j];
				if (u->kind != 1 || dl_edit_distance(u->key, r->key) > 2 ||
				    !dl_shape_equal(&st->t[u->t].shape, &r->param->shape))
					continue;
				int claimed = 0;
				for (int m = 0; m < i; m++)
					claimed |= w->p[m].kind == 0 &&
						   dl_edit_distance(u->key, w->p[m].key) <= 2 &&
						   dl_shape_equal(&st->t[u->t].shape, &w->p[m].param->shape);
				if (!claimed)
					snprintf(twin, sizeof twin, " (the file has '%s')", u->key);
			}
			if (kind == 2)
				snprintf(item, sizeof item, "%s'%s' %s, the model needs %s",
					 first ? "" : ", ", r->key,
					 dl_shape_str(&st->t[r->t].shape, a, sizeof a),
					 dl_shape_str(&r->param->shape, b, sizeof b));
			else
				snprintf(item, sizeof item, "%s'%s'%s", first ? "" : ", ", r->key, twin);
			if (put(msg, sizeof msg - 64, &used, item))
				full = 1;
			else
				shown++;
			first = 0;
		}
		if (!full)
			put(msg, sizeof msg, &used, ")");
	}
	if (full) {
		char more[64];
		snprintf(more, sizeof more, " ... and %d more keys)", total - shown);
		put(msg, sizeof msg, &used, more);
	}
	return dl_error_set(err, DL_EINPUT, "%s: %s", path, msg);
}

/* Checks every key of the file against the model: what is missing,
 * unexpected or mis-shaped goes to w; used[t] marks the file's tensors that
 * the model reads (tied keys included). */
static int check_keys(struct dl_graph *g, const struct dl_safetensors *st,
		      int ignore_extra, struct wproblems *w, char *used,
		      int *n_ignored)
{
	char key[512];
	*n_ignored = 0;
	for (int i = 0; i < g->n_nodes; i++) {
		struct dl_node *n = &g->nodes[i];
		for (int k = 0; k < n->n_params; k++) {
			struct dl_param *p = &n->params[k];
			/* a shared repeat's later copies: their keys in the
			 * file are unexpected */
			if (p->repeat_copy)
				continue;
			dl_param_key(n, p, key, sizeof key);
			int t = dl_st_find(st, key);
			if (t >= 0)
				used[t] = 1;
			/* a tied tensor's own key may be there too (PyTorch's
			 * state_dict lists tied tensors under every name) */
			if (t < 0 && !p->tie && add_problem(w, 0, key, n, p, -1))
				return -1;
			if (t >= 0 && !dl_shape_equal(&st->t[t].shape, &p->shape) &&
			    add_problem(w, 2, key, n, p, t))
				return -1;
		}
	}
	for (int t = 0; t < st->n; t++) {
		if (used[t] || ignored_extra(st->t[t].name))
			continue;
		if (ignored_by_model(g, st->t[t].name, ignore_extra))
			++*n_ignored;
		else if (add_problem(w, 1, st->t[t].name, NULL, NULL, t))
			return -1;
	}
	return 0;
}

/* The owner of a tied parameter's storage. */
static const struct dl_param *owner(const struct dl_param *p)
{
	while (p->tie)
		p = p->tie;
	return p;
}

/* A tied tensor stored under both keys must hold the same values. */
static int check_tied(struct dl_graph *g, const struct dl_safetensors *st,
		      const char *path, struct dl_error *err)
{
	char key[512], okey[512];
	for (int i = 0; i < g->n_nodes; i++) {
		struct dl_node *n = &g->nodes[i];
		for (int k = 0; k < n->n_params; k++) {
			struct dl_param *p = &n->params[k];
			int t;
			if (!p->tie || p->repeat_copy ||
			    (t = dl_st_find(st, dl_param_key(n, p, key, sizeof key))) < 0)
				continue;
			const struct dl_param *o = owner(p);
			int64_t c = dl_shape_numel(&p->shape);
			float *tmp = malloc((size_t)(c ? c : 1) * sizeof *tmp);
			if (!tmp)
				return dl_error_set(err, DL_ERUN, "out of memory");
			int rc = dl_st_read_f32(st, t, tmp, err);
			int same = rc == 0 && (c == 0 || memcmp(tmp, o->data, (size_t)c * sizeof *tmp) == 0);
			free(tmp);
			if (rc)
				return rc;
			if (same)
				continue;
			okey[0] = 0;
			for (int j = 0; j < g->n_nodes && !okey[0]; j++)
				for (int q = 0; q < g->nodes[j].n_params; q++)
					if (&g->nodes[j].params[q] == o) {
						dl_param_key(&g->nodes[j], o, okey, sizeof okey);
						break;
					}
			return dl_error_set(err, DL_EINPUT,
					    "%s: tensors '%s' and '%s' differ, but the model ties them "
					    "(%s:%d:%d); store the tensor once, under '%s', or twice with "
					    "equal values", path, okey, key, g->file, n->line, n->col, okey);
		}
	}
	return 0;
}

int dl_model_load_weights_ext(struct dl_graph *g, const char *path,
			      int ignore_extra, int *n_ignored,
			      struct dl_error *err)
{
	int ignored = 0;
	if (n_ignored)
		*n_ignored = 0;
	if (!g->params_ready)
		return dl_error_set(err, DL_ERUN, "internal: weights before shape inference");
	struct dl_safetensors st;
	int rc = dl_st_open(&st, path, err);
	if (rc)
		return rc;
	struct wproblems w = {0};
	char *used = calloc((size_t)st.n + 1, 1);
	if (!used || check_keys(g, &st, ignore_extra, &w, used, &ignored))
		rc = dl_error_set(err, DL_ERUN, "out of memory");
	int total = w.n_missing + w.n_unexpected + w.n_shape;
	if (rc == 0 && total == 1)
		rc = one_problem(g, &st, path, &w.p[0], err);
	else if (rc == 0 && total > 1)
		rc = all_problems(g, &st, path, &w, err);
	char key[512];
	for (int i = 0; rc == 0 && i < g->n_nodes; i++) {
		struct dl_node *n = &g->nodes[i];
		for (int k = 0; rc == 0 && k < n->n_params; k++) {
			struct dl_param *p = &n->params[k];
			if (!p->tie)
				rc = dl_st_read_f32(&st, dl_st_find(&st, dl_param_key(n, p, key, sizeof key)),
						    p->data, err);
		}
	}
	if (rc == 0)
		rc = check_tied(g, &st, path, err);
	if (rc == 0 && n_ignored)
		*n_ignored = ignored;
	free(w.p);
	free(used);
	dl_st_close(&st);
	return rc;
}

int dl_model_check_weights(struct dl_graph *g, const char *path,
			   int ignore_extra, struct dl_weights_problem **out,
			   int *n, struct dl_error *err)
{
	*out = NULL;
	*n = 0;
	if (!g->params_ready)
		return dl_error_set(err, DL_ERUN, "internal: weights before shape inference");
	struct dl_safetensors st;
	int rc = dl_st_open(&st, path, err), ignored;
	if (rc)
		return rc;
	struct wproblems w = {0};
	char *used = calloc((size_t)st.n + 1, 1);
	if (!used || check_keys(g, &st, ignore_extra, &w, used, &ignored))
		rc = dl_error_set(err, DL_ERUN, "out of memory");
	int total = w.n_missing + w.n_unexpected + w.n_shape;
	if (rc == 0 && total) {
		*out = calloc((size_t)total, sizeof **out);
		if (!*out)
			rc = dl_error_set(err, DL_ERUN, "out of memory");
	}
	for (int i = 0; rc == 0 && i < total; i++) {
		struct dl_weights_problem *p = &(*out)[i];
		const struct wprob *r = &w.p[i];
		p->kind = r->kind;
		snprintf(p->key, sizeof p->key, "%s", r->key);
		if (r->t >= 0)
			p->file = st.t[r->t].shape;
		if (r->param)
			p->model = r->param->shape;
		if (r->node) {
			p->line = r->node->line;
			p->col = r->node->col;
		}
	}
	if (rc == 0)
		*n = total;
	free(w.p);
	free(used);
	dl_st_close(&st);
	return rc;
}

int dl_model_load_weights(struct dl_graph *g, const char *path,
			  struct dl_error *err)
{
	return dl_model_load_weights_ext(g, path, 0, NULL, err);
}

int dl_model_save_weights(struct dl_graph *g, const char *path,
			  const char *const *meta, int n_meta,
			  struct dl_error *err)
{
	int count = 0;
	for (int i = 0; i < g->n_nodes; i++)
		count += g->nodes[i].n_params;
	struct dl_st_entry *e = calloc((size_t)count + 1, sizeof *e);
	/* a tied tensor is written once, under its owner's key */
	char **keys = calloc((size_t)count + 1, sizeof *keys);
	int rc = 0;
	if (!e || !keys)
		rc = dl_error_set(err, DL_ERUN, "out of memory");
	int c = 0;
	for (int i = 0; rc == 0 && i < g->n_nodes; i++)
		for (int k = 0; rc == 0 && k < g->nodes[i].n_params; k++) {
			char key[512];
			struct dl_param *p = &g->nodes[i].params[k];
			if (p->tie)
				continue;
			keys[c] = strdup(dl_param_key(&g->nodes[i], p, key, sizeof key));
			if (!keys[c])
				rc = dl_error_set(err, DL_ERUN, "out of memory");
			e[c].name = keys[c];
			e[c].shape = p->shape;
			e[c].f32 = p->data;
			c++;
		}
	if (rc == 0)
		rc = dl_st_write(path, e, c, meta, n_meta, err);
	for (int i = 0; keys && i < c; i++)
		free(keys[i]);
	free(keys);
	free(e);
	return rc;
}

int64_t dl_model_count_params(const struct dl_graph *g, int64_t *buffers)
{
	int64_t p = 0, b = 0;
	for (int i = 0; i < g->n_nodes; i++)
		for (int k = 0; k < g->nodes[i].n_params; k++) {
			int64_t c = dl_shape_numel(&g->nodes[i].params[k].shape);
			if (g->nodes[i].params[k].tie)
				continue;   /* counted once, at its owner */
			if (g->nodes[i].params[k].buffer)
				b += c;
			else
				p += c;
		}
	if (buffers)
		*buffers = b;
	return p;
}
