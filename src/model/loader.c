/* The model file -> graph: top-level keys, entries in their three forms,
 * `name`/`in` wiring, composites expanded into op nodes with PyTorch's
 * nn.Sequential parameter scopes. Every error names file:line:col. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "model/model.h"
#include "model/data_spec.h"
#include "model/hparams.h"
#include "model/yamlutil.h"
#include "model/vocab.h"
#include "ops/registry.h"

#define MAX_NESTING 64
/* Limits on what a small file can make dlrun build (documented in
 * dlrun-model(5)): entries after repeats and aliases are expanded, and the
 * nesting depth and size of the YAML text itself. */
#define MAX_ENTRIES 250000
#define MAX_YAML_DEPTH 256
#define MAX_MODEL_BYTES ((size_t)64 << 20)

/* Names visible to `in:`: this list's, then the enclosing lists'. */
struct names {
	const struct names *up;
	int n, cap;
	const char **name;    /* borrowed from the YAML document */
	int *value;
};

/* What the parameter layout checks and ties (g->bind, bind_params): `share:`
 * entries, shared repeats, and digit names that may clash with an index
 * scope. Places are 1-based. */
struct tie_rec {
	int node;             /* the entry's node */
	char *param, *key;    /* its parameter PARAM is the tensor of KEY */
	int pline, pcol;      /* PARAM's place */
	int kline, kcol;      /* KEY's place */
};

struct repeat_rec {
	int dst, src, count;  /* nodes [dst, dst + count) use the parameters of
	                       * [src, src + count) (copy 0) */
	int copy;             /* dst's copy number */
	int line, col;        /* the repeat key */
};

struct clash_rec {
	int row;              /* the unnamed entry whose index is the name */
	char *name;
	int line, col;        /* the name's place */
};

struct bind {
	int n_ties, cap_ties;
	struct tie_rec *ties;
	int n_reps, cap_reps;
	struct repeat_rec *reps;
	int n_clash, cap_clash;
	struct clash_rec *clash;
};

struct loader {
	const char *file;
	yaml_document_t doc;
	yaml_node_t *blocks;      /* the `blocks:` mapping, or NULL */
	const char *using[MAX_NESTING]; /* blocks being expanded, for cycles */
	int n_using;
	struct dl_graph *g;
	int caps_nodes, caps_values, caps_rows;
	int in_sub;               /* building an op's list of entries */
	long entries;             /* built so far, against MAX_ENTRIES */
	long *expand;             /* per YAML node: entries its list expands
	                           * to (capped), -1 unknown, -2 counting */
	struct dl_error *err;
};

static const char *const top_keys[] = {
	"name", "inputs", "outputs", "weights", "blocks", "layers", "train",
	"ignore_keys", "vocab", "data", NULL};
static const char *const train_keys[] = {
	"epochs", "batch_size", "lr", "optimizer", "loss", "momentum",
	"dampening", "nesterov", "weight_decay", "betas", "eps",
	"clip_grad_norm", "lr_schedule", "step_size", "gamma", "min_lr",
	"warmup", "seed", "shuffle", "ignore_index", "val_split",
	"checkpoint_every", "loss_output", "threads", "max_memory", "ignore_extra",
	"sync_batch_norm",
	"keep_best", "monitor", "early_stopping", "min_delta", "factor", "patience",
	"log_every", "keep_checkpoints", "context", NULL};

