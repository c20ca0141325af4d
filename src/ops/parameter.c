/* parameter: a learned tensor as an entry's output, like a bare
 * nn.Parameter (GPT's learned positions, ViT's cls_token). Its key is the
 * entry's scope alone. The loader wires it to the model's first input,
 * which gives only the batch size. */
#include <string.h>

#include "engine/op.h"

enum { PAR_SHAPE };

static const struct dl_hp_desc parameter_hp[] = {
	[PAR_SHAPE] = {"shape", DL_HP_INTS, NULL, NULL,
		       DL_HP_REQUIRED | DL_HP_POSITIVE},
};

static int parameter_infer(struct dl_node *n, const struct dl_shape *in,
			   struct dl_shape *out, struct dl_error *err)
{
	const struct dl_hp_value *s = &n->hp[PAR_SHAPE];
	if (s->n < 1 || s->n > DL_MAX_DIMS - 1)
		return dl_node_error(err, n, PAR_SHAPE,
				     "shape has %d dimensions; give 1 to %d (the batch "
				     "dimension is added)", s->n, DL_MAX_DIMS - 1);
	struct dl_shape ps = dl_shape_make(s->n, s->v);
	if (dl_shape_numel(&ps) < 0)
		return dl_node_error(err, n, PAR_SHAPE, "shape is too large");
	int rc = dl_node_param(n, "", &ps, DL_INIT_NORMAL, 1.0, err);
	if (rc < 0)
		return rc;
	out->ndim = s->n + 1;
	out->d[0] = in[0].d[0];
	for (int i = 0; i < s->n; i++)
		out->d[i + 1] = s->v[i];
	if (dl_shape_numel(out) < 0)
		return dl_node_error(err, n, -1, "the output would be too large");
	n->ws_bytes = 0;
	n->saved_bytes = 0;
	n->macs = 0;
	return 0;
}

/* out[b] = p for every sample b */
static void parameter_forward(float *out, const float *p, int64_t batch,
			      int64_t size)
{
	for (int64_t b = 0; b < batch; b++)
		memcpy(out + b * size, p, (size_t)size * sizeof *out);
}

/* dp += sum over b of dout[b] */
static void parameter_backward(float *dp, const float *dout, int64_t batch,
			       int64_t size)
{
	for (int64_t b = 0; b < batch; b++) {
		const float *g = dout + b * size;
		for (int64_t i = 0; i < size; i++)
			dp[i] += g[i];
	}
}

static void parameter_fwd(struct dl_node *n, const struct dl_tensor *in,
			  struct dl_tensor *out, struct dl_ctx *ctx)
{
	int64_t size = dl_shape_numel(&n->params[0].shape);
	parameter_forward(out->data, n->params[0].data, out->shape.d[0], size);
}

static void parameter_bwd(struct dl_node *n, const struct dl_tensor *in,
			  const struct dl_tensor *out, const float *dout,
			  float *const *din, struct dl_ctx *ctx)
{
	if (n->params[0].grad)
		parameter_backward(n->params[0].grad, dout, out->shape.d[0],
				   dl_shape_numel(&n->params[0].shape));
}

/* y[b] = p for each sample b: p [*shape] ~ N(0, 1) (torch.randn), key = the
 * entry's scope */
static const struct dl_op_desc parameter_op = {
	"parameter", "y[b] = p for every sample b; p [*shape] learned, key = the scope",
	1, 1, parameter_hp, 1, parameter_infer, parameter_fwd, parameter_bwd,
	DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT, "(the scope) [*shape]",
};

const struct dl_op_desc *const dl_ops_parameter[] = {&parameter_op, NULL};
