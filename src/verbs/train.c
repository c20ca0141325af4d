/* dlrun train: mini-batch training with PyTorch's losses, optimizers and
 * schedules; validation each epoch, progress, JSON-lines logs, atomic
 * checkpoints that resume to the same bytes. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model/yamlutil.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/loss.h"
#include "train/optim.h"
#include "verbs/verbs.h"

struct cfg {
	const char *data, *labels, *val_data, *val_labels;
	double val_split;
	const char *loss, *optimizer, *schedule;
	double lr, momentum, dampening, weight_decay, beta1, beta2, eps;
	int nesterov, wd_set, betas_set, eps_set;
	double clip, gamma, min_lr;
	long long step_size, warmup, epochs, batch, seed, ckpt_every, ignore_index;
	int shuffle, progress;
	int ignore_extra;           /* --ignore-extra */
	const char *w, *out, *checkpoint, *resume, *log, *threads;
};

/* One option, from the command line or the model's train: mapping. */
static int set_option(struct cfg *c, const char *name, const char *val,
		      const char *where, struct dl_error *err)
{
	double f;
	int64_t i;
	/* messages name the option as it was written: --batch-size on the
	 * command line, batch_size in the model's train: mapping */
	char shown[64];
	int yaml = strstr(where, ": train: ") != NULL;
	snprintf(shown, sizeof shown, "%s%s", yaml ? "" : "--", name);
	for (char *p = shown; yaml && *p; p++)
		if (*p == '-')
			*p = '_';
#define NUM(field, key, cond) \
	if (strcmp(name, key) == 0) { \
		if (dl_parse_float(val, &f) || !(cond)) \
			return dl_error_set(err, DL_EINPUT, "%s%s: bad value '%s'", where, shown, val); \
		c->field = f; \
		return 0; \
	}
#define INT(field, key, lo) \
	if (strcmp(name, key) == 0) { \
		if (dl_parse_int(val, &i) || i < (lo)) \
			return dl_error_set(err, DL_EINPUT, "%s%s takes an integer >= %d, got '%s'", \
					    where, shown, (int)(lo), val); \
		c->field = i; \
		return 0; \
	}
#define STR(field, key) \
	if (strcmp(name, key) == 0) { \
		c->field = val; \
		return 0; \
	}
	NUM(val_split, "val-split", f > 0 && f < 1)
	NUM(lr, "lr", f >= 0)
	NUM(momentum, "momentum", f >= 0)
	NUM(dampening, "dampening", 1)
	NUM(clip, "clip-grad-norm", f > 0)
	NUM(gamma, "gamma", f > 0)
	NUM(min_lr, "min-lr", f >= 0)
	INT(step_size, "step-size", 1)
	INT(warmup, "warmup", 0)
	INT(epochs, "epochs", 0)
	INT(batch, "batch-size", 1)
	INT(seed, "seed", 0)
	INT(ckpt_every, "checkpoint-every", 1)
	STR(data, "data")
	STR(labels, "labels")
	STR(val_data, "val-data")
	STR(val_labels, "val-labels")
	STR(loss, "loss")
	STR(optimizer, "optimizer")
	STR(schedule, "lr-schedule")
	STR(w, "weights")
	STR(out, "output")
	STR(checkpoint, "checkpoint")
	STR(resume, "resume")
	STR(log, "log")
	STR(threads, "threads")
#undef NUM
#undef INT
#undef STR
	if (strcmp(name, "ignore-index") == 0) {
		if (dl_parse_int(val, &i))
			return dl_error_set(err, DL_EINPUT, "%s%s takes an integer", where, shown);
		c->ignore_index = i;
		return 0;
	}
	if (strcmp(name, "weight-decay") == 0) {
		if (dl_parse_float(val, &f) || f < 0)
			return dl_error_set(err, DL_EINPUT, "%s%s: bad value '%s'", where, shown, val);
		c->weight_decay = f;
		c->wd_set = 1;
		return 0;
	}
	if (strcmp(name, "eps") == 0) {
		if (dl_parse_float(val, &f) || f < 0)
			return dl_error_set(err, DL_EINPUT, "%s%s: bad value '%s'", where, shown, val);
		c->eps = f;
		c->eps_set = 1;
		return 0;
	}
	if (strcmp(name, "betas") == 0) {
		char a[64], b[64];
		const char *comma = strchr(val, ',');
		if (!comma || (size_t)(comma - val) >= sizeof a || strlen(comma + 1) >= sizeof b)
			return dl_error_set(err, DL_EINPUT, "%s%s takes B1,B2, got '%s'", where, shown, val);
		snprintf(a, sizeof a, "%.*s", (int)(comma - val), val);
		snprintf(b, sizeof b, "%s", comma + 1);
		if (dl_parse_float(a, &c->beta1) || dl_parse_float(b, &c->beta2) ||
		    c->beta1 < 0 || c->beta1 >= 1 || c->beta2 < 0 || c->beta2 >= 1)
			return dl_error_set(err, DL_EINPUT, "%s%s takes two numbers in [0, 1), got '%s'",
					    where, shown, val);
		c->betas_set = 1;
		return 0;
	}
	int b = -1;
	if (strcmp(val, "true") == 0)
		b = 1;
	else if (strcmp(val, "false") == 0)
		b = 0;
	if (strcmp(name, "nesterov") == 0 && b >= 0) {
		c->nesterov = b;
		return 0;
	}
	if (strcmp(name, "shuffle") == 0 && b >= 0) {
		c->shuffle = b;
		return 0;
	}
	return dl_error_set(err, DL_EINPUT, "%s%s: bad value '%s' (true or false)", where, shown, val);
}

