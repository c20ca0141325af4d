/* Shared by conv.c, pool.c and their 3-D forms (conv3d.c, pool3d.c):
 * bounded tuples, padding resolution, sizes in messages. */
#include <stdio.h>

#include "ops/spatial.h"

int dl_spatial_tuple(const struct dl_node *n, int hp, int nsp, int64_t *v,
		     struct dl_error *err)
{
	int rc = dl_hp_tuple(n, hp, nsp, v, err);
	if (rc)
		return rc;
	for (int i = 0; i < nsp; i++)
		if (v[i] >= GEOM_MAX)
			return dl_node_error(err, n, hp, "%s %lld is too large",
					     n->op->hp[hp].name, (long long)v[i]);
	return 0;
}

int dl_spatial_padding(const struct dl_node *n, int hp, int nsp,
		       const int64_t *L, const int64_t *k, const int64_t *s,
		       const int64_t *d, int64_t *pb, int64_t *pa,
		       struct dl_error *err)
{
	const struct dl_hp_value *v = &n->hp[hp];
	switch (v->pad) {
	case DL_PAD_VALID:
		for (int i = 0; i < nsp; i++)
			pb[i] = pa[i] = 0;
		return 0;
	case DL_PAD_SAME:
		for (int i = 0; i < nsp; i++) {
			int64_t out = (L[i] + s[i] - 1) / s[i];
			int64_t total = (out - 1) * s[i] + d[i] * (k[i] - 1) + 1 - L[i];
			if (total < 0)
				total = 0;
			pb[i] = total / 2;
			pa[i] = total - pb[i];
		}
		return 0;
	case DL_PAD_PAIRS:
		if (v->n != nsp)
			return dl_node_error(err, n, hp,
				"padding has %d [before, after] pairs; give %d, one per spatial dimension",
				v->n, nsp);
		for (int i = 0; i < nsp; i++) {
			pb[i] = v->v[2 * i];
			pa[i] = v->v[2 * i + 1];
		}
		break;
	case DL_PAD_INTS:
		if (!(v->scalar || v->n == 1) && v->n != nsp)
			return dl_node_error(err, n, hp,
				"padding has %d values; give one, %d (one per spatial dimension), "
				"or [before, after] pairs such as %s",
				v->n, nsp, nsp == 1 ? "[[1, 2]]" : "[[1, 2], [0, 1]]");
		for (int i = 0; i < nsp; i++)
			pb[i] = pa[i] = v->scalar || v->n == 1 ? v->v[0] : v->v[i];
		break;
	}
	for (int i = 0; i < nsp; i++)
		if (pb[i] < 0 || pa[i] < 0 || pb[i] >= GEOM_MAX || pa[i] >= GEOM_MAX)
			return dl_node_error(err, n, hp, "padding must be between 0 and %lld",
					     (long long)GEOM_MAX - 1);
	return 0;
}

const char *dl_spatial_layout(int nsp)
{
	return nsp == 1 ? "[N, C, L]" : nsp == 2 ? "[N, C, H, W]" : "[N, C, D, H, W]";
}

const char *dl_spatial_dims3(char *buf, size_t size, const int64_t *v)
{
	snprintf(buf, size, "%lldx%lldx%lld", (long long)v[0], (long long)v[1],
		 (long long)v[2]);
	return buf;
}

int dl_spatial_fits3(const struct dl_node *n, int hp, const int64_t *L, const int64_t *k,
		     const int64_t *d, const int64_t *pb, const int64_t *pa,
		     struct dl_error *err)
{
	int64_t p[3];
	for (int i = 0; i < 3; i++)
		p[i] = L[i] + pb[i] + pa[i];
	for (int i = 0; i < 3; i++) {
		int64_t ek = d[i] * (k[i] - 1) + 1;   /* dilated kernel extent */
		if (ek <= p[i])
			continue;
		char kk[64], b[64];
		if (k[0] == k[1] && k[1] == k[2])
			snprintf(kk, sizeof kk, "%lld", (long long)k[0]);
		else
			dl_spatial_dims3(kk, sizeof kk, k);
		if (ek != k[i])
			return dl_node_error(err, n, hp,
				"kernel_size %s with dilation spans %lld cells, more than the padded input %s",
				kk, (long long)ek, dl_spatial_dims3(b, sizeof b, p));
		return dl_node_error(err, n, hp, "kernel_size %s is larger than the padded input %s",
				     kk, dl_spatial_dims3(b, sizeof b, p));
	}
	return 0;
}

const char *dl_spatial_dims(char *buf, size_t size, int nsp, int64_t a,
			    int64_t b)
{
	if (nsp == 1)
		snprintf(buf, size, "%lld", (long long)b);
	else
		snprintf(buf, size, "%lldx%lld", (long long)a, (long long)b);
	return buf;
}
