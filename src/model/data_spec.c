/* `data:` of a model file: the image pipelines (`image:`, `train:`) as
 * lists of torchvision-like steps, and the class names file. Every
 * mistake names file:line:col. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/data_spec.h"
#include "model/yamlutil.h"

struct ctx {
	const char *file;
	yaml_document_t *doc;
	struct dl_error *err;
};

static int perr(struct ctx *C, const yaml_node_t *at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int perr(struct ctx *C, const yaml_node_t *at, const char *fmt, ...)
{
	char what[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	return dl_error_set(C->err, DL_EINPUT, "%s:%d:%d: %s", C->file,
			    (int)at->start_mark.line + 1, (int)at->start_mark.column + 1, what);
}

static yaml_node_t *nd(struct ctx *C, int id)
{
	return yaml_document_get_node(C->doc, id);
}

static const char *str(const yaml_node_t *y)
{
	return y && y->type == YAML_SCALAR_NODE ? (const char *)y->data.scalar.value : NULL;
}

static int seq_len(const yaml_node_t *y)
{
	return (int)(y->data.sequence.items.top - y->data.sequence.items.start);
}

/* Checks map's keys against allowed; returns the value of each in val[]. */
static int get_keys(struct ctx *C, yaml_node_t *map, const char *what,
		    const char *const *allowed, yaml_node_t **val)
{
	int na = 0;
	while (allowed[na])
		val[na++] = NULL;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start;
	     p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = nd(C, p->key);
		const char *s = str(k);
		int i = 0;
		while (s && i < na && strcmp(allowed[i], s) != 0)
			i++;
		if (!s || i == na) {
			const char *sug = s ? dl_suggest(s, allowed) : NULL;
			char list[256] = "";
			size_t used = 0;
			for (int j = 0; j < na && used < sizeof list; j++)
				used += (size_t)snprintf(list + used, sizeof list - used, "%s%s",
							 j ? ", " : "", allowed[j]);
			if (sug)
				return perr(C, k, "%s: unknown key '%s'; did you mean '%s'?", what, s, sug);
			return perr(C, k, "%s: unknown key '%s' (allowed: %s)", what, s ? s : "?",
				    list);
		}
		if (val[i])
			return perr(C, k, "%s: key '%s' is given twice", what, s);
		val[i] = nd(C, p->value);
	}
	return 0;
}

/* A size: N or [H, W], each in [1, 65536]. */
static int get_size(struct ctx *C, yaml_node_t *y, const char *what, int two_only,
		    struct dl_img_step *s)
{
	int64_t v[2];
	int n = 0;
	if (y->type == YAML_SCALAR_NODE) {
		if (dl_yaml_int(y, &v[0]))
			return perr(C, y, "%s: size is a whole number or [height, width], got '%s'",
				    what, str(y));
		n = 1;
	} else if (y->type == YAML_SEQUENCE_NODE && (seq_len(y) == 2 || seq_len(y) == 1)) {
		n = seq_len(y);
		for (int i = 0; i < n; i++) {
			yaml_node_t *e = nd(C, y->data.sequence.items.start[i]);
			if (dl_yaml_int(e, &v[i]))
				return perr(C, e, "%s: size is a whole number or [height, width]", what);
		}
	} else {
		return perr(C, y, "%s: size is a whole number or [height, width], got %s", what,
			    dl_yaml_kind(y));
	}
	for (int i = 0; i < n; i++)
		if (v[i] < 1 || v[i] > 65536)
			return perr(C, y, "%s: size %lld is out of range [1, 65536]", what,
				    (long long)v[i]);
	if (n == 1 && two_only)
		v[1] = v[0], n = 2;
	s->n_size = n;
	s->size[0] = v[0];
	s->size[1] = n == 2 ? v[1] : 0;
	return 0;
}

