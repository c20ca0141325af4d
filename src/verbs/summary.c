/* dlrun summary: one row per entry with output shape, parameters,
 * multiply-adds and activation bytes, then totals and planned memory. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verbs/verbs.h"

struct totals {
	int64_t params, macs;
};

static struct totals row_totals(const struct dl_graph *g, const struct dl_row *r)
{
	struct totals t = {0, 0};
	for (int i = r->first; i <= r->last; i++) {
		const struct dl_node *n = &g->nodes[i];
		t.macs += n->macs;
		for (int k = 0; k < n->n_params; k++)
			if (!n->params[k].buffer && !n->params[k].tie)
				t.params += dl_shape_numel(&n->params[k].shape);
	}
	return t;
}

static void human(char *buf, size_t size, double bytes)
{
	const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int u = 0;
	while (bytes >= 1024 && u < 4) {
		bytes /= 1024;
		u++;
	}
	snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
}

/* The shape of a row's output into buf, "[a], [b]" for an entry with
 * several outputs; returns their floats. */
static int64_t row_shape(const struct dl_graph *g, const struct dl_row *row,
			 char *buf, size_t size)
{
	int v = row->value, p = g->values[v].producer, n = 1;
	if (p >= 0 && g->nodes[p].out == v && g->nodes[p].n_out > 1)
		n = g->nodes[p].n_out;
	int64_t floats = 0;
	size_t used = 0;
	buf[0] = '\0';
	for (int k = 0; k < n; k++) {
		char one[128];
		dl_shape_str(&g->values[v + k].shape, one, sizeof one);
		floats += dl_shape_numel(&g->values[v + k].shape);
		if (used < size)
			used += (size_t)snprintf(buf + used, size - used, "%s%s",
						 k ? ", " : "", one);
	}
	return floats;
}

static int print_json(const struct dl_graph *g, int64_t batch, size_t train_bytes)
{
	json_t *rows = json_array();
	char shape[256];
	for (int r = 0; r < g->n_rows; r++) {
		const struct dl_row *row = &g->rows[r];
		struct totals t = row_totals(g, row);
		int64_t floats = row_shape(g, row, shape, sizeof shape);
		json_array_append_new(rows, json_pack("{s:s, s:s, s:i, s:s, s:I, s:I, s:I}",
			"scope", row->scope, "op", row->kind, "depth", row->depth,
			"output_shape", shape, "params", (json_int_t)t.params,
			"macs", (json_int_t)t.macs,
			"activation_bytes", (json_int_t)(floats * 4)));
	}
	int64_t buffers, params = dl_model_count_params(g, &buffers);
	int64_t macs = 0;
	for (int i = 0; i < g->n_nodes; i++)
		macs += g->nodes[i].macs;
	json_t *o = json_pack("{s:s, s:I, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
		"model", g->name ? g->name : g->file, "batch", (json_int_t)batch,
		"entries", rows, "params", (json_int_t)params,
		"buffers", (json_int_t)buffers, "macs", (json_int_t)macs,
		"weights_bytes", (json_int_t)((params + buffers) * 4),
		"activation_bytes", (json_int_t)g->arena_bytes,
		"workspace_bytes", (json_int_t)g->ws_bytes,
		"kept_bytes", (json_int_t)g->keep_bytes,
		"peak_bytes", (json_int_t)(g->arena_bytes + g->ws_bytes + g->keep_bytes +
					   (size_t)(params + buffers) * 4));
	if (train_bytes)
		json_object_set_new(o, "training_bytes", json_integer((json_int_t)train_bytes));
	/* the model inputs of one batch, as float32: the caller's buffers */
	int64_t in_floats = 0;
	for (int i = 0; i < g->n_inputs; i++)
		in_floats += dl_shape_numel(&g->values[i].shape);
	json_object_set_new(o, "input_bytes", json_integer((json_int_t)(in_floats * 4)));
	char *s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!s)
		return -1;
	puts(s);
	free(s);
	return 0;
}

/* The key problems of a weights file that failed to load, as a table on
 * stdout (the error itself is still the one line main.c prints). */
static void print_weight_problems(struct dl_graph *g, const char *path,
				  int ignore_extra)
{
	struct dl_error e = {0};
	struct dl_weights_problem *p;
	int n;
	if (dl_model_check_weights(g, path, ignore_extra, &p, &n, &e) != 0 || n == 0)
		return;
	static const char *const what[3] = {"missing", "unexpected", "mis-shaped"};
	int kw = 3;
	for (int i = 0; i < n; i++)
		if ((int)strlen(p[i].key) > kw)
			kw = (int)strlen(p[i].key);
	printf("%s: %d key problem%s\n", path, n, n == 1 ? "" : "s");
	printf("%-*s  %-10s  %-16s  %-16s  %s\n", kw, "key", "problem", "in the file",
	       "the model needs", "entry");
	for (int i = 0; i < n; i++) {
		char fs[128] = "-", ms[128] = "-", at[64] = "-";
		if (p[i].kind != 0)
			dl_shape_str(&p[i].file, fs, sizeof fs);
		if (p[i].kind != 1)
			dl_shape_str(&p[i].model, ms, sizeof ms);
		if (p[i].line)
			snprintf(at, sizeof at, "%d:%d", p[i].line, p[i].col);
		printf("%-*s  %-10s  %-16s  %-16s  %s\n", kw, p[i].key, what[p[i].kind],
		       fs, ms, at);
	}
	fflush(stdout);
	free(p);
}