static int lerr(struct loader *L, const yaml_node_t *at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int lerr(struct loader *L, const yaml_node_t *at, const char *fmt, ...)
{
	char what[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	return dl_error_set(L->err, DL_EINPUT, "%s:%d:%d: %s", L->file,
			    (int)at->start_mark.line + 1,
			    (int)at->start_mark.column + 1, what);
}

static yaml_node_t *node(struct loader *L, int id)
{
	return yaml_document_get_node(&L->doc, id);
}

static const char *str(const yaml_node_t *y)
{
	return y->type == YAML_SCALAR_NODE ? (const char *)y->data.scalar.value : NULL;
}

static int seq_len(const yaml_node_t *y)
{
	return (int)(y->data.sequence.items.top - y->data.sequence.items.start);
}

/* A name: letters, digits, '_' and '-', not starting with a digit. */
static int is_ident(const char *s)
{
	if (!s || !*s || (*s >= '0' && *s <= '9'))
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_' || *s == '-'))
			return 0;
	return 1;
}

static char *xstrdup(const char *s)
{
	return s ? strdup(s) : NULL;
}

static int is_digits(const char *s)
{
	if (!s || !*s)
		return 0;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return 0;
	return 1;
}

/* An entry name: a PyTorch key segment of letters, digits, '_' and '-'
 * (model-format section 2), so also '1x1' or '2nd', and digits alone (an
 * index key segment, checked against the list's index scopes at layout);
 * `_` is reserved for the default input. */
static int is_entry_name(const char *s)
{
	if (!s || !*s || strcmp(s, "_") == 0)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_' || *s == '-'))
			return 0;
	return 1;
}

/* ---- growing the graph ---- */

static int grow(void **p, int *cap, int need, size_t size)
{
	if (need <= *cap)
		return 0;
	int c = *cap ? *cap * 2 : 16;
	while (c < need)
		c *= 2;
	void *q = realloc(*p, (size_t)c * size);
	if (!q)
		return -1;
	memset((char *)q + (size_t)*cap * size, 0, (size_t)(c - *cap) * size);
	*p = q;
	*cap = c;
	return 0;
}

static int new_value(struct loader *L, int producer)
{
	struct dl_graph *g = L->g;
	if (grow((void **)&g->values, &L->caps_values, g->n_values + 1, sizeof *g->values))
		return dl_error_set(L->err, DL_ERUN, "out of memory");
	g->values[g->n_values].producer = producer;
	return g->n_values++;
}

static int new_row(struct loader *L, const char *scope, const char *label,
		   const char *kind, int depth)
{
	struct dl_graph *g = L->g;
	if (grow((void **)&g->rows, &L->caps_rows, g->n_rows + 1, sizeof *g->rows))
		return dl_error_set(L->err, DL_ERUN, "out of memory");
	struct dl_row *r = &g->rows[g->n_rows];
	r->scope = xstrdup(scope);
	r->label = xstrdup(label);
	r->kind = kind;
	r->depth = depth;
	r->first = g->n_nodes;
	r->last = -1;
	r->value = -1;
	if (!r->scope || !r->label)
		return dl_error_set(L->err, DL_ERUN, "out of memory");
	return g->n_rows++;
}

/* ---- ties and key checks, run at the parameter layout ---- */

static void bind_free(void *p)
{
	struct bind *b = p;
	if (!b)
		return;
	for (int i = 0; i < b->n_ties; i++) {
		free(b->ties[i].param);
		free(b->ties[i].key);
	}
	for (int i = 0; i < b->n_clash; i++)
		free(b->clash[i].name);
	free(b->ties);
	free(b->reps);
	free(b->clash);
	free(b);
}

static int bind_params(struct dl_graph *g, struct dl_error *err);

/* The graph's bind data, made on first use. */
static struct bind *bind_of(struct loader *L)
{
	if (!L->g->bind && (L->g->bind = calloc(1, sizeof(struct bind))) != NULL) {
		L->g->bind_params = bind_params;
		L->g->bind_free = bind_free;
	}
	return L->g->bind;
}

static struct dl_param *own_param(struct dl_node *n, const char *name)
{
	int k = dl_node_find_param(n, name);
	return k >= 0 ? &n->params[k] : NULL;
}

/* "weight, bias" for messages */
static void param_list(const struct dl_node *n, char *buf, size_t size)
{
	size_t used = 0;
	buf[0] = 0;
	for (int k = 0; k < n->n_params && used < size; k++)
		used += (size_t)snprintf(buf + used, size - used, "%s%s", k ? ", " : "",
					 n->params[k].name[0] ? n->params[k].name : "(the scope)");
	if (!n->n_params)
		snprintf(buf, size, "none");
}

static int bind_params(struct dl_graph *g, struct dl_error *err)
{
	struct bind *b = g->bind;
	char key[512], a[128], c[256];
	/* a digit name and an unnamed entry at that index: one scope, two
	 * owners of its keys */
	for (int i = 0; i < b->n_clash; i++) {
		const struct clash_rec *r = &b->clash[i];
		const struct dl_row *row = &g->rows[r->row];
		for (int j = row->first; j <= row->last; j++)
			if (g->nodes[j].n_params)
				return dl_error_set(err, DL_EINPUT,
					"%s:%d:%d: name '%s' collides with entry %s of this list, "
					"which has no name and holds parameters ('%s'): name that "
					"entry, or choose another name",
					g->file, r->line, r->col, r->name, r->name,
					dl_param_key(&g->nodes[j], &g->nodes[j].params[0], key, sizeof key));
	}
	/* shared repeats: copy I uses copy 0's tensors */
	for (int i = 0; i < b->n_reps; i++) {
		const struct repeat_rec *r = &b->reps[i];
		for (int j = 0; j < r->count; j++) {
			struct dl_node *d = &g->nodes[r->dst + j], *s = &g->nodes[r->src + j];
			for (int k = 0; k < d->n_params; k++) {
				struct dl_param *p = &d->params[k], *q = own_param(s, p->name);
				if (!q || !dl_shape_equal(&p->shape, &q->shape))
					return dl_error_set(err, DL_EINPUT,
						"%s:%d:%d: repeat: a shared body must fit every copy, but "
						"'%s' of copy %d has shape %s and copy 0's %s (a shared "
						"body's output must have its input's size)",
						g->file, r->line, r->col, dl_param_key(d, p, key, sizeof key),
						r->copy, dl_shape_str(&p->shape, a, sizeof a),
						q ? dl_shape_str(&q->shape, c, sizeof c) : "does not exist");
				p->tie = q;
				p->repeat_copy = 1;
			}
		}
	}
	/* share: {PARAM: KEY} */
	for (int i = 0; i < b->n_ties; i++) {
		const struct tie_rec *t = &b->ties[i];
		struct dl_node *d = &g->nodes[t->node];
		struct dl_param *p = own_param(d, t->param);
		if (!p) {
			const char *cand[65];
			int nc = 0;
			for (int k = 0; k < d->n_params && nc < 64; k++)
				cand[nc++] = d->params[k].name;
			cand[nc] = NULL;
			const char *sug = dl_suggest(t->param, cand);
			if (sug)
				return dl_error_set(err, DL_EINPUT,
					"%s:%d:%d: share: %s has no parameter '%s'; did you mean '%s'?",
					g->file, t->pline, t->pcol, d->op->name, t->param, sug);
			param_list(d, c, sizeof c);
			return dl_error_set(err, DL_EINPUT,
				"%s:%d:%d: share: %s has no parameter '%s' (its parameters: %s)",
				g->file, t->pline, t->pcol, d->op->name, t->param, c);
		}
		struct dl_param *q = NULL;
		for (int j = 0; j < t->node && !q; j++)
			for (int k = 0; k < g->nodes[j].n_params && !q; k++)
				if (strcmp(dl_param_key(&g->nodes[j], &g->nodes[j].params[k], key,
							sizeof key), t->key) == 0)
					q = &g->nodes[j].params[k];
		if (!q) {
			const char *later = dl_graph_param(g, t->key, NULL) ? " (it belongs to "
				"this or a later entry: the tensor's owner comes first)" : "";
			return dl_error_set(err, DL_EINPUT,
				"%s:%d:%d: share: '%s' is not a parameter of an earlier entry%s",
				g->file, t->kline, t->kcol, t->key, later);
		}
		if (!dl_shape_equal(&p->shape, &q->shape))
			return dl_error_set(err, DL_EINPUT,
				"%s:%d:%d: share: '%s' has shape %s, but %s's '%s' needs %s",
				g->file, t->kline, t->kcol, t->key,
				dl_shape_str(&q->shape, a, sizeof a), d->op->name, t->param,
				dl_shape_str(&p->shape, c, sizeof c));
		if (p->buffer != q->buffer)
			return dl_error_set(err, DL_EINPUT,
				"%s:%d:%d: share: '%s' is a %s and '%s' a %s; a tensor is shared "
				"only with one of its kind", g->file, t->kline, t->kcol, t->key,
				q->buffer ? "buffer" : "parameter", t->param,
				p->buffer ? "buffer" : "parameter");
		p->tie = q;
	}
	return 0;
}

static int build_subgraphs(struct loader *L, int node, int hp, int depth);
static int build_sub_nodes(struct dl_node *n, const struct dl_sub_node *spec,
			   int count, struct dl_error *err);

/* Appends an op node reading `in` and returns its output value id. */
static int add_node(struct loader *L, const struct dl_op_desc *op,
		    const yaml_node_t *at, yaml_node_t *hps, const char *scope,
		    const int *in, int n_in)
{
	struct dl_graph *g = L->g;
	if (grow((void **)&g->nodes, &L->caps_nodes, g->n_nodes + 1, sizeof *g->nodes))
		return dl_error_set(L->err, DL_ERUN, "out of memory");
	struct dl_node *n = &g->nodes[g->n_nodes];
	memset(n, 0, sizeof *n);
	n->op = op;
	n->build_sub = build_sub_nodes;
	n->file = g->file;
	n->line = (int)at->start_mark.line + 1;
	n->col = (int)at->start_mark.column + 1;
	n->scope = xstrdup(scope);
	n->in = malloc((size_t)(n_in ? n_in : 1) * sizeof *n->in);
	if (!n->scope || !n->in)
		return dl_error_set(L->err, DL_ERUN, "out of memory");
	memcpy(n->in, in, (size_t)n_in * sizeof *in);
	n->n_in = n_in;
	g->n_nodes++;
	int rc = dl_hp_read(n, &L->doc, hps, L->err);
	if (rc)
		return rc;
	if (n_in < op->min_in || (op->max_in >= 0 && n_in > op->max_in)) {
		if (op->min_in == op->max_in)
			return dl_node_error(L->err, n, -1, "takes %d input%s, got %d%s",
					     op->min_in, op->min_in == 1 ? "" : "s", n_in,
					     op->min_in > 1 ? "; name them with in: [a, b]" : "");
		if (op->max_in < 0)
			return dl_node_error(L->err, n, -1,
					     "takes at least %d inputs, got %d; name them with in: [a, b]",
					     op->min_in, n_in);
		return dl_node_error(L->err, n, -1, "takes %d to %d inputs, got %d",
				     op->min_in, op->max_in, n_in);
	}
	for (int i = 0; i < op->n_hp; i++)
		if (op->hp[i].type == DL_HP_ENTRIES && n->hp[i].entries) {
			rc = build_subgraphs(L, g->n_nodes - 1, i, 0);
			if (rc)
				return rc;
		}
	/* an op with several outputs gets consecutive values */
	struct dl_node *nd = &g->nodes[g->n_nodes - 1];
	int n_out = op->n_outputs ? op->n_outputs(nd) : 1;
	int v = -1;
	for (int k = 0; k < n_out; k++) {
		int w = new_value(L, g->n_nodes - 1);
		if (w < 0)
			return w;
		v = k == 0 ? w : v;
	}
	g->nodes[g->n_nodes - 1].out = v;
	g->nodes[g->n_nodes - 1].n_out = n_out;
	return v;
}

/* How many outputs value v starts: its node's n_out when it is a node's
 * first output, else 1. */
static int value_outputs(const struct dl_graph *g, int v)
{
	int p = g->values[v].producer;
	if (p < 0 || g->nodes[p].out != v || g->nodes[p].n_out < 2)
		return 1;
	return g->nodes[p].n_out;
}

/* ---- names ---- */

static int lookup(const struct names *s, const char *name)
{
	for (; s; s = s->up)
		for (int i = s->n - 1; i >= 0; i--)
			if (strcmp(s->name[i], name) == 0)
				return s->value[i];
	return -1;
}

/* The value that `s` names in an in: list or outputs: a name, or NAME.K
 * for output K of an entry with several outputs (NAME.0 is NAME). Returns
 * -1 when nothing is called so, or DL_EINPUT with the error set at `at`
 * when NAME has no output K. */
static int resolve(struct loader *L, const struct names *names,
		   const yaml_node_t *at, const char *s)
{
	int v = lookup(names, s);
	const char *dot = strrchr(s, '.');
	if (v >= 0 || !dot || !dot[1] ||
	    strspn(dot + 1, "0123456789") != strlen(dot + 1))
		return v;
	char base[256];
	size_t len = (size_t)(dot - s);
	if (len >= sizeof base)
		return -1;
	memcpy(base, s, len);
	base[len] = '\0';
	if ((v = lookup(names, base)) < 0)
		return -1;
	int n = value_outputs(L->g, v);
	long k = strlen(dot + 1) > 3 ? 1000 : strtol(dot + 1, NULL, 10);
	if (k < n)
		return v + (int)k;
	if (n == 1)
		return lerr(L, at, "'%s': '%s' has one output; write '%s'", s,
			    base, base);
	return lerr(L, at, "'%s': '%s' has %d outputs, '%s' (or '%s.0') to "
		    "'%s.%d'", s, base, n, base, base, base, n - 1);
}

static const char *suggest_name(const struct names *s, const char *name)
{
	const char *cand[257];
	int c = 0;
	for (; s && c < 256; s = s->up)
		for (int i = 0; i < s->n && c < 256; i++)
			cand[c++] = s->name[i];
	cand[c] = NULL;
	return dl_suggest(name, cand);
}

static int define(struct loader *L, struct names *s, const yaml_node_t *at,
		  const char *name, int value)
{
	for (int i = 0; i < s->n; i++)
		if (strcmp(s->name[i], name) == 0)
			return lerr(L, at, "name '%s' is defined twice in this list", name);
	if (grow((void **)&s->name, &s->cap, s->n + 1, sizeof *s->name))
		return dl_error_set(L->err, DL_ERUN, "out of memory");
	int cap = s->cap;
	s->value = realloc(s->value, (size_t)cap * sizeof *s->value);
	if (!s->value)
		return dl_error_set(L->err, DL_ERUN, "out of memory");
	s->name[s->n] = name;
	s->value[s->n] = value;
	s->n++;
	return 0;
}

static void names_free(struct names *s)
{
	free(s->name);
	free(s->value);
}

/* ---- entries ---- */

static int build_list(struct loader *L, yaml_node_t *list, const char *prefix,
		      int input, const struct names *up, int depth,
		      struct names *keep);

static int join(char *buf, size_t size, const char *prefix, const char *own)
{
	int k = prefix && *prefix ? snprintf(buf, size, "%s.%s", prefix, own)
				  : snprintf(buf, size, "%s", own);
	return k < 0 || (size_t)k >= size ? -1 : 0;
}

static yaml_node_t *map_get(struct loader *L, yaml_node_t *map, const char *key,
			    yaml_node_t **key_node)
{
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start;
	     p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = node(L, p->key);
		if (str(k) && strcmp(str(k), key) == 0) {
			if (key_node)
				*key_node = k;
			return node(L, p->value);
		}
	}
	return NULL;
}

/* The values that op's DL_HP_INPUT hyperparameters name (upsample's
 * size_of), appended to in[0..*n_in) in the order of op's table; a value
 * that is no name is left to dl_hp_read to report. */
static int hp_inputs(struct loader *L, const struct dl_op_desc *op, yaml_node_t *val,
		     const struct names *names, int *in, int *n_in, int max)
{
	if (!val || val->type != YAML_MAPPING_NODE)
		return 0;
	for (int i = 0; i < op->n_hp; i++) {
		if (op->hp[i].type != DL_HP_INPUT)
			continue;
		yaml_node_t *nm = map_get(L, val, op->hp[i].name, NULL);
		const char *s = nm ? str(nm) : NULL;
		if (!s || dl_yaml_null(nm))
			continue;
		int v = resolve(L, names, nm, s);
		if (v == DL_EINPUT)
			return v;
		if (v < 0) {
			const char *sug = suggest_name(names, s);
			if (sug)
				return lerr(L, nm, "%s: %s '%s' is not defined before this "
					    "entry; did you mean '%s'?", op->name,
					    op->hp[i].name, s, sug);
			return lerr(L, nm, "%s: %s '%s' is not defined before this entry "
				    "(it names a model input or an earlier named entry)",
				    op->name, op->hp[i].name, s);
		}
		if (*n_in >= max)
			return lerr(L, nm, "too many inputs");
		in[(*n_in)++] = v;
	}
	return 0;
}

/* Rejects keys of map not in allowed (NULL-terminated). */
static int check_keys(struct loader *L, yaml_node_t *map, const char *what,
		      const char *const *allowed)
{
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start;
	     p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = node(L, p->key);
		const char *s = str(k);
		if (!s)
			return lerr(L, k, "%s: keys are plain words", what);
		int ok = 0;
		for (const char *const *a = allowed; *a; a++)
			ok |= strcmp(*a, s) == 0;
		for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++)
			if (str(node(L, q->key)) && strcmp(str(node(L, q->key)), s) == 0)
				return lerr(L, k, "%s: key '%s' is given twice", what, s);
		if (ok)
			continue;
		const char *sug = dl_suggest(s, allowed);
		char list[512] = "";   /* train: has some 35 keys */
		size_t used = 0;
		for (const char *const *a = allowed; *a && used < sizeof list; a++)
			used += (size_t)snprintf(list + used, sizeof list - used, "%s%s",
						 a == allowed ? "" : ", ", *a);
		if (sug)
			return lerr(L, k, "%s: unknown key '%s'; did you mean '%s'?", what, s, sug);
		return lerr(L, k, "%s: unknown key '%s' (allowed: %s)", what, s, list);
	}
	return 0;
}

