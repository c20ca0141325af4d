/* dlrun plot: the loss curves of `dlrun train --log` files as an SVG picture
 * (render/plot.h), to stdout or, atomically, to a file. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/atomic.h"
#include "render/plot.h"
#include "verbs/verbs.h"

/* A number field of a log line: *v stays NAN when it is absent or null
 * (a non-finite value is logged as null); 1 when present. */
static int field(json_t *o, const char *key, double *v, const char *path, long line,
		 struct dl_error *err)
{
	json_t *j = json_object_get(o, key);
	*v = NAN;
	if (!j || json_is_null(j))
		return 0;
	if (!json_is_number(j))
		return dl_error_set(err, DL_EINPUT, "%s:%ld: \"%s\" is not a number", path, line, key);
	*v = json_number_value(j);
	return 1;
}

/* Reads one log into r: epoch lines (loss, val_loss, val_accuracy at
 * their step and epoch) and --log-every step lines (which carry "batch").
 * The x values are steps; the epochs are kept in *epochs (loss, same
 * points) for a plot per epoch. */
static int read_log(const char *path, struct dl_plot_run *r, struct dl_plot_run *by_epoch,
		    int *has_steps, struct dl_error *err)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
	if (!f)
		return dl_error_set(err, DL_EINPUT, "%s: cannot open: %s", path, strerror(errno));
	const char *name = f == stdin ? "stdin" : path;
	struct dl_plot_series step_loss = {0};
	char *buf = NULL;
	size_t cap = 0;
	ssize_t got;
	long line = 0;
	int rc = 0, lines = 0;
	while (rc == 0 && (got = getline(&buf, &cap, f)) >= 0) {
		line++;
		const char *p = buf;
		while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
			p++;
		if (!*p)
			continue;   /* blank lines */
		json_error_t je;
		json_t *o = json_loadb(buf, (size_t)got, 0, &je);
		if (!o) {
			rc = dl_error_set(err, DL_EINPUT, "%s:%ld:%d: not a JSON line: %s", name, line,
					  je.column > 0 ? je.column : 1, je.text);
			break;
		}
		if (!json_is_object(o)) {
			json_decref(o);
			rc = dl_error_set(err, DL_EINPUT, "%s:%ld: not a JSON object (dlrun train "
					  "--log writes one object a line)", name, line);
			break;
		}
		double epoch, step, loss, vl, va;
		int has_epoch = (rc = field(o, "epoch", &epoch, name, line, err)) > 0;
		int has_step = rc >= 0 && (rc = field(o, "step", &step, name, line, err)) > 0;
		if (rc >= 0)
			rc = field(o, "loss", &loss, name, line, err);
		if (rc >= 0)
			rc = field(o, "val_loss", &vl, name, line, err);
		if (rc >= 0)
			rc = field(o, "val_accuracy", &va, name, line, err);
		int step_line = json_object_get(o, "batch") != NULL;
		json_decref(o);
		if (rc < 0)
			break;
		rc = 0;
		if (!has_epoch || !has_step) {
			rc = dl_error_set(err, DL_EINPUT, "%s:%ld: no \"%s\" number (not a line of "
					  "dlrun train --log)", name, line, has_epoch ? "step" : "epoch");
			break;
		}
		lines++;
		int bad = 0;
		if (step_line) {
			bad |= dl_plot_add(&step_loss, step, loss);
		} else {
			bad |= dl_plot_add(&r->loss, step, loss);
			bad |= dl_plot_add(&by_epoch->loss, epoch, loss);
			if (!isnan(vl)) {
				bad |= dl_plot_add(&r->val_loss, step, vl);
				bad |= dl_plot_add(&by_epoch->val_loss, epoch, vl);
			}
			if (!isnan(va)) {
				bad |= dl_plot_add(&r->val_accuracy, step, va);
				bad |= dl_plot_add(&by_epoch->val_accuracy, epoch, va);
			}
		}
		if (bad)
			rc = dl_error_set(err, DL_ERUN, "out of memory");
	}
	if (rc == 0 && ferror(f))
		rc = dl_error_set(err, DL_EINPUT, "%s: read error: %s", name, strerror(errno));
	if (rc == 0 && lines == 0)
		rc = dl_error_set(err, DL_EINPUT, "%s: no log lines (dlrun train --log PATH "
				  "writes them)", name);
	free(buf);
	if (f != stdin)
		fclose(f);
	/* per-step lines, when the log has them, draw the training loss */
	if (rc == 0 && step_loss.n > 0) {
		*has_steps = 1;
		dl_plot_series_free(&r->loss);
		r->loss = step_loss;
	} else {
		dl_plot_series_free(&step_loss);
	}
	return rc;
}