/* The model's train: defaults, keys with underscores. */
static int apply_model_defaults(struct cfg *c, const struct dl_graph *g,
				struct dl_error *err)
{
	for (int i = 0; i < g->n_train; i++) {
		char name[64], where[512];
		snprintf(name, sizeof name, "%s", g->train[i].key);
		for (char *p = name; *p; p++)
			if (*p == '_')
				*p = '-';
		snprintf(where, sizeof where, "%s:%d:%d: train: ", g->file, g->train[i].line,
			 g->train[i].col);
		int rc = set_option(c, name, g->train[i].val, where, err);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- the run ---- */

struct run {
	struct cfg c;
	struct dl_graph *g;
	struct dl_dataset train, val;
	enum dl_loss loss;
	struct dl_optim opt;
	struct dl_lr_schedule sched;
	struct dl_range *ranges;
	int n_ranges;
	float *bx, *by, *dout;     /* one batch: inputs, float targets, dL/dout */
	int64_t *bids;
	int64_t *perm;
	int64_t cur_batch;         /* batch size the graph is planned for */
	int cur_train;
	struct dl_train_pos pos;
	FILE *log;
	int tty;
	double last_draw;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int plan_for(struct run *R, int64_t b, int train, struct dl_error *err)
{
	if (R->cur_batch == b && R->cur_train == train)
		return 0;
	struct dl_shape in = R->train.xshape;
	in.d[0] = b;
	int rc = dl_graph_infer(R->g, &in, err);
	if (rc == 0)
		rc = dl_graph_plan(R->g, train, err);
	if (rc == 0) {
		R->cur_batch = b;
		R->cur_train = train;
	}
	return rc;
}

/* Copies the samples idx[0..b) of d into the batch buffers. */
static void gather(struct run *R, const struct dl_dataset *d, const int64_t *idx,
		   int64_t b)
{
	int64_t xs = dl_shape_prod(&d->xshape, 1, d->xshape.ndim);
	int64_t ys = dl_shape_prod(&d->yshape, 1, d->yshape.ndim);
	for (int64_t i = 0; i < b; i++) {
		memcpy(R->bx + i * xs, d->x + idx[i] * xs, (size_t)xs * sizeof *R->bx);
		if (d->ids)
			memcpy(R->bids + i * ys, d->ids + idx[i] * ys, (size_t)ys * sizeof *R->bids);
		else
			memcpy(R->by + i * ys, d->targets + idx[i] * ys, (size_t)ys * sizeof *R->by);
	}
}

/* Loss (and dL/dout when grad) of the planned batch's output. */
static int batch_loss(struct run *R, int64_t b, const struct dl_dataset *d, int grad,
		      double *loss, int64_t *correct, int64_t *counted,
		      struct dl_error *err)
{
	const struct dl_value *v = &R->g->values[R->g->outputs[0]];
	struct dl_shape ys = d->yshape;
	ys.d[0] = b;
	int64_t rows, cols;
	int rc = dl_loss_shape(R->loss, &v->shape, &ys, &rows, &cols, err);
	if (rc)
		return rc;
	*loss = dl_loss_eval(R->loss, v->data, R->bids, R->by, rows, cols,
			     R->c.ignore_index, grad ? R->dout : NULL);
	if (correct) {
		if (d->ids)
			*correct = dl_loss_correct(v->data, R->bids, rows, cols,
						   R->c.ignore_index, counted);
		else {
			*correct = dl_loss_correct_binary(v->data, R->by, rows * cols);
			*counted = rows * cols;
		}
	}
	return 0;
}

static int validate(struct run *R, double *loss, double *acc, struct dl_error *err)
{
	const struct dl_dataset *d = &R->val;
	struct dl_ctx ctx = {.train = 0, .rng = &R->pos.rng, .threads = dl_threads()};
	double sum = 0;
	int64_t correct = 0, counted = 0, seen = 0;
	for (int64_t off = 0; off < d->n; off += R->c.batch) {
		int64_t b = d->n - off < R->c.batch ? d->n - off : R->c.batch;
		for (int64_t i = 0; i < b; i++)
			R->perm[i] = off + i;   /* perm is rebuilt each epoch */
		gather(R, d, R->perm, b);
		int rc = plan_for(R, b, 0, err);
		if (rc)
			return rc;
		float *in[1] = {R->bx};
		dl_graph_forward(R->g, in, &ctx);
		double l;
		int64_t c, n;
		if ((rc = batch_loss(R, b, d, 0, &l, &c, &n, err)) != 0)
			return rc;
		sum += l * (double)b;
		seen += b;
		correct += c;
		counted += n;
	}
	*loss = seen ? sum / (double)seen : NAN;
	*acc = counted ? (double)correct / (double)counted : NAN;
	return 0;
}

static void log_json(struct run *R, int64_t epoch, double loss, double lr,
		     const double *val_loss, const double *val_acc)
{
	if (!R->log)
		return;
	json_t *o = json_pack("{s:I, s:I, s:o, s:f}", "epoch", (json_int_t)epoch,
			      "step", (json_int_t)R->pos.step,
			      "loss", isfinite(loss) ? json_real(loss) : json_null(),
			      "lr", lr);
	if (val_loss) {
		json_object_set_new(o, "val_loss", isfinite(*val_loss) ? json_real(*val_loss) : json_null());
		json_object_set_new(o, "val_accuracy", isfinite(*val_acc) ? json_real(*val_acc) : json_null());
	}
	char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (s) {
		fprintf(R->log, "%s\n", s);
		fflush(R->log);
		free(s);
	}
	json_decref(o);
}

static void progress(struct run *R, int64_t epoch, int64_t b, int64_t nb, double loss,
		     double rate, double eta, int force)
{
	if (!R->tty)
		return;
	double t = now();
	if (!force && t - R->last_draw < 0.1)
		return;
	R->last_draw = t;
	fprintf(stderr, "\r\033[Kepoch %lld/%lld  step %lld/%lld  loss %.4f  %.0f samples/s  ETA %.0fs",
		(long long)epoch + 1, R->c.epochs, (long long)b, (long long)nb, loss, rate, eta);
	fflush(stderr);
}

static int train_loop(struct run *R, struct dl_error *err)
{
	struct dl_graph *g = R->g;
	struct dl_ctx ctx = {.train = 1, .rng = &R->pos.rng, .threads = dl_threads()};
	int64_t n = R->train.n, bs = R->c.batch;
	int64_t nb = (n + bs - 1) / bs;
	double t0 = now();
	int64_t samples = 0;
	int rc = 0;
	for (; R->pos.epoch < R->c.epochs; R->pos.epoch++, R->pos.batch = 0) {
		/* the epoch's order depends only on (seed, epoch): resumable */
		struct dl_rng order;
		dl_rng_seed(&order, (uint64_t)R->c.seed * 1000003u + (uint64_t)R->pos.epoch + 1);
		for (int64_t i = 0; i < n; i++)
			R->perm[i] = i;
		if (R->c.shuffle)
			for (int64_t i = n - 1; i > 0; i--) {
				int64_t j = (int64_t)dl_rng_below(&order, (uint64_t)i + 1);
				int64_t t = R->perm[i];
				R->perm[i] = R->perm[j];
				R->perm[j] = t;
			}
		double sum = 0;
		int64_t seen = 0;
		double lr = 0;
		for (; R->pos.batch < nb; R->pos.batch++) {
			int64_t off = R->pos.batch * bs;
			int64_t b = n - off < bs ? n - off : bs;
			gather(R, &R->train, R->perm + off, b);
			if ((rc = plan_for(R, b, 1, err)) != 0)
				return rc;
			float *in[1] = {R->bx};
			dl_graph_forward(g, in, &ctx);
			double loss;
			if ((rc = batch_loss(R, b, &R->train, 1, &loss, NULL, NULL, err)) != 0)
				return rc;
			if (!isfinite(loss)) {
				int bad = dl_graph_first_nonfinite(g);
				if (bad >= 0)
					return dl_error_set(err, DL_ERUN,
							    "%s:%d:%d: %s ('%s') produced a non-finite value at "
							    "step %lld; training stopped (lower --lr, or --clip-grad-norm)",
							    g->file, g->nodes[bad].line, g->nodes[bad].col,
							    g->nodes[bad].op->name, g->nodes[bad].scope,
							    (long long)R->pos.step);
				return dl_error_set(err, DL_ERUN,
						    "the loss is not finite at step %lld; training stopped",
						    (long long)R->pos.step);
			}
			dl_graph_zero_grad(g);
			const float *dout[1] = {R->dout};
			dl_graph_backward(g, dout, NULL, &ctx);
			if (R->c.clip > 0)
				dl_clip_grad_norm(g->grad_block, g->n_param_floats, R->ranges,
						  R->n_ranges, R->c.clip);
			lr = dl_lr_at(&R->sched, R->pos.step);
			dl_optim_step(&R->opt, g->param_block, g->grad_block, lr);
			R->pos.step++;
			sum += loss * (double)b;
			seen += b;
			samples += b;
			double el = now() - t0;
			double rate = el > 0 ? (double)samples / el : 0;
			int64_t left = (R->c.epochs - R->pos.epoch - 1) * n + (n - off - b);
			progress(R, R->pos.epoch, R->pos.batch + 1, nb, sum / (double)seen, rate,
				 rate > 0 ? (double)left / rate : 0, 0);
			if (R->c.checkpoint && R->c.ckpt_every > 0 &&
			    R->pos.step % R->c.ckpt_every == 0) {
				struct dl_train_pos p = R->pos;
				p.batch++;
				if (p.batch == nb) {
					p.batch = 0;
					p.epoch++;
				}
				if ((rc = dl_checkpoint_save(R->c.checkpoint, g, &R->opt, &p, err)) != 0)
					return rc;
			}
		}
		double tl = seen ? sum / (double)seen : NAN;
		double vl = NAN, va = NAN;
		if (R->val.n > 0 && (rc = validate(R, &vl, &va, err)) != 0)
			return rc;
		if (R->tty)
			fputs("\r\033[K", stderr);
		if (R->c.progress != 0) {
			if (R->val.n > 0)
				fprintf(stderr, "epoch %lld/%lld: loss %.6f  val_loss %.6f  val_accuracy %.4f  lr %.3g\n",
					(long long)R->pos.epoch + 1, R->c.epochs, tl, vl, va, lr);
			else
				fprintf(stderr, "epoch %lld/%lld: loss %.6f  lr %.3g\n",
					(long long)R->pos.epoch + 1, R->c.epochs, tl, lr);
		}
		log_json(R, R->pos.epoch + 1, tl, lr, R->val.n > 0 ? &vl : NULL,
			 R->val.n > 0 ? &va : NULL);
	}
	return 0;
}

static int setup(struct run *R, struct dl_error *err)
{
	struct cfg *c = &R->c;
	struct dl_graph *g = R->g;
	int rc;
	if (g->n_inputs != 1)
		return dl_error_set(err, DL_EINPUT, "train: the model has %d inputs; training takes "
				    "models with one input for now", g->n_inputs);
	if ((rc = dl_loss_from_name(c->loss, &R->loss, err)) != 0)
		return rc;
	int ids = dl_loss_takes_ids(R->loss);
	if (!c->data)
		return dl_error_set(err, DL_EINPUT, "train: --data is required (an .npy with --labels, or an .npz with x and y)");
	int npz = strlen(c->data) > 4 && strcmp(c->data + strlen(c->data) - 4, ".npz") == 0;
	if (strcmp(c->data, "-") == 0) {
		if (c->labels)
			return dl_error_set(err, DL_EINPUT, "train: --data - reads (x, y) pairs from "
					    "stdin; --labels does not go with it");
		rc = dl_dataset_load_stream(&R->train, stdin, ids, g->inputs[0].is_int, err);
	} else {
		if (!npz && !c->labels)
			return dl_error_set(err, DL_EINPUT, "train: --labels is required with an .npy --data");
		rc = dl_dataset_load(&R->train, c->data, "x", npz && !c->labels ? c->data : c->labels,
				     "y", ids, g->inputs[0].is_int, err);
	}
	if (rc)
		return rc;
	if (c->val_data) {
		int vnpz = strlen(c->val_data) > 4 && strcmp(c->val_data + strlen(c->val_data) - 4, ".npz") == 0;
		if (!vnpz && !c->val_labels)
			return dl_error_set(err, DL_EINPUT, "train: --val-labels is required with an .npy --val-data");
		rc = dl_dataset_load(&R->val, c->val_data, "x", c->val_labels ? c->val_labels : c->val_data,
				     "y", ids, g->inputs[0].is_int, err);
	} else if (c->val_split > 0) {
		rc = dl_dataset_split(&R->train, &R->val, c->val_split, err);
	} else if (npz) {
		/* an .npz with x_val and y_val carries its own validation split */
		struct dl_error probe = {0};
		if (dl_dataset_load(&R->val, c->data, "x_val", c->data, "y_val", ids,
				    g->inputs[0].is_int, &probe) != 0)
			memset(&R->val, 0, sizeof R->val);
	}
	if (rc)
		return rc;
	if (R->train.n < 1)
		return dl_error_set(err, DL_EINPUT, "%s: no training samples", c->data);
	/* shapes: the data's per-sample shape must be the model's */
	struct dl_shape in = R->train.xshape;
	in.d[0] = c->batch;
	if ((rc = dl_graph_infer(g, &in, err)) != 0) {
		char msg[sizeof err->msg];
		snprintf(msg, sizeof msg, "%s", err->msg);
		dl_error_clear(err);
		return dl_error_set(err, DL_EINPUT, "%s: %s", c->data, msg);
	}
	/* the whole label array against the output for all its samples */
	struct dl_shape os = g->values[g->outputs[0]].shape;
	os.d[0] = R->train.n;
	int64_t rows, cols;
	if ((rc = dl_loss_shape(R->loss, &os, &R->train.yshape, &rows, &cols, err)) != 0) {
		char msg[sizeof err->msg];
		snprintf(msg, sizeof msg, "%s", err->msg);
		dl_error_clear(err);
		return dl_error_set(err, DL_EINPUT, "%s: %s",
				    strcmp(c->data, "-") == 0 ? "stdin" : c->labels ? c->labels : c->data, msg);
	}
	if (ids) {
		const char *yname = c->labels ? c->labels : c->data;
		rc = dl_loss_check_labels(R->train.ids, dl_shape_numel(&R->train.yshape), cols,
					  c->ignore_index, yname, err);
		if (rc == 0 && R->val.n)
			rc = dl_loss_check_labels(R->val.ids, dl_shape_numel(&R->val.yshape), cols,
						  c->ignore_index, c->val_labels ? c->val_labels : yname, err);
		if (rc)
			return rc;
	}
	/* weights */
	if (c->w) {
		if ((rc = verb_weights(g, c->w, c->ignore_extra, err)) != 0)
			return rc;
	} else {
		dl_graph_init_params(g, (uint64_t)c->seed);
	}
	if ((rc = dl_graph_train_setup(g, err)) != 0)
		return rc;
	g->watch_finite = 1;  /* to name the op of a non-finite loss */
	/* trainable ranges of the parameter block */
	R->ranges = calloc((size_t)g->n_nodes * 8 + 1, sizeof *R->ranges);
	if (!R->ranges)
		return dl_error_set(err, DL_ERUN, "out of memory");
	for (int i = 0; i < g->n_nodes; i++)
		for (int k = 0; k < g->nodes[i].n_params; k++) {
			struct dl_param *p = &g->nodes[i].params[k];
			if (p->buffer || p->tie)
				continue;
			size_t off = (size_t)(p->data - g->param_block);
			size_t len = (size_t)dl_shape_numel(&p->shape);
			if (R->n_ranges && R->ranges[R->n_ranges - 1].offset +
			    R->ranges[R->n_ranges - 1].length == off)
				R->ranges[R->n_ranges - 1].length += len;
			else
				R->ranges[R->n_ranges++] = (struct dl_range){off, len};
		}
	/* optimizer and schedule */
	enum dl_optim_kind kind;
	if ((rc = dl_optim_from_name(c->optimizer, &kind, err)) != 0)
		return rc;
	struct dl_optim_config oc = dl_optim_defaults(kind);
	oc.momentum = c->momentum;
	oc.dampening = c->dampening;
	oc.nesterov = c->nesterov;
	if (c->wd_set)
		oc.weight_decay = c->weight_decay;
	if (c->betas_set) {
		oc.beta1 = c->beta1;
		oc.beta2 = c->beta2;
	}
	if (c->eps_set)
		oc.eps = c->eps;
	if ((rc = dl_optim_init(&R->opt, &oc, g->n_param_floats, R->ranges, R->n_ranges, err)) != 0)
		return rc;
	enum dl_lr_kind lk;
	if ((rc = dl_lr_from_name(c->schedule, &lk, err)) != 0)
		return rc;
	int64_t nb = (R->train.n + c->batch - 1) / c->batch;
	R->sched = (struct dl_lr_schedule){lk, c->lr, c->step_size, c->gamma, c->min_lr,
					   nb * c->epochs, c->warmup};
	if ((rc = dl_lr_check(&R->sched, err)) != 0)
		return rc;
	/* buffers for one batch */
	int64_t xs = dl_shape_prod(&R->train.xshape, 1, R->train.xshape.ndim);
	int64_t ysz = dl_shape_prod(&R->train.yshape, 1, R->train.yshape.ndim);
	int64_t outn = dl_shape_numel(&g->values[g->outputs[0]].shape);
	int64_t maxn = R->train.n > R->val.n ? R->train.n : R->val.n;
	R->bx = malloc((size_t)(c->batch * xs) * sizeof *R->bx + 1);
	R->by = malloc((size_t)(c->batch * ysz) * sizeof *R->by + 1);
	R->bids = malloc((size_t)(c->batch * ysz) * sizeof *R->bids + 1);
	R->dout = malloc((size_t)outn * sizeof *R->dout + 1);
	R->perm = malloc((size_t)maxn * sizeof *R->perm + 1);
	if (!R->bx || !R->by || !R->bids || !R->dout || !R->perm)
		return dl_error_set(err, DL_ERUN, "out of memory");
	dl_rng_seed(&R->pos.rng, (uint64_t)c->seed ^ 0x5deece66dULL);
	if (c->resume && (rc = dl_checkpoint_load(c->resume, g, &R->opt, &R->pos, err)) != 0)
		return rc;
	if (c->log) {
		R->log = fopen(c->log, c->resume ? "a" : "w");
		if (!R->log)
			return dl_error_set(err, DL_EINPUT, "%s: cannot write the log: %s", c->log,
					    strerror(errno));
	}
	R->cur_batch = -1;
	return 0;
}

static int train_main(int argc, char **argv, struct dl_error *err)
{
	static const struct option opts[] = {
		{"data", required_argument, NULL, 0}, {"labels", required_argument, NULL, 0},
		{"val-data", required_argument, NULL, 0}, {"val-labels", required_argument, NULL, 0},
		{"val-split", required_argument, NULL, 0}, {"loss", required_argument, NULL, 0},
		{"ignore-index", required_argument, NULL, 0}, {"optimizer", required_argument, NULL, 0},
		{"lr", required_argument, NULL, 0}, {"momentum", required_argument, NULL, 0},
		{"dampening", required_argument, NULL, 0}, {"nesterov", no_argument, NULL, 'N'},
		{"weight-decay", required_argument, NULL, 0}, {"betas", required_argument, NULL, 0},
		{"eps", required_argument, NULL, 0}, {"clip-grad-norm", required_argument, NULL, 0},
		{"lr-schedule", required_argument, NULL, 0}, {"step-size", required_argument, NULL, 0},
		{"gamma", required_argument, NULL, 0}, {"min-lr", required_argument, NULL, 0},
		{"warmup", required_argument, NULL, 0}, {"epochs", required_argument, NULL, 0},
		{"batch-size", required_argument, NULL, 0}, {"seed", required_argument, NULL, 0},
		{"shuffle", no_argument, NULL, 'S'}, {"no-shuffle", no_argument, NULL, 's'},
		{"weights", required_argument, NULL, 'w'}, {"output", required_argument, NULL, 'o'},
		{"checkpoint", required_argument, NULL, 0}, {"checkpoint-every", required_argument, NULL, 0},
		{"resume", required_argument, NULL, 0}, {"log", required_argument, NULL, 0},
		{"threads", required_argument, NULL, 0}, {"progress", no_argument, NULL, 'P'},
		{"no-progress", no_argument, NULL, 'q'}, {"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'}, {"ignore-extra", no_argument, NULL, 'X'},
		{NULL, 0, NULL, 0},
	};
	struct run R;
	memset(&R, 0, sizeof R);
	struct cfg *c = &R.c;
	*c = (struct cfg){.loss = "cross_entropy", .optimizer = "adam", .schedule = "constant",
			  .lr = 1e-3, .gamma = 0.1, .step_size = 1, .epochs = 10, .batch = 32,
			  .shuffle = 1, .progress = -1, .ignore_index = DL_IGNORE_INDEX_DEFAULT,
			  .ckpt_every = 0};
	/* two passes: the model first (for its train: defaults), then flags */
	const char *model = NULL;
	int rc = 0, ch, idx;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":w:o:qh", opts, &idx)) != -1) {
		if (ch == 'h') {
			verb_usage(&verb_train);
			return 0;
		}
		if (ch == '?' || ch == ':')
			return verb_bad_option("train", ch, argv, err);
	}
	if ((rc = verb_model_arg("train", argc, argv, &model, err)) != 0)
		return rc;
	if ((rc = dl_model_load(&R.g, model, err)) != 0)
		return rc;
	rc = apply_model_defaults(c, R.g, err);
	optind = 0;
	while (rc == 0 && (ch = getopt_long(argc, argv, ":w:o:qh", opts, &idx)) != -1) {
		switch (ch) {
		case 0:
			rc = set_option(c, opts[idx].name, optarg, "train: ", err);
			break;
		case 'w':
			c->w = optarg;
			break;
		case 'o':
			c->out = optarg;
			break;
		case 'N':
			c->nesterov = 1;
			break;
		case 'X':
			c->ignore_extra = 1;
			break;
		case 'S':
			c->shuffle = 1;
			break;
		case 's':
			c->shuffle = 0;
			break;
		case 'P':
			c->progress = 1;
			break;
		case 'q':
			c->progress = 0;
			break;
		}
	}
	if (rc == 0 && c->checkpoint && !c->ckpt_every)
		rc = dl_error_set(err, DL_EINPUT, "train: --checkpoint needs --checkpoint-every STEPS");
	if (rc == 0)
		rc = verb_threads("train", c->threads, err);
	char *out = NULL;
	if (rc == 0) {
		out = c->out ? strdup(c->out) : dl_model_default_weights(R.g);
		if (!out)
			rc = dl_error_set(err, DL_ERUN, "out of memory");
	}
	R.tty = c->progress == 1 ||
		(c->progress < 0 && isatty(2) && tcgetpgrp(2) == getpgrp());
	if (rc == 0)
		rc = setup(&R, err);
	if (rc == 0)
		rc = train_loop(&R, err);
	if (rc == 0) {
		const char *meta[] = {"format", "pt"};
		rc = dl_model_save_weights(R.g, out, meta, 1, err);
	}
	free(out);
	if (R.log)
		fclose(R.log);
	dl_optim_free(&R.opt);
	dl_dataset_free(&R.train);
	dl_dataset_free(&R.val);
	free(R.ranges);
	free(R.bx);
	free(R.by);
	free(R.bids);
	free(R.dout);
	free(R.perm);
	dl_graph_free(R.g);
	return rc;
}

const struct verb verb_train = {
	"train",
	"train a model on .npy/.npz data",
	"usage: dlrun train MODEL.yaml --data X [--labels Y] [options]\n"
	"\n"
	"Data:     --data X.npy --labels Y.npy, or --data D.npz (arrays x and y;\n"
	"          x_val and y_val, when present, are the validation set), or\n"
	"          --data - for (x, y) .npy pairs on stdin, concatenated\n"
	"          --val-data X --val-labels Y | --val-split F\n"
	"Loss:     --loss cross_entropy|nll|mse|bce_with_logits  --ignore-index I\n"
	"Optimizer: --optimizer sgd|adam|adamw (default adam)  --lr LR (1e-3)\n"
	"          --momentum M --dampening D --nesterov --weight-decay W\n"
	"          --betas B1,B2 --eps E --clip-grad-norm MAX\n"
	"Schedule: --lr-schedule constant|step|cosine --step-size N --gamma G\n"
	"          --min-lr LR --warmup STEPS\n"
	"Batches:  --epochs N (10) --batch-size N (32) --seed S (0)\n"
	"          --shuffle (default) | --no-shuffle\n"
	"Files:    -w INIT.safetensors (else fresh weights from --seed)\n"
	"          -o OUT.safetensors (default: the model's weights path)\n"
	"          --ignore-extra (skip, and count, keys of INIT the model does not use)\n"
	"          --checkpoint PATH --checkpoint-every STEPS, --resume PATH\n"
	"          --log PATH (JSON lines, one per epoch)\n"
	"Other:    --threads N, --progress | --no-progress | -q\n"
	"\n"
	"The model's train: mapping gives defaults under the same names with\n"
	"underscores (batch_size: 64); flags override it.\n",
	train_main,
};
