/* Stepping a model along its token sequence (engine/stepper.h). */
#include <stdlib.h>
#include <string.h>

#include "engine/stepper.h"

static void clear_nodes(struct dl_graph *g)
{
	for (int i = 0; i < g->n_nodes; i++) {
		struct dl_node *n = &g->nodes[i];
		n->step_axis = 0;
		n->step_floats = 0;
		n->step_state = NULL;
		const struct dl_subgraphs *s = n->sub;
		for (int k = 0; s && k < s->n; k++)
			clear_nodes(s->g[k]);
	}
}

void dl_graph_step_clear(struct dl_graph *g)
{
	if (g)
		clear_nodes(g);
}

int dl_graph_step_analyse(struct dl_graph *g, const int *in_axis,
			  int64_t max_len, int *out_axis, struct dl_error *err)
{
	clear_nodes(g);
	int *axis = calloc((size_t)g->n_values + 1, sizeof *axis);
	int *ia = calloc((size_t)g->n_values + 1, sizeof *ia);
	struct dl_shape *ins = calloc((size_t)g->n_values + 1, sizeof *ins);
	if (!axis || !ia || !ins) {
		free(axis);
		free(ia);
		free(ins);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	for (int i = 0; i < g->n_inputs; i++)
		axis[i] = in_axis[i];
	int rc = 0;
	for (int i = 0; i < g->n_nodes && rc == 0; i++) {
		struct dl_node *n = &g->nodes[i];
		int any = 0;
		for (int k = 0; k < n->n_in; k++) {
			ia[k] = axis[n->in[k]];
			ins[k] = g->values[n->in[k]].shape;
			any |= ia[k] != 0;
		}
		if (!any)
			continue;
		int outs = n->n_out > 0 ? n->n_out : 1;
		int oa[DL_MAX_OUT] = {0};
		if (!n->op->step)
			rc = dl_node_error(err, n, -1,
				"the entry '%s' sees the whole token sequence at once, so the model "
				"cannot be decoded step by step (only causal attention, recurrent "
				"layers, positional encodings and position-wise entries can)",
				n->scope);
		else
			rc = n->op->step(n, ins, ia, oa, max_len, err);
		for (int k = 0; rc == 0 && k < outs; k++)
			axis[n->out + k] = oa[k];
		if (rc == 0)
			n->step_axis = oa[0];
	}
	for (int k = 0; rc == 0 && out_axis && k < g->n_outputs; k++)
		out_axis[k] = axis[g->outputs[k]];
	free(axis);
	free(ia);
	free(ins);
	if (rc)
		clear_nodes(g);
	return rc;
}

size_t dl_graph_step_floats(const struct dl_graph *g)
{
	size_t f = 0;
	for (int i = 0; i < g->n_nodes; i++) {
		const struct dl_node *n = &g->nodes[i];
		f += n->step_floats;
		const struct dl_subgraphs *s = n->sub;
		for (int k = 0; s && k < s->n; k++)
			f += dl_graph_step_floats(s->g[k]);
	}
	return f;
}

static float *bind_nodes(struct dl_graph *g, float *at, int64_t rows)
{
	for (int i = 0; i < g->n_nodes; i++) {
		struct dl_node *n = &g->nodes[i];
		n->step_state = n->step_floats ? at : NULL;
		at += n->step_floats * (size_t)rows;
		const struct dl_subgraphs *s = n->sub;
		for (int k = 0; s && k < s->n; k++)
			at = bind_nodes(s->g[k], at, rows);
	}
	return at;
}

void dl_graph_step_bind(struct dl_graph *g, float *base, int64_t rows)
{
	bind_nodes(g, base, rows);
}

void dl_graph_step_copy(struct dl_graph *g, int64_t dst, int64_t src)
{
	for (int i = 0; i < g->n_nodes; i++) {
		struct dl_node *n = &g->nodes[i];
		if (n->step_state && dst != src)
			memcpy(n->step_state + (size_t)dst * n->step_floats,
			       n->step_state + (size_t)src * n->step_floats,
			       n->step_floats * sizeof(float));
		const struct dl_subgraphs *s = n->sub;
		for (int k = 0; s && k < s->n; k++)
			dl_graph_step_copy(s->g[k], dst, src);
	}
}

int dl_step_pointwise(struct dl_node *n, const struct dl_shape *in,
		      const int *in_axis, int *out_axis, int64_t max_len,
		      struct dl_error *err)
{
	(void)max_len;
	int a = 0;
	for (int k = 0; k < n->n_in; k++) {
		if (!in_axis[k])
			continue;
		if (a && in_axis[k] != a)
			return dl_node_error(err, n, -1,
				"its inputs run over the token positions along different axes, "
				"so the model cannot be decoded step by step");
		a = in_axis[k];
	}
	for (int k = 0; k < n->n_in; k++)
		if (!in_axis[k] && in[k].ndim > a && in[k].d[in[k].ndim - a] != 1)
			return dl_node_error(err, n, -1,
				"input %d has %lld positions of its own along the token axis "
				"(a fixed-length table added to the tokens), so the model cannot "
				"be decoded step by step; use positional_encoding {kind: learned}",
				k + 1, (long long)in[k].d[in[k].ndim - a]);
	int outs = n->n_out > 0 ? n->n_out : 1;
	for (int k = 0; k < outs; k++)
		out_axis[k] = a;
	n->step_floats = 0;
	return 0;
}

int dl_step_rows(struct dl_node *n, const struct dl_shape *in,
		 const int *in_axis, int *out_axis, int64_t max_len,
		 struct dl_error *err)
{
	int rc = dl_step_pointwise(n, in, in_axis, out_axis, max_len, err);
	if (rc == 0 && out_axis[0] == 1)
		return dl_node_error(err, n, -1,
			"it mixes the token positions (they are its input's last "
			"dimension), so the model cannot be decoded step by step");
	return rc;
}

int dl_step_check_dim(struct dl_node *n, const struct dl_shape *in,
		      const int *in_axis, int64_t dim, int hp,
		      struct dl_error *err)
{
	int r = in[0].ndim, a = in_axis[0];
	int64_t d = dim < 0 ? dim + r : dim;
	if (a && d == r - a)
		return dl_node_error(err, n, hp,
			"it mixes the token positions (dimension %lld), so the model "
			"cannot be decoded step by step", (long long)dim);
	return 0;
}

size_t dl_graph_step_konst(const struct dl_graph *g, int64_t *off)
{
	size_t total = 0;
	for (int v = 0; v < g->n_values; v++)
		off[v] = -1;
	for (int v = 0; v < g->n_values; v++) {
		const struct dl_value *x = &g->values[v];
		if (x->producer < 0 || g->nodes[x->producer].step_axis != 0)
			continue;
		/* a value of a node off the tokens: its own producer's axis
		 * (a second output of a multi-output node: the same node) */
		int wanted = 0;
		for (int i = 0; i < g->n_nodes && !wanted; i++)
			for (int k = 0; k < g->nodes[i].n_in; k++)
				if (g->nodes[i].in[k] == v && g->nodes[i].step_axis > 0)
					wanted = 1;
		for (int k = 0; k < g->n_outputs; k++)
			wanted |= g->outputs[k] == v;
		if (!wanted)
			continue;
		int64_t N = x->shape.d[0];
		int64_t per = N > 0 ? dl_shape_numel(&x->shape) / N : 0;
		off[v] = (int64_t)total;
		total += (size_t)per;
	}
	return total;
}
