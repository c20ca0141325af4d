/* Hyperparameters as data: every op's table is read here, from a YAML
 * mapping or from defaults, with the model format's strict literal typing
 * (decimal numbers as strtoll/strtod read them, true/false only). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/hparams.h"
#include "model/yamlutil.h"

/* ---- literals ---- */

static int plain(const yaml_node_t *y)
{
	return y->type == YAML_SCALAR_NODE &&
	       y->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

static const char *text(const yaml_node_t *y)
{
	return (const char *)y->data.scalar.value;
}

/* Decimal without leading zeros ("010" would be octal in YAML 1.1). */
static int leading_zero(const char *s)
{
	if (*s == '+' || *s == '-')
		s++;
	return s[0] == '0' && s[1] >= '0' && s[1] <= '9';
}

int dl_parse_int(const char *s, int64_t *out)
{
	if (!*s || leading_zero(s))
		return -1;
	for (const char *p = *s == '-' || *s == '+' ? s + 1 : s; *p; p++)
		if (*p < '0' || *p > '9')
			return -1;
	if (!(s[0] == '-' || s[0] == '+' ? s[1] : s[0]))
		return -1;
	errno = 0;
	char *end;
	long long v = strtoll(s, &end, 10);
	if (errno || *end)
		return -1;
	*out = v;
	return 0;
}

int dl_parse_float(const char *s, double *out)
{
	if (!*s || leading_zero(s) || strpbrk(s, "xX") || strchr(s, ' '))
		return -1;
	errno = 0;
	char *end;
	double v = strtod(s, &end);
	if (*end || errno == ERANGE || !isfinite(v))
		return -1;
	*out = v;
	return 0;
}

int dl_yaml_int(const yaml_node_t *y, int64_t *out)
{
	return plain(y) ? dl_parse_int(text(y), out) : -1;
}

int dl_yaml_float(const yaml_node_t *y, double *out)
{
	return plain(y) ? dl_parse_float(text(y), out) : -1;
}

int dl_yaml_bool(const yaml_node_t *y, int *out)
{
	if (!plain(y))
		return -1;
	if (strcmp(text(y), "true") == 0)
		*out = 1;
	else if (strcmp(text(y), "false") == 0)
		*out = 0;
	else
		return -1;
	return 0;
}

int dl_yaml_null(const yaml_node_t *y)
{
	return plain(y) && (strcmp(text(y), "null") == 0 ||
			    strcmp(text(y), "~") == 0 || text(y)[0] == '\0');
}

const char *dl_yaml_kind(const yaml_node_t *y)
{
	switch (y->type) {
	case YAML_SCALAR_NODE:
		return dl_yaml_null(y) ? "null" : "a scalar";
	case YAML_SEQUENCE_NODE:
		return "a list";
	case YAML_MAPPING_NODE:
		return "a mapping";
	default:
		return "nothing";
	}
}

/* ---- reading one value ---- */

struct reader {
	struct dl_node *n;
	int i;                    /* hp index */
	yaml_document_t *doc;
	struct dl_error *err;
};

static int at(struct reader *r, const yaml_node_t *y, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int at(struct reader *r, const yaml_node_t *y, const char *fmt, ...)
{
	char what[640];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	return dl_error_set(r->err, DL_EINPUT, "%s:%d:%d: %s: %s",
			    r->n->file ? r->n->file : "model",
			    (int)y->start_mark.line + 1,
			    (int)y->start_mark.column + 1, r->n->op->name, what);
}

static int check_int(struct reader *r, const yaml_node_t *y, int64_t v)
{
	const struct dl_hp_desc *d = &r->n->op->hp[r->i];
	if ((d->flags & DL_HP_POSITIVE) && v <= 0)
		return at(r, y, "%s must be positive, got %lld", d->name,
			  (long long)v);
	if ((d->flags & DL_HP_NONNEG) && v < 0)
		return at(r, y, "%s must not be negative, got %lld", d->name,
			  (long long)v);
	return 0;
}

/* A number written in quotes is a string in YAML: say so. */
static int quoted_number(const yaml_node_t *y)
{
	double f;
	return y->type == YAML_SCALAR_NODE && !plain(y) &&
	       dl_parse_float(text(y), &f) == 0;
}

static int read_int(struct reader *r, const yaml_node_t *y, int64_t *out)
{
	const struct dl_hp_desc *d = &r->n->op->hp[r->i];
	if (quoted_number(y))
		return at(r, y, "%s is quoted ('%s'), which makes it a string; "
			  "write the number without quotes", d->name, text(y));
	if (dl_yaml_int(y, out) != 0)
		return at(r, y, "%s must be a decimal integer, got %s%s%s",
			  d->name, y->type == YAML_SCALAR_NODE ? "'" : "",
			  y->type == YAML_SCALAR_NODE ? text(y) : dl_yaml_kind(y),
			  y->type == YAML_SCALAR_NODE ? "'" : "");
	return check_int(r, y, *out);
}

static int read_float(struct reader *r, const yaml_node_t *y, double *out)
{
	const struct dl_hp_desc *d = &r->n->op->hp[r->i];
	if (quoted_number(y))
		return at(r, y, "%s is quoted ('%s'), which makes it a string; "
			  "write the number without quotes", d->name, text(y));
	if (dl_yaml_float(y, out) != 0)
		return at(r, y, "%s must be a number, got %s%s%s", d->name,
			  y->type == YAML_SCALAR_NODE ? "'" : "",
			  y->type == YAML_SCALAR_NODE ? text(y) : dl_yaml_kind(y),
			  y->type == YAML_SCALAR_NODE ? "'" : "");
	if ((d->flags & DL_HP_POSITIVE) && !(*out > 0))
		return at(r, y, "%s must be positive, got %g", d->name, *out);
	if ((d->flags & DL_HP_NONNEG) && *out < 0)
		return at(r, y, "%s must not be negative, got %g", d->name, *out);
	return 0;
}

static int read_enum(struct reader *r, const yaml_node_t *y, int64_t *out)
{
	const struct dl_hp_desc *d = &r->n->op->hp[r->i];
	if (y->type == YAML_SCALAR_NODE) {
		const char *s = text(y);
		size_t len = strlen(s);
		int idx = 0;
		for (const char *c = d->choices; *c; idx++) {
			size_t l = strcspn(c, "|");
			if (l == len && strncmp(c, s, l) == 0) {
				*out = idx;
				return 0;
			}
			c += l + (c[l] == '|');
		}
	}
	return at(r, y, "%s must be one of %s", d->name, d->choices);
}

/* A scalar or a flat list, of integers or of numbers. */
static int read_list(struct reader *r, const yaml_node_t *y,
		     struct dl_hp_value *v, int floats)
{
	const struct dl_hp_desc *d = &r->n->op->hp[r->i];
	if (y->type == YAML_SCALAR_NODE) {
		v->scalar = 1;
		v->n = 1;
		return floats ? read_float(r, y, &v->fv[0])
			      : read_int(r, y, &v->v[0]);
	}
	if (y->type != YAML_SEQUENCE_NODE)
		return at(r, y, "%s must be %s or a list of them, got %s",
			  d->name, floats ? "a number" : "an integer",
			  dl_yaml_kind(y));
	yaml_node_item_t *it = y->data.sequence.items.start;
	int count = (int)(y->data.sequence.items.top - it);
	if (count == 0)
		return at(r, y, "%s must not be an empty list", d->name);
	if (count > DL_HP_MAXN)
		return at(r, y, "%s has %d values; at most %d are allowed",
			  d->name, count, DL_HP_MAXN);
	v->n = count;
	for (int k = 0; k < count; k++) {
		yaml_node_t *e = yaml_document_get_node(r->doc, it[k]);
		int rc = floats ? read_float(r, e, &v->fv[k])
				: read_int(r, e, &v->v[k]);
		if (rc)
			return rc;
	}
	return 0;
}

static int read_padding(struct reader *r, const yaml_node_t *y,
			struct dl_hp_value *v)
{
	const struct dl_hp_desc *d = &r->n->op->hp[r->i];
	int64_t ignored;
	if (y->type == YAML_SCALAR_NODE && dl_yaml_int(y, &ignored) != 0) {
		if (strcmp(text(y), "same") == 0) {
			v->pad = DL_PAD_SAME;
			return 0;
		}
		if (strcmp(text(y), "valid") == 0) {
			v->pad = DL_PAD_VALID;
			return 0;
		}
		return at(r, y, "%s must be an integer, a list, 'same', 'valid' "
			  "or a list of [before, after] pairs, got '%s'",
			  d->name, text(y));
	}
	if (y->type == YAML_SEQUENCE_NODE) {
		yaml_node_item_t *it = y->data.sequence.items.start;
		int count = (int)(y->data.sequence.items.top - it);
		yaml_node_t *first = count ? yaml_document_get_node(r->doc, it[0]) : NULL;
		if (first && first->type == YAML_SEQUENCE_NODE) {
			if (count > DL_HP_MAXN)
				return at(r, y, "%s has %d pairs; at most %d",
					  d->name, count, DL_HP_MAXN);
			v->pad = DL_PAD_PAIRS;
			v->n = count;
			for (int k = 0; k < count; k++) {
				yaml_node_t *p = yaml_document_get_node(r->doc, it[k]);
				if (p->type != YAML_SEQUENCE_NODE ||
				    p->data.sequence.items.top - p->data.sequence.items.start != 2)
					return at(r, p, "%s: each padding pair is a list "
						  "[before, after] of two integers", d->name);
				for (int j = 0; j < 2; j++) {
					yaml_node_t *e = yaml_document_get_node(
						r->doc, p->data.sequence.items.start[j]);
					int rc = read_int(r, e, &v->v[2 * k + j]);
					if (rc)
						return rc;
				}
			}
			return 0;
		}
	}
	v->pad = DL_PAD_INTS;
	return read_list(r, y, v, 0);
}

static int read_value(struct reader *r, const yaml_node_t *y)
{
	struct dl_hp_value *v = &r->n->hp[r->i];
	const struct dl_hp_desc *d = &r->n->op->hp[r->i];
	int b;
	switch (d->type) {
	case DL_HP_INT:
		return read_int(r, y, &v->i);
	case DL_HP_FLOAT:
		return read_float(r, y, &v->f);
	case DL_HP_BOOL:
		if (dl_yaml_bool(y, &b) != 0)
			return at(r, y, "%s must be true or false", d->name);
		v->i = b;
		return 0;
	case DL_HP_ENUM:
		return read_enum(r, y, &v->i);
	case DL_HP_INTS:
		return read_list(r, y, v, 0);
	case DL_HP_FLOATS:
		return read_list(r, y, v, 1);
	case DL_HP_PADDING:
		return read_padding(r, y, v);
	case DL_HP_INPUT:
		/* resolved by the loader, which added the input */
		if (y->type != YAML_SCALAR_NODE || dl_yaml_null(y))
			return at(r, y, "%s must be the name of an input or an earlier entry",
				  d->name);
		return 0;
	case DL_HP_ENTRIES:
		if (y->type != YAML_SEQUENCE_NODE)
			return at(r, y, "%s must be a list of entries", d->name);
		v->entries = y;
		return 0;
	}
	return at(r, y, "internal: unknown hyperparameter type");
}

/* Defaults are written as scalar literals in the op tables. */
static int set_default(struct dl_node *n, int i, struct dl_error *err)
{
	const struct dl_hp_desc *d = &n->op->hp[i];
	struct dl_hp_value *v = &n->hp[i];
	memset(v, 0, sizeof *v);
	v->line = n->line;
	v->col = n->col;
	if ((d->flags & (DL_HP_REQUIRED | DL_HP_DERIVED)) || !d->def)
		return 0;
	yaml_node_t y;
	memset(&y, 0, sizeof y);
	y.type = YAML_SCALAR_NODE;
	y.data.scalar.style = YAML_PLAIN_SCALAR_STYLE;
	y.data.scalar.value = (yaml_char_t *)d->def;
	y.data.scalar.length = strlen(d->def);
	y.start_mark.line = (size_t)(n->line - 1);
	y.start_mark.column = (size_t)(n->col - 1);
	struct reader r = {n, i, NULL, err};
	int rc = read_value(&r, &y);
	if (rc)
		return dl_error_set(err, DL_ERUN,
				    "internal: op %s: bad default '%s' for %s",
				    n->op->name, d->def, d->name);
	return 0;
}

int dl_hp_defaults(struct dl_node *n, struct dl_error *err)
{
	const struct dl_op_desc *op = n->op;
	free(n->hp);
	n->hp = calloc((size_t)(op->n_hp ? op->n_hp : 1), sizeof *n->hp);
	if (!n->hp)
		return dl_error_set(err, DL_ERUN, "out of memory");
	for (int i = 0; i < op->n_hp; i++) {
		int rc = set_default(n, i, err);
		if (rc)
			return rc;
	}
	return 0;
}

int dl_hp_read(struct dl_node *n, yaml_document_t *doc, yaml_node_t *map,
	       struct dl_error *err)
{
	const struct dl_op_desc *op = n->op;
	int drc = dl_hp_defaults(n, err);
	if (drc)
		return drc;
	if (map && map->type == YAML_SCALAR_NODE && dl_yaml_null(map))
		map = NULL;
	if (map && map->type != YAML_MAPPING_NODE) {
		struct reader r = {n, 0, doc, err};
		return at(&r, map, "hyperparameters must be a mapping "
			  "(key: value), got %s", dl_yaml_kind(map));
	}
	if (!map)
		goto required;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start;
	     p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(doc, p->key);
		yaml_node_t *val = yaml_document_get_node(doc, p->value);
		struct reader r = {n, 0, doc, err};
		if (k->type != YAML_SCALAR_NODE)
			return at(&r, k, "hyperparameter names are plain words");
		int i;
		for (i = 0; i < op->n_hp; i++)
			if (strcmp(op->hp[i].name, text(k)) == 0)
				break;
		if (i == op->n_hp) {
			const char *names[65];
			int c = 0;
			for (int j = 0; j < op->n_hp && c < 64; j++)
				names[c++] = op->hp[j].name;
			names[c] = NULL;
			const char *s = dl_suggest(text(k), names);
			if (s)
				return at(&r, k, "unknown hyperparameter '%s'; did you mean '%s'?",
					  text(k), s);
			if (op->n_hp == 0)
				return at(&r, k, "unknown hyperparameter '%s'; %s takes none",
					  text(k), op->name);
			return at(&r, k, "unknown hyperparameter '%s' (see 'dlrun ops %s')",
				  text(k), op->name);
		}
		if (n->hp[i].set)
			return at(&r, k, "hyperparameter '%s' is given twice", text(k));
		r.i = i;
		if (dl_yaml_null(val) && !(op->hp[i].flags & DL_HP_REQUIRED) &&
		    op->hp[i].type != DL_HP_ENTRIES)
			continue;  /* `end: null` is Python's None: the default */
		struct dl_hp_value *v = &n->hp[i];
		memset(v, 0, sizeof *v);
		int rc = read_value(&r, val);
		if (rc)
			return rc;
		v->set = 1;
		v->line = (int)k->start_mark.line + 1;
		v->col = (int)k->start_mark.column + 1;
	}
required:
	for (int i = 0; i < op->n_hp; i++)
		if ((op->hp[i].flags & DL_HP_REQUIRED) && !n->hp[i].set)
			return dl_error_set(err, DL_EINPUT,
				"%s:%d:%d: %s: missing hyperparameter '%s' "
				"(write it as %s: {%s: ...})",
				n->file ? n->file : "model", n->line, n->col,
				op->name, op->hp[i].name, op->name, op->hp[i].name);
	return 0;
}

int dl_node_setup(struct dl_node *n, const struct dl_op_desc *op,
		  const char *hps, struct dl_error *err)
{
	memset(n, 0, sizeof *n);
	n->op = op;
	n->file = "test";
	n->line = 1;
	n->col = 1;
	n->scope = "0";
	size_t len = strlen(hps) + 3;
	char *buf = malloc(len);
	if (!buf)
		return dl_error_set(err, DL_ERUN, "out of memory");
	snprintf(buf, len, "{%s}", hps);
	yaml_parser_t parser;
	yaml_document_t doc;
	yaml_parser_initialize(&parser);
	yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len - 1);
	int rc;
	if (!yaml_parser_load(&parser, &doc)) {
		rc = dl_error_set(err, DL_EINPUT, "test: bad YAML: %s",
				  parser.problem ? parser.problem : "?");
	} else {
		rc = dl_hp_read(n, &doc, yaml_document_get_root_node(&doc), err);
		yaml_document_delete(&doc);
	}
	yaml_parser_delete(&parser);
	free(buf);
	return rc;
}

void dl_node_release(struct dl_node *n)
{
	if (!n)
		return;
	free(n->hp);
	free(n->params);
	free(n->priv);
	free(n->in);
	n->hp = NULL;
	n->params = NULL;
	n->priv = NULL;
	n->in = NULL;
	n->n_params = 0;
}

void dl_hp_describe(const struct dl_hp_desc *d, char *buf, size_t size)
{
	if (d->flags & DL_HP_REQUIRED)
		snprintf(buf, size, "%s", d->name);
	else if (d->type == DL_HP_ENUM)
		snprintf(buf, size, "%s=%s (%s)", d->name, d->def ? d->def : "none",
			 d->choices);
	else
		snprintf(buf, size, "%s=%s", d->name, d->def ? d->def : "none");
}
