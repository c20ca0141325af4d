/* The registry: every op family's NULL-terminated descriptor array. */
#include <stddef.h>
#include <string.h>

#include "ops/registry.h"

extern const struct dl_op_desc *const dl_ops_linear[];
extern const struct dl_op_desc *const dl_ops_elementwise[];
extern const struct dl_op_desc *const dl_ops_activation[];
extern const struct dl_op_desc *const dl_ops_shape[];
extern const struct dl_op_desc *const dl_ops_reduce[];
extern const struct dl_op_desc *const dl_ops_dropout[];
extern const struct dl_op_desc *const dl_ops_conv[];
extern const struct dl_op_desc *const dl_ops_pool[];
extern const struct dl_op_desc *const dl_ops_norm[];
extern const struct dl_op_desc *const dl_ops_sequence[];
extern const struct dl_op_desc *const dl_ops_rnn[];
extern const struct dl_op_desc *const dl_ops_attention[];
extern const struct dl_op_desc *const dl_ops_gating[];
extern const struct dl_op_desc *const dl_ops_moe[];
extern const struct dl_op_desc *const dl_ops_transformer[];
extern const struct dl_op_desc *const dl_ops_parameter[];
extern const struct dl_op_desc *const dl_ops_attention_decoder[];
extern const struct dl_op_desc *const dl_ops_conv3d[];
extern const struct dl_op_desc *const dl_ops_pool3d[];
extern const struct dl_op_desc *const dl_ops_compare[];
extern const struct dl_op_desc *const dl_ops_expand[];

static const struct dl_op_desc *const *const families[] = {
	dl_ops_linear, dl_ops_elementwise, dl_ops_activation, dl_ops_shape,
	dl_ops_reduce, dl_ops_dropout, dl_ops_conv, dl_ops_pool, dl_ops_norm,
	dl_ops_sequence, dl_ops_rnn, dl_ops_attention, dl_ops_gating, dl_ops_moe,
	dl_ops_transformer,
	dl_ops_parameter,
	dl_ops_attention_decoder,
	dl_ops_conv3d, dl_ops_pool3d,
	dl_ops_compare, dl_ops_expand,
};

#define MAX_OPS 256
static const struct dl_op_desc *all[MAX_OPS + 1];

const struct dl_op_desc *const *dl_op_all(void)
{
	if (!all[0]) {
		int k = 0;
		for (size_t f = 0; f < sizeof families / sizeof *families; f++)
			for (const struct dl_op_desc *const *o = families[f]; *o && k < MAX_OPS; o++)
				all[k++] = *o;
		all[k] = NULL;
	}
	return all;
}

const struct dl_op_desc *dl_op_find(const char *name)
{
	for (const struct dl_op_desc *const *o = dl_op_all(); *o; o++)
		if (strcmp((*o)->name, name) == 0)
			return *o;
	return NULL;
}

const char *dl_op_suggest(const char *name)
{
	static const char *names[MAX_OPS + 8];
	int k = 0;
	for (const struct dl_op_desc *const *o = dl_op_all(); *o; o++)
		names[k++] = (*o)->name;
	static const char *const composites[] = {"sequential", "residual", "repeat", "use"};
	for (int i = 0; i < 4; i++)
		names[k++] = composites[i];
	names[k] = NULL;
	return dl_suggest(name, names);
}