/* ---- expansion count ---- */

/* A list's entries are counted before they are built, aliases and repeats
 * expanded in the count only (a node counted once, whatever aliases it), so
 * that a small file of aliases or nested repeats is refused at once rather
 * than after building the first MAX_ENTRIES entries. The count is what
 * build_entry would count, or less (what the builder would refuse counts
 * 0), and stops at EXPAND_CAP. */
#define EXPAND_CAP ((long)MAX_ENTRIES + 1)
#define EXPAND_DEPTH (4 * MAX_NESTING)   /* past the builder's nesting */

static long expand_list(struct loader *L, yaml_node_t *list, int depth);
static int is_composite(const char *s);

static long cap_add(long a, long b)
{
	return a + b > EXPAND_CAP ? EXPAND_CAP : a + b;
}

static long cap_mul(long a, long b)
{
	return b && a > EXPAND_CAP / b ? EXPAND_CAP : a * b;
}

/* The list a `use: BLOCK` names, or NULL. */
static yaml_node_t *block_list(struct loader *L, yaml_node_t *name)
{
	const char *b = str(name);
	return b && *b && L->blocks ? map_get(L, L->blocks, b, NULL) : NULL;
}

/* A repeat's times, or 0 when the builder would refuse it. */
static int64_t repeat_times(struct loader *L, yaml_node_t *val)
{
	yaml_node_t *times = val->type == YAML_MAPPING_NODE ? map_get(L, val, "times", NULL) : NULL;
	int64_t t;
	return times && !dl_yaml_int(times, &t) && t >= 1 && t <= 100000 ? t : 0;
}

/* The entries a composite's value VAL builds (the composite not counted). */
static long expand_composite(struct loader *L, const char *kind, yaml_node_t *val,
			     int depth)
{
	if (strcmp(kind, "sequential") == 0)
		return expand_list(L, val, depth);
	if (strcmp(kind, "residual") == 0) {
		if (val->type != YAML_MAPPING_NODE)
			return expand_list(L, val, depth);
		yaml_node_t *body = map_get(L, val, "body", NULL);
		yaml_node_t *shortcut = map_get(L, val, "shortcut", NULL);
		return cap_add(body ? expand_list(L, body, depth) : 0,
			       shortcut ? expand_list(L, shortcut, depth) : 0);
	}
	if (strcmp(kind, "repeat") == 0) {
		int64_t t = repeat_times(L, val);
		if (!t)
			return 0;
		yaml_node_t *body = map_get(L, val, "body", NULL);
		yaml_node_t *use = map_get(L, val, "use", NULL);
		yaml_node_t *list = body ? body : use ? block_list(L, use) : NULL;
		return list ? cap_mul(expand_list(L, list, depth), t) : 0;
	}
	yaml_node_t *list = block_list(L, val);   /* use: BLOCK */
	return list ? expand_list(L, list, depth) : 0;
}

/* The op of entry E and its value (NULL for a bare name), or NULL. */
static const char *entry_op(struct loader *L, yaml_node_t *e, yaml_node_t **key,
			    yaml_node_t **val)
{
	*key = *val = NULL;
	if (e->type == YAML_SCALAR_NODE) {
		*key = e;
		return str(e);
	}
	if (e->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *p = e->data.mapping.pairs.start;
	     p < e->data.mapping.pairs.top; p++) {
		const char *s = str(node(L, p->key));
		if (s && strcmp(s, "name") && strcmp(s, "in") && strcmp(s, "share")) {
			*key = node(L, p->key);
			*val = node(L, p->value);
			return s;
		}
	}
	return NULL;
}

/* The entries entry E builds: itself and a composite's contents. */
static long expand_entry(struct loader *L, yaml_node_t *e, int depth)
{
	yaml_node_t *key, *val;
	const char *op = entry_op(L, e, &key, &val);
	if (!op || !*op)
		return 1;
	if (!is_composite(op) || !val)
		return 1;
	return cap_add(1, expand_composite(L, op, val, depth + 1));
}

static long expand_list(struct loader *L, yaml_node_t *list, int depth)
{
	if (!list || list->type != YAML_SEQUENCE_NODE || depth > EXPAND_DEPTH)
		return 0;
	size_t id = (size_t)(list - L->doc.nodes.start);
	if (!L->expand) {
		size_t n = (size_t)(L->doc.nodes.top - L->doc.nodes.start);
		L->expand = malloc((n ? n : 1) * sizeof *L->expand);
		if (!L->expand)
			return 0;
		for (size_t i = 0; i < n; i++)
			L->expand[i] = -1;
	}
	if (L->expand[id] == -2)
		return 0;    /* a block that uses itself: the builder says so */
	if (L->expand[id] >= 0)
		return L->expand[id];
	L->expand[id] = -2;
	long n = 0;
	for (int i = 0; i < seq_len(list) && n < EXPAND_CAP; i++)
		n = cap_add(n, expand_entry(L, node(L, list->data.sequence.items.start[i]),
					    depth + 1));
	L->expand[id] = n;
	return n;
}

/* Refuses LIST, which expands past ROOM more entries: at the entry whose
 * copy crosses the limit, within the composites it expands to, or at the
 * repeat count that multiplies it past. */
static int refuse_expansion(struct loader *L, yaml_node_t *list, long room)
{
	yaml_node_t *at = list;
	for (int step = 0; list && step < EXPAND_DEPTH; step++) {
		yaml_node_t *next = NULL;
		long before = 0;
		for (int i = 0; i < seq_len(list); i++) {
			yaml_node_t *e = node(L, list->data.sequence.items.start[i]);
			long n = expand_entry(L, e, 0);
			if (before + n <= room) {
				before += n;
				continue;
			}
			yaml_node_t *key, *val;
			const char *op = entry_op(L, e, &key, &val);
			at = key ? key : e;
			room -= before + 1;   /* the entry itself */
			if (!op || !is_composite(op) || !val || room < 0)
				break;
			if (strcmp(op, "repeat") == 0) {
				yaml_node_t *body = map_get(L, val, "body", NULL);
				yaml_node_t *use = map_get(L, val, "use", NULL);
				next = body ? body : use ? block_list(L, use) : NULL;
				if (next && expand_list(L, next, 0) <= room) {
					/* a later copy crosses: the count is too large */
					at = map_get(L, val, "times", NULL);
					next = NULL;
				}
			} else if (strcmp(op, "residual") == 0 && val->type == YAML_MAPPING_NODE) {
				next = map_get(L, val, "body", NULL);
				if (next && expand_list(L, next, 0) <= room) {
					room -= expand_list(L, next, 0);
					next = map_get(L, val, "shortcut", NULL);
				}
			} else {
				next = strcmp(op, "use") == 0 ? block_list(L, val) : val;
			}
			/* an alias (its list written before the key that uses it):
			 * the place that copies it is the one to name */
			if (next && strcmp(op, "use") && next->start_mark.index < at->start_mark.index)
				next = NULL;
			break;
		}
		list = next;
	}
	return lerr(L, at, "the model expands to more than %d entries (the "
		    "counts of nested repeats multiply, and aliases are "
		    "copied), the most dlrun builds", MAX_ENTRIES);
}

