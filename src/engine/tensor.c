/* Shape arithmetic, with the overflow checks every size from a file or a
 * model description goes through. */
#include <stdio.h>
#include <string.h>

#include "engine/tensor.h"

int64_t dl_shape_numel(const struct dl_shape *s)
{
	if (s->ndim < 0 || s->ndim > DL_MAX_DIMS)
		return -1;
	int64_t n = 1;
	for (int i = 0; i < s->ndim; i++) {
		int64_t d = s->d[i];
		if (d < 0)
			return -1;
		if (d == 0)
			n = 0;
		else if (n > DL_MAX_NUMEL / d)
			return -1;
		else
			n *= d;
	}
	/* a zero dimension makes the product 0 but a later huge one must
	 * still be sane on its own */
	for (int i = 0; i < s->ndim; i++)
		if (s->d[i] > DL_MAX_NUMEL)
			return -1;
	return n;
}

int64_t dl_shape_prod(const struct dl_shape *s, int from, int to)
{
	int64_t n = 1;
	for (int i = from; i < to; i++)
		n *= s->d[i];
	return n;
}

int dl_shape_equal(const struct dl_shape *a, const struct dl_shape *b)
{
	if (a->ndim != b->ndim)
		return 0;
	for (int i = 0; i < a->ndim; i++)
		if (a->d[i] != b->d[i])
			return 0;
	return 1;
}

struct dl_shape dl_shape_make(int ndim, const int64_t *d)
{
	struct dl_shape s;
	memset(&s, 0, sizeof s);
	s.ndim = ndim;
	for (int i = 0; i < ndim; i++)
		s.d[i] = d[i];
	return s;
}

char *dl_shape_str(const struct dl_shape *s, char *buf, size_t size)
{
	size_t used = 0;
	if (size == 0)
		return buf;
	buf[0] = '\0';
	used += (size_t)snprintf(buf + used, size - used, "[");
	for (int i = 0; i < s->ndim && used < size; i++)
		used += (size_t)snprintf(buf + used, size - used, "%s%lld",
					 i ? ", " : "", (long long)s->d[i]);
	if (used < size)
		snprintf(buf + used, size - used, "]");
	return buf;
}

int dl_dim_index(int64_t dim, int ndim)
{
	if (dim < 0)
		dim += ndim;
	return dim >= 0 && dim < ndim ? (int)dim : -1;
}
