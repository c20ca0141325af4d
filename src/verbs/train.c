/* dlrun train: mini-batch training with PyTorch's losses, optimizers and
 * schedules; validation each epoch, progress, JSON-lines logs, atomic
 * checkpoints that resume to the same bytes. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/sniff.h"
#include "model/vocab.h"
#include "model/yamlutil.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/image_data.h"
#include "train/dist.h"
#include "train/loop.h"
#include "engine/session.h"
#include "train/table.h"
#include "train/text.h"
#include "verbs/verbs.h"

struct cfg {
	const char *data, *labels, *val_data, *val_labels;
	double val_split;
	const char *loss, *optimizer, *schedule;
	double lr, momentum, dampening, weight_decay, beta1, beta2, eps;
	int nesterov, wd_set, betas_set, eps_set;
	double clip, gamma, min_lr;
	long long step_size, warmup, epochs, batch, seed, ckpt_every, ignore_index;
	long long context;          /* --context: a text corpus's window; 0: default */
	const char *label;          /* --label: a CSV table's label column */
	int shuffle, progress, sync_bn;
	int ignore_extra;           /* --ignore-extra */
	const char *w, *out, *checkpoint, *resume, *log, *threads, *max_memory;
	/* choosing what to keep (train/monitor.h) */
	int keep_best;
	const char *needs_plateau, *needs_monitor, *needs_log; /* such a flag
	                                * given on the command line, or NULL */
	const char *monitor;
	long long early_stopping, patience, log_every, keep_checkpoints;
	double min_delta, factor;
	const char *loss_output;       /* output the loss applies to, or NULL */
	char loss_output_where[512];   /* where it was given, for messages */
	char loss_output_shown[64];
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
	INT(early_stopping, "early-stopping", 1)
	INT(patience, "patience", 0)
	INT(log_every, "log-every", 1)
	INT(keep_checkpoints, "keep-checkpoints", 1)
	NUM(min_delta, "min-delta", f >= 0)
	NUM(factor, "factor", f > 0 && f < 1)
	INT(context, "context", 1)
	STR(data, "data")
	STR(labels, "labels")
	STR(label, "label")
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
	STR(max_memory, "max-memory")
#undef NUM
#undef INT
#undef STR
	if (strcmp(name, "threads") == 0) {   /* checked here to say where */
		if (dl_parse_int(val, &i) || i < 1 || i > 1024)
			return dl_error_set(err, DL_EINPUT, "%s%s takes an integer from 1 to 1024, "
					    "got '%s'", where, shown, val);
		c->threads = val;
		return 0;
	}
	if (strcmp(name, "loss-output") == 0) {
		c->loss_output = val;
		snprintf(c->loss_output_where, sizeof c->loss_output_where, "%s", where);
		snprintf(c->loss_output_shown, sizeof c->loss_output_shown, "%s", shown);
		return 0;
	}
	if (strcmp(name, "monitor") == 0) {
		if (strcmp(val, "val_loss") != 0 && strcmp(val, "val_accuracy") != 0)
			return dl_error_set(err, DL_EINPUT, "%s%s: unknown value '%s' (val_loss or "
					    "val_accuracy)", where, shown, val);
		c->monitor = val;
		return 0;
	}
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
	if (strcmp(name, "ignore-extra") == 0 && b >= 0) {
		c->ignore_extra = b;
		return 0;
	}
	if (strcmp(name, "keep-best") == 0 && b >= 0) {
		c->keep_best = b;
		return 0;
	}
	if (strcmp(name, "sync-batch-norm") == 0 && b >= 0) {
		c->sync_bn = b;
		return 0;
	}
	return dl_error_set(err, DL_EINPUT, "%s%s: bad value '%s' (true or false)", where, shown, val);
}

/* Flags that mean nothing without another: remembered when given on the
 * command line (a model's train: mapping may hold them for when it is
 * used), checked by check_dependent. */
static void note_dependent(struct cfg *c, const char *name)
{
	if (strcmp(name, "factor") == 0 || strcmp(name, "patience") == 0)
		c->needs_plateau = name;
	else if (strcmp(name, "monitor") == 0 || strcmp(name, "min-delta") == 0)
		c->needs_monitor = name;
	else if (strcmp(name, "log-every") == 0)
		c->needs_log = name;
}

static int check_dependent(const struct cfg *c, struct dl_error *err)
{
	if (c->needs_plateau && strcmp(c->schedule, "plateau") != 0)
		return dl_error_set(err, DL_EINPUT, "train: --%s goes with --lr-schedule plateau "
				    "(the schedule is %s)%s", c->needs_plateau, c->schedule,
				    strcmp(c->needs_plateau, "patience") == 0 ?
				    "; early stopping's patience is --early-stopping N" : "");
	if (c->needs_monitor && !c->keep_best && !c->early_stopping &&
	    strcmp(c->schedule, "plateau") != 0)
		return dl_error_set(err, DL_EINPUT, "train: --%s goes with --keep-best, "
				    "--early-stopping N or --lr-schedule plateau", c->needs_monitor);
	if (c->needs_log && !c->log)
		return dl_error_set(err, DL_EINPUT, "train: --%s goes with --log PATH",
				    c->needs_log);
	return 0;
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
	struct dl_table_classes classes;   /* a CSV table's class names */
	struct dl_trainer t;
	struct dl_dist dist;   /* data-parallel over MPI; size 1: one process */
	FILE *log;
	char *paths[4];        /* data paths with {rank} replaced */
	char threads[24];      /* the default --threads under mpirun */
	int same_error;        /* the error is every process's: rank 0 says it */
	int tty;
	double last_draw;
	char **run_meta;       /* "run.<flag>", value pairs for checkpoints */
	int n_run_meta;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Writes x to buf with the fewest significant digits that read back to
 * the same double (0.003, not 0.0030000000000000001); null when not
 * finite. */
static void shortest_real(char *buf, size_t size, double x)
{
	if (!isfinite(x)) {
		snprintf(buf, size, "null");
		return;
	}
	for (int p = 1; p <= 17; p++) {
		snprintf(buf, size, "%.*g", p, x);
		if (strtod(buf, NULL) == x)
			break;
	}
	/* JSON wants a number that looks real: 1 -> 1.0 */
	if (!strpbrk(buf, ".eEn"))
		strncat(buf, ".0", size - strlen(buf) - 1);
}

static void log_json(struct run *R, const struct dl_epoch_report *e)
{
	if (!R->log)
		return;
	char loss[40], lr[40], vl[40], va[40];
	shortest_real(loss, sizeof loss, e->loss);
	shortest_real(lr, sizeof lr, e->lr);
	fprintf(R->log, "{\"epoch\":%lld,\"step\":%lld,\"loss\":%s",
		(long long)e->epoch, (long long)e->step, loss);
	if (e->has_balance) {
		char bl[40];
		shortest_real(bl, sizeof bl, e->balance_loss);
		fprintf(R->log, ",\"balance_loss\":%s", bl);
	}
	fprintf(R->log, ",\"lr\":%s", lr);
	if (e->has_val) {
		shortest_real(vl, sizeof vl, e->val_loss);
		fprintf(R->log, ",\"val_loss\":%s", vl);
		if (e->has_accuracy) {
			shortest_real(va, sizeof va, e->val_accuracy);
			fprintf(R->log, ",\"val_accuracy\":%s", va);
		}
	}
	fprintf(R->log, "}\n");
	fflush(R->log);
}

/* The log's length, for checkpoints (-1: no log here) */
static int64_t log_bytes(void *user)
{
	struct run *R = user;
	if (!R->log || R->log == stdout)
		return -1;
	long at = ftell(R->log);
	return at < 0 ? -1 : (int64_t)at;
}

static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
	stop_signal = sig;
}