static int composite(struct loader *L, const char *kind, yaml_node_t *key,
		     yaml_node_t *val, const char *scope, int input,
		     const struct names *names, int depth)
{
	if (depth >= MAX_NESTING)
		return lerr(L, key, "composites nested more than %d deep", MAX_NESTING);
	if (strcmp(kind, "sequential") == 0) {
		if (val->type != YAML_SEQUENCE_NODE)
			return lerr(L, val, "sequential takes a list of entries, got %s",
				    dl_yaml_kind(val));
		return build_list(L, val, scope, input, names, depth + 1, NULL);
	}
	if (strcmp(kind, "residual") == 0) {
		yaml_node_t *body = val, *shortcut = NULL;
		if (val->type == YAML_MAPPING_NODE) {
			static const char *const keys[] = {"body", "shortcut", NULL};
			int rc = check_keys(L, val, "residual", keys);
			if (rc)
				return rc;
			body = map_get(L, val, "body", NULL);
			shortcut = map_get(L, val, "shortcut", NULL);
			if (!body)
				return lerr(L, val, "residual: missing 'body' (a list of entries)");
		}
		if (body->type != YAML_SEQUENCE_NODE)
			return lerr(L, body, "residual takes a list of entries (or body: and "
				    "shortcut: lists), got %s", dl_yaml_kind(body));
		if (shortcut && shortcut->type != YAML_SEQUENCE_NODE)
			return lerr(L, shortcut, "residual: shortcut must be a list of entries");
		int b = build_list(L, body, scope, input, names, depth + 1, NULL);
		if (b < 0)
			return b;
		int s = input;
		if (shortcut) {
			char sub[512];
			if (join(sub, sizeof sub, scope, "shortcut"))
				return lerr(L, key, "scope name too long");
			s = build_list(L, shortcut, sub, input, names, depth + 1, NULL);
			if (s < 0)
				return s;
		}
		int in[2] = {s, b};
		return add_node(L, dl_op_find("add"), key, NULL, scope, in, 2);
	}
	if (strcmp(kind, "repeat") == 0) {
		static const char *const keys[] = {"times", "body", "use", "shared", NULL};
		if (val->type != YAML_MAPPING_NODE)
			return lerr(L, val, "repeat takes {times: N, body: [...]} or "
				    "{times: N, use: BLOCK}, got %s", dl_yaml_kind(val));
		int rc = check_keys(L, val, "repeat", keys);
		if (rc)
			return rc;
		yaml_node_t *times = map_get(L, val, "times", NULL);
		yaml_node_t *body = map_get(L, val, "body", NULL);
		yaml_node_t *use_key = NULL;
		yaml_node_t *use = map_get(L, val, "use", &use_key);
		int64_t t;
		if (!times)
			return lerr(L, val, "repeat: missing 'times'");
		if (dl_yaml_int(times, &t) || t < 1 || t > 100000)
			return lerr(L, times, "repeat: times must be a positive integer, "
				    "at most 100000 (the most one repeat takes)");
		if (!body == !use)
			return lerr(L, val, "repeat: give exactly one of 'body' (a list of "
				    "entries) or 'use' (a block name)");
		yaml_node_t *shared_node = map_get(L, val, "shared", NULL);
		int shared = 0;
		if (shared_node) {
			const char *sv = str(shared_node);
			if (sv && strcmp(sv, "true") == 0)
				shared = 1;
			else if (!sv || strcmp(sv, "false") != 0)
				return lerr(L, shared_node, "repeat: shared is true or false");
			if (shared && L->in_sub)
				return lerr(L, shared_node, "repeat: shared is not available "
					    "inside an op's list of entries");
		}
		int cur = input, first0 = L->g->n_nodes, count0 = 0;
		long before = L->entries;
		for (int64_t i = 0; i < t; i++) {
			int first = L->g->n_nodes;
			char sub[512], own[32];
			snprintf(own, sizeof own, "%lld", (long long)i);
			if (join(sub, sizeof sub, scope, own))
				return lerr(L, key, "scope name too long");
			if (body) {
				if (body->type != YAML_SEQUENCE_NODE)
					return lerr(L, body, "repeat: body must be a list of entries");
				cur = build_list(L, body, sub, cur, names, depth + 1, NULL);
			} else {
				cur = composite(L, "use", use_key, use, sub, cur, names, depth + 1);
			}
			if (cur < 0)
				return cur;
			/* every copy adds as many entries as the first: refuse now
			 * rather than after building MAX_ENTRIES of them */
			if (i == 0 && (L->entries - before) * t > MAX_ENTRIES - before)
				return lerr(L, times, "the model expands to more than %d "
					    "entries (the counts of nested repeats multiply, "
					    "and aliases are copied), the most dlrun builds",
					    MAX_ENTRIES);
			if (!shared)
				continue;
			/* copy i runs copy 0's nodes again with copy 0's tensors */
			if (i == 0) {
				count0 = L->g->n_nodes - first;
				continue;
			}
			struct bind *b = bind_of(L);
			if (!b || grow((void **)&b->reps, &b->cap_reps, b->n_reps + 1,
				       sizeof *b->reps))
				return dl_error_set(L->err, DL_ERUN, "out of memory");
			b->reps[b->n_reps++] = (struct repeat_rec){
				first, first0, count0, (int)i,
				(int)key->start_mark.line + 1, (int)key->start_mark.column + 1};
		}
		return cur;
	}
	/* use: BLOCK */
	const char *b = str(val);
	if (!b || !*b)
		return lerr(L, val, "use takes a block name");
	yaml_node_t *list = L->blocks ? map_get(L, L->blocks, b, NULL) : NULL;
	if (!list) {
		const char *cand[257];
		int c = 0;
		if (L->blocks)
			for (yaml_node_pair_t *p = L->blocks->data.mapping.pairs.start;
			     p < L->blocks->data.mapping.pairs.top && c < 256; p++)
				cand[c++] = str(node(L, p->key));
		cand[c] = NULL;
		const char *s = dl_suggest(b, cand);
		if (s)
			return lerr(L, val, "no block '%s' in blocks:; did you mean '%s'?", b, s);
		return lerr(L, val, "no block '%s' in blocks:", b);
	}
	for (int i = 0; i < L->n_using; i++)
		if (strcmp(L->using[i], b) == 0)
			return lerr(L, val, "block '%s' uses itself", b);
	if (L->n_using >= MAX_NESTING)
		return lerr(L, val, "blocks nested more than %d deep", MAX_NESTING);
	L->using[L->n_using++] = b;
	/* a block sees only the model inputs and its own names */
	int out = build_list(L, list, scope, input, NULL, depth + 1, NULL);
	L->n_using--;
	return out;
}

static int is_composite(const char *s)
{
	return strcmp(s, "sequential") == 0 || strcmp(s, "residual") == 0 ||
	       strcmp(s, "repeat") == 0 || strcmp(s, "use") == 0;
}

/* Checks a `share: {PARAM: KEY}` mapping (on an op entry, outside an op's
 * own entry lists). */
static int parse_share(struct loader *L, yaml_node_t *share, const char *opname)
{
	if (L->in_sub)
		return lerr(L, share, "share: is not available inside an op's list "
			    "of entries");
	if (opname && is_composite(opname))
		return lerr(L, share, "share: belongs on an op entry; a %s has no "
			    "parameters of its own (put share: on the entry inside it)",
			    opname);
	if (share->type != YAML_MAPPING_NODE ||
	    share->data.mapping.pairs.top == share->data.mapping.pairs.start)
		return lerr(L, share, "share: maps a parameter of this entry to the key "
			    "of an earlier one, as {weight: wte.weight}");
	for (yaml_node_pair_t *p = share->data.mapping.pairs.start;
	     p < share->data.mapping.pairs.top; p++) {
		yaml_node_t *k = node(L, p->key), *v = node(L, p->value);
		if (!str(k) || !*str(k))
			return lerr(L, k, "share: keys are parameter names such as weight");
		if (!str(v) || !*str(v))
			return lerr(L, v, "share: '%s' takes a weights-file key such as "
				    "wte.weight, got %s", str(k), dl_yaml_kind(v));
		for (yaml_node_pair_t *q = share->data.mapping.pairs.start; q < p; q++)
			if (str(node(L, q->key)) && strcmp(str(node(L, q->key)), str(k)) == 0)
				return lerr(L, k, "share: '%s' is given twice", str(k));
	}
	return 0;
}

static int add_share(struct loader *L, yaml_node_t *share, int nd)
{
	struct bind *b = bind_of(L);
	if (!b)
		return dl_error_set(L->err, DL_ERUN, "out of memory");
	for (yaml_node_pair_t *p = share->data.mapping.pairs.start;
	     p < share->data.mapping.pairs.top; p++) {
		yaml_node_t *k = node(L, p->key), *v = node(L, p->value);
		if (grow((void **)&b->ties, &b->cap_ties, b->n_ties + 1, sizeof *b->ties))
			return dl_error_set(L->err, DL_ERUN, "out of memory");
		struct tie_rec *t = &b->ties[b->n_ties++];
		t->node = nd;
		t->param = xstrdup(str(k));
		t->key = xstrdup(str(v));
		t->pline = (int)k->start_mark.line + 1;
		t->pcol = (int)k->start_mark.column + 1;
		t->kline = (int)v->start_mark.line + 1;
		t->kcol = (int)v->start_mark.column + 1;
		if (!t->param || !t->key)
			return dl_error_set(L->err, DL_ERUN, "out of memory");
	}
	return 0;
}