/* [a, b] of numbers with lo <= a <= b. */
static int get_pair(struct ctx *C, yaml_node_t *y, const char *what, double lo, double *out)
{
	if (y->type != YAML_SEQUENCE_NODE || seq_len(y) != 2)
		return perr(C, y, "%s is a list of two numbers [low, high]", what);
	for (int i = 0; i < 2; i++)
		if (dl_yaml_float(nd(C, y->data.sequence.items.start[i]), &out[i]) ||
		    !isfinite(out[i]))
			return perr(C, y, "%s is a list of two numbers [low, high]", what);
	if (out[0] < lo || out[0] > out[1])
		return perr(C, y, "%s: [%g, %g] must have %g <= low <= high", what, out[0],
			    out[1], lo);
	return 0;
}

static int get_floats(struct ctx *C, yaml_node_t *y, const char *what, float *out, int *n)
{
	if (y->type == YAML_SCALAR_NODE) {
		double d;
		if (dl_yaml_float(y, &d) || !isfinite(d))
			return perr(C, y, "%s is a number or a list of numbers", what);
		out[0] = (float)d;
		*n = 1;
		return 0;
	}
	if (y->type != YAML_SEQUENCE_NODE || seq_len(y) < 1 || seq_len(y) > DL_PIPE_MAX_CH)
		return perr(C, y, "%s is a list of 1 to %d numbers (one per channel)", what,
			    DL_PIPE_MAX_CH);
	*n = seq_len(y);
	for (int i = 0; i < *n; i++) {
		double d;
		yaml_node_t *e = nd(C, y->data.sequence.items.start[i]);
		if (dl_yaml_float(e, &d) || !isfinite(d))
			return perr(C, e, "%s takes numbers", what);
		out[i] = (float)d;
	}
	return 0;
}

static int empty_args(const yaml_node_t *y)
{
	return (y->type == YAML_SCALAR_NODE && dl_yaml_null(y)) ||
	       (y->type == YAML_MAPPING_NODE &&
		y->data.mapping.pairs.top == y->data.mapping.pairs.start);
}

static const char *const step_names[] = {
	"resize", "center_crop", "random_resized_crop", "horizontal_flip", "grayscale",
	"to_float", "normalize", NULL};