/* The rows' labels into label[]: the entry's own scope, but the full scope
 * for an entry of a repeat's copy (blocks.0.fc, blocks.1.fc), whose own
 * scopes repeat. The parent of a row is the nearest row above it that is
 * less deep: a stack of those, so 100,000 rows take one pass. */
static void row_labels(const struct dl_graph *g, const char **label, int *stack)
{
	int top = 0;
	for (int r = 0; r < g->n_rows; r++) {
		const struct dl_row *row = &g->rows[r];
		while (top > 0 && g->rows[stack[top - 1]].depth >= row->depth)
			top--;
		label[r] = top > 0 && strcmp(g->rows[stack[top - 1]].kind, "repeat") == 0
			? row->scope : row->label;
		stack[top++] = r;
	}
}

static int digits(int64_t v)
{
	char b[32];
	return snprintf(b, sizeof b, "%lld", (long long)v);
}

static int print_table(const struct dl_graph *g, int64_t batch, size_t train_bytes)
{
	char shape[256];
	const char **label = malloc(((size_t)g->n_rows + 1) * sizeof *label);
	int *stack = malloc(((size_t)g->n_rows + 1) * sizeof *stack);
	if (!label || !stack) {
		free(label);
		free(stack);
		return -1;
	}
	row_labels(g, label, stack);
	free(stack);
	/* every column as wide as its widest cell (at least the usual width),
	 * so long names, ops and shapes keep the table aligned */
	int width = 5, ow = 20, sw = 20, pw = 12, mw = 14, aw = 12;
	for (int r = 0; r < g->n_rows; r++) {
		const struct dl_row *row = &g->rows[r];
		struct totals t = row_totals(g, row);
		int64_t floats = row_shape(g, row, shape, sizeof shape);
		int w = 2 * row->depth + (int)strlen(label[r]);
		width = w > width ? w : width;
		ow = (int)strlen(row->kind) > ow ? (int)strlen(row->kind) : ow;
		sw = (int)strlen(shape) > sw ? (int)strlen(shape) : sw;
		pw = digits(t.params) > pw ? digits(t.params) : pw;
		mw = digits(t.macs) > mw ? digits(t.macs) : mw;
		aw = digits(floats * 4) > aw ? digits(floats * 4) : aw;
	}
	printf("%-*s  %-*s %-*s %*s %*s %*s\n", width, "entry", ow, "op", sw,
	       "output shape", pw, "params", mw, "mult-adds", aw, "act. bytes");
	for (int r = 0; r < g->n_rows; r++) {
		const struct dl_row *row = &g->rows[r];
		struct totals t = row_totals(g, row);
		int64_t floats = row_shape(g, row, shape, sizeof shape);
		printf("%*s%-*s  %-*s %-*s %*lld %*lld %*lld\n", 2 * row->depth, "",
		       width - 2 * row->depth, label[r], ow, row->kind, sw, shape,
		       pw, (long long)t.params, mw, (long long)t.macs, aw,
		       (long long)(floats * 4));
	}
	free(label);
	int64_t buffers, params = dl_model_count_params(g, &buffers);
	int64_t macs = 0;
	for (int i = 0; i < g->n_nodes; i++)
		macs += g->nodes[i].macs;
	char wb[32], ab[32], wsb[32], pk[32], kb[48] = "";
	human(wb, sizeof wb, (double)(params + buffers) * 4);
	human(ab, sizeof ab, (double)g->arena_bytes);
	human(wsb, sizeof wsb, (double)g->ws_bytes);
	human(pk, sizeof pk, (double)(g->arena_bytes + g->ws_bytes + g->keep_bytes) +
	      (double)(params + buffers) * 4);
	if (g->keep_bytes) {
		char h[32];
		human(h, sizeof h, (double)g->keep_bytes);
		snprintf(kb, sizeof kb, " + %s kept", h);
	}
	printf("\ntotal parameters: %lld", (long long)params);
	if (buffers)
		printf(" (plus %lld in buffers)", (long long)buffers);
	printf("\nmultiply-adds:    %lld (batch %lld)\n", (long long)macs, (long long)batch);
	printf("weights:          %s\n", wb);
	printf("planned memory:   %s activations + %s workspace%s + %s weights = %s peak\n",
	       ab, wsb, kb, wb, pk);
	if (train_bytes) {
		char tb[32];
		human(tb, sizeof tb, (double)train_bytes);
		printf("training step:    %s activations and gradients (batch %lld)\n", tb,
		       (long long)batch);
	}
	return 0;
}