/* Builds one entry; returns its output value id or a negative error. */
static int build_entry(struct loader *L, yaml_node_t *e, int index,
		       const char *prefix, int prev, struct names *names,
		       int depth)
{
	yaml_node_t *key = NULL, *val = NULL, *name_node = NULL, *in_node = NULL;
	yaml_node_t *share_node = NULL;
	const char *opname;
	if (e->type == YAML_SCALAR_NODE) {
		key = e;
		opname = str(e);
	} else if (e->type == YAML_MAPPING_NODE) {
		for (yaml_node_pair_t *p = e->data.mapping.pairs.start;
		     p < e->data.mapping.pairs.top; p++) {
			yaml_node_t *k = node(L, p->key);
			const char *s = str(k);
			if (!s)
				return lerr(L, k, "entry keys are plain words");
			if (strcmp(s, "name") == 0 || strcmp(s, "in") == 0 ||
			    strcmp(s, "share") == 0) {
				yaml_node_t **slot = s[0] == 'n' ? &name_node
					: s[0] == 'i' ? &in_node : &share_node;
				if (*slot)
					return lerr(L, k, "'%s' is given twice in this entry", s);
				*slot = node(L, p->value);
				continue;
			}
			if (key) {
				const struct dl_op_desc *op = dl_op_find(str(key));
				for (int i = 0; op && i < op->n_hp; i++)
					if (strcmp(op->hp[i].name, s) == 0)
						return lerr(L, k, "'%s' is a hyperparameter of %s: write "
							    "it inside the op, as %s: {%s: ...}",
							    s, op->name, op->name, s);
				return lerr(L, k, "an entry has exactly one op; this one has "
					    "'%s' and '%s' (put each in its own '- ' entry)",
					    str(key), s);
			}
			key = k;
			val = node(L, p->value);
		}
		if (!key)
			return lerr(L, e, "this entry has no op (only name/in)");
		opname = str(key);
	} else {
		return lerr(L, e, "an entry is an op name (relu), a mapping "
			    "(linear: {out_features: 10}) or a composite, got %s",
			    dl_yaml_kind(e));
	}

	/* scope: the entry's name, else its index in this list */
	char own[256], scope[512];
	if (name_node) {
		const char *nm = str(name_node);
		if (nm && strcmp(nm, "_") == 0)
			return lerr(L, name_node, "'_' is not a name: in in: lists it stands "
				    "for the entry's default input");
		if (!is_entry_name(nm))
			return lerr(L, name_node, "name must be a word of letters, digits, "
				    "'_' and '-' (a PyTorch key segment: no dots or spaces)");
		snprintf(own, sizeof own, "%s", nm);
	} else {
		snprintf(own, sizeof own, "%d", index);
	}
	if (join(scope, sizeof scope, prefix, own))
		return lerr(L, key, "scope name too long");

	/* inputs */
	int in[DL_HP_MAXN * 4];
	int n_in = 0;
	if (in_node) {
		yaml_node_t *one = in_node;
		int count = 1;
		if (in_node->type == YAML_SEQUENCE_NODE) {
			count = seq_len(in_node);
			if (count == 0)
				return lerr(L, in_node, "in: needs at least one name");
		} else if (in_node->type != YAML_SCALAR_NODE) {
			return lerr(L, in_node, "in: takes a name or a list of names");
		}
		if (count > (int)(sizeof in / sizeof *in))
			return lerr(L, in_node, "in: too many inputs");
		for (int i = 0; i < count; i++) {
			yaml_node_t *nm = in_node->type == YAML_SEQUENCE_NODE
				? node(L, in_node->data.sequence.items.start[i]) : one;
			const char *s = str(nm);
			if (!s)
				return lerr(L, nm, "in: takes names, got %s", dl_yaml_kind(nm));
			if (strcmp(s, "_") == 0) {
				/* the default input: the previous entry's output, or
				 * the composite's input for a body's first entry */
				in[n_in++] = prev;
				continue;
			}
			int v = resolve(L, names, nm, s);
			if (v == DL_EINPUT)
				return v;
			if (v < 0) {
				const char *sug = suggest_name(names, s);
				if (sug)
					return lerr(L, nm, "'%s' is not defined before this entry; "
						    "did you mean '%s'?", s, sug);
				return lerr(L, nm, "'%s' is not defined before this entry (in: "
					    "names a model input or an earlier named entry)", s);
			}
			in[n_in++] = v;
		}
	} else {
		in[n_in++] = prev;
	}

	if (opname && strcmp(opname, "parameter") == 0) {
		/* a learned tensor reads no input; the model's first input
		 * gives it the batch size */
		if (in_node)
			return lerr(L, in_node, "parameter takes no input (its output is "
				    "the tensor, repeated over the batch)");
		in[0] = 0;
		n_in = 1;
	}
	if (share_node) {
		int rc = parse_share(L, share_node, opname);
		if (rc)
			return rc;
	}

	if (++L->entries > MAX_ENTRIES)
		return lerr(L, key, "the model expands to more than %d entries (the "
			    "counts of nested repeats multiply, and aliases are "
			    "copied), the most dlrun builds", MAX_ENTRIES);
	int row = new_row(L, scope, own, NULL, depth);
	if (row < 0)
		return row;
	int out;
	if (!opname || !*opname)
		return lerr(L, key, "empty op name");
	if (is_composite(opname)) {
		L->g->rows[row].kind = strcmp(opname, "sequential") == 0 ? "sequential"
			: strcmp(opname, "residual") == 0 ? "residual"
			: strcmp(opname, "repeat") == 0 ? "repeat" : "use";
		if (!val || (val->type == YAML_SCALAR_NODE && dl_yaml_null(val)))
			return lerr(L, key, "%s needs a body", opname);
		if (n_in != 1)
			return lerr(L, in_node, "%s takes one input, got %d", opname, n_in);
		out = composite(L, opname, key, val, scope, in[0], names, depth);
		if (out >= 0 && strcmp(opname, "repeat") == 0) {
			yaml_node_t *sh = map_get(L, val, "shared", NULL);
			L->g->rows[row].shared = sh && str(sh) && strcmp(str(sh), "true") == 0;
		}
	} else {
		const struct dl_op_desc *op = dl_op_find(opname);
		if (!op) {
			const char *sug = dl_op_suggest(opname);
			if (sug)
				return lerr(L, key, "unknown op '%s'; did you mean '%s'?", opname, sug);
			/* "layer_norm {normalized_shape: 4}" is the key
			 * "layer_norm {normalized_shape": a colon left out */
			size_t w = strcspn(opname, " \t{[;,.");
			char first[64];
			snprintf(first, sizeof first, "%.*s", (int)w, opname);
			if (opname[w] && (dl_op_find(first) || is_composite(first)))
				return lerr(L, key, "unknown op '%s': '%s' is missing its colon; "
					    "write '%s: {...}'", opname, first, first);
			return lerr(L, key, "unknown op '%s' (see 'dlrun ops')", opname);
		}
		L->g->rows[row].kind = op->name;
		out = hp_inputs(L, op, val, names, in, &n_in,
				(int)(sizeof in / sizeof *in));
		if (out == 0)
			out = add_node(L, op, key, val, scope, in, n_in);
		if (out >= 0 && share_node) {
			int rc = add_share(L, share_node, L->g->n_nodes - 1);
			if (rc)
				return rc;
		}
	}
	if (out < 0)
		return out;
	L->g->rows[row].last = L->g->n_nodes - 1;
	L->g->rows[row].value = out;
	if (name_node) {
		int rc = define(L, names, name_node, str(name_node), out);
		if (rc)
			return rc;
	}
	return out;
}

static yaml_node_t *entry_name(struct loader *L, yaml_node_t *e)
{
	return e->type == YAML_MAPPING_NODE ? map_get(L, e, "name", NULL) : NULL;
}

/* A digit name N of a list whose entry N has no name: the two share the
 * scope N. It is an error when that entry holds parameters, known only at
 * the layout (bind_params); recorded here. Returns cur, or an error. */
static int note_clashes(struct loader *L, yaml_node_t *list, const int *row_at,
			int cur)
{
	int count = seq_len(list);
	for (int i = 0; i < count; i++) {
		yaml_node_t *nm = entry_name(L, node(L, list->data.sequence.items.start[i]));
		const char *s = nm ? str(nm) : NULL;
		if (!is_digits(s) || (s[0] == '0' && s[1]) || strlen(s) > 9)
			continue;
		int at = atoi(s);
		if (at >= count || at == i ||
		    entry_name(L, node(L, list->data.sequence.items.start[at])))
			continue;
		struct bind *b = bind_of(L);
		if (!b || grow((void **)&b->clash, &b->cap_clash, b->n_clash + 1,
			       sizeof *b->clash))
			return dl_error_set(L->err, DL_ERUN, "out of memory");
		struct clash_rec *r = &b->clash[b->n_clash++];
		r->row = row_at[at];
		r->name = xstrdup(s);
		r->line = (int)nm->start_mark.line + 1;
		r->col = (int)nm->start_mark.column + 1;
		if (!r->name)
			return dl_error_set(L->err, DL_ERUN, "out of memory");
	}
	return cur;
}

/* Builds the entries of list; returns the last one's output value. The
 * list's names are freed, or handed to *keep when keep is not NULL. */
static int build_list(struct loader *L, yaml_node_t *list, const char *prefix,
		      int input, const struct names *up, int depth,
		      struct names *keep)
{
	struct names names = {.up = up};
	if (!up) {
		/* the outermost list (and a used block) sees the model inputs */
		for (int i = 0; i < L->g->n_inputs; i++) {
			int rc = define(L, &names, list, L->g->inputs[i].name, i);
			if (rc) {
				names_free(&names);
				return rc;
			}
		}
	}
	int cur = input;
	int count = seq_len(list);
	if (count == 0) {
		names_free(&names);
		return lerr(L, list, "an empty list of entries");
	}
	if (L->entries + expand_list(L, list, 0) > MAX_ENTRIES) {
		names_free(&names);
		return refuse_expansion(L, list, MAX_ENTRIES - L->entries);
	}
	int *row_at = calloc((size_t)count, sizeof *row_at);
	if (!row_at) {
		names_free(&names);
		return dl_error_set(L->err, DL_ERUN, "out of memory");
	}
	for (int i = 0; i < count; i++) {
		yaml_node_t *e = node(L, list->data.sequence.items.start[i]);
		row_at[i] = L->g->n_rows;
		cur = build_entry(L, e, i, prefix, cur, &names, depth);
		if (cur < 0)
			break;
	}
	if (cur >= 0)
		cur = note_clashes(L, list, row_at, cur);
	free(row_at);
	if (keep && cur >= 0)
		*keep = names;
	else
		names_free(&names);
	return cur;
}

/* ---- sub-models (an op's list of entries, e.g. an expert) ---- */

static int parse_outputs(struct loader *L, yaml_node_t *outputs, int last,
			 const struct names *top);

/* Builds the copies of node's ENTRIES hyperparameter hp: copy I is a graph
 * of its own, one input "x" of per-sample shape [D] (D bound by the data),
 * its entries scoped "PREFIX.I.J" below the node's scope, PREFIX the
 * hyperparameter's `def` (e.g. "experts") or else its name. */
