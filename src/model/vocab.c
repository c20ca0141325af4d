/* The `vocab:` key: its three forms read into one table of tokens (bytes
 * back to back), a hash of them for longest-match encoding, and the
 * messages for text the vocabulary does not cover. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "model/vocab.h"
#include "model/yamlutil.h"

/* A vocabulary file larger than this is refused (a token a line: far more
 * than any real vocabulary). */
#define MAX_VOCAB_BYTES ((size_t)256 << 20)

struct dl_vocab {
	int64_t n;
	char *bytes;        /* every token's bytes, back to back */
	size_t *off;        /* [n + 1]: token i is bytes[off[i], off[i+1]) */
	size_t max_len;     /* the longest token's bytes */
	int is_bytes;       /* ids 0-255 are the bytes themselves */
	int64_t eos, bos;   /* -1: none */
	int64_t *slot;      /* [n_slots]: open-addressing hash, id + 1, 0 empty */
	size_t n_slots;
	char *model;        /* the model file, for messages */
	int line, col;      /* the `vocab:` value's place (1-based) */
};

static uint64_t fnv_step(uint64_t h, unsigned char c)
{
	return (h ^ c) * 1099511628211ull;
}

#define FNV_START 14695981039346656037ull

static uint64_t fnv(const char *s, size_t len)
{
	uint64_t h = FNV_START;
	for (size_t i = 0; i < len; i++)
		h = fnv_step(h, (unsigned char)s[i]);
	return h;
}

/* The id of the token equal to s[0, len) with hash h, or -1. */
static int64_t lookup(const struct dl_vocab *v, uint64_t h, const char *s, size_t len)
{
	size_t mask = v->n_slots - 1;
	for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
		int64_t id = v->slot[i] - 1;
		if (id < 0)
			return -1;
		size_t tl = v->off[id + 1] - v->off[id];
		if (tl == len && memcmp(v->bytes + v->off[id], s, len) == 0)
			return id;
	}
}

/* Hashes every token; a repeated token keeps its lowest id. */
static int index_tokens(struct dl_vocab *v)
{
	size_t want = 16;
	while (want < (size_t)v->n * 2)
		want *= 2;
	v->slot = calloc(want, sizeof *v->slot);
	if (!v->slot)
		return -1;
	v->n_slots = want;
	for (int64_t id = 0; id < v->n; id++) {
		const char *s = v->bytes + v->off[id];
		size_t len = v->off[id + 1] - v->off[id];
		if (len > v->max_len)
			v->max_len = len;
		uint64_t h = fnv(s, len);
		if (lookup(v, h, s, len) >= 0)
			continue;
		size_t i = (size_t)h & (want - 1);
		while (v->slot[i])
			i = (i + 1) & (want - 1);
		v->slot[i] = id + 1;
	}
	return 0;
}

void dl_vocab_free(struct dl_vocab *v)
{
	if (!v)
		return;
	free(v->bytes);
	free(v->off);
	free(v->slot);
	free(v->model);
	free(v);
}

const struct dl_vocab *dl_model_vocab(const struct dl_graph *g)
{
	return g ? g->vocab : NULL;
}

int64_t dl_vocab_size(const struct dl_vocab *v)
{
	return v->n;
}

int64_t dl_vocab_eos(const struct dl_vocab *v)
{
	return v->eos;
}

int64_t dl_vocab_bos(const struct dl_vocab *v)
{
	return v->bos;
}

const char *dl_vocab_token(const struct dl_vocab *v, int64_t id, size_t *len)
{
	if (id < 0 || id >= v->n) {
		*len = 0;
		return NULL;
	}
	*len = v->off[id + 1] - v->off[id];
	return v->bytes + v->off[id];
}

size_t dl_vocab_match(const struct dl_vocab *v, const char *text, size_t len,
		      int64_t *id)
{
	if (len == 0)
		return 0;
	if (v->is_bytes) {
		*id = (unsigned char)text[0];
		return 1;
	}
	size_t best = 0, most = len < v->max_len ? len : v->max_len;
	uint64_t h = FNV_START;
	for (size_t k = 1; k <= most; k++) {
		h = fnv_step(h, (unsigned char)text[k - 1]);
		int64_t t = lookup(v, h, text, k);
		if (t >= 0) {
			best = k;
			*id = t;
		}
	}
	return best;
}

/* The UTF-8 character at s[0, len): its code point, and its length in
 * bytes as the result; 0 when the bytes are not UTF-8. */
