/* Shapes and tensor views. A tensor never owns its data: data points into
 * the parameter block, the activation arena or a caller's buffer. */
#ifndef DL_TENSOR_H
#define DL_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#define DL_MAX_DIMS 8

struct dl_shape {
	int ndim;
	int64_t d[DL_MAX_DIMS];
};

struct dl_tensor {
	struct dl_shape shape;
	float *data;
};

/* Largest element count a tensor may have (keeps byte sizes in size_t and
 * int64 index arithmetic far from overflow). */
#define DL_MAX_NUMEL ((int64_t)1 << 40)

/* Element count; -1 when a dimension is negative or the product exceeds
 * DL_MAX_NUMEL. */
int64_t dl_shape_numel(const struct dl_shape *s);
/* Product of dimensions [from, to). No overflow check: use on shapes that
 * passed dl_shape_numel. */
int64_t dl_shape_prod(const struct dl_shape *s, int from, int to);
int dl_shape_equal(const struct dl_shape *a, const struct dl_shape *b);
struct dl_shape dl_shape_make(int ndim, const int64_t *d);
/* Writes "[2, 3, 4]" into buf (always NUL-terminated); returns buf. */
char *dl_shape_str(const struct dl_shape *s, char *buf, size_t size);
/* Normalises a possibly negative dim against ndim; -1 when out of range. */
int dl_dim_index(int64_t dim, int ndim);

#endif