static int parse_step(struct ctx *C, yaml_node_t *e, struct dl_img_step *s)
{
	yaml_node_t *k = e, *a = NULL;
	const char *name = str(e);
	if (e->type == YAML_MAPPING_NODE) {
		if (e->data.mapping.pairs.top - e->data.mapping.pairs.start != 1)
			return perr(C, e, "data: a step is one 'name: arguments' pair "
				    "(e.g. resize: 256)");
		k = nd(C, e->data.mapping.pairs.start->key);
		a = nd(C, e->data.mapping.pairs.start->value);
		name = str(k);
	} else if (!name) {
		return perr(C, e, "data: a step is 'name: arguments' (e.g. resize: 256), got %s",
			    dl_yaml_kind(e));
	}
	int op = 0;
	while (step_names[op] && strcmp(step_names[op], name ? name : "") != 0)
		op++;
	if (!step_names[op]) {
		const char *sug = name ? dl_suggest(name, step_names) : NULL;
		if (sug)
			return perr(C, k, "data: unknown step '%s'; did you mean '%s'?", name, sug);
		return perr(C, k, "data: unknown step '%s' (steps: resize, center_crop, "
			    "random_resized_crop, horizontal_flip, grayscale, to_float, "
			    "normalize)", name ? name : "?");
	}
	memset(s, 0, sizeof *s);
	s->op = (enum dl_img_op)op;
	s->line = (int)k->start_mark.line + 1;
	s->col = (int)k->start_mark.column + 1;
	s->scale[0] = 0.08;
	s->scale[1] = 1.0;
	s->ratio[0] = 3.0 / 4.0;
	s->ratio[1] = 4.0 / 3.0;
	s->p = 0.5;
	s->channels = 1;
	int needs_args = s->op == DL_IMG_RESIZE || s->op == DL_IMG_CENTER_CROP ||
			 s->op == DL_IMG_RANDOM_RESIZED_CROP || s->op == DL_IMG_NORMALIZE;
	if (!a || empty_args(a)) {
		if (needs_args)
			return perr(C, k, "data: %s needs arguments (%s)", name,
				    s->op == DL_IMG_NORMALIZE ? "normalize: {mean: [...], std: [...]}"
				    : s->op == DL_IMG_RANDOM_RESIZED_CROP ? "random_resized_crop: "
				    "{size: 224, scale: [0.08, 1.0]}" : "a size: N or [height, width]");
		return 0;
	}
	yaml_node_t *v[4];
	int rc = 0;
	switch (s->op) {
	case DL_IMG_RESIZE:
		return get_size(C, a, name, 0, s);
	case DL_IMG_CENTER_CROP:
		return get_size(C, a, name, 1, s);
	case DL_IMG_RANDOM_RESIZED_CROP:
		if (a->type != YAML_MAPPING_NODE)
			return get_size(C, a, name, 1, s);
		if ((rc = get_keys(C, a, name, (const char *const[]){"size", "scale", "ratio",
								      NULL}, v)) != 0)
			return rc;
		if (!v[0])
			return perr(C, a, "random_resized_crop: size is required");
		if ((rc = get_size(C, v[0], name, 1, s)) != 0)
			return rc;
		if (v[1] && (rc = get_pair(C, v[1], "random_resized_crop: scale", 0, s->scale)) != 0)
			return rc;
		if (s->scale[1] > 1 || s->scale[1] <= 0)
			return perr(C, v[1], "random_resized_crop: scale is within (0, 1]");
		if (v[2] && (rc = get_pair(C, v[2], "random_resized_crop: ratio", 1e-6,
					   s->ratio)) != 0)
			return rc;
		return 0;
	case DL_IMG_HFLIP: {
		yaml_node_t *p = a;
		if (a->type == YAML_MAPPING_NODE) {
			if ((rc = get_keys(C, a, name, (const char *const[]){"p", NULL}, v)) != 0)
				return rc;
			p = v[0];
		}
		if (p && (dl_yaml_float(p, &s->p) || !(s->p >= 0 && s->p <= 1)))
			return perr(C, p, "horizontal_flip: the probability is a number in [0, 1]");
		return 0;
	}
	case DL_IMG_GRAYSCALE: {
		yaml_node_t *n = a;
		int64_t ch;
		if (a->type == YAML_MAPPING_NODE) {
			if ((rc = get_keys(C, a, name, (const char *const[]){"num_output_channels",
									      NULL}, v)) != 0)
				return rc;
			n = v[0];
		}
		if (n && (dl_yaml_int(n, &ch) || (ch != 1 && ch != 3)))
			return perr(C, n, "grayscale: num_output_channels is 1 or 3");
		s->channels = n ? (int)ch : 1;
		return 0;
	}
	case DL_IMG_TO_FLOAT:
		return perr(C, a, "to_float takes no arguments (to_float: {})");
	case DL_IMG_NORMALIZE:
		if (a->type != YAML_MAPPING_NODE)
			return perr(C, a, "normalize: is {mean: [...], std: [...]}");
		if ((rc = get_keys(C, a, name, (const char *const[]){"mean", "std", NULL}, v)) != 0)
			return rc;
		if (!v[0] || !v[1])
			return perr(C, a, "normalize: needs both mean and std");
		int nm, ns;
		if ((rc = get_floats(C, v[0], "normalize: mean", s->mean, &nm)) != 0 ||
		    (rc = get_floats(C, v[1], "normalize: std", s->std, &ns)) != 0)
			return rc;
		if (nm != ns)
			return perr(C, v[1], "normalize: mean has %d values and std %d", nm, ns);
		for (int i = 0; i < ns; i++)
			if (!(s->std[i] != 0))
				return perr(C, v[1], "normalize: std must not be 0");
		s->n_ch = nm;
		return 0;
	}
	return 0;
}

