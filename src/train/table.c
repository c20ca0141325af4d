/* CSV tables -> a dataset of float features and labels (train/table.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/csv.h"
#include "train/table.h"

void dl_table_classes_free(struct dl_table_classes *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->n; i++)
		free(c->name[i]);
	free(c->name);
	free(c->column);
	c->name = NULL;
	c->column = NULL;
	c->n = 0;
}

/* A decimal number (no hex, no inf or nan) filling all of s. */
static int parse_number(const char *s, double *out)
{
	if (!*s || strpbrk(s, "xXnN"))
		return -1;
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (*end || errno == ERANGE || !isfinite(v))
		return -1;
	*out = v;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A label as read: its text (until the kind of the column is known) and
 * its place. */
struct label {
	char *text;
	long line, col;
};

struct reader {
	struct dl_csv csv;
	int n_cols, label;           /* columns; the label's */
	char **names;                /* [n_cols] header names */
	float *x;                    /* [rows, n_cols - 1] */
	struct label *lab;           /* [rows] */
	int64_t rows, cap;
};

static void reader_free(struct reader *R)
{
	for (int i = 0; R->names && i < R->n_cols; i++)
		free(R->names[i]);
	free(R->names);
	for (int64_t i = 0; R->lab && i < R->rows; i++)
		free(R->lab[i].text);
	free(R->lab);
	free(R->x);
	dl_csv_close(&R->csv);
}

static int read_header(struct reader *R, const char *path, const char *label,
		       struct dl_error *err)
{
	struct dl_csv *c = &R->csv;
	int rc = dl_csv_next(c, err);
	if (rc < 0)
		return rc;
	if (rc == 0)
		return dl_error_set(err, DL_EINPUT, "%s: an empty table; a CSV table has a "
				    "header line of column names, then one row a sample", path);
	if (c->n < 2)
		return dl_error_set(err, DL_EINPUT, "%s:%ld:1: the header has one column; a "
				    "table needs a label column and at least one feature", path,
				    c->line);
	R->n_cols = c->n;
	R->names = calloc((size_t)c->n + 1, sizeof *R->names);
	if (!R->names)
		return dl_error_set(err, DL_ERUN, "out of memory");
	for (int i = 0; i < c->n; i++)
		if (!(R->names[i] = strdup(c->field[i])))
			return dl_error_set(err, DL_ERUN, "out of memory");
	R->label = c->n - 1;
	if (!label)
		return 0;
	for (int i = 0; i < c->n; i++)
		if (strcmp(c->field[i], label) == 0) {
			R->label = i;
			return 0;
		}
	char cols[1024];
	size_t used = 0;
	cols[0] = '\0';
	for (int i = 0; i < c->n && used < sizeof cols; i++)
		used += (size_t)snprintf(cols + used, sizeof cols - used, "%s%s", i ? ", " : "",
					 c->field[i]);
	const char *sug = dl_suggest(label, (const char *const *)R->names);
	if (sug)
		return dl_error_set(err, DL_EINPUT, "train: --label '%s' is not a column of %s; "
				    "did you mean '%s'?", label, path, sug);
	return dl_error_set(err, DL_EINPUT, "train: --label '%s' is not a column of %s (its "
			    "columns: %s)", label, path, cols);
}

static int read_rows(struct reader *R, const char *path, struct dl_error *err)
{
	struct dl_csv *c = &R->csv;
	int64_t F = R->n_cols - 1;
	int rc;
	while ((rc = dl_csv_next(c, err)) == 1) {
		if (c->n < R->n_cols) {
			const char *last = c->field[c->n - 1];
			return dl_error_set(err, DL_EINPUT, "%s:%ld:%ld: the row has %d fields but "
					    "the header %d: no value for column '%s'", path, c->line,
					    c->col[c->n - 1] + (long)strlen(last), c->n, R->n_cols,
					    R->names[c->n]);
		}
		if (c->n > R->n_cols)
			return dl_error_set(err, DL_EINPUT, "%s:%ld:%ld: the row has %d fields but "
					    "the header %d", path, c->line, c->col[R->n_cols],
					    c->n, R->n_cols);
		if (R->rows == R->cap) {
			int64_t k = R->cap ? R->cap * 2 : 256;
			float *x = realloc(R->x, (size_t)(k * F) * sizeof *x);
			if (x)
				R->x = x;
			struct label *l = realloc(R->lab, (size_t)k * sizeof *l);
			if (l)
				R->lab = l;
			if (!x || !l)
				return dl_error_set(err, DL_ERUN, "out of memory");
			R->cap = k;
		}
		float *row = R->x + R->rows * F;
		for (int i = 0, k = 0; i < R->n_cols; i++) {
			if (i == R->label)
				continue;
			double v;
			if (!*c->field[i])
				return dl_error_set(err, DL_EINPUT, "%s:%ld:%ld: no value for column "
						    "'%s'; every feature is a number", path, c->line,
						    c->col[i], R->names[i]);
			if (parse_number(c->field[i], &v))
				return dl_error_set(err, DL_EINPUT, "%s:%ld:%ld: '%s' in column '%s' "
						    "is not a number; every column but the label "
						    "('%s') is a float feature", path, c->line,
						    c->col[i], c->field[i], R->names[i],
						    R->names[R->label]);
			row[k++] = (float)v;
		}
		struct label *l = &R->lab[R->rows++];
		l->line = c->line;
		l->col = c->col[R->label];
		if (!(l->text = strdup(c->field[R->label])))
			return dl_error_set(err, DL_ERUN, "out of memory");
		if (!*l->text)
			return dl_error_set(err, DL_EINPUT, "%s:%ld:%ld: no label (column '%s')",
					    path, l->line, l->col, R->names[R->label]);
	}
	if (rc < 0)
		return rc;
	if (R->rows == 0)
		return dl_error_set(err, DL_EINPUT, "%s: a header and no rows", path);
	return 0;
}

/* The sorted distinct labels of R into *found. */
static int find_classes(struct reader *R, struct dl_table_classes *found,
			struct dl_error *err)
{
	char **all = malloc((size_t)R->rows * sizeof *all);
	if (!all)
		return dl_error_set(err, DL_ERUN, "out of memory");
	for (int64_t i = 0; i < R->rows; i++)
		all[i] = R->lab[i].text;
	qsort(all, (size_t)R->rows, sizeof *all, cmp_str);
	int64_t n = 0;
	for (int64_t i = 0; i < R->rows; i++)
		if (i == 0 || strcmp(all[i], all[n - 1]) != 0)
			all[n++] = all[i];
	found->name = calloc((size_t)n, sizeof *found->name);
	int rc = 0;
	if (!found->name)
		rc = dl_error_set(err, DL_ERUN, "out of memory");
	for (int64_t i = 0; rc == 0 && i < n; i++) {
		if (!(found->name[i] = strdup(all[i])))
			rc = dl_error_set(err, DL_ERUN, "out of memory");
		found->n++;
	}
	free(all);
	return rc;
}

static int class_of(const struct dl_table_classes *k, const char *s)
{
	int lo = 0, hi = k->n - 1;
	while (lo <= hi) {
		int mid = (lo + hi) / 2, c = strcmp(s, k->name[mid]);
		if (c == 0)
			return mid;
		if (c < 0)
			hi = mid - 1;
		else
			lo = mid + 1;
	}
	return -1;
}

int dl_table_load(struct dl_dataset *d, const char *path, const char *label, int ids,
		  const struct dl_table_classes *known, struct dl_table_classes *found,
		  struct dl_error *err)
{
	memset(d, 0, sizeof *d);
	if (found)
		memset(found, 0, sizeof *found);
	struct reader R;
	memset(&R, 0, sizeof R);
	int rc = dl_csv_open(&R.csv, path, err);
	if (rc == 0)
		rc = read_header(&R, path, label, err);
	if (rc == 0)
		rc = read_rows(&R, path, err);
	/* numbers, or class names: the training file decides */
	int numeric = 1;
	for (int64_t i = 0; rc == 0 && i < R.rows && numeric; i++) {
		double v;
		numeric = parse_number(R.lab[i].text, &v) == 0;
	}
	if (rc == 0 && known)
		numeric = known->n == 0;
	if (rc == 0 && !numeric && !known)
		rc = find_classes(&R, found, err);
	if (rc == 0 && found && !(found->column = strdup(R.names[R.label])))
		rc = dl_error_set(err, DL_ERUN, "out of memory");
	const struct dl_table_classes *cls = known ? known : found;
	int64_t *yid = NULL;
	float *yf = NULL;
	if (rc == 0) {
		yid = ids ? malloc((size_t)R.rows * sizeof *yid) : NULL;
		yf = ids ? NULL : malloc((size_t)R.rows * sizeof *yf);
		if (!yid && !yf)
			rc = dl_error_set(err, DL_ERUN, "out of memory");
	}
	for (int64_t i = 0; rc == 0 && i < R.rows; i++) {
		const struct label *l = &R.lab[i];
		double v = 0;
		if (numeric && parse_number(l->text, &v))
			rc = dl_error_set(err, DL_EINPUT, "%s:%ld:%ld: label '%s' is not a number, "
					  "but the training data's labels are numbers", path,
					  l->line, l->col, l->text);
		else if (numeric && ids && (v != floor(v) || v < 0 || v > 1e15))
			rc = dl_error_set(err, DL_EINPUT, "%s:%ld:%ld: label '%s' is not a class "
					  "id (a whole number >= 0); class names are words", path,
					  l->line, l->col, l->text);
		else if (!numeric && (v = class_of(cls, l->text)) < 0)
			rc = dl_error_set(err, DL_EINPUT, "%s:%ld:%ld: class '%s' is not one of "
					  "the training data's %d", path, l->line, l->col, l->text,
					  cls->n);
		if (rc)
			break;
		if (ids)
			yid[i] = (int64_t)v;
		else
			yf[i] = (float)v;
	}
	if (rc == 0) {
		d->x = calloc(2, sizeof *d->x);
		if (!d->x)
			rc = dl_error_set(err, DL_ERUN, "out of memory");
	}
	if (rc) {
		free(yid);
		free(yf);
		reader_free(&R);
		if (found)
			dl_table_classes_free(found);
		free(d->x);
		memset(d, 0, sizeof *d);
		return rc;
	}
	int64_t xd[2] = {R.rows, R.n_cols - 1}, yd[1] = {R.rows};
	d->n_x = 1;
	d->n = R.rows;
	d->x[0].shape = dl_shape_make(2, xd);
	d->x[0].f = R.x;
	d->y.shape = dl_shape_make(1, yd);
	d->y.ids = yid;
	d->y.f = yf;
	R.x = NULL;
	reader_free(&R);
	return 0;
}