static int build_subgraphs(struct loader *L, int node, int hp, int depth)
{
	struct dl_node *n = &L->g->nodes[node];
	const struct dl_hp_desc *d = &n->op->hp[hp];
	yaml_node_t *body = (yaml_node_t *)n->hp[hp].entries;
	int copies = 1;
	for (int i = 0; d->choices && i < n->op->n_hp; i++)
		if (strcmp(n->op->hp[i].name, d->choices) == 0)
			copies = (int)n->hp[i].i;
	if (copies < 1 || copies > 4096)
		return dl_node_error(L->err, n, hp, "needs 1 to 4096 copies of %s", d->name);
	if (seq_len(body) == 0)
		return lerr(L, body, "%s: an empty list of entries", d->name);
	struct dl_subgraphs *sub = calloc(1, sizeof *sub);
	if (!sub || !(sub->g = calloc((size_t)copies, sizeof *sub->g))) {
		free(sub);
		return dl_error_set(L->err, DL_ERUN, "out of memory");
	}
	n->sub = sub;
	/* build each copy into its own graph, the loader's state set aside */
	struct dl_graph *parent = L->g;
	int caps[3] = {L->caps_nodes, L->caps_values, L->caps_rows};
	int rc = 0;
	for (int c = 0; rc == 0 && c < copies; c++) {
		struct dl_graph *g = calloc(1, sizeof *g);
		if (!g) {
			rc = dl_error_set(L->err, DL_ERUN, "out of memory");
			break;
		}
		sub->g[sub->n++] = g;
		g->borrowed = 1;  /* memory and parameters: the node's */
		g->file = xstrdup(parent->file);
		g->inputs = calloc(1, sizeof *g->inputs);
		g->sym_names = calloc(1, sizeof *g->sym_names);
		g->sym_vals = calloc(1, sizeof *g->sym_vals);
		if (!g->file || !g->inputs || !g->sym_names || !g->sym_vals) {
			rc = dl_error_set(L->err, DL_ERUN, "out of memory");
			break;
		}
		g->inputs[0].name = xstrdup("x");
		g->inputs[0].ndim = 1;
		g->inputs[0].d[0] = -1;
		g->inputs[0].sym[0] = xstrdup("D");
		g->inputs[0].line = (int)body->start_mark.line + 1;
		g->inputs[0].col = (int)body->start_mark.column + 1;
		g->sym_names[0] = xstrdup("D");
		g->sym_vals[0] = -1;
		g->n_syms = 1;
		g->n_inputs = 1;
		L->g = g;
		L->caps_nodes = L->caps_values = L->caps_rows = 0;
		if (new_value(L, -1) < 0) {
			rc = DL_ERUN;
			break;
		}
		char prefix[512];
		snprintf(prefix, sizeof prefix, "%s.%d", d->def ? d->def : d->name, c);
		struct names top = {0};
		L->in_sub++;
		int last = build_list(L, body, prefix, 0, NULL, depth + 1, &top);
		L->in_sub--;
		rc = last < 0 ? last : parse_outputs(L, NULL, last, &top);
		if (rc == 0 && g->n_outputs > 1)
			rc = lerr(L, body, "%s: the last entry has %d outputs; a body "
				  "gives one (add an entry after it, e.g. "
				  "{in: NAME.1, identity: {}})", d->name,
				  g->n_outputs);
		names_free(&top);
		L->g = parent;
	}
	L->g = parent;
	L->caps_nodes = caps[0];
	L->caps_values = caps[1];
	L->caps_rows = caps[2];
	return rc;
}

/* ---- top level ---- */

static int parse_inputs(struct loader *L, yaml_node_t *inputs)
{
	struct dl_graph *g = L->g;
	if (inputs->type != YAML_MAPPING_NODE ||
	    inputs->data.mapping.pairs.top == inputs->data.mapping.pairs.start)
		return lerr(L, inputs, "inputs: must map each input name to {shape: [...]}");
	int count = (int)(inputs->data.mapping.pairs.top - inputs->data.mapping.pairs.start);
	g->inputs = calloc((size_t)count, sizeof *g->inputs);
	if (!g->inputs)
		return dl_error_set(L->err, DL_ERUN, "out of memory");
	for (int i = 0; i < count; i++) {
		yaml_node_pair_t *p = &inputs->data.mapping.pairs.start[i];
		yaml_node_t *k = node(L, p->key), *v = node(L, p->value);
		struct dl_input_spec *s = &g->inputs[i];
		if (!is_ident(str(k)))
			return lerr(L, k, "input names are words of letters, digits, '_' and '-' "
				    "(not starting with a digit)");
		for (int j = 0; j < i; j++)
			if (strcmp(g->inputs[j].name, str(k)) == 0)
				return lerr(L, k, "input '%s' is defined twice", str(k));
		s->name = xstrdup(str(k));
		s->line = (int)k->start_mark.line + 1;
		s->col = (int)k->start_mark.column + 1;
		g->n_inputs++;
		if (v->type != YAML_MAPPING_NODE)
			return lerr(L, v, "input '%s': give {shape: [...]} (per-sample, "
				    "without the batch dimension)", s->name);
		static const char *const keys[] = {"shape", "dtype", NULL};
		int rc = check_keys(L, v, "inputs", keys);
		if (rc)
			return rc;
		yaml_node_t *shape = map_get(L, v, "shape", NULL);
		yaml_node_t *dtype = map_get(L, v, "dtype", NULL);
		if (!shape)
			return lerr(L, v, "input '%s' needs a shape", s->name);
		if (shape->type != YAML_SEQUENCE_NODE)
			return lerr(L, shape, "shape is a list of sizes, e.g. [1, 28, 28]");
		if (seq_len(shape) > DL_MAX_DIMS - 1)
			return lerr(L, shape, "shape has %d dimensions; at most %d besides "
				    "the batch", seq_len(shape), DL_MAX_DIMS - 1);
		s->ndim = seq_len(shape);
		for (int d = 0; d < s->ndim; d++) {
			yaml_node_t *e = node(L, shape->data.sequence.items.start[d]);
			int64_t val;
			if (dl_yaml_int(e, &val) == 0) {
				if (val < 1)
					return lerr(L, e, "sizes must be positive, got %lld",
						    (long long)val);
				s->d[d] = val;
			} else if (is_ident(str(e))) {
				s->d[d] = -1;
				s->sym[d] = xstrdup(str(e));
				int found = 0;
				for (int j = 0; j < g->n_syms; j++)
					found |= strcmp(g->sym_names[j], str(e)) == 0;
				if (!found) {
					char **nn = realloc(g->sym_names, (size_t)(g->n_syms + 1) * sizeof *nn);
					if (!nn)
						return dl_error_set(L->err, DL_ERUN, "out of memory");
					g->sym_names = nn;
					int64_t *nv = realloc(g->sym_vals, (size_t)(g->n_syms + 1) * sizeof *nv);
					if (!nv)
						return dl_error_set(L->err, DL_ERUN, "out of memory");
					g->sym_vals = nv;
					g->sym_names[g->n_syms] = xstrdup(str(e));
					g->sym_vals[g->n_syms++] = -1;
				}
			} else {
				return lerr(L, e, "a size is a positive integer or a symbolic "
					    "name such as T");
			}
		}
		if (dtype) {
			const char *t = str(dtype);
			if (t && strcmp(t, "float") == 0)
				s->is_int = 0;
			else if (t && strcmp(t, "int") == 0)
				s->is_int = 1;
			else
				return lerr(L, dtype, "dtype is float or int");
		}
		if (new_value(L, -1) < 0)
			return DL_ERUN;
	}
	return 0;
}

static int parse_outputs(struct loader *L, yaml_node_t *outputs, int last,
			 const struct names *top)
{
	struct dl_graph *g = L->g;
	int rc = 0;
	int count = 1;
	if (outputs) {
		if (outputs->type == YAML_SEQUENCE_NODE)
			count = seq_len(outputs);
		else if (outputs->type != YAML_SCALAR_NODE)
			count = 0;
		if (count == 0) {
			rc = lerr(L, outputs, "outputs: a list of entry names");
			goto out;
		}
	}
	/* an entry with several outputs gives them all: NAME, NAME.1, ... */
	g->outputs = calloc((size_t)count * DL_MAX_OUT, sizeof *g->outputs);
	g->output_names = calloc((size_t)count * DL_MAX_OUT, sizeof *g->output_names);
	if (!g->outputs || !g->output_names) {
		rc = dl_error_set(L->err, DL_ERUN, "out of memory");
		goto out;
	}
	for (int i = 0; i < count; i++) {
		const char *s = "output";
		int v = last;
		if (outputs) {
			yaml_node_t *nm = outputs->type == YAML_SEQUENCE_NODE
				? node(L, outputs->data.sequence.items.start[i]) : outputs;
			s = str(nm);
			v = s ? resolve(L, top, nm, s) : -1;
			if (v == DL_EINPUT) {
				rc = v;
				goto out;
			}
			if (v < 0) {
				const char *sug = s ? suggest_name(top, s) : NULL;
				rc = sug ? lerr(L, nm, "outputs: '%s' is not a top-level name; "
						"did you mean '%s'?", s, sug)
					 : lerr(L, nm, "outputs: '%s' is not a top-level entry name "
						"or input", s ? s : "?");
				goto out;
			}
		}
		/* NAME.K is one output; a whole entry is all of its outputs */
		int whole = !outputs || lookup(top, s) >= 0;
		int n = whole ? value_outputs(g, v) : 1;
		for (int k = 0; k < n; k++) {
			char name[300];
			snprintf(name, sizeof name, k ? "%s.%d" : "%s", s, k);
			g->outputs[g->n_outputs] = v + k;
			g->output_names[g->n_outputs] = xstrdup(name);
			g->values[v + k].pinned = 1;
			g->n_outputs++;
		}
	}
out:
	return rc;
}

static int parse_train(struct loader *L, yaml_node_t *train)
{
	struct dl_graph *g = L->g;
	if (train->type != YAML_MAPPING_NODE)
		return lerr(L, train, "train: is a mapping of training defaults");
	int rc = check_keys(L, train, "train", train_keys);
	if (rc)
		return rc;
	int count = (int)(train->data.mapping.pairs.top - train->data.mapping.pairs.start);
	g->train = calloc((size_t)count + 1, sizeof *g->train);
	if (!g->train)
		return dl_error_set(L->err, DL_ERUN, "out of memory");
	for (int i = 0; i < count; i++) {
		yaml_node_pair_t *p = &train->data.mapping.pairs.start[i];
		yaml_node_t *k = node(L, p->key), *v = node(L, p->value);
		char buf[512] = "";
		if (v->type == YAML_SCALAR_NODE) {
			snprintf(buf, sizeof buf, "%s", str(v));
		} else if (v->type == YAML_SEQUENCE_NODE) {
			size_t used = 0;
			for (int j = 0; j < seq_len(v); j++) {
				yaml_node_t *e = node(L, v->data.sequence.items.start[j]);
				if (!str(e))
					return lerr(L, e, "train: %s takes numbers", str(k));
				used += (size_t)snprintf(buf + used, used < sizeof buf ? sizeof buf - used : 0,
							 "%s%s", j ? "," : "", str(e));
			}
		} else {
			return lerr(L, v, "train: %s takes a value or a list", str(k));
		}
		struct dl_kv *kv = &g->train[g->n_train++];
		kv->key = xstrdup(str(k));
		kv->val = xstrdup(buf);
		kv->line = (int)v->start_mark.line + 1;
		kv->col = (int)v->start_mark.column + 1;
	}
	return 0;
}