/* A --log-every line: this step's loss and learning rate, "epoch" the
 * (1-based) epoch it belongs to and "batch" its place in it, which also
 * tells it from an epoch's line. */
static void log_step(struct run *R, const struct dl_batch_report *b)
{
	char loss[40], lr[40];
	shortest_real(loss, sizeof loss, b->step_loss);
	shortest_real(lr, sizeof lr, b->lr);
	fprintf(R->log, "{\"epoch\":%lld,\"batch\":%lld,\"step\":%lld,\"loss\":%s,\"lr\":%s}\n",
		(long long)b->epoch + 1, (long long)b->batch, (long long)b->step, loss, lr);
	fflush(R->log);
}

static void on_batch(void *user, const struct dl_batch_report *b)
{
	struct run *R = user;
	if (R->log && R->c.log_every > 0 && b->step % R->c.log_every == 0)
		log_step(R, b);
	if (!R->tty)
		return;
	double t = now();
	if (t - R->last_draw < 0.1)
		return;
	R->last_draw = t;
	fprintf(stderr, "\r\033[Kepoch %lld/%lld  step %lld/%lld  loss %.4f",
		(long long)b->epoch + 1, R->c.epochs, (long long)b->batch, (long long)b->n_batches,
		b->loss);
	if (b->has_balance)
		fprintf(stderr, "  balance_loss %.4f", b->balance_loss);
	fprintf(stderr, "  %.0f samples/s  ETA %.0fs", b->rate, b->eta);
	if (b->data_wait > 0.1)   /* the decoders do not keep up */
		fprintf(stderr, "  waiting for images %.0f%%", 100 * b->data_wait);
	fflush(stderr);
}

static void on_epoch(void *user, const struct dl_epoch_report *e)
{
	struct run *R = user;
	if (R->tty)
		fputs("\r\033[K", stderr);
	if (R->c.progress != 0) {
		fprintf(stderr, "epoch %lld/%lld: loss %.6f", (long long)e->epoch, R->c.epochs, e->loss);
		if (e->has_balance)
			fprintf(stderr, "  balance_loss %.6f", e->balance_loss);
		if (e->has_val)
			fprintf(stderr, "  val_loss %.6f", e->val_loss);
		if (e->has_val && e->has_accuracy)
			fprintf(stderr, "  val_accuracy %.4f", e->val_accuracy);
		fprintf(stderr, "  lr %.3g\n", e->lr);
	}
	log_json(R, e);
}

static int is_npz(const char *path)
{
	return strlen(path) > 4 && strcmp(path + strlen(path) - 4, ".npz") == 0;
}

/* "x, adj" */
static void input_names(const struct dl_graph *g, char *buf, size_t size)
{
	size_t used = 0;
	buf[0] = '\0';
	for (int i = 0; i < g->n_inputs && used < size; i++)
		used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "",
					 g->inputs[i].name);
}

/* A text corpus for a model with a vocab: windows of the token input's
 * length T (--context, else the model's longest). */
static int load_text(struct run *R, const struct dl_data_spec *spec, struct dl_error *err)
{
	struct cfg *c = &R->c;
	struct dl_graph *g = R->g;
	const struct dl_input_spec *in = &g->inputs[0];
	if (g->n_inputs != 1 || !in->is_int || in->ndim != 1)
		return dl_error_set(err, DL_EINPUT, "%s: a text corpus feeds a model whose one "
				    "input is its token ids, {shape: [T], dtype: int}; %s:%d:%d: "
				    "input '%s' is not", c->data, g->file, in->line, in->col,
				    g->n_inputs != 1 ? g->inputs[1].name : in->name);
	if (c->labels)
		return dl_error_set(err, DL_EINPUT, "train: %s is a text corpus, its own labels "
				    "(each window's next tokens); --labels does not go with it",
				    c->data);
	if (!spec->ids)
		return dl_error_set(err, DL_EINPUT, "train: %s is a text corpus, whose labels are "
				    "token ids; --loss %s takes float targets (use cross_entropy "
				    "or nll)", c->data, c->loss);
	int64_t T = in->d[0];
	if (T > 0 && c->context && c->context != T)
		return dl_error_set(err, DL_EINPUT, "train: --context %lld, but the model's token "
				    "input '%s' has a fixed length %lld (%s:%d:%d)", c->context,
				    in->name, (long long)T, g->file, in->line, in->col);
	if (T < 0)
		T = c->context ? c->context : dl_model_max_context(g);
	if (T < 0)
		return dl_error_set(err, DL_EINPUT, "train: give --context T for the text corpus "
				    "%s: the model's token input '%s' has a symbolic length and no "
				    "max_len (a learned positional_encoding's) bounds it", c->data,
				    in->name);
	const struct dl_vocab *v = dl_model_vocab(g);
	int rc = dl_text_load(&R->train, c->data, v, T, err);
	if (rc)
		return rc;
	if (c->val_data) {
		enum dl_file_kind k;
		if ((rc = dl_sniff_path(c->val_data, &k, err)) != 0)
			return rc;
		if (k != DL_FILE_TEXT && k != DL_FILE_CSV)
			return dl_error_set(err, DL_EINPUT, "%s: %s, but --data is a text corpus; "
					    "--val-data takes a text too", c->val_data,
					    dl_file_kind_name(k));
		if ((rc = dl_text_load(&R->val, c->val_data, v, T, err)) == 0)
			rc = dl_text_as_val(&R->val, c->val_data, err);
	} else if (c->val_split > 0) {
		rc = dl_text_split(&R->train, &R->val, c->val_split, err);
	}
	return rc;
}

