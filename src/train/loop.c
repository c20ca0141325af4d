/* The training loop: epochs of mini-batches in an order that depends only on
 * (seed, epoch), so a run resumed from a checkpoint continues exactly; one
 * dl_train_step per batch; validation after each epoch. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/safetensors.h"
#include "train/loop.h"
#include "train/text.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int classifies(enum dl_loss l)
{
	return l == DL_LOSS_CROSS_ENTROPY || l == DL_LOSS_NLL || l == DL_LOSS_BCE_WITH_LOGITS;
}

/* Infers shapes and plans for b samples of d (once per batch size, data
 * set and mode); in training, the loss writes its gradient into the
 * plan's own slot for it. */
static int plan_for(struct dl_trainer *t, const struct dl_dataset *d, int64_t b, int train,
		    struct dl_error *err)
{
	if (t->cur_batch == b && t->cur_train == train && t->cur_data == d)
		return 0;
	struct dl_graph *g = t->g;
	struct dl_shape *in = calloc((size_t)d->n_x + 1, sizeof *in);
	if (!in)
		return dl_error_set(err, DL_ERUN, "out of memory");
	for (int i = 0; i < d->n_x; i++) {
		in[i] = d->x[i].shape;
		in[i].d[0] = b;
	}
	int rc = dl_graph_infer(g, in, err);
	free(in);
	if (rc == 0)
		rc = dl_graph_plan(g, train, err);
	if (rc)
		return rc;
	if (train)
		dl_step_use_plan_slot(&t->step);
	t->cur_batch = b;
	t->cur_train = train;
	t->cur_data = d;
	return 0;
}

/* Copies the samples idx[0..b) of d into the batch buffers (or has d's
 * source make them); fills bt. */
static int gather(struct dl_trainer *t, const struct dl_dataset *d, const int64_t *idx,
		  int64_t b, struct dl_batch *bt, struct dl_error *err)
{
	const struct dl_text *x = d->text;   /* windows of a text corpus */
	for (int64_t i = 0; x && i < b; i++)
		dl_text_window(x, x->consecutive ? idx[i] * x->T : idx[i], t->bx[0] + i * x->T,
			       t->bids + i * x->T);
	if (d->src) {   /* samples made from files (images) */
		int rc = d->src->fill(d->src->user, t->pos.epoch, idx, b, t->bx[0], err);
		if (rc)
			return rc;
	}
	for (int k = 0; !x && !d->src && k < d->n_x; k++) {
		int64_t xs = dl_array_sample_numel(&d->x[k]);
		int one = dl_array_broadcast(&d->x[k], d->n);   /* row 0 for every sample */
		for (int64_t i = 0; i < b; i++)
			memcpy(t->bx[k] + i * xs, d->x[k].f + (one ? 0 : idx[i]) * xs,
			       (size_t)xs * sizeof(float));
	}
	int64_t ys = dl_array_sample_numel(&d->y);
	for (int64_t i = 0; !x && i < b; i++) {
		if (d->y.ids)
			memcpy(t->bids + i * ys, d->y.ids + idx[i] * ys, (size_t)ys * sizeof *t->bids);
		else
			memcpy(t->by + i * ys, d->y.f + idx[i] * ys, (size_t)ys * sizeof *t->by);
	}
	bt->n = b;
	bt->in = t->bx;
	bt->yshape = d->y.shape;
	bt->yshape.d[0] = b;
	bt->ids = d->y.ids || x ? t->bids : NULL;
	bt->targets = d->y.ids || x ? NULL : t->by;
	return 0;
}

/* The data-parallel run's dl_dist, or NULL for one process. */
static struct dl_dist *dist_of(const struct dl_trainer *t)
{
	return t->dist && t->dist->size > 1 ? t->dist : NULL;
}

static int reduce_grads(void *user, float *grad, size_t n, double *loss, struct dl_error *err)
{
	return dl_dist_reduce_grads(user, grad, n, loss, err);
}