/* ignore_keys: [GLOB, ...]: weights-file keys the model does not use
 * (fnmatch globs, `*` matching dots too). */
static int parse_ignore_keys(struct loader *L, yaml_node_t *ignore)
{
	struct dl_graph *g = L->g;
	if (ignore->type == YAML_SCALAR_NODE && dl_yaml_null(ignore))
		return 0;
	if (ignore->type != YAML_SEQUENCE_NODE)
		return lerr(L, ignore, "ignore_keys: is a list of key patterns, as "
			    "['*.attn.bias']");
	int count = seq_len(ignore);
	g->ignore_keys = calloc((size_t)count + 1, sizeof *g->ignore_keys);
	if (!g->ignore_keys)
		return dl_error_set(L->err, DL_ERUN, "out of memory");
	for (int i = 0; i < count; i++) {
		yaml_node_t *e = node(L, ignore->data.sequence.items.start[i]);
		if (!str(e) || !*str(e))
			return lerr(L, e, "ignore_keys: takes key patterns (strings such "
				    "as '*.attn.bias'), got %s", dl_yaml_kind(e));
		if (!(g->ignore_keys[g->n_ignore_keys++] = xstrdup(str(e))))
			return dl_error_set(L->err, DL_ERUN, "out of memory");
	}
	return 0;
}

static char *resolve_relative(const char *model, const char *path)
{
	if (path[0] == '/' || !strchr(model, '/'))
		return xstrdup(path);
	size_t dir = (size_t)(strrchr(model, '/') - model);
	char *out = malloc(dir + strlen(path) + 2);
	if (out)
		sprintf(out, "%.*s/%s", (int)dir, model, path);
	return out;
}

static int parse(struct loader *L)
{
	struct dl_graph *g = L->g;
	yaml_node_t *root = yaml_document_get_root_node(&L->doc);
	if (!root)
		return dl_error_set(L->err, DL_EINPUT, "%s: the file is empty; a model needs "
				    "inputs: and layers:", L->file);
	if (root->type != YAML_MAPPING_NODE)
		return lerr(L, root, "a model file is a mapping with inputs: and layers:");
	int rc = check_keys(L, root, "model", top_keys);
	if (rc)
		return rc;
	yaml_node_t *k_layers = NULL;
	yaml_node_t *name = map_get(L, root, "name", NULL);
	yaml_node_t *inputs = map_get(L, root, "inputs", NULL);
	yaml_node_t *outputs = map_get(L, root, "outputs", NULL);
	yaml_node_t *weights = map_get(L, root, "weights", NULL);
	yaml_node_t *blocks = map_get(L, root, "blocks", NULL);
	yaml_node_t *layers = map_get(L, root, "layers", &k_layers);
	yaml_node_t *train = map_get(L, root, "train", NULL);
	yaml_node_t *ignore = map_get(L, root, "ignore_keys", NULL);
	yaml_node_t *vocab = map_get(L, root, "vocab", NULL);
	if (ignore && (rc = parse_ignore_keys(L, ignore)) != 0)
		return rc;
	if (vocab && (rc = dl_vocab_parse(&g->vocab, L->file, &L->doc, vocab, L->err)) != 0)
		return rc;
	if (name) {
		if (!str(name))
			return lerr(L, name, "name: is a string");
		g->name = xstrdup(str(name));
	}
	if (!inputs)
		return lerr(L, root, "the model has no inputs: (e.g. inputs: {x: {shape: [16]}})");
	if (!layers)
		return lerr(L, root, "the model has no layers: list");
	if (weights) {
		if (!str(weights) || !*str(weights))
			return lerr(L, weights, "weights: is a file path");
		g->weights = resolve_relative(L->file, str(weights));
	}
	if (blocks) {
		if (blocks->type != YAML_MAPPING_NODE)
			return lerr(L, blocks, "blocks: maps block names to lists of entries");
		for (yaml_node_pair_t *p = blocks->data.mapping.pairs.start;
		     p < blocks->data.mapping.pairs.top; p++)
			if (node(L, p->value)->type != YAML_SEQUENCE_NODE)
				return lerr(L, node(L, p->value), "block '%s' must be a list of entries",
					    str(node(L, p->key)) ? str(node(L, p->key)) : "?");
		L->blocks = blocks;
	}
	if ((rc = parse_inputs(L, inputs)) != 0)
		return rc;
	if (train && (rc = parse_train(L, train)) != 0)
		return rc;
	yaml_node_t *data = map_get(L, root, "data", NULL);
	if (data && (rc = dl_data_spec_parse(&g->data, L->file, &L->doc, data, L->err)) != 0)
		return rc;
	if (layers->type != YAML_SEQUENCE_NODE)
		return lerr(L, layers, "layers: is a list of entries");
	struct names top = {0};
	int last = build_list(L, layers, "", 0, NULL, 0, &top);
	if (last >= 0)
		rc = parse_outputs(L, outputs, last, &top);
	names_free(&top);
	return last < 0 ? last : rc;
}

/* node->build_sub: a composite's inner graph from its C description, each
 * node made from its op's descriptor with default hyperparameters and the
 * spec's values. Its nodes stand at the composite's place in the file and
 * are scoped below it ("self_attn"); its memory and parameters are the
 * parent's (g->borrowed). */