static int parse_pipeline(struct ctx *C, yaml_node_t *y, const char *what,
			  struct dl_pipeline *p)
{
	if (y->type != YAML_SEQUENCE_NODE)
		return perr(C, y, "data: %s: is a list of steps, as [resize: 256, center_crop: "
			    "224, to_float: {}]", what);
	if (seq_len(y) > DL_PIPE_MAX_STEPS)
		return perr(C, y, "data: %s: has %d steps; at most %d", what, seq_len(y),
			    DL_PIPE_MAX_STEPS);
	p->n = 0;
	for (int i = 0; i < seq_len(y); i++) {
		int rc = parse_step(C, nd(C, y->data.sequence.items.start[i]), &p->step[p->n]);
		if (rc)
			return rc;
		p->n++;
	}
	return 0;
}

int dl_data_spec_parse(struct dl_data_conf **out, const char *file, yaml_document_t *doc,
		       yaml_node_t *data, struct dl_error *err)
{
	struct ctx C = {file, doc, err};
	*out = NULL;
	if (data->type == YAML_SCALAR_NODE && dl_yaml_null(data))
		return 0;
	if (data->type != YAML_MAPPING_NODE)
		return perr(&C, data, "data: is a mapping (image:, train:, classes:)");
	yaml_node_t *v[3];
	int rc = get_keys(&C, data, "data", (const char *const[]){"image", "train", "classes",
								  NULL}, v);
	if (rc)
		return rc;
	struct dl_data_conf *c = calloc(1, sizeof *c);
	if (!c)
		return dl_error_set(err, DL_ERUN, "out of memory");
	c->line = (int)data->start_mark.line + 1;
	c->col = (int)data->start_mark.column + 1;
	if (v[0] && (rc = parse_pipeline(&C, v[0], "image", &c->image)) == 0)
		c->has_image = 1;
	if (rc == 0 && v[1] && (rc = parse_pipeline(&C, v[1], "train", &c->train)) == 0)
		c->has_train = 1;
	if (rc == 0 && !c->has_train) {
		c->train = c->image;
		c->has_train = c->has_image;
	}
	if (rc == 0 && v[2]) {
		const char *s = str(v[2]);
		if (!s || !*s)
			rc = perr(&C, v[2], "data: classes: is a file of class names, one a line");
		else if (s[0] != '/' && strchr(file, '/'))
			snprintf(c->classes, sizeof c->classes, "%.*s/%s",
				 (int)(strrchr(file, '/') - file), file, s);
		else
			snprintf(c->classes, sizeof c->classes, "%s", s);
	}
	if (rc) {
		free(c);
		return rc;
	}
	*out = c;
	return 0;
}

void dl_data_classes_free(char **names, int n)
{
	for (int i = 0; names && i < n; i++)
		free(names[i]);
	free(names);
}

int dl_data_classes(const struct dl_data_conf *c, char ***names, int *n, struct dl_error *err)
{
	*names = NULL;
	*n = 0;
	if (!c || !c->classes[0])
		return 0;
	FILE *f = fopen(c->classes, "r");
	if (!f)
		return dl_error_set(err, DL_EINPUT, "%s: cannot open the class names (data: "
				    "classes:): %s", c->classes, strerror(errno));
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int cnt = 0, room = 0, rc = 0;
	char **v = NULL;
	while ((len = getline(&line, &cap, f)) >= 0) {
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = '\0';
		if (cnt == room) {
			room = room ? room * 2 : 64;
			char **w = room < (1 << 24) ? realloc(v, (size_t)room * sizeof *w) : NULL;
			if (!w) {
				rc = dl_error_set(err, DL_ERUN, "%s: out of memory", c->classes);
				break;
			}
			v = w;
		}
		if (!(v[cnt] = strdup(line))) {
			rc = dl_error_set(err, DL_ERUN, "%s: out of memory", c->classes);
			break;
		}
		cnt++;
	}
	free(line);
	fclose(f);
	if (rc) {
		dl_data_classes_free(v, cnt);
		return rc;
	}
	*names = v;
	*n = cnt;
	return 0;
}