static int validate(struct dl_trainer *t, double *loss, double *acc, struct dl_error *err)
{
	const struct dl_dataset *d = t->val;
	struct dl_dist *D = dist_of(t);
	struct dl_ctx ctx = {.train = 0, .rng = &t->pos.rng};
	double sum = 0;
	int64_t correct = 0, counted = 0, seen = 0;
	for (int64_t off = 0; off < d->n; off += t->batch) {
		int64_t b = d->n - off < t->batch ? d->n - off : t->batch;
		int64_t lo = 0;
		if (D && !D->local_data) {   /* this process's shard of the batch */
			dl_dist_set_shard(D, b);
			lo = D->shard.off;
			b = D->shard.n;
			if (b == 0)
				continue;
		}
		for (int64_t i = 0; i < b; i++)
			t->perm[i] = off + lo + i;   /* perm is rebuilt each epoch */
		int rc = plan_for(t, d, b, 0, err);
		if (rc)
			return rc;
		struct dl_batch bt;
		if ((rc = gather(t, d, t->perm, b, &bt, err)) != 0)
			return rc;
		dl_step_forward(&t->step, bt.in, &ctx);
		double l;
		int64_t c, n;
		if ((rc = dl_step_loss(&t->step, &bt, 0, &l, &c, &n, err)) != 0)
			return rc;
		sum += l * (double)b;
		seen += b;
		correct += c;
		counted += n;
	}
	if (D) {
		double sums[4] = {sum, (double)seen, (double)correct, (double)counted};
		int rc = dl_dist_sum(D, sums, 4, err);
		if (rc)
			return rc;
		sum = sums[0];
		seen = (int64_t)sums[1];
		correct = (int64_t)sums[2];
		counted = (int64_t)sums[3];
	}
	*loss = seen ? sum / (double)seen : NAN;
	*acc = counted ? (double)correct / (double)counted : NAN;
	return 0;
}

/* path with {step} and {epoch} replaced for the checkpoint after the
 * given step (epoch: the 1-based epoch that step belongs to), in a
 * malloc()ed string; NULL when out of memory. */
static char *expand_path(const char *path, int64_t step, int64_t n_batches)
{
	int64_t epoch = step > 0 ? (step - 1) / n_batches + 1 : 0;
	size_t len = strlen(path) + 1;
	for (const char *p = path; (p = strchr(p, '{')); p++)
		len += 24;
	char *s = malloc(len), *o = s;
	if (!s)
		return NULL;
	for (const char *p = path; *p;) {
		if (strncmp(p, "{step}", 6) == 0) {
			o += sprintf(o, "%lld", (long long)step);
			p += 6;
		} else if (strncmp(p, "{epoch}", 7) == 0) {
			o += sprintf(o, "%lld", (long long)epoch);
			p += 7;
		} else {
			*o++ = *p++;
		}
	}
	*o = '\0';
	return s;
}

int dl_checkpoint_path_has_fields(const char *path)
{
	return path && (strstr(path, "{step}") || strstr(path, "{epoch}"));
}

/* --keep-checkpoints K after the checkpoint of step: walks back over the
 * regular checkpoints (every ckpt_every steps) and deletes the file that
 * has just become the (K+1)-th newest. Needs no list, so it works the
 * same in a resumed run. */
static void prune_checkpoints(struct dl_trainer *t, int64_t step, const char *newest)
{
	int64_t every = t->ckpt_every, k = t->keep_checkpoints;
	if (k <= 0 || every <= 0 || !dl_checkpoint_path_has_fields(t->checkpoint))
		return;
	int64_t s = step / every * every;
	char *prev = strdup(newest);
	int distinct = 1;
	if (s == step)
		s -= every;
	for (; prev && s > 0; s -= every) {
		char *p = expand_path(t->checkpoint, s, t->n_batches);
		if (!p)
			break;
		if (strcmp(p, prev) != 0) {
			if (++distinct > k) {
				remove(p);   /* gone already: nothing to do */
				free(p);
				break;
			}
			free(prev);
			prev = p;
		} else {
			free(p);
		}
	}
	free(prev);
}

/* The checkpoint after the step just taken: the batch counts as done,
 * and at an epoch's last batch the position stays in that epoch (all its
 * batches done), so a resumed run still writes the epoch's report, with
 * the epoch's loss over all its batches, and the log as it stood. */