/* A CSV table: the label column (--label, default the last) and float
 * features; class names become ids in sorted order, said once on stderr. */
static int load_table(struct run *R, const struct dl_data_spec *spec, struct dl_error *err)
{
	struct cfg *c = &R->c;
	struct dl_graph *g = R->g;
	const struct dl_input_spec *in = &g->inputs[0];
	if (g->n_inputs != 1)
		return dl_error_set(err, DL_EINPUT, "%s: a CSV table feeds a model with one input "
				    "of features; this one has %d", c->data, g->n_inputs);
	if (c->labels)
		return dl_error_set(err, DL_EINPUT, "train: %s is a CSV table, whose label "
				    "column gives the labels (--label COLUMN, default the last); "
				    "--labels does not go with it", c->data);
	int rc = dl_table_load(&R->train, c->data, c->label, spec->ids, NULL, &R->classes, err);
	if (rc)
		return rc;
	int64_t F = R->train.x[0].shape.d[1];
	if (in->ndim != 1 || (in->d[0] >= 0 && in->d[0] != F))
		return dl_error_set(err, DL_EINPUT, "%s: %lld feature columns, but the model's "
				    "input '%s' (%s:%d:%d) does not take [%lld] per sample",
				    c->data, (long long)F, in->name, g->file, in->line, in->col,
				    (long long)F);
	if (R->classes.n && c->progress != 0 && R->dist.rank == 0) {
		fprintf(stderr, "%s: classes of column '%s':", c->data, R->classes.column);
		for (int i = 0; i < R->classes.n; i++)
			fprintf(stderr, "%s %d %s", i ? "," : "", i, R->classes.name[i]);
		fputc('\n', stderr);
	}
	if (c->val_data) {
		enum dl_file_kind k;
		if ((rc = dl_sniff_path(c->val_data, &k, err)) != 0)
			return rc;
		if (k != DL_FILE_CSV)
			return dl_error_set(err, DL_EINPUT, "%s: %s, but --data is a CSV table; "
					    "--val-data takes a table with the same columns",
					    c->val_data, dl_file_kind_name(k));
		rc = dl_table_load(&R->val, c->val_data, c->label, spec->ids, &R->classes, NULL,
				   err);
	} else if (c->val_split > 0) {
		rc = dl_dataset_split(&R->train, &R->val, c->val_split, err);
	}
	return rc;
}

/* Class ids as float targets, for the losses that take floats (mse,
 * bce_with_logits on image folders' labels). */
static int labels_as_floats(struct dl_dataset *d, struct dl_error *err)
{
	if (!d->y.ids)
		return 0;
	int64_t n = dl_shape_numel(&d->y.shape);
	float *f = malloc((size_t)n * sizeof *f + 1);
	if (!f)
		return dl_error_set(err, DL_ERUN, "out of memory");
	for (int64_t i = 0; i < n; i++)
		f[i] = (float)d->y.ids[i];
	free(d->y.ids);
	d->y.ids = NULL;
	d->y.f = f;
	return 0;
}

/* Image folders or list files (train/image_data.h), for --data and
 * --val-data alike. */
static int load_images(struct run *R, const struct dl_data_spec *spec, struct dl_error *err)
{
	struct cfg *c = &R->c;
	if (c->labels || c->val_labels)
		return dl_error_set(err, DL_EINPUT, "train: %s is image data, labelled by its "
				    "class folders (or the list's LABEL column); --labels and "
				    "--val-labels do not go with it", c->data);
	if (c->val_split > 0)
		return dl_error_set(err, DL_EINPUT, "train: --val-split does not split image "
				    "data; give the validation images with --val-data DIR");
	if (c->val_data && dl_image_data_probe(c->val_data) != 1)
		return dl_error_set(err, DL_EINPUT, "%s: --data is image data, so --val-data is "
				    "too (a folder of class folders or a list of PATH LABEL lines)",
				    c->val_data);
	int rc = dl_image_data_load(&R->train, c->data, R->g, 1, (uint64_t)c->seed,
				    dl_threads(), NULL, err);
	if (rc == 0 && c->val_data)
		rc = dl_image_data_load(&R->val, c->val_data, R->g, 0, (uint64_t)c->seed,
					dl_threads(), NULL, err);
	if (rc == 0 && !spec->ids)
		rc = labels_as_floats(&R->train, err);
	if (rc == 0 && !spec->ids)
		rc = labels_as_floats(&R->val, err);
	return rc;
}