static size_t utf8_char(const unsigned char *s, size_t len, uint32_t *cp)
{
	size_t n;
	uint32_t c = s[0], min;
	if (c < 0x80) {
		*cp = c;
		return 1;
	} else if ((c & 0xe0) == 0xc0) {
		n = 2, c &= 0x1f, min = 0x80;
	} else if ((c & 0xf0) == 0xe0) {
		n = 3, c &= 0x0f, min = 0x800;
	} else if ((c & 0xf8) == 0xf0) {
		n = 4, c &= 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (n > len)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (s[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return n;
}

int dl_vocab_uncovered(const struct dl_vocab *v, const char *text, size_t len,
		       size_t at, size_t pos, const char *where,
		       struct dl_error *err)
{
	const unsigned char *s = (const unsigned char *)text + at;
	uint32_t cp;
	size_t n = utf8_char(s, len - at, &cp);
	if (n == 0)
		return dl_error_set(err, DL_EINPUT, "%s: byte 0x%02X at position %zu "
				    "is not UTF-8 and not in the vocabulary of %s",
				    where, s[0], pos, v->model);
	char shown[16];
	if (cp == '\n')
		strcpy(shown, "\\n");
	else if (cp == '\t')
		strcpy(shown, "\\t");
	else if (cp == '\r')
		strcpy(shown, "\\r");
	else if (cp < 0x20 || cp == 0x7f)
		snprintf(shown, sizeof shown, "\\x%02x", (unsigned)cp);
	else
		snprintf(shown, sizeof shown, "%.*s", (int)n, (const char *)s);
	return dl_error_set(err, DL_EINPUT, "%s: character '%s' (U+%04X) at position "
			    "%zu is not in the vocabulary of %s", where, shown,
			    (unsigned)cp, pos, v->model);
}

int dl_vocab_encode(const struct dl_vocab *v, const char *text, size_t len,
		    const char *what, int64_t **ids, size_t *n, struct dl_error *err)
{
	*ids = NULL;
	*n = 0;
	int64_t *out = malloc((len ? len : 1) * sizeof *out);
	if (!out)
		return dl_error_set(err, DL_ERUN, "out of memory");
	size_t count = 0, pos = 0;
	for (size_t i = 0; i < len;) {
		int64_t id;
		size_t k = dl_vocab_match(v, text + i, len - i, &id);
		if (k == 0) {
			free(out);
			return dl_vocab_uncovered(v, text, len, i, pos, what, err);
		}
		out[count++] = id;
		for (size_t j = i; j < i + k; j++)
			pos += ((unsigned char)text[j] & 0xc0) != 0x80;
		i += k;
	}
	*ids = out;
	*n = count;
	return 0;
}

int dl_vocab_check_output(const struct dl_graph *g, int k, struct dl_error *err)
{
	const struct dl_vocab *v = g->vocab;
	if (!v || k < 0 || k >= g->n_outputs)
		return 0;
	const struct dl_shape *s = &g->values[g->outputs[k]].shape;
	if (s->ndim < 1 || s->d[s->ndim - 1] == v->n)
		return 0;
	return dl_error_set(err, DL_EINPUT, "%s:%d:%d: vocab: %lld tokens, but the "
			    "logits (output '%s') have %lld on their last dimension; "
			    "the vocabulary's size must equal it", v->model, v->line,
			    v->col, (long long)v->n, g->output_names[k],
			    (long long)s->d[s->ndim - 1]);
}

/* ---- reading the `vocab:` key ---- */

struct reader {
	const char *model;
	yaml_document_t *doc;
	struct dl_vocab *v;
	size_t cap_bytes, cap_off;
	struct dl_error *err;
};

static int yerr(struct reader *R, const yaml_node_t *at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int yerr(struct reader *R, const yaml_node_t *at, const char *fmt, ...)
{
	char what[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	return dl_error_set(R->err, DL_EINPUT, "%s:%d:%d: vocab: %s", R->model,
			    (int)at->start_mark.line + 1,
			    (int)at->start_mark.column + 1, what);
}

static int add_token(struct reader *R, const char *s, size_t len)
{
	struct dl_vocab *v = R->v;
	size_t used = v->n ? v->off[v->n] : 0;
	if (used + len > R->cap_bytes) {
		size_t c = R->cap_bytes ? R->cap_bytes : 256;
		while (c < used + len)
			c *= 2;
		char *b = realloc(v->bytes, c);
		if (!b)
			return -1;
		v->bytes = b;
		R->cap_bytes = c;
	}
	if ((size_t)v->n + 2 > R->cap_off) {
		size_t c = R->cap_off ? R->cap_off * 2 : 64;
		size_t *o = realloc(v->off, c * sizeof *o);
		if (!o)
			return -1;
		v->off = o;
		R->cap_off = c;
	}
	if (v->n == 0)
		v->off[0] = 0;
	memcpy(v->bytes + used, s, len);
	v->off[++v->n] = used + len;
	return 0;
}

static int read_bytes(struct reader *R)
{
	R->v->is_bytes = 1;
	for (int c = 0; c < 256; c++) {
		char b = (char)c;
		if (add_token(R, &b, 1))
			return dl_error_set(R->err, DL_ERUN, "out of memory");
	}
	return 0;
}

static int read_list(struct reader *R, yaml_node_t *list)
{
	for (yaml_node_item_t *it = list->data.sequence.items.start;
	     it < list->data.sequence.items.top; it++) {
		yaml_node_t *e = yaml_document_get_node(R->doc, *it);
		if (e->type != YAML_SCALAR_NODE)
			return yerr(R, e, "token %lld is %s; tokens are strings",
				    (long long)R->v->n, dl_yaml_kind(e));
		if (e->data.scalar.length == 0)
			return yerr(R, e, "token %lld is empty; a token has at least "
				    "one character", (long long)R->v->n);
		if (add_token(R, (const char *)e->data.scalar.value, e->data.scalar.length))
			return dl_error_set(R->err, DL_ERUN, "out of memory");
	}
	if (R->v->n == 0)
		return yerr(R, list, "an empty list of tokens");
	return 0;
}

static char *relative_to(const char *model, const char *path)
{
	if (path[0] == '/' || !strchr(model, '/'))
		return strdup(path);
	size_t dir = (size_t)(strrchr(model, '/') - model);
	char *out = malloc(dir + strlen(path) + 2);
	if (out)
		sprintf(out, "%.*s/%s", (int)dir, model, path);
	return out;
}

/* One token a line, with \n, \t and \\ escapes; errors at path:line:col. */
static int parse_vocab_file(struct reader *R, const char *path, const char *buf,
			    size_t len)
{
	char *tok = malloc(len + 1);
	if (!tok)
		return dl_error_set(R->err, DL_ERUN, "out of memory");
	int rc = 0;
	long line = 1;
	for (size_t i = 0; i < len && rc == 0; line++) {
		const char *nl = memchr(buf + i, '\n', len - i);
		size_t end = nl ? (size_t)(nl - buf) : len, k = 0;
		for (size_t j = i; j < end; j++) {
			if (buf[j] != '\\') {
				tok[k++] = buf[j];
				continue;
			}
			char c = j + 1 < end ? buf[j + 1] : 0;
			if (c == 'n' || c == 't' || c == '\\') {
				tok[k++] = c == 'n' ? '\n' : c == 't' ? '\t' : '\\';
				j++;
				continue;
			}
			rc = c ? dl_error_set(R->err, DL_EINPUT, "%s:%ld:%zu: unknown escape "
					      "'\\%c'; the escapes are \\n, \\t and \\\\",
					      path, line, j - i + 1, c)
			       : dl_error_set(R->err, DL_EINPUT, "%s:%ld:%zu: a '\\' at the "
					      "end of the line; write \\\\ for a backslash",
					      path, line, j - i + 1);
			break;
		}
		if (rc == 0 && k == 0)
			rc = dl_error_set(R->err, DL_EINPUT, "%s:%ld:1: an empty line; a "
					  "token has at least one character (\\n for a "
					  "newline)", path, line);
		if (rc == 0 && add_token(R, tok, k))
			rc = dl_error_set(R->err, DL_ERUN, "out of memory");
		i = end + 1;
	}
	free(tok);
	if (rc == 0 && R->v->n == 0)
		rc = dl_error_set(R->err, DL_EINPUT, "%s: the vocabulary file is empty", path);
	return rc;
}

static int read_file(struct reader *R, yaml_node_t *y)
{
	if (y->type != YAML_SCALAR_NODE || y->data.scalar.length == 0)
		return yerr(R, y, "file: is the path of a vocabulary file (one token "
			    "a line), relative to the model file");
	char *path = relative_to(R->model, (const char *)y->data.scalar.value);
	if (!path)
		return dl_error_set(R->err, DL_ERUN, "out of memory");
	int rc = 0;
	char *buf = NULL;
	size_t len = 0, cap = 0;
	FILE *f = fopen(path, "rb");
	if (!f) {
		rc = yerr(R, y, "cannot open the vocabulary file %s: %s", path,
			  strerror(errno));
		goto out;
	}
	for (;;) {
		if (len == cap) {
			if (cap >= MAX_VOCAB_BYTES) {
				rc = dl_error_set(R->err, DL_EINPUT, "%s: a vocabulary file "
						  "larger than %zu MiB", path,
						  MAX_VOCAB_BYTES >> 20);
				goto out;
			}
			cap = cap ? cap * 2 : 4096;
			char *b = realloc(buf, cap);
			if (!b) {
				rc = dl_error_set(R->err, DL_ERUN, "out of memory");
				goto out;
			}
			buf = b;
		}
		size_t got = fread(buf + len, 1, cap - len, f);
		len += got;
		if (got == 0)
			break;
	}
	if (ferror(f)) {
		rc = yerr(R, y, "cannot read the vocabulary file %s: %s", path,
			  strerror(errno));
		goto out;
	}
	rc = parse_vocab_file(R, path, buf, len);
out:
	if (f)
		fclose(f);
	free(buf);
	free(path);
	return rc;
}

static int read_id(struct reader *R, yaml_node_t *y, const char *key, int64_t *out)
{
	int64_t id;
	if (dl_yaml_int(y, &id) != 0)
		return yerr(R, y, "%s: is a token id (an integer)", key);
	if (id < 0 || id >= R->v->n)
		return yerr(R, y, "%s: %lld is outside the vocabulary (ids 0 to %lld)",
			    key, (long long)id, (long long)R->v->n - 1);
	*out = id;
	return 0;
}

static int read_mapping(struct reader *R, yaml_node_t *map)
{
	static const char *const keys[] = {"tokens", "file", "bytes", "eos", "bos", NULL};
	yaml_node_t *val[5] = {0};
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start;
	     p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(R->doc, p->key);
		const char *name = k->type == YAML_SCALAR_NODE
			? (const char *)k->data.scalar.value : "?";
		int i = 0;
		while (keys[i] && strcmp(keys[i], name) != 0)
			i++;
		if (!keys[i]) {
			const char *sug = dl_suggest(name, keys);
			return sug ? yerr(R, k, "unknown key '%s'; did you mean '%s'?", name, sug)
				   : yerr(R, k, "unknown key '%s' (the keys are tokens, file, "
					  "bytes, eos and bos)", name);
		}
		if (val[i])
			return yerr(R, k, "'%s' is given twice", name);
		val[i] = yaml_document_get_node(R->doc, p->value);
	}
	int forms = !!val[0] + !!val[1] + !!val[2];
	if (forms != 1)
		return yerr(R, map, "give one of tokens: [...], file: PATH or bytes: true%s",
			    forms ? ", not several" : "");
	int rc;
	if (val[0]) {
		if (val[0]->type != YAML_SEQUENCE_NODE)
			return yerr(R, val[0], "tokens: is a list of strings");
		rc = read_list(R, val[0]);
	} else if (val[1]) {
		rc = read_file(R, val[1]);
	} else {
		int on;
		if (dl_yaml_bool(val[2], &on) != 0 || !on)
			return yerr(R, val[2], "bytes: takes true (ids 0-255 are the bytes "
				    "of UTF-8 text)");
		rc = read_bytes(R);
	}
	if (rc == 0 && val[3])
		rc = read_id(R, val[3], "eos", &R->v->eos);
	if (rc == 0 && val[4])
		rc = read_id(R, val[4], "bos", &R->v->bos);
	return rc;
}

int dl_vocab_parse(struct dl_vocab **out, const char *model_file,
		   struct yaml_document_s *doc, struct yaml_node_s *y,
		   struct dl_error *err)
{
	*out = NULL;
	struct dl_vocab *v = calloc(1, sizeof *v);
	if (!v || !(v->model = strdup(model_file))) {
		free(v);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	v->eos = v->bos = -1;
	v->line = (int)y->start_mark.line + 1;
	v->col = (int)y->start_mark.column + 1;
	struct reader R = {model_file, doc, v, 0, 0, err};
	int rc;
	if (y->type == YAML_SCALAR_NODE && strcmp((const char *)y->data.scalar.value,
						  "bytes") == 0)
		rc = read_bytes(&R);
	else if (y->type == YAML_SEQUENCE_NODE)
		rc = read_list(&R, y);
	else if (y->type == YAML_MAPPING_NODE)
		rc = read_mapping(&R, y);
	else
		rc = yerr(&R, y, "is bytes, a list of tokens, or a mapping {tokens: "
			  "[...] | file: PATH | bytes: true, eos: ID, bos: ID}");
	if (rc == 0 && index_tokens(v))
		rc = dl_error_set(err, DL_ERUN, "out of memory");
	if (rc) {
		dl_vocab_free(v);
		return rc;
	}
	*out = v;
	return 0;
}
