/* Helpers ops call from shape inference: located errors, parameter
 * declaration, tuple expansion. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/op.h"

int dl_node_error(struct dl_error *err, const struct dl_node *n, int hp,
		  const char *fmt, ...)
{
	char what[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	int line = n->line, col = n->col;
	if (hp >= 0 && n->hp && n->hp[hp].set) {
		line = n->hp[hp].line;
		col = n->hp[hp].col;
	}
	return dl_error_set(err, DL_EINPUT, "%s:%d:%d: %s: %s",
			    n->file ? n->file : "model", line, col,
			    n->op->name, what);
}

static int declare(struct dl_node *n, const char *name,
		   const struct dl_shape *shape, enum dl_init init, double arg,
		   int buffer, struct dl_error *err)
{
	for (int i = 0; i < n->n_params; i++) {
		struct dl_param *p = &n->params[i];
		if (strcmp(p->name, name) != 0)
			continue;
		if (!dl_shape_equal(&p->shape, shape)) {
			char a[128], b[128];
			return dl_node_error(err, n, -1,
				"parameter '%s' would change shape from %s to %s with this input; "
				"parameter shapes must not depend on the input size",
				name, dl_shape_str(&p->shape, a, sizeof a),
				dl_shape_str(shape, b, sizeof b));
		}
		return i;
	}
	if (dl_shape_numel(shape) < 0)
		return dl_node_error(err, n, -1, "parameter '%s' is too large", name);
	struct dl_param *np = realloc(n->params, (size_t)(n->n_params + 1) * sizeof *np);
	if (!np)
		return dl_error_set(err, DL_ERUN, "out of memory");
	n->params = np;
	struct dl_param *p = &np[n->n_params];
	memset(p, 0, sizeof *p);
	p->name = name;
	p->shape = *shape;
	p->init = init;
	p->init_arg = arg;
	p->init_zero_row = -1;
	p->buffer = buffer;
	return n->n_params++;
}

int dl_node_param(struct dl_node *n, const char *name,
		  const struct dl_shape *shape, enum dl_init init, double arg,
		  struct dl_error *err)
{
	return declare(n, name, shape, init, arg, 0, err);
}

int dl_node_find_param(const struct dl_node *n, const char *name)
{
	for (int k = 0; k < n->n_params; k++)
		if (strcmp(n->params[k].name, name) == 0)
			return k;
	return -1;
}

const struct dl_param *dl_param_root(const struct dl_param *p)
{
	while (p->tie)
		p = p->tie;
	return p;
}

int dl_node_buffer(struct dl_node *n, const char *name,
		   const struct dl_shape *shape, enum dl_init init, double arg,
		   struct dl_error *err)
{
	return declare(n, name, shape, init, arg, 1, err);
}

int dl_hp_tuple(const struct dl_node *n, int hp, int count, int64_t *out,
		struct dl_error *err)
{
	const struct dl_hp_value *v = &n->hp[hp];
	if (v->scalar || v->n == 1) {
		for (int i = 0; i < count; i++)
			out[i] = v->v[0];
		return 0;
	}
	if (v->n != count)
		return dl_node_error(err, n, hp,
			"%s has %d values; give one, or %d (one per spatial dimension)",
			n->op->hp[hp].name, v->n, count);
	for (int i = 0; i < count; i++)
		out[i] = v->v[i];
	return 0;
}

int dl_hp_ftuple(const struct dl_node *n, int hp, int count, double *out,
		 struct dl_error *err)
{
	const struct dl_hp_value *v = &n->hp[hp];
	if (v->scalar || v->n == 1) {
		for (int i = 0; i < count; i++)
			out[i] = v->fv[0];
		return 0;
	}
	if (v->n != count)
		return dl_node_error(err, n, hp,
			"%s has %d values; give one, or %d (one per spatial dimension)",
			n->op->hp[hp].name, v->n, count);
	for (int i = 0; i < count; i++)
		out[i] = v->fv[i];
	return 0;
}