/* Training and validation data as the model's inputs and the loss want. */
static int load_data(struct run *R, const struct dl_data_spec *spec, struct dl_error *err)
{
	struct cfg *c = &R->c;
	struct dl_graph *g = R->g;
	int images = strcmp(c->data, "-") != 0 ? dl_image_data_probe(c->data) : 0;
	if (images == 2)
		return dl_error_set(err, DL_EINPUT, "%s: a single image; --data takes a folder "
				    "with one subfolder of images per class, or a list file of "
				    "PATH LABEL lines ('dlrun infer MODEL FILE' reads one image)",
				    c->data);
	if (images)
		return load_images(R, spec, err);
	int npz = is_npz(c->data), rc;
	char names[512];
	input_names(g, names, sizeof names);
	/* the kind of --data by its content (io/sniff.h) */
	enum dl_file_kind kind = DL_FILE_UNKNOWN;
	if (strcmp(c->data, "-") != 0) {
		struct dl_error probe = {0};
		if (dl_sniff_path(c->data, &kind, &probe) != 0)
			kind = DL_FILE_UNKNOWN;   /* the readers below say why */
		if (kind == DL_FILE_ZIP)
			npz = 1;
		else if (kind == DL_FILE_NPY)
			npz = 0;
	}
	if ((kind == DL_FILE_TEXT || kind == DL_FILE_CSV) && dl_model_vocab(g))
		return load_text(R, spec, err);
	if (c->label && kind != DL_FILE_CSV)
		return dl_error_set(err, DL_EINPUT, "train: --label names a column of a CSV "
				    "table, but %s is %s", c->data, dl_file_kind_name(kind));
	if (kind == DL_FILE_CSV)
		return load_table(R, spec, err);
	if (kind == DL_FILE_TEXT)
		return dl_error_set(err, DL_EINPUT, "%s: UTF-8 text, but the model has no vocab: "
				    "to encode it (see dlrun-model(5)); a CSV table needs a "
				    "header line of comma-separated column names", c->data);
	if (strcmp(c->data, "-") == 0) {
		if (c->labels)
			return dl_error_set(err, DL_EINPUT, "train: --data - reads, per step, one array "
					    "per input and then the labels from stdin; --labels does "
					    "not go with it");
		rc = dl_dataset_load_stream(&R->train, stdin, spec, err);
	} else if (npz) {
		rc = dl_dataset_load_npz(&R->train, c->data, 0, c->labels, spec, err);
	} else {
		if (g->n_inputs != 1)
			return dl_error_set(err, DL_EINPUT, "%s: the model has %d inputs (%s); --data "
					    "takes an .npz with one array per input, named as the "
					    "input, and the labels y (or - for a stream)",
					    c->data, g->n_inputs, names);
		if (!c->labels)
			return dl_error_set(err, DL_EINPUT, "train: --labels is required with an .npy --data");
		rc = dl_dataset_load_npy(&R->train, c->data, c->labels, spec, err);
	}
	if (rc)
		return rc;
	if (c->val_data) {
		if (is_npz(c->val_data)) {
			/* the training file's names, or their _val forms */
			struct dl_error probe = {0};
			rc = dl_dataset_load_npz(&R->val, c->val_data, 0, c->val_labels, spec, &probe);
			if (rc && dl_dataset_load_npz(&R->val, c->val_data, 1, c->val_labels, spec,
						      err) == 0 && R->val.n > 0)
				rc = 0;
			else if (rc)
				*err = probe;
		} else {
			if (g->n_inputs != 1)
				return dl_error_set(err, DL_EINPUT, "%s: the model has %d inputs (%s); "
						    "--val-data takes an .npz with one array per input",
						    c->val_data, g->n_inputs, names);
			if (!c->val_labels)
				return dl_error_set(err, DL_EINPUT,
						    "train: --val-labels is required with an .npy --val-data");
			rc = dl_dataset_load_npy(&R->val, c->val_data, c->val_labels, spec, err);
		}
	} else if (c->val_split > 0) {
		rc = dl_dataset_split(&R->train, &R->val, c->val_split, err);
	} else if (npz) {
		/* an .npz with <input>_val and y_val carries its own validation
		 * split (none: an empty set) */
		rc = dl_dataset_load_npz(&R->val, c->data, 1, NULL, spec, err);
	}
	if (rc)
		return rc;
	if (R->train.n < 1)
		return dl_error_set(err, DL_EINPUT, "%s: no training samples", c->data);
	return 0;
}