static int save_checkpoint(struct dl_trainer *t, struct dl_error *err)
{
	struct dl_train_pos p = t->pos;
	p.batch++;
	p.log_bytes = t->log_bytes ? t->log_bytes(t->user) : -1;
	/* the run's flags and the monitor's state as metadata */
	const char *mkeys[DL_MONITOR_META];
	char mvals[DL_MONITOR_META][40];
	int nm = dl_monitor_meta(&t->mon, mkeys, mvals);
	const char **meta = calloc((size_t)(t->n_run_meta + nm) * 2 + 1, sizeof *meta);
	char *path = expand_path(t->checkpoint, t->pos.step, t->n_batches);
	if (!meta || !path) {
		free(meta);
		free(path);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	for (int i = 0; i < 2 * t->n_run_meta; i++)
		meta[i] = t->run_meta[i];
	for (int i = 0; i < nm; i++) {
		meta[2 * (t->n_run_meta + i)] = mkeys[i];
		meta[2 * (t->n_run_meta + i) + 1] = mvals[i];
	}
	struct dl_st_entry best = {"__best__.state", {1, {(int64_t)t->mon.n}},
				   t->mon.best_state, NULL};
	struct dl_ckpt_extra x = {meta, t->n_run_meta + nm, &best,
				  t->mon.best_state && t->mon.best_epoch > 0};
	int rc = dl_checkpoint_save(path, t->g, &t->opt, &p, &x, err);
	free(meta);
	if (rc == 0)
		prune_checkpoints(t, t->pos.step, path);
	free(t->ckpt_path);
	t->ckpt_path = path;
	return rc;
}

/* A signal asked the run to stop after the step just taken: the
 * checkpoint of this point (unless it was just written), then the error. */
static int stopped(struct dl_trainer *t, struct dl_error *err)
{
	int sig = (int)*t->stop;
	const char *name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
	if (!t->checkpoint)
		return dl_error_set(err, DL_ESIGNAL - sig, "train: stopped by %s after "
				    "step %lld; nothing written (--checkpoint PATH "
				    "--checkpoint-every N keeps the progress)", name,
				    (long long)t->pos.step);
	if (t->ckpt_every <= 0 || t->pos.step % t->ckpt_every != 0) {
		int rc = save_checkpoint(t, err);
		if (rc)
			return rc;
	}
	return dl_error_set(err, DL_ESIGNAL - sig, "train: stopped by %s after step "
			    "%lld; checkpoint written to %s (continue with --resume %s "
			    "and the same other flags)", name, (long long)t->pos.step,
			    t->ckpt_path, t->ckpt_path);
}

int dl_trainer_run(struct dl_trainer *t, struct dl_error *err)
{
	struct dl_ctx ctx = {.train = 1, .rng = &t->pos.rng};
	int64_t n = t->train->n, bs = t->batch;
	int64_t nb = (n + bs - 1) / bs;
	double t0 = now(), waited = 0;
	int64_t samples = 0;
	int rc = 0;
	struct dl_dist *D = dist_of(t);
	if (D) {
		ctx.shard = &D->shard;
		t->step.reduce = reduce_grads;
		t->step.reduce_user = D;
	}
	for (; t->pos.epoch < t->epochs; t->pos.epoch++, t->pos.batch = 0) {
		/* the epoch's order depends only on (seed, epoch): resumable */
		struct dl_rng order;
		dl_rng_seed(&order, (uint64_t)t->seed * 1000003u + (uint64_t)t->pos.epoch + 1);
		for (int64_t i = 0; i < n; i++)
			t->perm[i] = i;
		if (t->train->text)   /* random windows, as get_batch */
			dl_text_offsets(t->train->text, t->seed, t->pos.epoch, t->shuffle,
					t->perm, n);
		else if (t->shuffle)
			for (int64_t i = n - 1; i > 0; i--) {
				int64_t j = (int64_t)dl_rng_below(&order, (uint64_t)i + 1);
				int64_t tmp = t->perm[i];
				t->perm[i] = t->perm[j];
				t->perm[j] = tmp;
			}
		if (t->train->src && t->train->src->plan && t->pos.batch * bs < n)   /* to come */
			t->train->src->plan(t->train->src->user, t->pos.epoch,
					    t->perm + t->pos.batch * bs, n - t->pos.batch * bs, bs);
		/* the epoch's sums so far: zero, or a checkpoint's */
		double sum = t->pos.ep_loss, bsum = t->pos.ep_aux;
		int64_t seen = t->pos.ep_seen;
		double lr = t->pos.batch > 0 && t->pos.step > 0 ? dl_lr_at(&t->sched, t->pos.step - 1) : 0;
		for (; t->pos.batch < nb; t->pos.batch++) {
			int64_t off = t->pos.batch * bs;
			int64_t b = n - off < bs ? n - off : bs;
			int64_t lo = 0, nr = b;   /* this process's shard */
			if (D) {
				dl_dist_set_shard(D, b);
				lo = D->shard.off;
				nr = D->shard.n;
			}
			if ((rc = plan_for(t, t->train, nr, 1, err)) != 0)
				return rc;
			struct dl_batch bt;
			double g0 = now();
			if ((rc = gather(t, t->train, t->perm + off + lo, nr, &bt, err)) != 0)
				return rc;
			if (t->train->src)   /* decoding files: did the step wait? */
				waited += now() - g0;
			lr = dl_lr_at(&t->sched, t->pos.step);
			double loss;
			if ((rc = dl_train_step(&t->step, &bt, lr, t->pos.step, &ctx, &loss, err)) != 0)
				return rc;
			t->pos.step++;
			sum += loss * (double)b;
			bsum += t->step.aux_loss * (double)b;
			seen += b;
			t->pos.ep_loss = sum;
			t->pos.ep_aux = bsum;
			t->pos.ep_seen = seen;
			samples += b;
			double el = now() - t0;
			double rate = el > 0 ? (double)samples / el : 0;
			int64_t left = (t->epochs - t->pos.epoch - 1) * n + (n - off - b);
			if (t->on_batch) {
				struct dl_batch_report r = {t->pos.epoch, t->pos.batch + 1, nb,
							    sum / (double)seen, rate,
							    rate > 0 ? (double)left / rate : 0,
							    t->step.has_aux, bsum / (double)seen,
							    t->pos.step, loss, lr, el > 0 ? waited / el : 0};
				t->on_batch(t->user, &r);
			}
			if (t->checkpoint && t->ckpt_every > 0 && t->pos.step % t->ckpt_every == 0 &&
			    (!D || D->rank == 0)) {
				if ((rc = save_checkpoint(t, err)) != 0)
					return rc;
			}
			if (t->stop && *t->stop)
				return stopped(t, err);
		}
		struct dl_epoch_report r = {t->pos.epoch + 1, t->pos.step,
					    seen ? sum / (double)seen : NAN, lr, 0, NAN, 0, NAN,
					    t->step.has_aux, seen ? bsum / (double)seen : NAN};
		if (t->val && t->val->n > 0) {
			if ((rc = validate(t, &r.val_loss, &r.val_accuracy, err)) != 0)
				return rc;
			r.has_val = 1;
			r.has_accuracy = classifies(t->step.loss);
		}
		if (t->on_epoch)
			t->on_epoch(t->user, &r);
		t->pos.ep_loss = t->pos.ep_aux = 0;
		t->pos.ep_seen = 0;
		if (dl_monitor_active(&t->mon)) {
			double v = t->mon.kind == DL_MONITOR_VAL_ACCURACY ? r.val_accuracy : r.val_loss;
			dl_monitor_epoch(&t->mon, r.epoch, v, t->g->param_block);
			if (t->mon.plateau)
				t->sched.lr = t->mon.p.lr;   /* for the next epoch */
			if (t->mon.stop) {
				t->pos.epoch++;
				t->pos.batch = 0;
				return 0;
			}
		}
	}
	return 0;
}

/* Monitoring needs validation data, and val_accuracy a classification
 * loss; the message names the flag that asked for it. */
static int check_monitor(struct dl_trainer *t, struct dl_error *err)
{
	struct dl_monitor *m = &t->mon;
	if (!dl_monitor_active(m))
		return 0;
	const char *flag = m->keep_best ? "--keep-best" : m->early_stopping > 0 ?
		"--early-stopping" : "--lr-schedule plateau";
	const char *what = dl_monitor_name(m->kind);
	if (!t->val || t->val->n == 0)
		return dl_error_set(err, DL_EINPUT, "train: %s monitors %s, which needs validation "
				    "data (--val-data X --val-labels Y, --val-split F, or "
				    "<input>_val and y_val in the .npz)", flag, what);
	if (m->kind == DL_MONITOR_VAL_ACCURACY && !classifies(t->step.loss))
		return dl_error_set(err, DL_EINPUT, "train: --monitor val_accuracy needs a "
				    "classification loss (cross_entropy, nll, bce_with_logits), "
				    "not %s; monitor val_loss", dl_loss_name(t->step.loss));
	return 0;
}

/* A resumed run: the same flags as the checkpoint's run, and the
 * monitor's state. */
static int resume_extra(struct dl_trainer *t, struct dl_error *err)
{
	struct dl_safetensors st;
	int rc = dl_st_open(&st, t->resume, err);
	if (rc)
		return rc;
	rc = dl_checkpoint_check_run(&st, t->run_meta, t->n_run_meta, err);
	if (rc == 0 && dl_monitor_active(&t->mon))
		rc = dl_monitor_restore(&t->mon, &st, err);
	dl_st_close(&st);
	if (rc == 0 && t->mon.plateau)
		t->sched.lr = t->mon.p.lr;
	return rc;
}

int dl_trainer_init(struct dl_trainer *t, struct dl_error *err)
{
	struct dl_graph *g = t->g;
	int rc = dl_train_ranges(g, &t->ranges, &t->n_ranges, err);
	if (rc)
		return rc;
	if ((rc = dl_optim_init(&t->opt, &t->oc, g->n_param_floats, t->ranges, t->n_ranges,
				err)) != 0)
		return rc;
	int64_t nb = (t->train->n + t->batch - 1) / t->batch;
	t->n_batches = nb > 0 ? nb : 1;
	t->sched.total_steps = nb * t->epochs;
	if ((rc = dl_lr_check(&t->sched, err)) != 0)
		return rc;
	t->step.g = g;
	t->step.has_aux = dl_step_has_aux(g);
	t->step.opt = &t->opt;
	t->step.ranges = t->ranges;
	t->step.n_ranges = t->n_ranges;
	/* buffers for one batch, for the larger of the two sets' samples */
	int n_x = t->train->n_x;
	t->bx = calloc((size_t)n_x + 1, sizeof *t->bx);
	t->dout = calloc((size_t)g->n_outputs + 1, sizeof *t->dout);
	if (!t->bx || !t->dout)
		return dl_error_set(err, DL_ERUN, "out of memory");
	t->step.dout = t->dout;
	int has_val = t->val && t->val->n > 0;
	for (int i = 0; i < n_x; i++) {
		int64_t xs = dl_array_sample_numel(&t->train->x[i]);
		if (has_val && dl_array_sample_numel(&t->val->x[i]) > xs)
			xs = dl_array_sample_numel(&t->val->x[i]);
		if (!(t->bx[i] = malloc((size_t)(t->batch * xs) * sizeof(float) + 1)))
			return dl_error_set(err, DL_ERUN, "out of memory");
	}
	int64_t ys = dl_array_sample_numel(&t->train->y);
	if (has_val && dl_array_sample_numel(&t->val->y) > ys)
		ys = dl_array_sample_numel(&t->val->y);
	int64_t maxn = t->train->n > (has_val ? t->val->n : 0) ? t->train->n : t->val->n;
	t->by = malloc((size_t)(t->batch * ys) * sizeof *t->by + 1);
	t->bids = malloc((size_t)(t->batch * ys) * sizeof *t->bids + 1);
	t->perm = malloc((size_t)maxn * sizeof *t->perm + 1);
	if (!t->by || !t->bids || !t->perm)
		return dl_error_set(err, DL_ERUN, "out of memory");
	dl_rng_seed(&t->pos.rng, (uint64_t)t->seed ^ 0x5deece66dULL);
	t->pos.log_bytes = -1;
	if ((rc = check_monitor(t, err)) != 0)
		return rc;
	if (dl_monitor_active(&t->mon) &&
	    (rc = dl_monitor_init(&t->mon, g->n_param_floats, t->sched.lr, err)) != 0)
		return rc;
	/* the flags first: a checkpoint of another model fails on them with
	 * a clearer message than on its tensors */
	if (t->resume && (rc = resume_extra(t, err)) != 0)
		return rc;
	if (t->resume && (rc = dl_checkpoint_load(t->resume, g, &t->opt, &t->pos, err)) != 0)
		return rc;
	t->cur_batch = -1;
	return 0;
}

void dl_trainer_free(struct dl_trainer *t)
{
	if (!t)
		return;
	dl_optim_free(&t->opt);
	dl_monitor_free(&t->mon);
	free(t->ckpt_path);
	t->ckpt_path = NULL;
	free(t->ranges);
	for (int i = 0; t->bx && t->train && i < t->train->n_x; i++)
		free(t->bx[i]);
	free(t->bx);
	free(t->dout);   /* its entries are the plan's */
	free(t->by);
	free(t->bids);
	free(t->perm);
	t->ranges = NULL;
	t->bx = t->dout = NULL;
	t->by = NULL;
	t->bids = t->perm = NULL;
}