static int summary_main(int argc, char **argv, struct dl_error *err)
{
	int64_t filled = 0;   /* a symbolic size verb_infer_shapes_as took */
	static const struct option opts[] = {
		{"weights", required_argument, NULL, 'w'},
		{"input-shape", required_argument, NULL, 'I'},
		{"batch-size", required_argument, NULL, 'b'},
		{"json", no_argument, NULL, 'j'},
		{"ignore-extra", no_argument, NULL, 'X'},
		{"threads", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *wflag = NULL, *model = NULL, *threads = NULL;
	long long batch = 1;
	int json = 0, rc = 0, c, n_specs = 0, ignore_extra = 0;
	char **specs = calloc((size_t)argc + 1, sizeof *specs);
	if (!specs)
		return dl_error_set(err, DL_ERUN, "out of memory");
	opterr = 0;
	while (rc == 0 && (c = getopt_long(argc, argv, ":w:b:t:h", opts, NULL)) != -1) {
		switch (c) {
		case 'w':
			wflag = optarg;
			break;
		case 'X':
			ignore_extra = 1;
			break;
		case 't':
			threads = optarg;
			break;
		case 'I':
			specs[n_specs++] = optarg;
			break;
		case 'b':
			rc = verb_int("summary", "--batch-size", optarg, 0, 1 << 30, &batch, err);
			break;
		case 'j':
			json = 1;
			break;
		case 'h':
			verb_usage(&verb_summary);
			free(specs);
			return 0;
		default:
			rc = verb_bad_option("summary", c, argv, err);
		}
	}
	struct dl_graph *g = NULL;
	/* the plan's workspace holds one slot per thread */
	if (rc == 0)
		rc = verb_threads("summary", threads, err);
	if (rc == 0)
		rc = verb_model_arg("summary", argc, argv, &model, err);
	if (rc == 0)
		rc = dl_model_load(&g, model, err);
	if (rc == 0)
		rc = verb_infer_shapes_as(g, specs, n_specs, batch, &filled, err);
	if (rc == 0)
		verb_note_filled(g, n_specs, filled);
	if (rc == 0 && wflag)
		rc = verb_weights(g, wflag, ignore_extra, err);
	if (rc == DL_EINPUT && wflag && g && g->params_ready && !json)
		print_weight_problems(g, wflag, ignore_extra);
	/* the training plan's size, when every op can be trained */
	size_t train_bytes = 0;
	int trainable = 1;
	for (int i = 0; g && i < g->n_nodes; i++)
		trainable &= g->nodes[i].op->backward != NULL;
	if (rc == 0 && trainable && g->n_nodes) {
		rc = dl_graph_plan(g, 1, err);
		/* and what ops keep for their backward (masks, statistics, the
		 * inner activations of composites) */
		train_bytes = g->arena_bytes;
		for (int i = 0; i < g->n_nodes; i++)
			train_bytes += (g->nodes[i].saved_bytes + 63) / 64 * 64;
	}
	if (rc == 0)
		rc = dl_graph_plan(g, 0, err);
	if (rc == 0) {
		if (json ? print_json(g, batch, train_bytes) != 0 : print_table(g, batch, train_bytes) != 0)
			rc = dl_error_set(err, DL_ERUN, "out of memory");
		if (fflush(stdout) != 0)
			rc = dl_error_set(err, DL_ERUN, "stdout: write failed");
	}
	free(specs);
	dl_graph_free(g);
	return rc;
}

const struct verb verb_summary = {
	"summary",
	"print a table of entries, shapes, parameters and memory",
	"usage: dlrun summary MODEL.yaml [-w WEIGHTS] [--input-shape NAME=d,d...]\n"
	"                    [--batch-size N] [--threads N] [--json]\n"
	"\n"
	"One row per entry (nested entries indented): scope, op, output shape,\n"
	"parameters, multiply-adds and activation bytes; then the totals, the\n"
	"weights' bytes and the planned peak memory of one inference.\n"
	"\n"
	"  -w, --weights PATH     also check a weights file against the model (keys\n"
	"                         that do not fit are listed in a table)\n"
	"      --ignore-extra     with -w: skip (and count) keys the model does not use\n"
	"      --input-shape NAME=d1,d2,...  per-sample sizes for symbolic inputs\n"
	"  -b, --batch-size N     batch for shapes and counts (default 1)\n"
	"  -t, --threads N        threads the plan is for: the workspace holds one\n"
	"                         slot per thread (default: all cores, as infer)\n"
	"      --json             one JSON object instead of the table\n"
	"  -h, --help             this help\n",
	summary_main,
};
