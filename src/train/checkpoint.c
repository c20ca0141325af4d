/* Checkpoints as safetensors: the model's tensors under their own keys,
 * the optimizer's moments as "__optim__.m" / "__optim__.v", and the
 * position and RNG state as metadata strings (exact: integers and the
 * bits of doubles in hex). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "train/checkpoint.h"

#define N_META 10
#define N_META_EPOCH 4   /* optional: the epoch's sums and the log's length */

int dl_checkpoint_save(const char *path, struct dl_graph *g,
		       const struct dl_optim *o, const struct dl_train_pos *pos,
		       const struct dl_ckpt_extra *x, struct dl_error *err)
{
	int count = 0;
	for (int i = 0; i < g->n_nodes; i++)
		count += g->nodes[i].n_params;
	int n_xt = x ? x->n_t : 0, n_xm = x ? x->n_meta : 0;
	struct dl_st_entry *e = calloc((size_t)count + 2 + (size_t)n_xt, sizeof *e);
	char **keys = calloc((size_t)count + 1, sizeof *keys);
	int rc = 0, c = 0;
	if (!e || !keys)
		rc = dl_error_set(err, DL_ERUN, "out of memory");
	for (int i = 0; rc == 0 && i < g->n_nodes; i++)
		for (int k = 0; rc == 0 && k < g->nodes[i].n_params; k++) {
			char key[512];
			struct dl_param *p = &g->nodes[i].params[k];
			if (p->tie)
				continue;   /* written once, under its owner's key */
			if (!(keys[c] = strdup(dl_param_key(&g->nodes[i], p, key, sizeof key))))
				rc = dl_error_set(err, DL_ERUN, "out of memory");
			e[c].name = keys[c];
			e[c].shape = p->shape;
			e[c].f32 = p->data;
			c++;
		}
	int64_t n = (int64_t)o->n;
	if (o->m)
		e[c++] = (struct dl_st_entry){"__optim__.m", {1, {n}}, o->m, NULL};
	if (o->v)
		e[c++] = (struct dl_st_entry){"__optim__.v", {1, {n}}, o->v, NULL};
	for (int i = 0; e && i < n_xt; i++)
		e[c++] = x->t[i];
	char v[N_META][40];
	snprintf(v[0], 40, "%" PRId64, pos->step);
	snprintf(v[1], 40, "%" PRId64, pos->epoch);
	snprintf(v[2], 40, "%" PRId64, pos->batch);
	for (int i = 0; i < 4; i++)
		snprintf(v[3 + i], 40, "%016" PRIx64, pos->rng.s[i]);
	snprintf(v[7], 40, "%d", pos->rng.has_spare);
	uint64_t bits;
	memcpy(&bits, &pos->rng.spare, sizeof bits);
	snprintf(v[8], 40, "%016" PRIx64, bits);
	snprintf(v[9], 40, "%" PRId64, o->step);
	char w[N_META_EPOCH][40];
	memcpy(&bits, &pos->ep_loss, sizeof bits);
	snprintf(w[0], 40, "%016" PRIx64, bits);
	memcpy(&bits, &pos->ep_aux, sizeof bits);
	snprintf(w[1], 40, "%016" PRIx64, bits);
	snprintf(w[2], 40, "%" PRId64, pos->ep_seen);
	snprintf(w[3], 40, "%" PRId64, pos->log_bytes);
	const char *meta[] = {
		"dlrun_checkpoint", "1", "step", v[0], "epoch", v[1], "batch", v[2],
		"rng0", v[3], "rng1", v[4], "rng2", v[5], "rng3", v[6],
		"rng_has_spare", v[7], "rng_spare", v[8], "optim_step", v[9],
		"epoch_loss", w[0], "epoch_aux", w[1], "epoch_seen", w[2],
		"log_bytes", w[3]};
	int n_meta = (int)(sizeof meta / sizeof *meta / 2);
	const char **all = calloc((size_t)(n_meta + n_xm) * 2 + 1, sizeof *all);
	if (!all && rc == 0)
		rc = dl_error_set(err, DL_ERUN, "out of memory");
	if (rc == 0) {
		memcpy(all, meta, sizeof meta);
		for (int i = 0; i < 2 * n_xm; i++)
			all[2 * n_meta + i] = x->meta[i];
		rc = dl_st_write(path, e, c, all, n_meta + n_xm, err);
	}
	free(all);
	for (int i = 0; keys && i < count; i++)
		free(keys[i]);
	free(keys);
	free(e);
	return rc;
}