static void free_runs(struct dl_plot_run *runs, int n)
{
	for (int i = 0; runs && i < n; i++) {
		dl_plot_series_free(&runs[i].loss);
		dl_plot_series_free(&runs[i].val_loss);
		dl_plot_series_free(&runs[i].val_accuracy);
	}
	free(runs);
}

static int plot_main(int argc, char **argv, struct dl_error *err)
{
	static const struct option opts[] = {
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *out = "-";
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'o':
			out = optarg;
			break;
		case 'h':
			verb_usage(&verb_plot);
			return 0;
		default:
			return verb_bad_option("plot", c, argv, err);
		}
	}
	int n = argc - optind;
	if (n < 1)
		return dl_error_set(err, DL_EINPUT, "plot: no log file (usage: dlrun plot "
				    "run.jsonl [more.jsonl ...] [-o curve.svg])");
	if (strcmp(out, "-") == 0 && isatty(1))
		return dl_error_set(err, DL_EINPUT, "plot: the SVG would go to the terminal; "
				    "give -o FILE.svg or redirect standard output");
	int stdin_logs = 0;
	for (int i = optind; i < argc; i++)
		stdin_logs += strcmp(argv[i], "-") == 0;
	if (stdin_logs > 1)
		return dl_error_set(err, DL_EINPUT, "plot: '-' (standard input) given %d times",
				    stdin_logs);
	struct dl_plot_run *steps = calloc((size_t)n, sizeof *steps);
	struct dl_plot_run *epochs = calloc((size_t)n, sizeof *epochs);
	int rc = 0, has_steps = 0;
	if (!steps || !epochs)
		rc = dl_error_set(err, DL_ERUN, "out of memory");
	for (int i = 0; rc == 0 && i < n; i++) {
		const char *path = argv[optind + i];
		steps[i].name = epochs[i].name = strcmp(path, "-") == 0 ? "stdin" : path;
		rc = read_log(path, &steps[i], &epochs[i], &has_steps, err);
	}
	/* against steps when a log has per-step lines (--log-every), else
	 * against epochs */
	char *svg = NULL;
	size_t len = 0;
	if (rc == 0)
		rc = dl_plot_render(has_steps ? steps : epochs, n, has_steps ? "step" : "epoch",
				    &svg, &len, err);
	if (rc == 0) {
		struct dl_atomic a;
		rc = dl_atomic_open(&a, out, err);
		if (rc == 0 && fwrite(svg, 1, len, a.f) != len) {
			dl_atomic_abort(&a);
			rc = dl_error_set(err, DL_ERUN, "%s: write failed",
					  a.direct && a.f == stdout ? "stdout" : out);
		} else if (rc == 0) {
			rc = dl_atomic_commit(&a, err);
		}
	}
	free(svg);
	free_runs(steps, n);
	free_runs(epochs, n);
	return rc;
}

const struct verb verb_plot = {
	"plot",
	"draw the loss curves of training logs as an SVG picture",
	"usage: dlrun plot RUN.jsonl [MORE.jsonl ...] [-o FILE.svg]\n"
	"\n"
	"Draws the training loss, the validation loss (dashed) and, when logged,\n"
	"the validation accuracy (dashed, in a panel below) of `dlrun train --log`\n"
	"files, in the style of `dlrun draw`: axes with ticks, and a legend. The\n"
	"x axis counts steps when a log has per-step lines (--log-every), else\n"
	"epochs. Several logs: one colour a run, for comparing them. '-' reads\n"
	"a log from standard input.\n"
	"\n"
	"  -o, --output FILE      write the picture to FILE, whole or not at all\n"
	"                         (default, or '-': standard output, which must\n"
	"                         not be a terminal)\n"
	"  -h, --help             this help\n",
	plot_main,
};
