/* Sub-model parameters mirrored into the node that runs them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/subgraph.h"

struct mirror {
	int g, j, k;        /* sub-model, its node, that node's parameter */
};

/* n->priv: one block (freed as a whole), the names after the mirrors. */
struct mirrors {
	int first;          /* index of the first mirrored parameter in n */
	int n;
	struct mirror m[];
};

int dl_sub_declare(struct dl_node *n, const struct dl_subgraphs *s,
		   struct dl_error *err)
{
	struct mirrors *m = n->priv;
	if (!m) {
		int count = 0;
		size_t names = 0;
		for (int g = 0; g < s->n; g++)
			for (int j = 0; j < s->g[g]->n_nodes; j++)
				for (int k = 0; k < s->g[g]->nodes[j].n_params; k++) {
					count++;
					names += strlen(s->g[g]->nodes[j].scope) +
						 strlen(s->g[g]->nodes[j].params[k].name) + 2;
				}
		m = malloc(sizeof *m + (size_t)count * sizeof m->m[0] + names);
		if (!m)
			return dl_error_set(err, DL_ERUN, "out of memory");
		n->priv = m;
		m->first = n->n_params;
		m->n = 0;
		char *name = (char *)&m->m[count];
		for (int g = 0; g < s->n; g++)
			for (int j = 0; j < s->g[g]->n_nodes; j++)
				for (int k = 0; k < s->g[g]->nodes[j].n_params; k++) {
					/* "" (the parameter op): the scope alone */
					const char *pn = s->g[g]->nodes[j].params[k].name;
					sprintf(name, *pn ? "%s.%s" : "%s%s",
						s->g[g]->nodes[j].scope, pn);
					m->m[m->n++] = (struct mirror){g, j, k};
					name += strlen(name) + 1;
				}
	}
	/* (re)declare: the same names and shapes on every call */
	const char *name = (const char *)&m->m[m->n];
	for (int i = 0; i < m->n; i++) {
		const struct dl_param *p = &s->g[m->m[i].g]->nodes[m->m[i].j].params[m->m[i].k];
		int rc = p->buffer ? dl_node_buffer(n, name, &p->shape, p->init, p->init_arg, err)
				   : dl_node_param(n, name, &p->shape, p->init, p->init_arg, err);
		if (rc < 0)
			return rc;
		n->params[rc].init_zero_row = p->init_zero_row;
		name += strlen(name) + 1;
	}
	return 0;
}

void dl_sub_link(struct dl_node *n, const struct dl_subgraphs *s)
{
	const struct mirrors *m = n->priv;
	for (int i = 0; i < m->n; i++) {
		struct dl_param *p = &s->g[m->m[i].g]->nodes[m->m[i].j].params[m->m[i].k];
		p->data = n->params[m->first + i].data;
		p->grad = n->params[m->first + i].grad;
	}
}

int dl_sub_prepare(struct dl_graph *g, const struct dl_shape *in, int train,
		   struct dl_error *err)
{
	int rc = dl_graph_infer(g, in, err);
	if (rc == 0 && train && !g->grad_block)
		rc = dl_graph_train_setup(g, err);
	if (rc == 0)
		rc = dl_graph_plan(g, train, err);
	return rc;
}
