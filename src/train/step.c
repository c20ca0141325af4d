/* The training step every verb shares: forward, loss of one output,
 * backward, clipping, optimizer update. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/step.h"

int dl_step_has_aux(const struct dl_graph *g)
{
	for (int i = 0; i < g->n_nodes; i++) {
		const struct dl_node *n = &g->nodes[i];
		if (n->op->has_aux_loss && n->op->has_aux_loss(n))
			return 1;
		const struct dl_subgraphs *sub = n->sub;
		for (int k = 0; sub && k < sub->n; k++)
			if (dl_step_has_aux(sub->g[k]))
				return 1;
	}
	return 0;
}

int dl_step_output(const struct dl_graph *g, const char *name)
{
	for (int k = 0; k < g->n_outputs; k++)
		if (g->output_names && g->output_names[k] && strcmp(g->output_names[k], name) == 0)
			return k;
	return -1;
}

void dl_step_forward(struct dl_step *s, float *const *in, struct dl_ctx *ctx)
{
	dl_graph_forward(s->g, in, ctx);
}

int dl_step_loss(struct dl_step *s, const struct dl_batch *b, int grad, double *loss,
		 int64_t *correct, int64_t *counted, struct dl_error *err)
{
	const struct dl_value *v = &s->g->values[s->g->outputs[s->out]];
	int64_t rows, cols;
	int rc = dl_loss_shape(s->loss, &v->shape, &b->yshape, &rows, &cols, err);
	if (rc)
		return rc;
	*loss = dl_loss_eval(s->loss, v->data, b->ids, b->targets, rows, cols, s->ignore_index,
			     grad ? s->dout[s->out] : NULL);
	if (correct) {
		*correct = 0;
		if (counted)
			*counted = 0;
		if (s->loss == DL_LOSS_CROSS_ENTROPY || s->loss == DL_LOSS_NLL) {
			*correct = dl_loss_correct(v->data, b->ids, rows, cols, s->ignore_index,
						   counted);
		} else if (s->loss == DL_LOSS_BCE_WITH_LOGITS) {
			*correct = dl_loss_correct_binary(v->data, b->targets, rows * cols);
			if (counted)
				*counted = rows * cols;
		}
	}
	return 0;
}

void dl_step_backward(struct dl_step *s, float *const *din, struct dl_ctx *ctx)
{
	dl_graph_zero_grad(s->g);
	dl_graph_backward(s->g, (const float *const *)s->dout, din, ctx);
}

void dl_step_update(struct dl_step *s, double lr)
{
	if (!s->opt)
		return;
	if (s->clip > 0)
		dl_clip_grad_norm(s->g->grad_block, s->g->n_param_floats, s->ranges, s->n_ranges,
				  s->clip);
	dl_optim_step(s->opt, s->g->param_block, s->g->grad_block, lr);
}

int dl_train_forward(struct dl_step *s, const struct dl_batch *b, int64_t step_no,
		     struct dl_ctx *ctx, double *loss, struct dl_error *err)
{
	struct dl_graph *g = s->g;
	double l = 0, aux = 0;
	double *keep = ctx->aux_loss;
	ctx->aux_loss = &aux;
	dl_step_forward(s, b->in, ctx);
	ctx->aux_loss = keep;
	s->aux_loss = aux;
	if ((b->ids || b->targets) && b->n > 0) {
		int rc = dl_step_loss(s, b, 1, &l, NULL, NULL, err);
		if (rc)
			return rc;
		l += aux;
		if (!isfinite(l)) {
			int bad = dl_graph_first_nonfinite(g);
			if (bad >= 0)
				return dl_error_set(err, DL_ERUN,
						    "%s:%d:%d: %s ('%s') produced a non-finite value at "
						    "step %lld; training stopped (lower --lr, or --clip-grad-norm)",
						    g->file, g->nodes[bad].line, g->nodes[bad].col,
						    g->nodes[bad].op->name, g->nodes[bad].scope,
						    (long long)step_no);
			return dl_error_set(err, DL_ERUN,
					    "the loss is not finite at step %lld; training stopped",
					    (long long)step_no);
		}
	}
	*loss = l;
	return 0;
}

int dl_train_finish(struct dl_step *s, double lr, struct dl_ctx *ctx, double *loss,
		    struct dl_error *err)
{
	struct dl_graph *g = s->g;
	dl_step_backward(s, NULL, ctx);
	if (s->reduce) {
		int rc = s->reduce(s->reduce_user, g->grad_block, g->n_param_floats, loss, err);
		if (rc)
			return rc;
	}
	dl_step_update(s, lr);
	return 0;
}

int dl_train_step(struct dl_step *s, const struct dl_batch *b, double lr, int64_t step_no,
		  struct dl_ctx *ctx, double *loss, struct dl_error *err)
{
	double l;
	int rc = dl_train_forward(s, b, step_no, ctx, &l, err);
	if (rc == 0)
		rc = dl_train_finish(s, lr, ctx, &l, err);
	if (rc == 0 && loss)
		*loss = l;
	return rc;
}

void dl_step_use_plan_slot(struct dl_step *s)
{
	s->dout[s->out] = dl_graph_output_grad(s->g, s->out);
}

int dl_train_ranges(const struct dl_graph *g, struct dl_range **ranges, int *n,
		    struct dl_error *err)
{
	int cap = 1;
	for (int i = 0; i < g->n_nodes; i++)
		cap += g->nodes[i].n_params;
	struct dl_range *r = calloc((size_t)cap, sizeof *r);
	if (!r)
		return dl_error_set(err, DL_ERUN, "out of memory");
	int k = 0;
	for (int i = 0; i < g->n_nodes; i++)
		for (int j = 0; j < g->nodes[i].n_params; j++) {
			const struct dl_param *p = &g->nodes[i].params[j];
			if (p->buffer || p->tie)  /* a tied tensor steps once, as its owner */
				continue;
			size_t off = (size_t)(p->data - g->param_block);
			size_t len = (size_t)dl_shape_numel(&p->shape);
			if (k && r[k - 1].offset + r[k - 1].length == off)
				r[k - 1].length += len;
			else
				r[k++] = (struct dl_range){off, len};
		}
	*ranges = r;
	*n = k;
	return 0;
}