int dl_checkpoint_check_run(const struct dl_safetensors *st, const char *const *meta,
			    int n_meta, struct dl_error *err)
{
	for (int i = 0; i < n_meta; i++) {
		const char *name = meta[2 * i], *now = meta[2 * i + 1];
		const char *key = strncmp(name, "run.", 4) == 0 ? name + 4 : name;
		const char *then = dl_st_meta(st, name);
		if (!then || strcmp(then, now) == 0)
			continue;   /* the same, or a checkpoint that did not record it */
		if (strcmp(key, "model") == 0)
			return dl_error_set(err, DL_EINPUT, "train: the model file differs from the "
					    "one of the run that wrote %s; --resume continues that "
					    "run, with the same model and flags (only --epochs may "
					    "change)", st->path);
		return dl_error_set(err, DL_EINPUT, "train: --%s %s differs from the run that "
				    "wrote %s (--%s %s); --resume continues that run, with the "
				    "same model and flags (only --epochs may change)",
				    key, *now ? now : "(none)", st->path, key,
				    *then ? then : "(none)");
	}
	return 0;
}

static int meta_u64(const struct dl_safetensors *st, const char *key, int hex,
		    uint64_t *out, struct dl_error *err)
{
	const char *s = dl_st_meta(st, key);
	char *end;
	if (!s || !*s)
		return dl_error_set(err, DL_EINPUT, "%s: not a dlrun checkpoint (no '%s' metadata)",
				    st->path, key);
	*out = strtoull(s, &end, hex ? 16 : 10);
	if (*end)
		return dl_error_set(err, DL_EINPUT, "%s: bad checkpoint metadata '%s'", st->path, key);
	return 0;
}

static int read_moment(const struct dl_safetensors *st, const char *key, float *dst,
		       size_t n, struct dl_error *err)
{
	if (!dst)
		return 0;
	int t = dl_st_find(st, key);
	if (t < 0 || st->t[t].numel != (int64_t)n)
		return dl_error_set(err, DL_EINPUT,
				    "%s: optimizer state '%s' is missing or has the wrong size; "
				    "resume with the same model and optimizer", st->path, key);
	return dl_st_read_f32(st, t, dst, err);
}

int dl_checkpoint_load(const char *path, struct dl_graph *g,
		       struct dl_optim *o, struct dl_train_pos *pos,
		       struct dl_error *err)
{
	struct dl_safetensors st;
	int rc = dl_st_open(&st, path, err);
	if (rc)
		return rc;
	uint64_t u[N_META];
	static const char *const keys[] = {"step", "epoch", "batch", "rng0", "rng1", "rng2",
					   "rng3", "rng_has_spare", "rng_spare", "optim_step"};
	for (int i = 0; rc == 0 && i < N_META; i++)
		rc = meta_u64(&st, keys[i], i >= 3 && i != 7 && i != 9, &u[i], err);
	/* the epoch's sums and the log's length: absent from checkpoints of
	 * earlier versions (the epoch's report then counts from the resume) */
	uint64_t ew[N_META_EPOCH] = {0, 0, 0, 0};
	int64_t log_bytes = -1;
	static const char *const ekeys[] = {"epoch_loss", "epoch_aux", "epoch_seen"};
	for (int i = 0; rc == 0 && i < N_META_EPOCH - 1; i++)
		if (dl_st_meta(&st, ekeys[i]))
			rc = meta_u64(&st, ekeys[i], i < 2, &ew[i], err);
	const char *lb = dl_st_meta(&st, "log_bytes");
	if (rc == 0 && lb) {
		char *end;
		long long l = strtoll(lb, &end, 10);
		if (*end || end == lb || l < -1)
			rc = dl_error_set(err, DL_EINPUT, "%s: bad checkpoint metadata 'log_bytes'",
					  st.path);
		log_bytes = l;
	}
	if (rc == 0)
		rc = read_moment(&st, "__optim__.m", o->m, o->n, err);
	if (rc == 0)
		rc = read_moment(&st, "__optim__.v", o->v, o->n, err);
	dl_st_close(&st);
	if (rc)
		return rc;
	pos->step = (int64_t)u[0];
	pos->epoch = (int64_t)u[1];
	pos->batch = (int64_t)u[2];
	for (int i = 0; i < 4; i++)
		pos->rng.s[i] = u[3 + i];
	pos->rng.has_spare = (int)u[7];
	memcpy(&pos->rng.spare, &u[8], sizeof u[8]);
	o->step = (int64_t)u[9];
	memcpy(&pos->ep_loss, &ew[0], sizeof ew[0]);
	memcpy(&pos->ep_aux, &ew[1], sizeof ew[1]);
	pos->ep_seen = (int64_t)ew[2];
	pos->log_bytes = log_bytes;
	/* the model's tensors, checked like any weights file; the optimizer's
	 * are skipped by name */
	return dl_model_load_weights(g, path, err);
}