static int setup(struct run *R, struct dl_error *err)
{
	struct cfg *c = &R->c;
	struct dl_graph *g = R->g;
	struct dl_trainer *t = &R->t;
	int rc;
	if ((rc = dl_loss_from_name(c->loss, &t->step.loss, err)) != 0)
		return rc;
	t->step.out = 0;
	if (c->loss_output) {
		t->step.out = dl_step_output(g, c->loss_output);
		if (t->step.out < 0) {
			char outs[512];
			size_t used = 0;
			outs[0] = '\0';
			for (int k = 0; k < g->n_outputs && used < sizeof outs; k++)
				used += (size_t)snprintf(outs + used, sizeof outs - used, "%s%s",
							 k ? ", " : "", g->output_names[k]);
			return dl_error_set(err, DL_EINPUT, "%s%s: the model has no output '%s' "
					    "(its outputs: %s)", c->loss_output_where,
					    c->loss_output_shown, c->loss_output, outs);
		}
	}
	int ids = dl_loss_takes_ids(t->step.loss);
	if (!c->data)
		return dl_error_set(err, DL_EINPUT, "train: --data is required (an .npy with --labels, "
				    "or an .npz with one array per input and y)");
	struct dl_data_spec spec = {g->n_inputs, g->inputs, ids};
	if ((rc = load_data(R, &spec, err)) != 0)
		return rc;
	/* shapes: the data's per-sample shapes must be the model's */
	struct dl_shape *in = calloc((size_t)g->n_inputs + 1, sizeof *in);
	if (!in)
		return dl_error_set(err, DL_ERUN, "out of memory");
	for (int i = 0; i < g->n_inputs; i++) {
		in[i] = R->train.x[i].shape;
		in[i].d[0] = c->batch;
	}
	rc = dl_graph_infer(g, in, err);
	free(in);
	if (rc) {
		char msg[sizeof err->msg];
		snprintf(msg, sizeof msg, "%s", err->msg);
		dl_error_clear(err);
		return dl_error_set(err, DL_EINPUT, "%s: %s", c->data, msg);
	}
	/* the whole label array against the loss output for all its samples */
	struct dl_shape os = g->values[g->outputs[t->step.out]].shape;
	os.d[0] = R->train.n;
	int64_t rows, cols;
	const char *yname = strcmp(c->data, "-") == 0 ? "stdin" : c->labels ? c->labels : c->data;
	if ((rc = dl_loss_shape(t->step.loss, &os, &R->train.y.shape, &rows, &cols, err)) != 0) {
		char msg[sizeof err->msg];
		snprintf(msg, sizeof msg, "%s", err->msg);
		dl_error_clear(err);
		if (g->n_outputs > 1)
			return dl_error_set(err, DL_EINPUT, "%s: %s (the loss is on output '%s')", yname,
					    msg, g->output_names[t->step.out]);
		return dl_error_set(err, DL_EINPUT, "%s: %s", yname, msg);
	}
	if (R->train.text) {
		/* the vocabulary against the logits; the ids against the
		 * embedding (the largest one stands for all) */
		float top = (float)R->train.text->max_id;
		rc = dl_vocab_check_output(g, t->step.out, err);
		if (rc == 0)
			rc = dl_graph_check_input_ids(g, 0, &top, 1, c->data, err);
		if (rc)
			return rc;
	} else if (ids) {
		rc = dl_loss_check_labels(R->train.y.ids, dl_shape_numel(&R->train.y.shape), cols,
					  c->ignore_index, yname, err);
		if (rc == 0 && R->val.n)
			rc = dl_loss_check_labels(R->val.y.ids, dl_shape_numel(&R->val.y.shape), cols,
						  c->ignore_index,
						  c->val_labels ? c->val_labels : c->val_data ? c->val_data : yname,
						  err);
		if (rc)
			return rc;
	}
	/* token ids that feed an embedding: in its vocabulary, as infer checks
	 * them (else they would look up zero vectors, silently) */
	for (int i = 0; rc == 0 && !R->train.text && i < g->n_inputs; i++) {
		if (!g->inputs[i].is_int)
			continue;
		rc = dl_graph_check_input_ids(g, i, R->train.x[i].f, dl_shape_numel(&R->train.x[i].shape),
					  strcmp(c->data, "-") == 0 ? "stdin" : c->data, err);
		if (rc == 0 && R->val.n)
			rc = dl_graph_check_input_ids(g, i, R->val.x[i].f,
						  dl_shape_numel(&R->val.x[i].shape),
						  c->val_data ? c->val_data : c->data, err);
	}
	if (rc)
		return rc;
	/* weights */
	if (c->w) {
		if (strcmp(c->w, "-") == 0 && c->data && strcmp(c->data, "-") == 0)
			return dl_error_set(err, DL_EINPUT, "train: -w - and --data - cannot "
					    "both read stdin");
		if ((rc = verb_weights(g, c->w, c->ignore_extra, err)) != 0)
			return rc;
	} else {
		dl_graph_init_params(g, (uint64_t)c->seed);
	}
	if ((rc = dl_graph_train_setup(g, err)) != 0)
		return rc;
	g->watch_finite = 1;  /* to name the op of a non-finite loss */
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
	enum dl_lr_kind lk;
	if ((rc = dl_lr_from_name(c->schedule, &lk, err)) != 0)
		return rc;
	t->g = g;
	t->train = &R->train;
	t->val = &R->val;
	t->step.ignore_index = c->ignore_index;
	t->step.clip = c->clip;
	t->oc = oc;
	t->sched = (struct dl_lr_schedule){lk, c->lr, c->step_size, c->gamma, c->min_lr, 0,
					   c->warmup};
	t->epochs = c->epochs;
	t->batch = c->batch;
	t->seed = c->seed;
	t->shuffle = c->shuffle;
	t->checkpoint = c->checkpoint;
	t->ckpt_every = c->ckpt_every;
	t->keep_checkpoints = c->keep_checkpoints;
	t->run_meta = (const char *const *)R->run_meta;
	t->n_run_meta = R->n_run_meta;
	enum dl_monitor_kind mk = DL_MONITOR_VAL_LOSS;
	if (c->monitor && (rc = dl_monitor_from_name(c->monitor, &mk, err)) != 0)
		return rc;
	t->mon = (struct dl_monitor){.kind = mk, .keep_best = c->keep_best,
				     .early_stopping = c->early_stopping,
				     .min_delta = c->min_delta, .plateau = lk == DL_LR_PLATEAU};
	t->mon.p.factor = c->factor;
	t->mon.p.patience = c->patience;
	t->mon.p.min_lr = c->min_lr;
	t->resume = c->resume;
	t->on_batch = on_batch;
	t->on_epoch = on_epoch;
	t->log_bytes = log_bytes;
	t->user = R;
	t->dist = &R->dist;
	if ((rc = dl_trainer_init(t, err)) != 0)
		return rc;
	if (c->log && strcmp(c->log, "-") == 0 && R->dist.rank == 0) {
		R->log = stdout;   /* `-` is standard output (-o - too, then) */
	} else if (c->log && R->dist.rank == 0) {   /* rank 0 alone logs */
		/* a resumed run continues the log from its checkpoint's point:
		 * lines written after it (by a run killed later) are cut, so the
		 * log ends as an uninterrupted run's */
		struct stat sb;
		if (c->resume && t->pos.log_bytes >= 0 && stat(c->log, &sb) == 0 &&
		    S_ISREG(sb.st_mode) && sb.st_size > t->pos.log_bytes &&
		    truncate(c->log, (off_t)t->pos.log_bytes) != 0)
			return dl_error_set(err, DL_ERUN, "%s: cannot cut the log back to its "
					    "checkpoint's %lld bytes: %s", c->log,
					    (long long)t->pos.log_bytes, strerror(errno));
		R->log = fopen(c->log, c->resume ? "a" : "w");
		if (!R->log)
			return dl_error_set(err, DL_EINPUT, "%s: cannot write the log: %s", c->log,
					    strerror(errno));
		fseek(R->log, 0, SEEK_END);   /* ftell counts from the file's start */
	}
	return 0;
}

/* ---- the run's flags, kept in checkpoints ---- */

/* FNV-1a of the file's bytes as 16 hex digits; "" when unreadable. */
static void file_hash(const char *path, char out[17])
{
	FILE *f = path ? fopen(path, "rb") : NULL;
	out[0] = '\0';
	if (!f)
		return;
	uint64_t h = 0xcbf29ce484222325ULL;
	unsigned char buf[8192];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, f)) > 0)
		for (size_t i = 0; i < n; i++)
			h = (h ^ buf[i]) * 0x100000001b3ULL;
	if (!ferror(f))
		snprintf(out, 17, "%016llx", (unsigned long long)h);
	fclose(f);
}