static int build_sub_nodes(struct dl_node *n, const struct dl_sub_node *spec,
			   int count, struct dl_error *err)
{
	struct dl_subgraphs *sub = calloc(1, sizeof *sub);
	struct dl_graph *g = calloc(1, sizeof *g);
	if (sub)
		sub->g = calloc(1, sizeof *sub->g);
	if (!sub || !g || !sub->g) {
		if (sub)
			free(sub->g);
		free(sub);
		free(g);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	sub->g[0] = g;
	sub->n = 1;
	g->borrowed = 1;
	g->file = xstrdup(n->file);
	g->inputs = calloc((size_t)n->n_in, sizeof *g->inputs);
	g->values = calloc((size_t)(n->n_in + count), sizeof *g->values);
	g->nodes = calloc((size_t)count, sizeof *g->nodes);
	g->outputs = calloc(1, sizeof *g->outputs);
	g->output_names = calloc(1, sizeof *g->output_names);
	int rc = 0;
	if (!g->file || !g->inputs || !g->values || !g->nodes || !g->outputs ||
	    !g->output_names)
		rc = dl_error_set(err, DL_ERUN, "out of memory");
	for (int i = 0; rc == 0 && i < n->n_in; i++) {
		g->inputs[i].line = n->line;
		g->inputs[i].col = n->col;
		g->values[g->n_values++].producer = -1;
		g->n_inputs++;
	}
	for (int j = 0; rc == 0 && j < count; j++) {
		const struct dl_sub_node *sp = &spec[j];
		const struct dl_op_desc *op = dl_op_find(sp->op);
		struct dl_node *m = &g->nodes[g->n_nodes];
		if (!op) {
			rc = dl_node_error(err, n, -1, "internal: no op '%s'", sp->op);
			break;
		}
		m->op = op;
		m->file = g->file;
		m->line = n->line;
		m->col = n->col;
		m->scope = xstrdup(sp->scope);
		m->n_in = sp->n_in ? sp->n_in : 1;
		m->in = malloc((size_t)m->n_in * sizeof *m->in);
		g->n_nodes++;
		if (!m->scope || !m->in) {
			rc = dl_error_set(err, DL_ERUN, "out of memory");
			break;
		}
		for (int k = 0; k < m->n_in; k++) {
			int src = sp->n_in ? sp->in[k] : j - 1;
			m->in[k] = src < 0 ? -1 - src : n->n_in + src;
			if (m->in[k] < 0 || m->in[k] >= g->n_values)
				rc = dl_node_error(err, n, -1, "internal: %s reads a later node",
						   sp->scope);
		}
		if (rc == 0 && (m->n_in < op->min_in || (op->max_in >= 0 && m->n_in > op->max_in)))
			rc = dl_node_error(err, n, -1, "internal: %s takes another number of inputs",
					   op->name);
		if (rc == 0)
			rc = dl_hp_defaults(m, err);
		for (int h = 0; rc == 0 && h < (int)(sizeof sp->hp / sizeof sp->hp[0]) &&
		     sp->hp[h].name; h++) {
			int i = 0;
			while (i < op->n_hp && strcmp(op->hp[i].name, sp->hp[h].name) != 0)
				i++;
			if (i == op->n_hp) {
				rc = dl_node_error(err, n, -1, "internal: %s has no '%s'",
						   op->name, sp->hp[h].name);
				break;
			}
			struct dl_hp_value *v = &m->hp[i];
			v->set = 1;
			if (op->hp[i].type == DL_HP_FLOAT)
				v->f = sp->hp[h].value;
			else
				v->i = (int64_t)sp->hp[h].value;
		}
		if (rc)
			break;
		m->out = g->n_values;
		g->values[g->n_values++].producer = j;
	}
	if (rc == 0 && count < 1)
		rc = dl_node_error(err, n, -1, "internal: an empty composite");
	if (rc == 0) {
		g->outputs[0] = g->n_values - 1;
		g->output_names[0] = xstrdup("output");
		g->n_outputs = 1;
		g->values[g->outputs[0]].pinned = 1;
		if (!g->output_names[0])
			rc = dl_error_set(err, DL_ERUN, "out of memory");
	}
	if (rc) {
		dl_graph_free(g);
		free(sub->g);
		free(sub);
		return rc;
	}
	n->sub = sub;
	return 0;
}

/* Reads all of f (at most MAX_MODEL_BYTES) into *buf, NUL-terminated;
 * the caller frees *buf. */
static int read_model(FILE *f, const char *path, char **buf, size_t *len,
		      struct dl_error *err)
{
	size_t cap = 4096, n = 0;
	char *b = malloc(cap + 1);
	if (!b)
		return dl_error_set(err, DL_ERUN, "out of memory");
	for (;;) {
		if (n == cap) {
			if (cap >= MAX_MODEL_BYTES) {
				free(b);
				return dl_error_set(err, DL_EINPUT, "%s: the model file is "
					"larger than %zu MiB, the most dlrun reads (weights "
					"belong in a .safetensors file)", path, MAX_MODEL_BYTES >> 20);
			}
			cap *= 2;
			char *q = realloc(b, cap + 1);
			if (!q) {
				free(b);
				return dl_error_set(err, DL_ERUN, "out of memory");
			}
			b = q;
		}
		size_t got = fread(b + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	if (ferror(f)) {
		free(b);
		return dl_error_set(err, DL_EINPUT, "%s: cannot read the model file: %s",
				    path, strerror(errno));
	}
	b[n] = 0;
	*buf = b;
	*len = n;
	return 0;
}

/* Line `line` (0-based) of buf: its start and length, without the
 * newline; -1 past the end. */
static long line_at(const char *buf, size_t len, long line, size_t *start)
{
	size_t i = 0;
	for (long l = 0; l < line; l++) {
		const char *nl = memchr(buf + i, '\n', len - i);
		if (!nl)
			return -1;
		i = (size_t)(nl - buf) + 1;
	}
	const char *nl = memchr(buf + i, '\n', len - i);
	*start = i;
	return (long)((nl ? (size_t)(nl - buf) : len) - i);
}

/* An op name missing its colon, with its hyperparameters on the lines
 * below ("- layer_norm" then "    normalized_shape: 4"): libyaml reads the
 * lines as one plain scalar and stops at the next line's colon. When the
 * error's line continues (indented at least as far, not a "- " item) a
 * line that is one bare word, that word is to blame: its line and column
 * go to *wline and *wcol (1-based), the word to word. */
static int missing_colon(const char *buf, size_t len, long eline, char *word,
			 size_t size, int *wline, int *wcol)
{
	size_t st;
	long n = line_at(buf, len, eline, &st);
	if (n < 0)
		return 0;
	long ind = 0;
	while (ind < n && buf[st + ind] == ' ')
		ind++;
	if (ind < n && buf[st + ind] == '-')
		return 0;
	for (long l = eline - 1; l >= 0; l--) {
		long m = line_at(buf, len, l, &st);
		const char *t = buf + st, *end = t + m;
		while (end > t && (end[-1] == ' ' || end[-1] == '\r'))
			end--;
		const char *p = t;
		while (p < end && (*p == ' ' || ((*p == '-') && p + 1 < end && p[1] == ' ')))
			p++;
		if (p == end || *p == '#')
			continue;   /* blank or a comment: look further up */
		const char *w = p;
		while (p < end && (isalnum((unsigned char)*p) || *p == '_'))
			p++;
		if (p < end && (*p == ';' || *p == '.'))
			p++;
		if (p != end || w == end || !isalpha((unsigned char)*w) || ind < w - t)
			return 0;
		long wl = (long)(p - w) - (p[-1] == ';' || p[-1] == '.');
		snprintf(word, size, "%.*s", (int)wl, w);
		*wline = (int)l + 1;
		*wcol = (int)(w - t) + 1;
		return 1;
	}
	return 0;
}

/* The word before the colon of the error's line is an op name: an entry
 * whose "- " was left out, not a hyperparameter. */
static int next_is_op(const char *buf, size_t len, const yaml_mark_t *m)
{
	size_t st;
	long n = line_at(buf, len, (long)m->line, &st);
	if (n < 0 || (long)m->column > n)
		return 0;
	const char *p = buf + st, *end = p + m->column;
	while (p < end && (*p == ' ' || *p == '{'))
		p++;
	char word[64];
	snprintf(word, sizeof word, "%.*s", (int)(end - p), p);
	return dl_op_find(word) != NULL;
}

static int yaml_problem(yaml_parser_t *parser, const char *path, const char *buf,
			size_t len, struct dl_error *err)
{
	const yaml_mark_t *m = parser->problem ? &parser->problem_mark : &parser->mark;
	char word[64];
	int wl, wc;
	/* the first two inside the scalar; the last two after a comment,
	 * which ends it */
	if (parser->problem && (strstr(parser->problem, "mapping values are not allowed") ||
				strstr(parser->problem, "could not find expected ':'") ||
				strstr(parser->problem, "did not find expected '-' indicator") ||
				strstr(parser->problem, "did not find expected key")) &&
	    missing_colon(buf, len, (long)m->line, word, sizeof word, &wl, &wc) &&
	    (dl_op_find(word) || is_composite(word)) && !next_is_op(buf, len, m))
		return dl_error_set(err, DL_EINPUT, "%s:%d:%d: '%s' is missing its colon, so "
				    "the lines below it are read as part of its name, not as "
				    "its hyperparameters; write '%s:'", path, wl, wc, word, word);
	return dl_error_set(err, DL_EINPUT, "%s:%d:%d: malformed YAML: %s%s%s",
			    path, (int)m->line + 1, (int)m->column + 1,
			    parser->problem ? parser->problem : "unreadable",
			    parser->context ? " " : "",
			    parser->context ? parser->context : "");
}

/* A first pass over libyaml's events that refuses collections nested
 * deeper than MAX_YAML_DEPTH as soon as it meets one, before the document
 * (and libyaml's work, which grows faster than the depth) is built. */
static int check_depth(const char *path, const char *buf, size_t len,
		       struct dl_error *err)
{
	yaml_parser_t parser;
	yaml_event_t ev;
	int depth = 0, rc = 0;
	yaml_parser_initialize(&parser);
	yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
	for (;;) {
		if (!yaml_parser_parse(&parser, &ev)) {
			rc = yaml_problem(&parser, path, buf, len, err);
			break;
		}
		yaml_event_type_t t = ev.type;
		if (t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) {
			if (++depth > MAX_YAML_DEPTH) {
				rc = dl_error_set(err, DL_EINPUT, "%s:%d:%d: YAML nested more "
					"than %d deep, the most dlrun reads", path,
					(int)ev.start_mark.line + 1,
					(int)ev.start_mark.column + 1, MAX_YAML_DEPTH);
				yaml_event_delete(&ev);
				break;
			}
		} else if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT) {
			depth--;
		}
		yaml_event_delete(&ev);
		/* the loader reads the first document only */
		if (t == YAML_DOCUMENT_END_EVENT || t == YAML_STREAM_END_EVENT)
			break;
	}
	yaml_parser_delete(&parser);
	return rc;
}

int dl_model_load(struct dl_graph **out, const char *path, struct dl_error *err)
{
	*out = NULL;
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	if (!f)
		return dl_error_set(err, DL_EINPUT, "%s: cannot open the model file: %s",
				    path, strerror(errno));
	char *buf = NULL;
	size_t len = 0;
	int rc = read_model(f, path, &buf, &len, err);
	if (f != stdin)
		fclose(f);
	if (rc)
		return rc;
	rc = dl_model_load_buffer(out, path, buf, len, err);
	free(buf);
	return rc;
}

int dl_model_load_buffer(struct dl_graph **out, const char *path,
			 const char *buf, size_t len, struct dl_error *err)
{
	*out = NULL;
	if (len > MAX_MODEL_BYTES)
		return dl_error_set(err, DL_EINPUT, "%s: the model file is larger "
			"than %zu MiB, the most dlrun reads (weights belong in a "
			".safetensors file)", path, MAX_MODEL_BYTES >> 20);
	int rc = check_depth(path, buf, len, err);
	if (rc)
		return rc;
	struct loader L;
	memset(&L, 0, sizeof L);
	L.file = path;
	L.err = err;
	L.g = calloc(1, sizeof *L.g);
	if (!L.g)
		return dl_error_set(err, DL_ERUN, "out of memory");
	L.g->file = xstrdup(path);
	yaml_parser_t parser;
	yaml_parser_initialize(&parser);
	yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
	if (!yaml_parser_load(&parser, &L.doc)) {
		rc = yaml_problem(&parser, path, buf, len, err);
		yaml_parser_delete(&parser);
		dl_graph_free(L.g);
		return rc;
	}
	/* a model is one YAML document: a second one (after ---) is not read
	 * silently */
	yaml_document_t next;
	if (yaml_document_get_root_node(&L.doc)) {
		if (!yaml_parser_load(&parser, &next)) {
			rc = yaml_problem(&parser, path, buf, len, err);
		} else {
			yaml_node_t *r2 = yaml_document_get_root_node(&next);
			/* a trailing '---' alone holds an empty scalar */
			if (r2 && r2->type == YAML_SCALAR_NODE && r2->data.scalar.length == 0)
				r2 = NULL;
			if (r2)
				rc = dl_error_set(err, DL_EINPUT, "%s:%d:%d: a second YAML document; "
						  "a model file holds one (remove the '---' before it, "
						  "or this part)", path, (int)r2->start_mark.line + 1,
						  (int)r2->start_mark.column + 1);
			yaml_document_delete(&next);
		}
	}
	yaml_parser_delete(&parser);
	if (rc) {
		yaml_document_delete(&L.doc);
		dl_graph_free(L.g);
		return rc;
	}
	rc = parse(&L);
	free(L.expand);
	yaml_document_delete(&L.doc);
	if (rc) {
		dl_graph_free(L.g);
		return rc;
	}
	*out = L.g;
	/* Shape inference at once when no size waits for data. */
	if (L.g->n_syms == 0) {
		struct dl_shape in[64];
		struct dl_shape *ins = L.g->n_inputs <= 64 ? in : malloc((size_t)L.g->n_inputs * sizeof *ins);
		if (!ins)
			rc = dl_error_set(err, DL_ERUN, "out of memory");
		for (int i = 0; rc == 0 && i < L.g->n_inputs; i++) {
			ins[i].ndim = L.g->inputs[i].ndim + 1;
			ins[i].d[0] = 1;
			for (int d = 0; d < L.g->inputs[i].ndim; d++)
				ins[i].d[d + 1] = L.g->inputs[i].d[d];
		}
		if (rc == 0)
			rc = dl_graph_infer(L.g, ins, err);
		if (rc == 0)
			rc = dl_vocab_check_output(L.g, 0, err);
		if (ins != in)
			free(ins);
		if (rc) {
			dl_graph_free(L.g);
			*out = NULL;
		}
	}
	return rc;
}