static int add_meta(struct run *R, const char *flag, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int add_meta(struct run *R, const char *flag, const char *fmt, ...)
{
	char key[64], val[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(val, sizeof val, fmt, ap);
	va_end(ap);
	snprintf(key, sizeof key, "run.%s", flag);
	char **m = realloc(R->run_meta, (size_t)(R->n_run_meta + 1) * 2 * sizeof *m);
	if (!m)
		return -1;
	R->run_meta = m;
	m[2 * R->n_run_meta] = strdup(key);
	m[2 * R->n_run_meta + 1] = strdup(val);
	R->n_run_meta++;
	return m[2 * R->n_run_meta - 2] && m[2 * R->n_run_meta - 1] ? 0 : -1;
}

/* A double in the fewest digits that read back the same (0.05). */
static int add_real(struct run *R, const char *flag, double x)
{
	char buf[40];
	for (int p = 1; p <= 17; p++) {
		snprintf(buf, sizeof buf, "%.*g", p, x);
		if (strtod(buf, NULL) == x)
			break;
	}
	return add_meta(R, flag, "%s", buf);
}

/* The flags that define the run, as given (before mpirun's {rank} and
 * batch split): a resumed run must have the same ones (train/loop.c). */
static int record_run(struct run *R, struct dl_error *err)
{
	const struct cfg *c = &R->c;
	char h[17];
	file_hash(R->g->file, h);
#define S(x) ((x) ? (x) : "")
	int bad = 0;
	if (h[0])
		bad |= add_meta(R, "model", "%s", h);
	bad |= add_meta(R, "data", "%s", S(c->data));
	bad |= add_meta(R, "labels", "%s", S(c->labels));
	bad |= add_meta(R, "val-data", "%s", S(c->val_data));
	bad |= add_meta(R, "val-labels", "%s", S(c->val_labels));
	bad |= add_real(R, "val-split", c->val_split);
	bad |= add_meta(R, "context", "%lld", (long long)c->context);
	bad |= add_meta(R, "label", "%s", S(c->label));
	bad |= add_meta(R, "loss", "%s", c->loss);
	bad |= add_meta(R, "loss-output", "%s", S(c->loss_output));
	bad |= add_meta(R, "ignore-index", "%lld", c->ignore_index);
	bad |= add_meta(R, "optimizer", "%s", c->optimizer);
	bad |= add_real(R, "lr", c->lr);
	bad |= add_real(R, "momentum", c->momentum);
	bad |= add_real(R, "dampening", c->dampening);
	bad |= add_meta(R, "nesterov", "%s", c->nesterov ? "true" : "false");
	if (c->wd_set)
		bad |= add_real(R, "weight-decay", c->weight_decay);
	else
		bad |= add_meta(R, "weight-decay", "%s", "");
	if (c->betas_set)
		bad |= add_meta(R, "betas", "%.9g,%.9g", c->beta1, c->beta2);
	else
		bad |= add_meta(R, "betas", "%s", "");
	if (c->eps_set)
		bad |= add_real(R, "eps", c->eps);
	else
		bad |= add_meta(R, "eps", "%s", "");
	bad |= add_real(R, "clip-grad-norm", c->clip);
	bad |= add_meta(R, "lr-schedule", "%s", c->schedule);
	bad |= add_meta(R, "step-size", "%lld", c->step_size);
	bad |= add_real(R, "gamma", c->gamma);
	bad |= add_real(R, "min-lr", c->min_lr);
	bad |= add_meta(R, "warmup", "%lld", c->warmup);
	bad |= add_real(R, "factor", c->factor);
	bad |= add_meta(R, "patience", "%lld", c->patience);
	bad |= add_meta(R, "batch-size", "%lld", c->batch);
	bad |= add_meta(R, "seed", "%lld", c->seed);
	bad |= add_meta(R, "shuffle", "%s", c->shuffle ? "true" : "false");
	bad |= add_meta(R, "monitor", "%s", S(c->monitor) [0] ? c->monitor : "val_loss");
	bad |= add_meta(R, "keep-best", "%s", c->keep_best ? "true" : "false");
	bad |= add_meta(R, "early-stopping", "%lld", c->early_stopping);
	bad |= add_real(R, "min-delta", c->min_delta);
	/* --epochs may grow, except where it sets the schedule's length */
	if (strcmp(c->schedule, "cosine") == 0)
		bad |= add_meta(R, "epochs", "%lld", c->epochs);
#undef S
	return bad ? dl_error_set(err, DL_ERUN, "out of memory") : 0;
}

/* After the run: the early stop's line, and --keep-best's state into the
 * model before it is written. */
static void finish_monitor(struct run *R)
{
	const struct dl_monitor *m = &R->t.mon;
	const char *what = dl_monitor_name(m->kind);
	if (m->stop && R->dist.rank == 0) {
		fprintf(stderr, "early stopping at epoch %lld: %s has not improved by more than "
			"%g for %lld epoch%s (best %g at epoch %lld)\n",
			(long long)R->t.pos.epoch, what, m->min_delta,
			(long long)m->early_stopping, m->early_stopping == 1 ? "" : "s", m->best,
			(long long)m->best_epoch);
	}
	if (m->keep_best && m->best_epoch > 0) {
		memcpy(R->g->param_block, m->best_state, m->n * sizeof *m->best_state);
		if (R->c.progress != 0 && R->dist.rank == 0)
			fprintf(stderr, "keep-best: the weights of epoch %lld (%s %g)\n",
				(long long)m->best_epoch, what, m->best);
	}
}

/* ---- data-parallel training (train/dist.h) ---- */

/* path with every "{rank}" replaced by the rank, in a malloc()ed string
 * kept in *keep (freed by the caller); path itself when it has none. */
static const char *rank_path(const char *path, int rank, char **keep)
{
	if (!path || !strstr(path, "{rank}"))
		return path;
	size_t len = strlen(path) + 1;
	for (const char *p = path; (p = strstr(p, "{rank}")); p += 6)
		len += 16;
	char *s = malloc(len), *o = s;
	if (!s)
		return path;
	for (const char *p = path; *p;) {
		if (strncmp(p, "{rank}", 6) == 0) {
			o += sprintf(o, "%d", rank);
			p += 6;
		} else {
			*o++ = *p++;
		}
	}
	*o = '\0';
	*keep = s;
	return s;
}

/* Starts MPI under mpirun; one data file per process when --data names
 * {rank}, and then the global batch must divide among the processes. */
static int dist_setup(struct run *R, struct dl_error *err)
{
	struct cfg *c = &R->c;
	int rc = dl_dist_open(&R->dist, err);
	if (rc)
		return rc;
	struct dl_dist *d = &R->dist;
	d->sync_bn = c->sync_bn;
	if (d->size < 2)
		return 0;
	long long k = d->size;
	/* the machine's processors shared by its processes of the job */
	const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
	long nproc = sysconf(_SC_NPROCESSORS_ONLN), local = ls ? atol(ls) : 1;
	if (!c->threads && local > 1 && nproc > 0) {
		snprintf(R->threads, sizeof R->threads, "%ld", nproc / local > 1 ? nproc / local : 1);
		c->threads = R->threads;
	}
	/* With one file for all, a global batch that does not divide gives
	 * shares of different sizes, each gradient weighted by its share (as
	 * every epoch's last batch is); with one file per process, each takes
	 * batch / k samples of its own at every step. */
	if (c->batch % k != 0 && c->data && strstr(c->data, "{rank}")) {
		R->same_error = 1;   /* every process finds it */
		long long lo = c->batch / k * k, hi = lo + k;
		if (lo > 0)
			return dl_error_set(err, DL_EINPUT, "train: --batch-size %lld (the global batch) "
					    "does not divide among %lld processes, each reading its own "
					    "file; %lld or %lld would",
					    c->batch, k, lo, hi);
		return dl_error_set(err, DL_EINPUT, "train: --batch-size %lld (the global batch) "
				    "does not divide among %lld processes, each reading its own "
				    "file; %lld (or a multiple of %lld) would", c->batch, k, hi, k);
	}
	if (c->data && strcmp(c->data, "-") == 0) {
		R->same_error = 1;
		return dl_error_set(err, DL_EINPUT, "train: --data - (a stream on stdin) cannot be "
				    "shared among %lld processes; give a file (or one per process: "
				    "--data 'shard-{rank}.npz')", k);
	}
	if (c->data && strstr(c->data, "{rank}")) {
		d->local_data = 1;
		c->batch /= k;   /* each process's batch of its own file */
	}
	c->data = rank_path(c->data, d->rank, &R->paths[0]);
	c->labels = rank_path(c->labels, d->rank, &R->paths[1]);
	c->val_data = rank_path(c->val_data, d->rank, &R->paths[2]);
	c->val_labels = rank_path(c->val_labels, d->rank, &R->paths[3]);
	return 0;
}

/* One file per process: every file must hold as many samples, so that
 * every process takes as many steps. */
static int dist_check_data(struct run *R, struct dl_error *err)
{
	struct dl_dist *d = &R->dist;
	if (d->size < 2 || !d->local_data)
		return 0;
	double n = (double)R->train.n, s[2] = {n, n * n};
	int rc = dl_dist_sum(d, s, 2, err);
	if (rc)
		return rc;
	if (s[1] * d->size != s[0] * s[0])
		return dl_error_set(err, DL_EINPUT, "%s: %lld samples, but the files of the other "
				    "processes hold %.0f in all; with one file per process every "
				    "file needs as many samples", R->c.data, (long long)R->train.n,
				    s[0] - n);
	return 0;
}

/* The end of a data-parallel run: a failing process ends the whole job
 * with one line naming it; the others wait for rank 0's files. */
static int dist_finish(struct run *R, int rc, struct dl_error *err)
{
	struct dl_dist *d = &R->dist;
	if (d->active && d->size > 1) {
		if (rc && R->same_error && d->rank != 0)
			dl_dist_wait_abort(d);   /* rank 0 says it */
		if (rc) {
			fprintf(stderr, "dlrun: rank %d: %s\n", d->rank,
				err->msg[0] ? err->msg : "failed");
			dl_dist_abort(d, rc == DL_EINPUT ? 2 : 1);
		}
		double done = 1;   /* every rank waits until rank 0 has written */
		rc = dl_dist_sum(d, &done, 1, err);
		if (rc == 0 && d->rank == 0 && R->c.progress != 0)
			fprintf(stderr, "mpi: %d processes, %.3f s in MPI_Allreduce (%lld calls)\n",
				d->size, d->allreduce_s, (long long)d->allreduce_calls);
	}
	dl_dist_close(d);
	return rc;
}

static int train_main(int argc, char **argv, struct dl_error *err)
{
	static const struct option opts[] = {
		{"data", required_argument, NULL, 0}, {"labels", required_argument, NULL, 0},
		{"val-data", required_argument, NULL, 0}, {"val-labels", required_argument, NULL, 0},
		{"val-split", required_argument, NULL, 0}, {"loss", required_argument, NULL, 0},
		{"loss-output", required_argument, NULL, 0},
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
		{"threads", required_argument, NULL, 't'}, {"progress", no_argument, NULL, 'P'},
		{"max-memory", required_argument, NULL, 0},
		{"context", required_argument, NULL, 0}, {"label", required_argument, NULL, 0},
		{"no-progress", no_argument, NULL, 'q'}, {"quiet", no_argument, NULL, 'q'},
		{"sync-batch-norm", no_argument, NULL, 'B'},
		{"keep-best", no_argument, NULL, 'k'}, {"monitor", required_argument, NULL, 0},
		{"early-stopping", required_argument, NULL, 0},
		{"min-delta", required_argument, NULL, 0}, {"factor", required_argument, NULL, 0},
		{"patience", required_argument, NULL, 0}, {"log-every", required_argument, NULL, 0},
		{"keep-checkpoints", required_argument, NULL, 0},
		{"help", no_argument, NULL, 'h'}, {"ignore-extra", no_argument, NULL, 'X'},
		{NULL, 0, NULL, 0},
	};
	struct run R;
	memset(&R, 0, sizeof R);
	struct cfg *c = &R.c;
	*c = (struct cfg){.loss = "cross_entropy", .optimizer = "adam", .schedule = "constant",
			  .lr = 1e-3, .gamma = 0.1, .step_size = 1, .epochs = 10, .batch = 32,
			  .shuffle = 1, .progress = -1, .ignore_index = DL_IGNORE_INDEX_DEFAULT,
			  .ckpt_every = 0, .factor = 0.1, .patience = 10};
	/* two passes: the model first (for its train: defaults), then flags */
	const char *model = NULL;
	int rc = 0, ch, idx;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":w:o:t:qh", opts, &idx)) != -1) {
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
	while (rc == 0 && (ch = getopt_long(argc, argv, ":w:o:t:qh", opts, &idx)) != -1) {
		switch (ch) {
		case 0:
			rc = set_option(c, opts[idx].name, optarg, "train: ", err);
			note_dependent(c, opts[idx].name);
			break;
		case 'w':
			c->w = optarg;
			break;
		case 'o':
			c->out = optarg;
			break;
		case 't':
			c->threads = optarg;
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
		case 'B':
			c->sync_bn = 1;
			break;
		case 'k':
			c->keep_best = 1;
			break;
		}
	}
	if (rc == 0)
		rc = check_dependent(c, err);
	if (rc == 0)
		rc = record_run(&R, err);
	if (rc == 0)
		rc = dist_setup(&R, err);
	if (rc == 0 && c->checkpoint && !c->ckpt_every)
		rc = dl_error_set(err, DL_EINPUT, "train: --checkpoint needs --checkpoint-every STEPS");
	if (rc == 0 && c->keep_checkpoints && !dl_checkpoint_path_has_fields(c->checkpoint))
		rc = dl_error_set(err, DL_EINPUT, "train: --keep-checkpoints needs a --checkpoint "
				  "path with {step} or {epoch} (one file per checkpoint), e.g. "
				  "--checkpoint 'ck-{step}.safetensors'");
	if (rc == 0)
		rc = verb_threads("train", c->threads, err);
	if (rc == 0)
		rc = verb_max_memory("train", c->max_memory, err);
	char *out = NULL;
	if (rc == 0) {
		out = c->out ? strdup(c->out) : dl_model_default_weights(R.g);
		if (!out)
			rc = dl_error_set(err, DL_ERUN, "out of memory");
	}
	if (R.dist.rank != 0)   /* rank 0 alone shows progress */
		c->progress = 0;
	R.tty = c->progress == 1 ||
		(c->progress < 0 && isatty(2) && tcgetpgrp(2) == getpgrp());
	if (rc == 0)
		rc = setup(&R, err);
	if (rc == 0)
		rc = dist_check_data(&R, err);
	if (rc == 0) {
		/* SIGINT or SIGTERM stops at the next step boundary (after a
		 * checkpoint); the handler resets itself, so a second one ends
		 * the process at once (output files are renamed into place
		 * whole, so none is left half-written). */
		struct sigaction sa, old_int, old_term;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_stop_signal;
		sa.sa_flags = SA_RESETHAND;
		sigemptyset(&sa.sa_mask);
		stop_signal = 0;
		R.t.stop = &stop_signal;
		sigaction(SIGINT, &sa, &old_int);
		sigaction(SIGTERM, &sa, &old_term);
		rc = dl_trainer_run(&R.t, err);
		sigaction(SIGINT, &old_int, NULL);
		sigaction(SIGTERM, &old_term, NULL);
	}
	if (rc == 0)
		finish_monitor(&R);
	if (rc == 0 && R.dist.rank == 0) {   /* rank 0 alone writes */
		const char *meta[] = {"format", "pt"};
		rc = dl_model_save_weights(R.g, out, meta, 1, err);
	}
	rc = dist_finish(&R, rc, err);
	free(out);
	for (int i = 0; i < 4; i++)
		free(R.paths[i]);
	for (int i = 0; i < 2 * R.n_run_meta; i++)
		free(R.run_meta[i]);
	free(R.run_meta);
	if (R.log && R.log != stdout)
		fclose(R.log);
	dl_trainer_free(&R.t);
	dl_dataset_free(&R.train);
	dl_dataset_free(&R.val);
	dl_table_classes_free(&R.classes);
	dl_graph_free(R.g);
	return rc;
}

const struct verb verb_train = {
	"train",
	"train a model on .npy/.npz data, a text corpus, a CSV table or image folders",
	"usage: dlrun train MODEL.yaml --data X [--labels Y] [options]\n"
	"\n"
	"Data:     --data X.npy --labels Y.npy (one input), or --data D.npz (one\n"
	"          array per model input, named as the input, or x; labels y;\n"
	"          <input>_val and y_val, when present, are the validation set),\n"
	"          or --data - (per step one .npy per input in the model's\n"
	"          order, then the labels, on stdin; concatenated)\n"
	"          --data corpus.txt (a model with a vocab): windows of\n"
	"          --context T ids at random offsets, labels the next ids\n"
	"          --data table.csv (a header line): --label COLUMN (default\n"
	"          the last; class names become ids in sorted order)\n"
	"          --val-data X --val-labels Y | --val-split F\n"
	"          or --data DIR [--val-data DIR]: images, one subfolder per\n"
	"          class (or a list file of PATH LABEL lines), prepared by the\n"
	"          model's data: pipelines\n"
	"Loss:     --loss cross_entropy|nll|mse|bce_with_logits  --ignore-index I\n"
	"          --loss-output NAME (the output the loss applies to; default\n"
	"          the first)\n"
	"Optimizer: --optimizer sgd|adam|adamw (default adam)  --lr LR (1e-3)\n"
	"          --momentum M --dampening D --nesterov --weight-decay W\n"
	"          --betas B1,B2 --eps E --clip-grad-norm MAX\n"
	"Schedule: --lr-schedule constant|step|cosine|plateau --step-size N\n"
	"          --gamma G --min-lr LR --warmup STEPS\n"
	"          plateau: --factor F (0.1) --patience N (10), as ReduceLROnPlateau\n"
	"          on the monitored value, once per epoch\n"
	"Keeping:  --keep-best (-o gets the epoch with the best monitored value)\n"
	"          --monitor val_loss|val_accuracy (default val_loss; needs\n"
	"          validation data)  --early-stopping N (end after N epochs\n"
	"          without improvement)  --min-delta D (what counts as one; 0)\n"
	"Batches:  --epochs N (10) --batch-size N (32) --seed S (0)\n"
	"          --shuffle (default) | --no-shuffle\n"
	"Files:    -w INIT.safetensors (else fresh weights from --seed)\n"
	"          -o OUT.safetensors (default: the model's weights path)\n"
	"          --ignore-extra (skip, and count, keys of INIT the model does not use)\n"
	"          --checkpoint PATH --checkpoint-every STEPS (PATH may hold\n"
	"          {step} and {epoch}: one file each; --keep-checkpoints K keeps\n"
	"          the last K), --resume PATH (the same flags; --epochs may grow)\n"
	"          --log PATH (JSON lines, one per epoch) --log-every N (and one\n"
	"          every N steps)\n"
	"Other:    -t, --threads N (BLAS and op threads; default: all cores)\n"
	"          --progress | --no-progress | -q\n"
	"          --max-memory SIZE (refuse a bigger plan; default 80% of RAM)\n"
	"Several processes: mpirun -np K dlrun train ... (built with MPI):\n"
	"          --batch-size is the global batch; --sync-batch-norm;\n"
	"          --data 'shard-{rank}.npz' for one file per process\n"
	"\n"
	"The model's train: mapping gives defaults under the same names with\n"
	"underscores (batch_size: 64); flags override it.\n",
	train_main,
};
