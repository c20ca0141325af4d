/* ONNX -> dlrun: walks the graph in its (topological) order, folds every
 * value that depends only on constants and static sizes, maps the rest to
 * dlrun entries (one op each, named from the ONNX node names), recognises
 * the patterns exporters write for one PyTorch op (GELU, SiLU, MatMul+Add),
 * drops entries nothing uses, and writes the model file and its weights. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "import/onnx.h"
#include "import/onnx.pb-c.h"
#include "io/atomic.h"
#include "io/safetensors.h"

#define MAXR DL_MAX_DIMS
/* The batch size inside folded shape arithmetic: any arithmetic on it
 * other than passing it along is a shape that cannot be folded. */
#define DYN (-1e300)
#define MAX_FILE_BYTES ((long)2000 * 1000 * 1000)
/* elements of constants that shape arithmetic (Range, ConstantOfShape,
 * Expand...) may fold at import, beyond the file's own */
#define CONST_FOLD_ELEMS ((int64_t)1 << 24)

enum { V_CONST = 1, V_RT = 2 };

struct val {
	const char *name;      /* the ONNX value name (points into the proto) */
	int kind;
	int rank;
	int64_t dims[MAXR];    /* V_RT: dims[0] is the batch, -1 */
	int isint;
	double *d;             /* V_CONST: numel values, row-major (owned) */
	int64_t numel;
	const char *init;      /* V_CONST from an initializer: its name */
	const char *ref;       /* V_RT: the name `in:` uses for it */
	int entry;             /* V_RT: producing entry, -1 for a model input */
	int node;              /* producing node, -1 for inputs and initializers */
	char *bad;             /* V_RT: why it cannot exist on its own (Erf) */
	int layout;            /* V_RT: L_BATCH, or a layout of ONNX's
	                        * recurrent ops (dims are ONNX's view, -1 at
	                        * the batch; the entry's output is batch first) */
	int dirs;              /* L_RNN_Y*: directions */
	int dynzero;           /* V_CONST: zeros whose shape has the batch
	                        * (an RNN's initial state); d has it as 1 */
	int port;              /* V_RT: which output of its entry (TopK's
	                        * indices are 1, `in: NAME.1`) */
	int castfree;          /* V_RT: floats that Cast passes as they are
	                        * (ONNX's bool as a comparison's 0/1, TopK's
	                        * indices) */
};

enum {
	L_BATCH = 0,   /* [N, ...] */
	L_TIME,        /* [T, N, F], the entry's [N, T, F] */
	L_RNN_Y,       /* [T, D, N, H], the entry's [N, T, D*H] */
	L_RNN_Y2,      /* [T, N, D, H], likewise */
};

struct param {
	const char *key;       /* the parameter's own name: weight, bias... */
	int rank;
	int64_t dims[MAXR];
	float *data;           /* owned */
};

struct entry {
	char *name;
	char *base;            /* the name it asked for, before uniquifying */
	const char *op;
	char *hp;              /* "k: v, k: v" (owned), or NULL */
	int n_in;
	const char **in;       /* [n_in] (owned array) */
	int *in_e;             /* [n_in] producing entries, -1 for model inputs */
	int *in_p;             /* [n_in] which output of that entry */
	int n_par;
	struct param par[8];
	int live;
};

struct imp {
	const char *path;
	Onnx__ModelProto *m;
	Onnx__GraphProto *g;
	int64_t opset;
	struct val **v;
	int nv, vcap;
	struct entry **e;
	int ne, ecap;
	int *inputs;           /* value indices of the model inputs */
	int n_inputs;
	int64_t fixed_batch;   /* the inputs' fixed batch size, or -1 */
	char **names;          /* every name given out (entries and inputs) */
	int n_names, names_cap;
	char *skip;            /* per node: taken over by a fused pattern */
	int64_t const_left;    /* elements constants may still take: what the
	                        * file holds, plus CONST_FOLD_ELEMS folded */
	struct dl_error *err;
};

/* ---- errors ---- */

static int ierr(struct imp *im, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int ierr(struct imp *im, const char *fmt, ...)
{
	char buf[800];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	return dl_error_set(im->err, DL_EINPUT, "%s: %s", im->path, buf);
}

static int nerr(struct imp *im, const Onnx__NodeProto *n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int nerr(struct imp *im, const Onnx__NodeProto *n, const char *fmt, ...)
{
	char buf[700];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (n->name && *n->name)
		return dl_error_set(im->err, DL_EINPUT, "%s: node '%s' (%s): %s", im->path,
				    n->name, n->op_type ? n->op_type : "?", buf);
	/* an unnamed node (exporters often leave names out): its place in
	 * the graph and its first output */
	int at = -1;
	for (size_t i = 0; im->g && i < im->g->n_node && at < 0; i++)
		if (im->g->node[i] == n)
			at = (int)i;
	return dl_error_set(im->err, DL_EINPUT, "%s: node %d, unnamed (%s, output '%s'): %s",
			    im->path, at, n->op_type ? n->op_type : "?",
			    n->n_output > 0 && n->output[0] ? n->output[0] : "?", buf);
}

static int oom(struct imp *im)
{
	return dl_error_set(im->err, DL_ERUN, "out of memory");
}

/* ---- attributes ---- */

static const Onnx__AttributeProto *attr(const Onnx__NodeProto *n, const char *name)
{
	for (size_t i = 0; i < n->n_attribute; i++)
		if (n->attribute[i]->name && strcmp(n->attribute[i]->name, name) == 0)
			return n->attribute[i];
	return NULL;
}

static int64_t attr_i(const Onnx__NodeProto *n, const char *name, int64_t def)
{
	const Onnx__AttributeProto *a = attr(n, name);
	return a && a->has_i ? a->i : def;
}

static double attr_f(const Onnx__NodeProto *n, const char *name, double def)
{
	const Onnx__AttributeProto *a = attr(n, name);
	return a && a->has_f ? a->f : def;
}

/* The attribute's ints, or NULL with *count 0. */
static const int64_t *attr_ints(const Onnx__NodeProto *n, const char *name, int *count)
{
	const Onnx__AttributeProto *a = attr(n, name);
	*count = a ? (int)a->n_ints : 0;
	return a && a->n_ints ? a->ints : NULL;
}

/* Whether the string attribute equals s (absent: def). */
static int attr_s_is(const Onnx__NodeProto *n, const char *name, const char *s, int def)
{
	const Onnx__AttributeProto *a = attr(n, name);
	if (!a || !a->has_s)
		return def;
	return a->s.len == strlen(s) && memcmp(a->s.data, s, a->s.len) == 0;
}

/* ---- values ---- */

static struct val *find(struct imp *im, const char *name)
{
	for (int i = im->nv - 1; i >= 0; i--)
		if (strcmp(im->v[i]->name, name) == 0)
			return im->v[i];
	return NULL;
}

static struct val *new_val(struct imp *im, const char *name, int kind)
{
	if (im->nv == im->vcap) {
		int cap = im->vcap ? 2 * im->vcap : 256;
		struct val **p = realloc(im->v, (size_t)cap * sizeof *p);
		if (!p)
			return NULL;
		im->v = p;
		im->vcap = cap;
	}
	struct val *v = calloc(1, sizeof *v);
	if (!v)
		return NULL;
	v->name = name;
	v->kind = kind;
	v->entry = -1;
	v->node = -1;
	im->v[im->nv++] = v;
	return v;
}

/* A folded value as an integer: out of range (or NaN) saturates to
 * +-2^53, which every size and index check then refuses. */
static int64_t to_i64(double x)
{
	const double big = 9007199254740992.0;   /* 2^53 */
	if (!(x > -big))
		return -(int64_t)big;
	return x < big ? (int64_t)x : (int64_t)big;
}

static int64_t numel_of(int rank, const int64_t *dims)
{
	int64_t n = 1;
	for (int i = 0; i < rank; i++)
		n *= dims[i];
	return n;
}

static const char *ilist(const int64_t *x, int n);

/* A constant value named name with shape dims; its data zeroed. NULL with
 * the error set when it is over the budget (im->const_left). */
static struct val *new_const(struct imp *im, const char *name, int rank,
			     const int64_t *dims, int isint)
{
	struct val *v = new_val(im, name, V_CONST);
	if (!v)
		return NULL;
	v->rank = rank;
	memcpy(v->dims, dims, (size_t)rank * sizeof *dims);
	int64_t n = 1;
	for (int i = 0; i < rank && n >= 0; i++)
		n = dims[i] < 0 || (dims[i] && n > im->const_left / dims[i]) ? -1 : n * dims[i];
	if (n < 0 || n > im->const_left) {
		ierr(im, "constant '%s' of shape %s: more elements than dlrun import "
		     "folds (the file's own constants and %lld more)", name,
		     ilist(dims, rank), (long long)CONST_FOLD_ELEMS);
		return NULL;
	}
	im->const_left -= n;
	v->numel = n;
	v->isint = isint;
	v->d = calloc((size_t)(v->numel ? v->numel : 1), sizeof *v->d);
	return v->d ? v : NULL;
}

static void val_free(struct val *v)
{
	if (v) {
		free(v->d);
		free(v->bad);
		free(v);
	}
}

static int dtype_size(int t)
{
	switch (t) {
	case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
	case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
		return 4;
	case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
	case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
		return 8;
	case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
	case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
	case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
		return 1;
	default:
		return 0;
	}
}

int dl_onnx_tensor_elem(const Onnx__TensorProto *t, size_t i, double *d, int64_t *k)
{
	const unsigned char *raw = t->has_raw_data ? t->raw_data.data : NULL;
	switch (t->data_type) {
	case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: {
		float f;
		if (raw)
			memcpy(&f, raw + 4 * i, 4);
		else
			f = t->float_data[i];
		*d = f;
		return 0;
	}
	case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
		if (raw)
			memcpy(d, raw + 8 * i, 8);
		else
			*d = t->double_data[i];
		return 0;
	case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
		if (raw)
			memcpy(k, raw + 8 * i, 8);
		else
			*k = t->int64_data[i];
		break;
	case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: {
		int32_t x;
		if (raw)
			memcpy(&x, raw + 4 * i, 4);
		else
			x = t->int32_data[i];
		*k = x;
		break;
	}
	case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
		*k = raw ? (int8_t)raw[i] : t->int32_data[i];
		break;
	case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
	case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
		*k = raw ? raw[i] : t->int32_data[i];
		break;
	default:
		return -1;
	}
	*d = (double)*k;
	return 0;
}

/* A TensorProto (an initializer or a Constant's value) as a constant
 * value, checking its size against its dims. what names it in errors. */
static int tensor_val(struct imp *im, const Onnx__TensorProto *t,
		      const char *name, const char *what, struct val **out)
{
	if (t->n_dims > MAXR)
		return ierr(im, "%s '%s' has %zu dimensions; dlrun takes at most %d",
			    what, name, t->n_dims, MAXR);
	int64_t dims[MAXR];
	int64_t n = 1;
	for (size_t i = 0; i < t->n_dims; i++) {
		if (t->dims[i] < 0 || (t->dims[i] && n > INT64_MAX / 16 / t->dims[i]))
			return ierr(im, "%s '%s' has a bad dimension %lld",
				    what, name, (long long)t->dims[i]);
		dims[i] = t->dims[i];
		n *= t->dims[i];
	}
	if (t->n_external_data || (t->has_data_location &&
	    t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL))
		return ierr(im, "%s '%s' keeps its data in an external file, which dlrun import does not read",
			    what, name);
	int dt = t->has_data_type ? t->data_type : 0;
	int es = dtype_size(dt);
	if (!es)
		return ierr(im, "%s '%s' has data type %d; dlrun import reads float, double, int64, int32, int8, uint8 and bool",
			    what, name, dt);
	int isint = dt != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT &&
		    dt != ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
	/* the data checked against the shape before anything is allocated */
	size_t have;
	switch (dt) {
	case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
		have = t->n_float_data;
		break;
	case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
		have = t->n_double_data;
		break;
	case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
		have = t->n_int64_data;
		break;
	default:
		have = t->n_int32_data;
	}
	if (t->has_raw_data && (int64_t)t->raw_data.len != n * es)
		return ierr(im, "%s '%s' holds %zu bytes; its shape and type need %lld",
			    what, name, t->raw_data.len, (long long)(n * es));
	if (!t->has_raw_data && (int64_t)have != n)
		return ierr(im, "%s '%s' holds %zu values; its shape needs %lld",
			    what, name, have, (long long)n);
	struct val *v = new_const(im, name, (int)t->n_dims, dims, isint);
	if (!v)
		return oom(im);
	v->init = name;
	*out = v;
	for (int64_t i = 0; i < n; i++) {
		int64_t k;
		dl_onnx_tensor_elem(t, (size_t)i, &v->d[i], &k);
	}
	return 0;
}

/* ---- names ---- */

static int name_taken(struct imp *im, const char *s)
{
	for (int i = 0; i < im->n_names; i++)
		if (strcmp(im->names[i], s) == 0)
			return 1;
	return 0;
}

/* Makes s a valid, unused dlrun name (letters, digits, _ and -; not all
 * digits), records it and returns the recorded copy, or NULL (no memory). */
static char *claim_name(struct imp *im, const char *s)
{
	size_t n = strlen(s);
	char *b = malloc(n + 24);
	if (!b)
		return NULL;
	size_t k = 0;
	int digits = 1;
	for (size_t i = 0; i < n && k < 80; i++) {
		char c = s[i];
		if (!isalnum((unsigned char)c) && c != '_' && c != '-')
			c = '_';
		if (c == '_' && (k == 0 || b[k - 1] == '_'))
			continue;
		if (!isdigit((unsigned char)c))
			digits = 0;
		b[k++] = c;
	}
	while (k && b[k - 1] == '_')
		k--;
	b[k] = 0;
	if (k == 0 || digits) {
		memmove(b + 1, b, k + 1);
		b[0] = 'n';
		k++;
	}
	if (name_taken(im, b)) {
		for (int j = 1;; j++) {
			snprintf(b + k, 24, "_%d", j);
			if (!name_taken(im, b))
				break;
		}
	}
	if (im->n_names == im->names_cap) {
		int cap = im->names_cap ? 2 * im->names_cap : 256;
		char **p = realloc(im->names, (size_t)cap * sizeof *p);
		if (!p) {
			free(b);
			return NULL;
		}
		im->names = p;
		im->names_cap = cap;
	}
	im->names[im->n_names++] = b;
	return b;
}

/* The PyTorch module path of a node named as torch.onnx.export names them
 * ("/layer1/layer1.0/conv1/Conv" -> "layer1.0.conv1"), written into buf;
 * *op gets the last component ("Conv"). Other names come back whole. */
static void module_path(const char *name, char *buf, size_t size, const char **op)
{
	buf[0] = 0;
	*op = NULL;
	if (name[0] != '/') {
		snprintf(buf, size, "%s", name);
		return;
	}
	const char *last = strrchr(name, '/');
	*op = last + 1;
	const char *p = name + 1;
	while (p < last) {
		const char *q = memchr(p, '/', (size_t)(last - p));
		if (!q)
			q = last;
		size_t len = (size_t)(q - p), have = strlen(buf);
		/* "layer1.0" inside "layer1" is already qualified */
		if (have && !(len > have && strncmp(p, buf, have) == 0 && p[have] == '.') &&
		    have + 1 < size)
			strcat(buf, ".");
		else if (have && len > have && strncmp(p, buf, have) == 0)
			buf[0] = 0, have = 0;
		have = strlen(buf);
		if (have + len < size) {
			memcpy(buf + have, p, len);
			buf[have + len] = 0;
		}
		p = q + 1;
	}
}

/* The name an entry for node n starts from, before uniquifying, into
 * name[size]: the PyTorch module path when it has one (the parameters'
 * initializer names when they are PyTorch's), else the node's own name;
 * suffix distinguishes the entries of one node. */
static void base_name(const Onnx__NodeProto *n, const char *pname, const char *suffix,
		      char *name, size_t size)
{
	char path[256];
	const char *op = NULL;
	if (pname) {
		snprintf(path, sizeof path, "%s", pname);
	} else if (n && n->name && *n->name) {
		module_path(n->name, path, sizeof path, &op);
		if (path[0] == 0 && op) {
			/* "/Relu_1" -> "relu_1" */
			snprintf(path, sizeof path, "%s", op);
			for (char *c = path; *c; c++)
				*c = (char)tolower((unsigned char)*c);
		}
	} else {
		snprintf(path, sizeof path, "%s", n ? n->op_type : "entry");
		for (char *c = path; *c; c++)
			*c = (char)tolower((unsigned char)*c);
	}
	snprintf(name, size, "%s%s%s", path, suffix ? "_" : "", suffix ? suffix : "");
}

/* The entry name for node n (base_name, made unique and recorded). */
static char *node_entry_name(struct imp *im, const Onnx__NodeProto *n,
			     const char *pname, const char *suffix)
{
	char name[300];
	base_name(n, pname, suffix, name, sizeof name);
	return claim_name(im, name);
}

/* The name node_entry_name would start from, before uniquifying (the
 * caller frees it). */
static char *node_base_name(const Onnx__NodeProto *n, const char *pname, const char *suffix)
{
	char name[300];
	base_name(n, pname, suffix, name, sizeof name);
	return strdup(name);
}

/* ---- entries ---- */

/* Appends "key: value" to *hp (NULL at first); returns 0 or DL_ERUN. */
static int hp_add(struct imp *im, char **hp, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int hp_add(struct imp *im, char **hp, const char *fmt, ...)
{
	char buf[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	size_t old = *hp ? strlen(*hp) : 0;
	char *s = realloc(*hp, old + strlen(buf) + 3);
	if (!s)
		return oom(im);
	if (old)
		strcpy(s + old, ", ");
	else
		s[0] = 0;
	strcat(s, buf);
	*hp = s;
	return 0;
}

/* A list of ints as YAML: "[1, 2]" (static buffer, one at a time). */
static const char *ilist(const int64_t *x, int n)
{
	static char buf[4][512];
	static int which;
	char *b = buf[which++ & 3];
	size_t k = 0;
	b[k++] = '[';
	for (int i = 0; i < n && k < 480; i++)
		k += (size_t)snprintf(b + k, 512 - k, "%s%lld", i ? ", " : "", (long long)x[i]);
	b[k++] = ']';
	b[k] = 0;
	return b;
}

/* A float as the shortest decimal that reads back as the same float32. */
static const char *fnum(double x)
{
	static char buf[4][40];
	static int which;
	char *b = buf[which++ & 3];
	for (int p = 1; p <= 9; p++) {
		snprintf(b, 40, "%.*g", p, x);
		if ((float)strtod(b, NULL) == (float)x)
			break;
	}
	if (!strpbrk(b, ".e") && !strstr(b, "inf") && !strstr(b, "nan"))
		strcat(b, ".0");
	return b;
}

/* A new entry for node n (its name from the node or from pname, the
 * PyTorch name of its parameters), running op on ins; out (may be NULL)
 * becomes its output. hp is taken over. Returns the entry or NULL. */
static struct entry *emit(struct imp *im, const Onnx__NodeProto *n,
			  const char *pname, const char *suffix, const char *op,
			  char *hp, struct val **ins, int n_in, struct val *out)
{
	for (int i = 0; i < n_in; i++) {
		int rnn = strcmp(op, "lstm") == 0 || strcmp(op, "gru") == 0 || strcmp(op, "rnn") == 0;
		if (ins[i]->layout != (rnn ? L_TIME : L_BATCH) && !ins[i]->bad) {
			free(hp);
			ierr(im, "node '%s' (%s): input '%s' is time major (batch second); dlrun import follows that layout only into and out of ONNX's recurrent ops and through the whole self-attention subgraph of nn.MultiheadAttention (no mask or the causal one), not op by op",
			     n && n->name ? n->name : "?", n ? n->op_type : "?", ins[i]->name);
			return NULL;
		}
		if (ins[i]->bad || !ins[i]->ref) {
			free(hp);
			if (ins[i]->bad)
				ierr(im, "%s", ins[i]->bad);
			else
				ierr(im, "an entry input without data (a dlrun import bug)");
			return NULL;
		}
	}
	if (im->ne == im->ecap) {
		int cap = im->ecap ? 2 * im->ecap : 128;
		struct entry **p = realloc(im->e, (size_t)cap * sizeof *p);
		if (!p) {
			free(hp);
			oom(im);
			return NULL;
		}
		im->e = p;
		im->ecap = cap;
	}
	struct entry *e = calloc(1, sizeof *e);
	if (!e) {
		free(hp);
		oom(im);
		return NULL;
	}
	e->name = node_entry_name(im, n, pname, suffix);
	e->base = node_base_name(n, pname, suffix);
	if (!e->name || !e->base) {
		free(e->base);
		free(e);
		free(hp);
		oom(im);
		return NULL;
	}
	e->op = op;
	e->hp = hp;
	e->n_in = n_in;
	e->in = malloc((size_t)(n_in ? n_in : 1) * sizeof *e->in);
	e->in_e = malloc((size_t)(n_in ? n_in : 1) * sizeof *e->in_e);
	e->in_p = malloc((size_t)(n_in ? n_in : 1) * sizeof *e->in_p);
	im->e[im->ne++] = e;   /* freed with the others from here on */
	if (!e->in || !e->in_e || !e->in_p) {
		oom(im);
		return NULL;
	}
	for (int i = 0; i < n_in; i++) {
		e->in[i] = ins[i]->ref;
		e->in_e[i] = ins[i]->entry;
		e->in_p[i] = ins[i]->port;
	}
	if (out) {
		out->kind = V_RT;
		out->ref = e->name;
		out->entry = im->ne - 1;
	}
	return e;
}

/* Adds parameter key of shape dims to e, from v's data (copied as float). */
static int add_param(struct imp *im, struct entry *e, const char *key,
		     int rank, const int64_t *dims, const double *d)
{
	struct param *p = &e->par[e->n_par++];
	p->key = key;
	p->rank = rank;
	memcpy(p->dims, dims, (size_t)rank * sizeof *dims);
	int64_t n = numel_of(rank, dims);
	p->data = malloc((size_t)(n ? n : 1) * sizeof *p->data);
	if (!p->data)
		return oom(im);
	for (int64_t i = 0; i < n; i++)
		p->data[i] = (float)d[i];
	return 0;
}

/* The PyTorch module name of a parameter initializer ("fc1.weight" ->
 * "fc1"), or NULL when the name is not PyTorch's ("onnx::Conv_31"). */
static const char *torch_prefix(const struct val *w, char *buf, size_t size)
{
	if (!w || !w->init)
		return NULL;
	const char *dot = strrchr(w->init, '.');
	if (!dot || dot == w->init || strchr(w->init, ':') || strchr(w->init, '/'))
		return NULL;
	if (strcmp(dot + 1, "weight") != 0 && strcmp(dot + 1, "bias") != 0)
		return NULL;
	size_t n = (size_t)(dot - w->init);
	if (n >= size)
		return NULL;
	memcpy(buf, w->init, n);
	buf[n] = 0;
	return buf;
}

/* ---- the node mappers ---- */

/* the most inputs of one node (DenseNet-201's widest Concat has 49) */
#define MAX_NODE_INPUTS 1024

struct ctx {
	struct imp *im;
	const Onnx__NodeProto *n;
	int node;
	struct val *in[MAX_NODE_INPUTS];
	int n_in;              /* inputs given (empty names are NULL) */
};

/* Output k of the node as a new value. */
static struct val *out_val(struct ctx *c, int k, int kind)
{
	if ((size_t)k >= c->n->n_output)
		return NULL;
	struct val *v = new_val(c->im, c->n->output[k], kind);
	if (v)
		v->node = c->node;
	return v;
}

static int is_rt(const struct val *v)
{
	return v && v->kind == V_RT;
}

static int is_const(const struct val *v)
{
	return v && v->kind == V_CONST;
}

static int has_dyn(const struct val *v)
{
	for (int64_t i = 0; i < v->numel; i++)
		if (v->d[i] == DYN)
			return 1;
	return 0;
}

/* A constant input as integers (axes, pads, shapes); DYN stays DYN via
 * *dyn (may be NULL, then DYN is an error). */
static int const_ints(struct ctx *c, int k, const char *what, int64_t *out,
		      int max, int *count)
{
	struct val *v = k < c->n_in ? c->in[k] : NULL;
	if (!is_const(v))
		return nerr(c->im, c->n, "%s must be a constant (it depends on the input data)", what);
	if (v->numel > max)
		return nerr(c->im, c->n, "%s has %lld values; at most %d", what,
			    (long long)v->numel, max);
	for (int64_t i = 0; i < v->numel; i++) {
		if (v->d[i] == DYN)
			return nerr(c->im, c->n, "%s depends on the batch size, a shape that cannot be folded", what);
		out[i] = to_i64(v->d[i]);
	}
	*count = (int)v->numel;
	return 0;
}

static int norm_axis(struct ctx *c, int64_t axis, int rank, int64_t *out)
{
	if (axis < -rank || axis >= rank)
		return nerr(c->im, c->n, "axis %lld is out of range for rank %d",
			    (long long)axis, rank);
	*out = axis < 0 ? axis + rank : axis;
	return 0;
}

/* Runtime axis: normalized and not the batch. */
static int rt_axis(struct ctx *c, int64_t axis, int rank, int64_t *out)
{
	int rc = norm_axis(c, axis, rank, out);
	if (rc == 0 && *out == 0)
		return nerr(c->im, c->n, "axis 0 is the batch dimension, which dlrun ops do not change");
	return rc;
}

static void set_shape(struct val *v, int rank, const int64_t *dims)
{
	v->rank = rank;
	memcpy(v->dims, dims, (size_t)rank * sizeof *dims);
	v->dims[0] = -1;
}

static void copy_shape(struct val *v, const struct val *from)
{
	set_shape(v, from->rank, from->dims);
}

static int need_rt(struct ctx *c, int k)
{
	if (k >= c->n_in || !c->in[k])
		return nerr(c->im, c->n, "input %d is missing", k);
	if (c->in[k]->kind != V_RT)
		return nerr(c->im, c->n, "input %d ('%s') is a constant where dlrun needs data; constant operands are folded only when every input is constant",
			    k, c->in[k]->name);
	if (c->in[k]->layout != L_BATCH)
		return nerr(c->im, c->n, "input %d ('%s') is time major (batch second); dlrun import follows that layout only into and out of ONNX's recurrent ops and through the whole self-attention subgraph of nn.MultiheadAttention (no mask or the causal one), not op by op",
			    k, c->in[k]->name);
	return 0;
}

/* A unary op on a constant, folded (x.abs() + 1 of a parameter); 1 when
 * op is one this folds, else 0. */
static int fold_unary(struct ctx *c, const char *op, int *rc)
{
	static const char *const known[] = {"abs", "neg", "sqrt", "exp", "log", "relu",
					    "sigmoid", "tanh"};
	int k = -1;
	for (int i = 0; i < (int)(sizeof known / sizeof known[0]); i++)
		if (strcmp(op, known[i]) == 0)
			k = i;
	struct val *x = c->in[0];
	if (k < 0 || !is_const(x))
		return 0;
	*rc = 0;
	if (has_dyn(x)) {
		*rc = nerr(c->im, c->n, "arithmetic on the batch size: a shape that cannot be folded");
		return 1;
	}
	struct val *o = new_const(c->im, c->n->output[0], x->rank, x->dims, 0);
	if (!o) {
		*rc = oom(c->im);
		return 1;
	}
	o->node = c->node;
	for (int64_t i = 0; i < x->numel; i++) {
		double v = x->d[i], y;
		switch (k) {
		case 0: y = fabs(v); break;
		case 1: y = -v; break;
		case 2: y = sqrt(v); break;
		case 3: y = exp(v); break;
		case 4: y = log(v); break;
		case 5: y = v > 0 ? v : 0; break;
		case 6: y = 1 / (1 + exp(-v)); break;
		default: y = tanh(v);
		}
		o->d[i] = x->isint && k <= 1 ? y : (float)y;
	}
	o->isint = x->isint && k <= 1;
	return 1;
}

/* Unary ops that map one to one. */
static int simple(struct ctx *c, const char *op, char *hp)
{
	int rc;
	if (c->n_in > 0 && fold_unary(c, op, &rc)) {
		free(hp);
		return rc;
	}
	rc = need_rt(c, 0);
	if (rc) {
		free(hp);
		return rc;
	}
	struct val *o = out_val(c, 0, V_RT);
	if (!o) {
		free(hp);
		return oom(c->im);
	}
	copy_shape(o, c->in[0]);
	return emit(c->im, c->n, NULL, NULL, op, hp, c->in, 1, o) ? 0 : DL_ERUN;
}

/* Output 0 is input 0 itself (Identity, Dropout at inference). */
static int alias(struct ctx *c, struct val *src, int k)
{
	struct val *o = out_val(c, k, src->kind);
	if (!o)
		return oom(c->im);
	struct val *keep = o;
	const char *name = o->name;
	int node = o->node;
	*keep = *src;
	keep->name = name;
	keep->node = node;
	keep->init = NULL;
	if (src->kind == V_CONST) {
		keep->d = malloc((size_t)(src->numel ? src->numel : 1) * sizeof *keep->d);
		if (!keep->d)
			return oom(c->im);
		memcpy(keep->d, src->d, (size_t)src->numel * sizeof *keep->d);
	}
	if (src->bad && !(keep->bad = strdup(src->bad)))
		return oom(c->im);
	return 0;
}

static int m_identity(struct ctx *c)
{
	if (!c->in[0])
		return nerr(c->im, c->n, "input 0 is missing");
	if (attr_i(c->n, "training_mode", 0))
		return nerr(c->im, c->n, "attribute 'training_mode' 1 (dropout in training) is not inference");
	if (c->n_in > 2 && c->in[2] && (!is_const(c->in[2]) || c->in[2]->d[0] != 0))
		return nerr(c->im, c->n, "input 'training_mode' must be a constant false");
	return alias(c, c->in[0], 0);
}

static int m_relu(struct ctx *c) { return simple(c, "relu", NULL); }
static int m_sigmoid(struct ctx *c) { return simple(c, "sigmoid", NULL); }
static int m_tanh(struct ctx *c) { return simple(c, "tanh", NULL); }
static int m_hardswish(struct ctx *c) { return simple(c, "hardswish", NULL); }
static int m_exp(struct ctx *c) { return simple(c, "exp", NULL); }
static int m_log(struct ctx *c) { return simple(c, "log", NULL); }
static int m_sqrt(struct ctx *c) { return simple(c, "sqrt", NULL); }
static int m_abs(struct ctx *c) { return simple(c, "abs", NULL); }
static int m_neg(struct ctx *c) { return simple(c, "neg", NULL); }
static int m_mish(struct ctx *c) { return simple(c, "mish", NULL); }

static int m_softplus(struct ctx *c) { return simple(c, "softplus", NULL); }

static int m_leaky_relu(struct ctx *c)
{
	char *hp = NULL;
	if (hp_add(c->im, &hp, "negative_slope: %s", fnum(attr_f(c->n, "alpha", 0.01))))
		return DL_ERUN;
	return simple(c, "leaky_relu", hp);
}

static int m_elu(struct ctx *c)
{
	char *hp = NULL;
	if (hp_add(c->im, &hp, "alpha: %s", fnum(attr_f(c->n, "alpha", 1.0))))
		return DL_ERUN;
	return simple(c, "elu", hp);
}

static int m_selu(struct ctx *c)
{
	if (fabs(attr_f(c->n, "alpha", 1.67326319217681884765625) - 1.6732632) > 1e-6 ||
	    fabs(attr_f(c->n, "gamma", 1.05070102214813232421875) - 1.0507010) > 1e-6)
		return nerr(c->im, c->n, "attributes 'alpha' and 'gamma' other than SELU's constants have no dlrun equivalent");
	return simple(c, "selu", NULL);
}

static int m_hardsigmoid(struct ctx *c)
{
	if (fabs(attr_f(c->n, "alpha", 0.2) - 1.0 / 6) > 1e-6 ||
	    fabs(attr_f(c->n, "beta", 0.5) - 0.5) > 1e-6)
		return nerr(c->im, c->n, "attribute 'alpha' %s, 'beta' %s: dlrun's hardsigmoid is PyTorch's (alpha 1/6, beta 0.5)",
			    fnum(attr_f(c->n, "alpha", 0.2)), fnum(attr_f(c->n, "beta", 0.5)));
	return simple(c, "hardsigmoid", NULL);
}

static int m_gelu(struct ctx *c)
{
	char *hp = NULL;
	if (attr_s_is(c->n, "approximate", "tanh", 0) &&
	    hp_add(c->im, &hp, "approximate: tanh"))
		return DL_ERUN;
	return simple(c, "gelu", hp);
}

static int softmax_like(struct ctx *c, const char *op)
{
	int rc = need_rt(c, 0);
	if (rc)
		return rc;
	int64_t axis = attr_i(c->n, "axis", c->im->opset >= 13 ? -1 : 1), ax = 0;
	if ((rc = rt_axis(c, axis, c->in[0]->rank, &ax)))
		return rc;
	if (c->im->opset < 13 && ax != c->in[0]->rank - 1)
		return nerr(c->im, c->n, "attribute 'axis' %lld before opset 13 flattens the trailing dimensions, which dlrun's %s does not",
			    (long long)axis, op);
	char *hp = NULL;
	if (hp_add(c->im, &hp, "dim: %lld", (long long)ax))
		return DL_ERUN;
	return simple(c, op, hp);
}

static int m_softmax(struct ctx *c) { return softmax_like(c, "softmax"); }
static int m_log_softmax(struct ctx *c) { return softmax_like(c, "log_softmax"); }

static int m_clip(struct ctx *c)
{
	double lo = -INFINITY, hi = INFINITY;
	if (c->im->opset < 11) {
		lo = attr_f(c->n, "min", -INFINITY);
		hi = attr_f(c->n, "max", INFINITY);
	}
	for (int k = 1; k <= 2; k++) {
		if (k < c->n_in && c->in[k]) {
			if (!is_const(c->in[k]) || c->in[k]->numel != 1)
				return nerr(c->im, c->n, "input %d ('%s') must be a constant scalar",
					    k, c->in[k]->name);
			*(k == 1 ? &lo : &hi) = c->in[k]->d[0];
		}
	}
	if (lo == 0 && hi == 6)
		return simple(c, "relu6", NULL);
	if (lo == 0 && isinf(hi))
		return simple(c, "relu", NULL);
	if (isinf(lo) && isinf(hi) && lo < 0 && hi > 0) {
		/* no bounds: the identity */
		int rc = need_rt(c, 0);
		return rc ? rc : alias(c, c->in[0], 0);
	}
	char *hp = NULL;
	if (!isinf(lo) && hp_add(c->im, &hp, "min: %s", fnum(lo)))
		return DL_ERUN;
	if (!isinf(hi) && hp_add(c->im, &hp, "max: %s", fnum(hi)))
		return DL_ERUN;
	return simple(c, "clamp", hp);
}

/* Erf exists only inside GELU's pattern (x * 0.5 * (1 + erf(x / sqrt 2))):
 * it is recorded as a value that cannot be built on its own, and the
 * pattern's last Mul recognises it. */
static int m_erf(struct ctx *c)
{
	int rc = need_rt(c, 0);
	if (rc)
		return rc;
	struct val *o = out_val(c, 0, V_RT);
	if (!o)
		return oom(c->im);
	copy_shape(o, c->in[0]);
	char buf[600];
	snprintf(buf, sizeof buf, "node '%s' (Erf): erf has no dlrun op; it is imported only as part of GELU's pattern 0.5 * x * (1 + erf(x / sqrt(2)))",
		 c->n->name ? c->n->name : "?");
	o->bad = strdup(buf);
	return o->bad ? 0 : oom(c->im);
}

/* ---- elementwise binary ops, with the patterns that end in them ---- */

static const Onnx__NodeProto *producer(struct imp *im, const struct val *v,
				       const char *op)
{
	if (!v || v->node < 0)
		return NULL;
	const Onnx__NodeProto *n = im->g->node[v->node];
	return strcmp(n->op_type, op) == 0 ? n : NULL;
}

static int is_scalar(const struct val *v, double x, double tol)
{
	return is_const(v) && v->numel == 1 && fabs(v->d[0] - x) <= tol;
}

/* Node input k's value. */
static struct val *node_in(struct imp *im, const Onnx__NodeProto *n, size_t k)
{
	return k < n->n_input && n->input[k][0] ? find(im, n->input[k]) : NULL;
}

/* The scalar operand of a binary node and the other one (either order);
 * 0 when neither is a scalar constant. */
static int scalar_operand(struct imp *im, const Onnx__NodeProto *n, double *k, struct val **other)
{
	if (!n || n->n_input != 2)
		return 0;
	for (int s = 0; s < 2; s++) {
		struct val *a = node_in(im, n, (size_t)s), *b = node_in(im, n, (size_t)(1 - s));
		if (is_const(a) && a->numel == 1 && b) {
			*k = a->d[0];
			*other = b;
			return 1;
		}
	}
	return 0;
}

/* Whether t = sqrt(2/pi) * (x + 0.044715 * x^3), as exporters write the
 * tanh approximation of GELU. */
static int gelu_tanh_arg(struct imp *im, struct val *t, struct val *x)
{
	double k;
	struct val *u, *v;
	if (!scalar_operand(im, producer(im, t, "Mul"), &k, &u) || fabs(k - 0.7978845608) > 1e-6)
		return 0;
	const Onnx__NodeProto *add = producer(im, u, "Add");
	if (!add || add->n_input != 2)
		return 0;
	for (int s = 0; s < 2; s++) {
		if (node_in(im, add, (size_t)s) != x)
			continue;
		v = node_in(im, add, (size_t)(1 - s));
		struct val *cube;
		if (scalar_operand(im, producer(im, v, "Mul"), &k, &cube) && fabs(k - 0.044715) < 1e-7 &&
		    (producer(im, cube, "Mul") || producer(im, cube, "Pow")))
			return 1;
	}
	return 0;
}

/* x when m = x * (1 + erf(x / sqrt(2))) (either operand order), or
 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) (then *tanh is set),
 * else NULL. */
static struct val *gelu_core(struct imp *im, struct val *m, int *tanh_form)
{
	*tanh_form = 0;
	const Onnx__NodeProto *mul = producer(im, m, "Mul");
	if (!mul || mul->n_input != 2)
		return NULL;
	for (int s = 0; s < 2; s++) {
		struct val *x = node_in(im, mul, (size_t)s), *a = node_in(im, mul, (size_t)(1 - s));
		const Onnx__NodeProto *add = producer(im, a, "Add");
		if (!add || add->n_input != 2)
			continue;
		for (int t = 0; t < 2; t++) {
			struct val *e = node_in(im, add, (size_t)t), *one = node_in(im, add, (size_t)(1 - t));
			const Onnx__NodeProto *th = producer(im, e, "Tanh");
			if (th && is_scalar(one, 1, 0) && gelu_tanh_arg(im, node_in(im, th, 0), x)) {
				*tanh_form = 1;
				return x;
			}
			const Onnx__NodeProto *erf = producer(im, e, "Erf");
			if (!erf || !is_scalar(one, 1, 0))
				continue;
			struct val *dv = node_in(im, erf, 0);
			const Onnx__NodeProto *div = producer(im, dv, "Div");
			const Onnx__NodeProto *mul2 = producer(im, dv, "Mul");
			if (div && node_in(im, div, 0) == x &&
			    is_scalar(node_in(im, div, 1), sqrt(2.0), 1e-5))
				return x;
			if (mul2 && node_in(im, mul2, 0) == x &&
			    is_scalar(node_in(im, mul2, 1), sqrt(0.5), 1e-6))
				return x;
		}
	}
	return NULL;
}

/* Broadcast of two runtime shapes (batch first): the per-sample shapes
 * aligned from the right, as dlrun's add, mul, sub and div do. Data of
 * different ranks would align ONNX's batch with another dimension, so
 * only a parameter entry made for the other operand (anyrank) may
 * differ in rank. */
static int bcast(struct ctx *c, const struct val *a, const struct val *b, struct val *o,
		 int anyrank)
{
	if (a->rank != b->rank && !anyrank)
		return nerr(c->im, c->n, "operands of rank %d and %d: dlrun broadcasts data operands of equal rank only (batch first)",
			    a->rank, b->rank);
	int r = a->rank > b->rank ? a->rank : b->rank;
	int64_t d[MAXR];
	for (int i = 1; i < r; i++) {
		int ia = i - (r - a->rank), ib = i - (r - b->rank);
		int64_t da = ia >= 1 ? a->dims[ia] : 1, db = ib >= 1 ? b->dims[ib] : 1;
		if (da == db || db == 1)
			d[i] = da;
		else if (da == 1)
			d[i] = db;
		else
			return nerr(c->im, c->n, "operand sizes %lld and %lld of dimension %d do not broadcast",
				    (long long)da, (long long)db, i);
	}
	set_shape(o, r, d);
	return 0;
}

/* Folds a binary op on constants (NumPy broadcasting). */
static int fold_binary(struct ctx *c, char op)
{
	struct val *a = c->in[0], *b = c->in[1];
	int r = a->rank > b->rank ? a->rank : b->rank;
	int64_t d[MAXR], sa[MAXR], sb[MAXR];
	for (int i = 0; i < r; i++) {
		int ia = i - (r - a->rank), ib = i - (r - b->rank);
		int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
		if (da != db && da != 1 && db != 1)
			return nerr(c->im, c->n, "constant operands of shapes %s and %s do not broadcast",
				    ilist(a->dims, a->rank), ilist(b->dims, b->rank));
		d[i] = da == 1 ? db : da;
		sa[i] = da == 1 ? 0 : 1;
		sb[i] = db == 1 ? 0 : 1;
	}
	struct val *o = new_const(c->im, c->n->output[0], r, d, a->isint && b->isint);
	if (!o)
		return oom(c->im);
	o->node = c->node;
	int64_t idx[MAXR] = {0};
	for (int64_t k = 0; k < o->numel; k++) {
		int64_t ka = 0, kb = 0;
		for (int i = 0; i < r; i++) {
			int ia = i - (r - a->rank), ib = i - (r - b->rank);
			if (ia >= 0)
				ka = ka * a->dims[ia] + (sa[i] ? idx[i] : 0);
			if (ib >= 0)
				kb = kb * b->dims[ib] + (sb[i] ? idx[i] : 0);
		}
		double x = a->d[ka], y = b->d[kb], z;
		if (x == DYN || y == DYN) {
			if ((op == '*' || op == '/') && (x == DYN ? y : x) == 1 && !(op == '/' && y == DYN))
				z = DYN;
			else if ((op == '+' || op == '-') && (x == DYN ? y : x) == 0 && !(op == '-' && y == DYN))
				z = DYN;
			/* the batch size is never negative: compared with a
			 * negative constant (the -1 of a shape, as Expand's
			 * exporters test for it), the answer is known */
			else if (op == '=' && x != y && (x == DYN ? y : x) < 0)
				z = 0;
			else if ((op == '<' || op == '>') && x != y && (x == DYN ? y : x) < 0)
				z = (op == '>') == (x == DYN);
			else if (op == '*' && x != y && (x == DYN ? y : x) > 1)
				/* Swin's windows, a reshape(B * nW, ...) */
				return nerr(c->im, c->n, "the batch size times %g: a shape that folds other dimensions into the batch, which dlrun keeps first and whole",
					    x == DYN ? y : x);
			else
				return nerr(c->im, c->n, "arithmetic on the batch size: a shape that cannot be folded");
		} else {
			switch (op) {
			case '+': z = x + y; break;
			case '-': z = x - y; break;
			case '*': z = x * y; break;
			case '^': z = pow(x, y); break;
			case '%':
			case 'f':
				if (y == 0)
					return nerr(c->im, c->n, "modulo by zero");
				z = fmod(x, y);
				/* Python's sign (the divisor's) unless fmod is set */
				if (op == '%' && z != 0 && (z < 0) != (y < 0))
					z += y;
				break;
			case '=': z = x == y; break;
			case '<': z = x < y; break;
			case '>': z = x > y; break;
			case 'l': z = x <= y; break;
			case 'g': z = x >= y; break;
			case 'n': z = x != y; break;
			case '&': z = x != 0 && y != 0; break;
			case '|': z = x != 0 || y != 0; break;
			default:
				if (o->isint) {
					if (y == 0)
						return nerr(c->im, c->n, "integer division by zero");
					z = floor(x / y);
					if (x / y < 0 && fmod(x, y) != 0)
						z = trunc(x / y);
				} else {
					z = x / y;
				}
			}
		}
		if (!o->isint && !strchr("=<>lgn&|", op))
			z = (float)z;
		o->d[k] = z;
		for (int i = r - 1; i >= 0; i--) {
			if (++idx[i] < d[i])
				break;
			idx[i] = 0;
		}
	}
	if (strchr("=<>lgn&|", op))
		o->isint = 1;
	return 0;
}

/* linear's bias after MatMul: out = matmul_out + b with b of shape [M]. */
static int fuse_bias(struct ctx *c, struct val *x, struct val *b)
{
	const Onnx__NodeProto *mm = producer(c->im, x, "MatMul");
	if (!mm || x->entry < 0)
		return 0;
	struct entry *e = c->im->e[x->entry];
	if (strcmp(e->op, "linear") != 0 || e->n_par != 1)
		return 0;
	int64_t m = e->par[0].dims[0];
	if (!(b->rank == 1 && b->dims[0] == m))
		return 0;
	/* the MatMul's output must feed this Add only */
	int uses = 0;
	for (size_t i = 0; i < c->im->g->n_node; i++)
		for (size_t k = 0; k < c->im->g->node[i]->n_input; k++)
			uses += strcmp(c->im->g->node[i]->input[k], x->name) == 0;
	for (size_t i = 0; i < c->im->g->n_output; i++)
		uses += c->im->g->output[i]->name &&
			strcmp(c->im->g->output[i]->name, x->name) == 0;
	if (uses != 1)
		return 0;
	char *p = strstr(e->hp, ", bias: false");
	if (p)
		*p = 0;
	if (add_param(c->im, e, "bias", 1, b->dims, b->d))
		return DL_ERUN;
	struct val *o = out_val(c, 0, V_RT);
	if (!o)
		return oom(c->im);
	copy_shape(o, x);
	o->ref = x->ref;
	o->entry = x->entry;
	o->port = x->port;
	return 1;
}

/* The trailing axes a ReduceMean node averages over (keepdims), as their
 * count, or 0 when it is not that. */
static int trailing_mean(struct imp *im, const Onnx__NodeProto *rm, int rank)
{
	int na;
	const int64_t *ax = attr_ints(rm, "axes", &na);
	if (!ax || na < 1 || na >= rank || !attr_i(rm, "keepdims", 1))
		return 0;
	int seen[MAXR] = {0};
	for (int i = 0; i < na; i++) {
		int64_t a = ax[i] < 0 ? ax[i] + rank : ax[i];
		if (a < rank - na || a >= rank)
			return 0;
		seen[a] = 1;
	}
	for (int i = rank - na; i < rank; i++)
		if (!seen[i])
			return 0;
	(void)im;
	return na;
}

/* x when div = (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) over
 * the trailing nd axes, as exporters write layer norm; else NULL. */
static struct val *ln_core(struct imp *im, const Onnx__NodeProto *div, double *eps, int *nd)
{
	if (strcmp(div->op_type, "Div") != 0 || div->n_input != 2)
		return NULL;
	struct val *d = node_in(im, div, 0), *sq = node_in(im, div, 1);
	const Onnx__NodeProto *sub = producer(im, d, "Sub"), *sqrt_n = producer(im, sq, "Sqrt");
	if (!sub || !sqrt_n)
		return NULL;
	struct val *x = node_in(im, sub, 0), *mu = node_in(im, sub, 1);
	const Onnx__NodeProto *rm = producer(im, mu, "ReduceMean");
	if (!is_rt(x) || !rm || node_in(im, rm, 0) != x)
		return NULL;
	int k = trailing_mean(im, rm, x->rank);
	const Onnx__NodeProto *add = producer(im, node_in(im, sqrt_n, 0), "Add");
	if (!k || !add)
		return NULL;
	for (int t = 0; t < 2; t++) {
		struct val *v = node_in(im, add, (size_t)t), *e = node_in(im, add, (size_t)(1 - t));
		const Onnx__NodeProto *rm2 = producer(im, v, "ReduceMean");
		if (!rm2 || !is_const(e) || e->numel != 1 || trailing_mean(im, rm2, x->rank) != k)
			continue;
		struct val *p = node_in(im, rm2, 0);
		const Onnx__NodeProto *pw = producer(im, p, "Pow"), *sqm = producer(im, p, "Mul");
		int ok = (pw && node_in(im, pw, 0) == d && is_scalar(node_in(im, pw, 1), 2, 0)) ||
			 (sqm && node_in(im, sqm, 0) == d && node_in(im, sqm, 1) == d);
		if (!ok)
			continue;
		*eps = e->d[0];
		*nd = k;
		return x;
	}
	return NULL;
}

/* A layer_norm entry over the trailing nd axes of x, with weight w and
 * bias b (both NULL: elementwise_affine false). */
static int emit_ln(struct ctx *c, struct val *x, double eps, int nd,
		   struct val *w, struct val *b)
{
	struct imp *im = c->im;
	int64_t n = numel_of(nd, x->dims + x->rank - nd);
	if ((w && w->numel != n) || (b && b->numel != n))
		return nerr(im, c->n, "layer norm's weight or bias has other than %lld values", (long long)n);
	char *hp = NULL;
	if (hp_add(im, &hp, "normalized_shape: %s", ilist(x->dims + x->rank - nd, nd)))
		return DL_ERUN;
	if (fabs(eps - 1e-5) > 1e-12 && hp_add(im, &hp, "eps: %s", fnum(eps)))
		return DL_ERUN;
	if (!w && hp_add(im, &hp, "elementwise_affine: false"))
		return DL_ERUN;
	struct val *o = out_val(c, 0, V_RT);
	if (!o) {
		free(hp);
		return oom(im);
	}
	copy_shape(o, x);
	char buf[256];
	const char *tp = torch_prefix(w, buf, sizeof buf);
	struct entry *e = emit(im, c->n, tp, NULL, "layer_norm", hp, &x, 1, o);
	if (!e)
		return DL_ERUN;
	int rc = 0;
	if (w)
		rc = add_param(im, e, "weight", nd, x->dims + x->rank - nd, w->d);
	if (rc == 0 && b)
		rc = add_param(im, e, "bias", nd, x->dims + x->rank - nd, b->d);
	return rc;
}

/* Constant k, an operand of data x, as a parameter entry (its key the
 * initializer's name): k's shape aligned with x's from the right, a
 * leading 1 at x's batch dropped, into *out. When k does not broadcast
 * so, *out is NULL and the node's output is marked bad (an error only if
 * something uses it). Returns 0 or an error code. */
static int const_param(struct ctx *c, struct val *k, struct val *x, struct val **out)
{
	struct imp *im = c->im;
	int r = k->rank;
	const int64_t *d = k->dims;
	*out = NULL;
	if (r == x->rank && r > 1 && d[0] == 1)
		d++, r--;
	if (r < 1 || r >= x->rank || k->numel < 1) {
		char buf[700];
		snprintf(buf, sizeof buf, "node '%s' (%s): constant operand '%s' of shape %s does not broadcast over the batch of data of rank %d (a dlrun parameter holds one value per sample)",
			 c->n->name ? c->n->name : "?", c->n->op_type, k->name, ilist(k->dims, k->rank), x->rank);
		struct val *o = out_val(c, 0, V_RT);
		if (!o)
			return oom(im);
		copy_shape(o, x);
		return (o->bad = strdup(buf)) ? 0 : oom(im);
	}
	char *hp = NULL;
	if (hp_add(im, &hp, "shape: %s", ilist(d, r)))
		return DL_ERUN;
	struct val *p = new_val(im, "", V_RT);
	if (!p) {
		free(hp);
		return oom(im);
	}
	int64_t pd[MAXR] = {-1};
	memcpy(pd + 1, d, (size_t)r * sizeof *d);
	set_shape(p, r + 1, pd);
	/* no input: the loader gives a parameter the batch size */
	struct entry *e = emit(im, c->n, k->init, k->init ? NULL : "const", "parameter", hp, NULL, 0, p);
	if (!e || add_param(im, e, "", r, d, k->d))
		return DL_ERUN;
	*out = p;
	return 0;
}

static int binary(struct ctx *c, char op, const char *dlop)
{
	struct val *a = c->in[0], *b = c->in[1];
	if (!a || !b)
		return nerr(c->im, c->n, "needs two inputs");
	if (is_const(a) && is_const(b))
		return fold_binary(c, op);
	if (op == '*') {
		/* GELU: (x * (1 + erf(x / sqrt 2))) * 0.5 */
		for (int s = 0; s < 2; s++) {
			struct val *m = c->in[s], *h = c->in[1 - s];
			struct val *x;
			int tf;
			if (is_scalar(h, 0.5, 0) && (x = gelu_core(c->im, m, &tf)) && is_rt(x) && !x->bad) {
				struct val *o = out_val(c, 0, V_RT);
				char *hp = NULL;
				if (!o || (tf && hp_add(c->im, &hp, "approximate: tanh")))
					return oom(c->im);
				copy_shape(o, x);
				return emit(c->im, c->n, NULL, NULL, "gelu", hp, &x, 1, o) ? 0 : DL_ERUN;
			}
		}
		/* SiLU: x * sigmoid(x) */
		for (int s = 0; s < 2; s++) {
			const Onnx__NodeProto *sg = producer(c->im, c->in[1 - s], "Sigmoid");
			if (sg && node_in(c->im, sg, 0) == c->in[s] && is_rt(c->in[s])) {
				struct val *x = c->in[s];
				struct val *o = out_val(c, 0, V_RT);
				if (!o)
					return oom(c->im);
				copy_shape(o, x);
				return emit(c->im, c->n, NULL, NULL, "silu", NULL, &x, 1, o) ? 0 : DL_ERUN;
			}
		}
	}
	/* layer norm written out: (x - mean) / sqrt(var + eps) [* w + b] */
	if (op == '/' && is_rt(a) && is_rt(b)) {
		double eps;
		int nd;
		struct val *x = ln_core(c->im, c->n, &eps, &nd);
		if (x)
			return emit_ln(c, x, eps, nd, NULL, NULL);
	}
	if (op == '+') {
		for (int s = 0; s < 2; s++) {
			struct val *m = c->in[s], *bias = c->in[1 - s];
			const Onnx__NodeProto *mul = producer(c->im, m, "Mul");
			if (!mul || !is_const(bias))
				continue;
			for (int t = 0; t < 2; t++) {
				struct val *nv = node_in(c->im, mul, (size_t)t), *w = node_in(c->im, mul, (size_t)(1 - t));
				const Onnx__NodeProto *div = producer(c->im, nv, "Div");
				double eps;
				int nd;
				struct val *x = div ? ln_core(c->im, div, &eps, &nd) : NULL;
				if (x && is_const(w))
					return emit_ln(c, x, eps, nd, w, bias);
			}
		}
	}
	/* bad operands (Erf) propagate; only a recognised pattern builds them */
	if ((is_rt(a) && a->bad) || (is_rt(b) && b->bad)) {
		struct val *o = out_val(c, 0, V_RT);
		if (!o)
			return oom(c->im);
		copy_shape(o, a->bad ? a : b);
		o->bad = strdup(a->bad ? a->bad : b->bad);
		return o->bad ? 0 : oom(c->im);
	}
	if (op == '+') {
		for (int s = 0; s < 2; s++) {
			if (is_rt(c->in[s]) && is_const(c->in[1 - s])) {
				int rc = fuse_bias(c, c->in[s], c->in[1 - s]);
				if (rc)
					return rc < 0 ? rc : 0;
			}
		}
	}
	if (op == '^') {
		if (is_rt(a) && is_scalar(b, 2, 0)) {
			struct val *ins[2] = {a, a};
			struct val *o = out_val(c, 0, V_RT);
			if (!o)
				return oom(c->im);
			copy_shape(o, a);
			return emit(c->im, c->n, NULL, NULL, "mul", NULL, ins, 2, o) ? 0 : DL_ERUN;
		}
		if (is_rt(a) && is_scalar(b, 0.5, 0)) {
			return simple(c, "sqrt", NULL);
		}
		return nerr(c->im, c->n, "only the exponents 2 and 0.5 of data have dlrun ops (mul, sqrt)");
	}
	/* a learned position table [T, D] added to a sequence [N, T, D] */
	for (int s = 0; op == '+' && s < 2; s++) {
		struct val *k = c->in[1 - s], *x = c->in[s];
		if (!(is_rt(x) && is_const(k) && x->rank == 3 && k->numel > 1 &&
		      k->numel == x->dims[1] * x->dims[2] && k->rank >= 2 &&
		      k->dims[k->rank - 1] == x->dims[2] && k->dims[k->rank - 2] == x->dims[1]))
			continue;
		char *hp = NULL;
		if (hp_add(c->im, &hp, "kind: learned, max_len: %lld", (long long)x->dims[1]))
			return DL_ERUN;
		struct val *o = out_val(c, 0, V_RT);
		if (!o) {
			free(hp);
			return oom(c->im);
		}
		copy_shape(o, x);
		struct entry *e = emit(c->im, c->n, NULL, NULL, "positional_encoding", hp, &x, 1, o);
		int64_t wd[2] = {x->dims[1], x->dims[2]};
		return e ? add_param(c->im, e, "weight", 2, wd, k->d) : DL_ERUN;
	}
	/* a scalar constant operand: scale {factor, shift} */
	for (int s = 0; s < 2; s++) {
		struct val *k = c->in[1 - s], *x = c->in[s];
		if (!(is_rt(x) && is_const(k)))
			continue;
		if (k->numel != 1) {
			/* a tensor of weights (ConvNeXt's layer scale [C, 1, 1], a
			 * bias table): a parameter entry, broadcast over the batch,
			 * and the op on both; a pattern that ends later (layer
			 * norm's affine) leaves them unused, and they are dropped */
			struct val *p;
			int rc = const_param(c, k, x, &p);
			if (rc || !p)
				return rc;
			struct val *o = out_val(c, 0, V_RT);
			if (!o)
				return oom(c->im);
			struct val *ins[2] = {s == 0 ? x : p, s == 0 ? p : x};
			rc = bcast(c, ins[0], ins[1], o, 1);
			if (rc)
				return rc;
			return emit(c->im, c->n, NULL, NULL, dlop, NULL, ins, 2, o) ? 0 : DL_ERUN;
		}
		double f = 1, sh = 0, v = k->d[0];
		if (op == '*')
			f = v;
		else if (op == '+')
			sh = v;
		else if (op == '-' && s == 0)
			sh = -v;
		else if (op == '-')
			f = -1, sh = v;
		else if (op == '/' && s == 0)
			f = 1.0 / v;
		else
			return nerr(c->im, c->n, "a constant divided by data (reciprocal) has no dlrun op");
		char *hp = NULL;
		if (f != 1 && hp_add(c->im, &hp, "factor: %s", fnum(f)))
			return DL_ERUN;
		if (sh != 0 && hp_add(c->im, &hp, "shift: %s", fnum(sh)))
			return DL_ERUN;
		struct val *o = out_val(c, 0, V_RT);
		if (!o) {
			free(hp);
			return oom(c->im);
		}
		copy_shape(o, x);
		return emit(c->im, c->n, NULL, NULL, "scale", hp, &x, 1, o) ? 0 : DL_ERUN;
	}
	struct val *o = out_val(c, 0, V_RT);
	if (!o)
		return oom(c->im);
	int rc = bcast(c, a, b, o, 0);
	if (rc)
		return rc;
	struct val *ins[2] = {a, b};
	return emit(c->im, c->n, NULL, NULL, dlop, NULL, ins, 2, o) ? 0 : DL_ERUN;
}

static int m_add(struct ctx *c) { return binary(c, '+', "add"); }
static int m_sub(struct ctx *c) { return binary(c, '-', "sub"); }
static int m_mul(struct ctx *c) { return binary(c, '*', "mul"); }
static int m_div(struct ctx *c) { return binary(c, '/', "div"); }
static int m_pow(struct ctx *c) { return binary(c, '^', NULL); }

static int need_all_const(struct ctx *c);

static int m_mod(struct ctx *c)
{
	if (!is_const(c->in[0]) || (c->n_in > 1 && !is_const(c->in[1])))
		return nerr(c->im, c->n, "a modulo of data has no dlrun op (only constants are folded)");
	return binary(c, attr_i(c->n, "fmod", 0) ? 'f' : '%', NULL);
}

/* ScatterND on constants (the attention masks Swin builds by assigning
 * to slices of a zeros tensor), folded. */
static int m_scatter_nd(struct ctx *c)
{
	struct imp *im = c->im;
	int rc = need_all_const(c);
	if (rc)
		return rc;
	struct val *x = c->in[0], *idx = c->n_in > 1 ? c->in[1] : NULL, *up = c->n_in > 2 ? c->in[2] : NULL;
	if (!x || !idx || !up)
		return nerr(im, c->n, "needs data, indices and updates");
	if (!attr_s_is(c->n, "reduction", "none", 1))
		return nerr(im, c->n, "attribute 'reduction' other than none is not folded");
	if (has_dyn(x) || has_dyn(idx) || has_dyn(up))
		return nerr(im, c->n, "arithmetic on the batch size: a shape that cannot be folded");
	int q = idx->rank, k = q ? (int)idx->dims[q - 1] : 0;
	if (q < 1 || k < 1 || k > x->rank)
		return nerr(im, c->n, "indices of shape %s for data of rank %d", ilist(idx->dims, idx->rank), x->rank);
	int64_t n = numel_of(q - 1, idx->dims), inner = numel_of(x->rank - k, x->dims + k);
	if (up->numel != n * inner)
		return nerr(im, c->n, "updates hold %lld values; the indices need %lld",
			    (long long)up->numel, (long long)(n * inner));
	struct val *o = new_const(im, c->n->output[0], x->rank, x->dims, x->isint);
	if (!o)
		return oom(im);
	o->node = c->node;
	memcpy(o->d, x->d, (size_t)x->numel * sizeof *o->d);
	for (int64_t i = 0; i < n; i++) {
		int64_t off = 0;
		for (int j = 0; j < k; j++) {
			int64_t v = to_i64(idx->d[i * k + j]), L = x->dims[j];
			if (v < 0)
				v += L;
			if (v < 0 || v >= L)
				return nerr(im, c->n, "index %lld out of range for size %lld",
					    (long long)to_i64(idx->d[i * k + j]), (long long)L);
			off = off * L + v;
		}
		memcpy(o->d + off * inner, up->d + i * inner, (size_t)inner * sizeof *o->d);
	}
	return 0;
}

/* ---- linear algebra ---- */

static int m_gemm(struct ctx *c)
{
	struct imp *im = c->im;
	int rc = need_rt(c, 0);
	if (rc)
		return rc;
	struct val *a = c->in[0], *b = c->n_in > 1 ? c->in[1] : NULL, *cc = c->n_in > 2 ? c->in[2] : NULL;
	if (attr_i(c->n, "transA", 0))
		return nerr(im, c->n, "attribute 'transA' 1 transposes the data with the batch; dlrun's linear cannot");
	if (a->rank != 2)
		return nerr(im, c->n, "input A has rank %d; Gemm takes rank 2", a->rank);
	if (!is_const(b) || b->rank != 2)
		return nerr(im, c->n, "input B must be a constant matrix (a weight)");
	int tb = (int)attr_i(c->n, "transB", 0);
	int64_t out = tb ? b->dims[0] : b->dims[1], in = tb ? b->dims[1] : b->dims[0];
	if (in != a->dims[1])
		return nerr(im, c->n, "B has %lld rows for %lld input features", (long long)in, (long long)a->dims[1]);
	double alpha = attr_f(c->n, "alpha", 1), beta = attr_f(c->n, "beta", 1);
	double *w = malloc((size_t)(out * in + 1) * sizeof *w), *bias = NULL;
	if (!w)
		return oom(im);
	for (int64_t o = 0; o < out; o++)
		for (int64_t i = 0; i < in; i++)
			w[o * in + i] = alpha * (tb ? b->d[o * in + i] : b->d[i * out + o]);
	if (cc) {
		if (!is_const(cc) || !(cc->numel == out || cc->numel == 1) ||
		    (cc->rank == 2 && cc->dims[0] != 1)) {
			free(w);
			return nerr(im, c->n, "input C must be a constant of %lld values (a bias)", (long long)out);
		}
		bias = malloc((size_t)out * sizeof *bias);
		if (!bias) {
			free(w);
			return oom(im);
		}
		for (int64_t o = 0; o < out; o++)
			bias[o] = beta * cc->d[cc->numel == 1 ? 0 : o];
	}
	char *hp = NULL;
	char buf[256];
	const char *tp = torch_prefix(b, buf, sizeof buf);
	struct val *ov = out_val(c, 0, V_RT);
	int64_t od[2] = {-1, out};
	if (!ov || hp_add(im, &hp, "out_features: %lld", (long long)out) ||
	    (!bias && hp_add(im, &hp, "bias: false"))) {
		free(w);
		free(bias);
		free(hp);
		return oom(im);
	}
	set_shape(ov, 2, od);
	struct entry *e = emit(im, c->n, tp, NULL, "linear", hp, &a, 1, ov);
	int64_t wd[2] = {out, in}, bd[1] = {out};
	rc = !e ? DL_ERUN : add_param(im, e, "weight", 2, wd, w);
	if (rc == 0 && bias)
		rc = add_param(im, e, "bias", 1, bd, bias);
	free(w);
	free(bias);
	return rc;
}

/* x with its last two dimensions swapped, as a permute entry into a
 * value of its own (suffix names the entry). */
static struct val *swap_last(struct ctx *c, struct val *x, const char *suffix)
{
	struct imp *im = c->im;
	int64_t perm[MAXR], d[MAXR];
	for (int i = 0; i < x->rank; i++)
		perm[i] = i;
	perm[x->rank - 2] = x->rank - 1;
	perm[x->rank - 1] = x->rank - 2;
	for (int i = 0; i < x->rank; i++)
		d[i] = x->dims[perm[i]];
	char *hp = NULL;
	struct val *o = new_val(im, "", V_RT);
	if (!o || hp_add(im, &hp, "dims: %s", ilist(perm, x->rank))) {
		oom(im);
		return NULL;
	}
	set_shape(o, x->rank, d);
	return emit(im, c->n, NULL, suffix, "permute", hp, &x, 1, o) ? o : NULL;
}

/* Einsum of two data operands whose equation is a batched matrix product
 * (MaxViT's "B G H I D, B G H J D -> B G H I J" and "B G H I J, B G H J D
 * -> B G H I D"): the same leading labels everywhere, the last two of
 * each operand a pair of (row or column, summed): matmul, with permutes
 * where an operand holds its pair the other way round. */
static int m_einsum(struct ctx *c)
{
	struct imp *im = c->im;
	const Onnx__AttributeProto *a = attr(c->n, "equation");
	char eq[256], lab[3][MAXR + 1];
	int nl[3] = {0, 0, 0}, part = 0;
	if (!a || !a->has_s || a->s.len >= sizeof eq)
		return nerr(im, c->n, "attribute 'equation' is missing or too long");
	memcpy(eq, a->s.data, a->s.len);
	eq[a->s.len] = 0;
	for (const char *p = eq; *p; p++) {
		if (*p == ' ')
			continue;
		if (*p == ',' && part == 0) {
			part = 1;
		} else if (p[0] == '-' && p[1] == '>' && part == 1) {
			part = 2;
			p++;
		} else if (isalpha((unsigned char)*p) && nl[part] < MAXR) {
			lab[part][nl[part]++] = *p;
		} else {
			return nerr(im, c->n, "equation '%s': dlrun import maps batched matrix products only ('...ik,...kj->...ij' and operands transposed), not ellipses, traces or more operands", eq);
		}
	}
	int rc;
	if (part != 2 || c->n_in != 2 || (rc = need_rt(c, 0)) || (rc = need_rt(c, 1)))
		return part != 2 || c->n_in != 2 ?
			nerr(im, c->n, "equation '%s': dlrun import maps products of two operands only", eq) : rc;
	struct val *x = c->in[0], *y = c->in[1];
	int r = nl[2];
	int ok = r >= 3 && nl[0] == r && nl[1] == r && x->rank == r && y->rank == r &&
		 memcmp(lab[0], lab[2], (size_t)(r - 2)) == 0 && memcmp(lab[1], lab[2], (size_t)(r - 2)) == 0;
	char i = lab[2][r - 2], j = lab[2][r - 1], k = 0;
	/* x holds {i, k}, y holds {k, j} in their last two places */
	int tx = 0, ty = 0;
	if (ok) {
		if (lab[0][r - 2] == i)
			k = lab[0][r - 1];
		else if (lab[0][r - 1] == i)
			k = lab[0][r - 2], tx = 1;
		else
			ok = 0;
	}
	if (ok) {
		if (lab[1][r - 2] == k && lab[1][r - 1] == j)
			ty = 0;
		else if (lab[1][r - 1] == k && lab[1][r - 2] == j)
			ty = 1;
		else
			ok = 0;
		ok = ok && k != i && k != j && i != j && !memchr(lab[2], k, (size_t)r);
		for (int t = 0; ok && t < r - 2; t++)
			ok = lab[2][t] != i && lab[2][t] != j && lab[2][t] != k;
	}
	if (!ok)
		return nerr(im, c->n, "equation '%s': dlrun import maps batched matrix products only ('...ik,...kj->...ij' and operands transposed, equal ranks of 3 or more, batch first)", eq);
	if (tx && !(x = swap_last(c, x, "a")))
		return DL_ERUN;
	if (ty && !(y = swap_last(c, y, "b")))
		return DL_ERUN;
	for (int t = 1; t < r - 2; t++)
		if (x->dims[t] != y->dims[t] && x->dims[t] != 1 && y->dims[t] != 1)
			return nerr(im, c->n, "batch sizes %lld and %lld of dimension %d do not broadcast",
				    (long long)x->dims[t], (long long)y->dims[t], t);
	if (x->dims[r - 1] != y->dims[r - 2])
		return nerr(im, c->n, "the summed sizes %lld and %lld differ",
			    (long long)x->dims[r - 1], (long long)y->dims[r - 2]);
	struct val *o = out_val(c, 0, V_RT);
	if (!o)
		return oom(im);
	int64_t d[MAXR];
	for (int t = 1; t < r - 2; t++)
		d[t] = x->dims[t] == 1 ? y->dims[t] : x->dims[t];
	d[r - 2] = x->dims[r - 2];
	d[r - 1] = y->dims[r - 1];
	set_shape(o, r, d);
	struct val *ins[2] = {x, y};
	return emit(im, c->n, NULL, NULL, "matmul", NULL, ins, 2, o) ? 0 : DL_ERUN;
}

static int m_matmul(struct ctx *c)
{
	struct imp *im = c->im;
	struct val *a = c->in[0], *b = c->in[1];
	if (!a || !b)
		return nerr(im, c->n, "needs two inputs");
	if (is_const(a) && is_const(b))
		return nerr(im, c->n, "a product of constants is not folded by dlrun import");
	if (is_const(a))
		return nerr(im, c->n, "a constant left operand has no dlrun op (linear multiplies on the right)");
	if (is_const(b)) {
		if (b->rank != 2)
			return nerr(im, c->n, "constant right operand of rank %d: linear takes a matrix", b->rank);
		if (a->rank < 2 || a->dims[a->rank - 1] != b->dims[0])
			return nerr(im, c->n, "the data's last size %lld does not match the weight's %lld rows",
				    (long long)a->dims[a->rank - 1], (long long)b->dims[0]);
		int64_t in = b->dims[0], out = b->dims[1];
		double *w = malloc((size_t)(in * out + 1) * sizeof *w);
		if (!w)
			return oom(im);
		for (int64_t o = 0; o < out; o++)
			for (int64_t i = 0; i < in; i++)
				w[o * in + i] = b->d[i * out + o];
		char *hp = NULL;
		struct val *ov = out_val(c, 0, V_RT);
		if (!ov || hp_add(im, &hp, "out_features: %lld, bias: false", (long long)out)) {
			free(w);
			return oom(im);
		}
		copy_shape(ov, a);
		ov->dims[a->rank - 1] = out;
		struct entry *e = emit(im, c->n, NULL, NULL, "linear", hp, &a, 1, ov);
		int64_t wd[2] = {out, in};
		int rc = e ? add_param(im, e, "weight", 2, wd, w) : DL_ERUN;
		free(w);
		return rc;
	}
	if (a->rank != b->rank || a->rank < 3)
		return nerr(im, c->n, "data operands of rank %d and %d: dlrun's matmul takes equal ranks of 3 or more (batch first)",
			    a->rank, b->rank);
	struct val *o = out_val(c, 0, V_RT);
	if (!o)
		return oom(im);
	int r = a->rank;
	int64_t d[MAXR];
	for (int i = 1; i < r - 2; i++) {
		if (a->dims[i] != b->dims[i] && a->dims[i] != 1 && b->dims[i] != 1)
			return nerr(im, c->n, "batch sizes %lld and %lld of dimension %d do not broadcast",
				    (long long)a->dims[i], (long long)b->dims[i], i);
		d[i] = a->dims[i] == 1 ? b->dims[i] : a->dims[i];
	}
	if (a->dims[r - 1] != b->dims[r - 2])
		return nerr(im, c->n, "inner sizes %lld and %lld differ",
			    (long long)a->dims[r - 1], (long long)b->dims[r - 2]);
	d[r - 2] = a->dims[r - 2];
	d[r - 1] = b->dims[r - 1];
	set_shape(o, r, d);
	struct val *ins[2] = {a, b};
	return emit(im, c->n, NULL, NULL, "matmul", NULL, ins, 2, o) ? 0 : DL_ERUN;
}

/* ---- convolution and pooling ---- */

/* The pads of a conv/pool node as dlrun's padding: "[p, q]" when
 * symmetric, else pairs; into hp. k the kernel sizes (for SAME). */
static int pads_hp(struct ctx *c, char **hp, int sd, const int64_t *in,
		   const int64_t *k, const int64_t *s, const int64_t *dil,
		   int64_t *pb, int64_t *pe, int transposed)
{
	int np;
	const int64_t *p = attr_ints(c->n, "pads", &np);
	if (p && np != 2 * sd)
		return nerr(c->im, c->n, "attribute 'pads' has %d values for %d spatial dimensions", np, sd);
	for (int i = 0; i < sd; i++) {
		pb[i] = p ? p[i] : 0;
		pe[i] = p ? p[sd + i] : 0;
		if (pb[i] < 0 || pe[i] < 0)
			return nerr(c->im, c->n, "attribute 'pads' has a negative value");
	}
	if (!attr_s_is(c->n, "auto_pad", "NOTSET", 1)) {
		if (attr_s_is(c->n, "auto_pad", "VALID", 0)) {
			for (int i = 0; i < sd; i++)
				pb[i] = pe[i] = 0;
		} else if (!transposed && (attr_s_is(c->n, "auto_pad", "SAME_UPPER", 0) ||
					   attr_s_is(c->n, "auto_pad", "SAME_LOWER", 0))) {
			int lower = attr_s_is(c->n, "auto_pad", "SAME_LOWER", 0);
			for (int i = 0; i < sd; i++) {
				int64_t o = (in[i] + s[i] - 1) / s[i];
				int64_t t = (o - 1) * s[i] + (k[i] - 1) * dil[i] + 1 - in[i];
				if (t < 0)
					t = 0;
				pb[i] = lower ? t - t / 2 : t / 2;
				pe[i] = t - pb[i];
			}
		} else {
			return nerr(c->im, c->n, "attribute 'auto_pad' value is not supported; give explicit pads");
		}
	}
	int sym = 1, any = 0;
	for (int i = 0; i < sd; i++) {
		sym &= pb[i] == pe[i];
		any |= pb[i] || pe[i];
	}
	if (!any)
		return 0;
	if (sym)
		return hp_add(c->im, hp, "padding: %s", ilist(pb, sd));
	char buf[256];
	size_t n = 0;
	n += (size_t)snprintf(buf + n, sizeof buf - n, "[");
	for (int i = 0; i < sd; i++)
		n += (size_t)snprintf(buf + n, sizeof buf - n, "%s[%lld, %lld]", i ? ", " : "",
				      (long long)pb[i], (long long)pe[i]);
	snprintf(buf + n, sizeof buf - n, "]");
	return hp_add(c->im, hp, "padding: %s", buf);
}

/* strides and dilations (default 1) of sd spatial dimensions. */
static int spatial_attr(struct ctx *c, const char *name, int sd, int64_t *out)
{
	int n;
	const int64_t *v = attr_ints(c->n, name, &n);
	if (v && n != sd)
		return nerr(c->im, c->n, "attribute '%s' has %d values for %d spatial dimensions", name, n, sd);
	for (int i = 0; i < sd; i++) {
		out[i] = v ? v[i] : 1;
		if (out[i] < 1)
			return nerr(c->im, c->n, "attribute '%s' has a value below 1", name);
	}
	return 0;
}

static int all_one(const int64_t *x, int n)
{
	for (int i = 0; i < n; i++)
		if (x[i] != 1)
			return 0;
	return 1;
}

static int m_conv(struct ctx *c)
{
	struct imp *im = c->im;
	int transposed = strcmp(c->n->op_type, "ConvTranspose") == 0;
	int rc = need_rt(c, 0);
	if (rc)
		return rc;
	struct val *x = c->in[0], *w = c->n_in > 1 ? c->in[1] : NULL, *b = c->n_in > 2 ? c->in[2] : NULL;
	if (!is_const(w))
		return nerr(im, c->n, "the weight must be a constant");
	int sd = x->rank - 2;
	if (sd < 1 || sd > 3)
		return nerr(im, c->n, "input of rank %d: dlrun has 1D, 2D and 3D convolutions", x->rank);
	if (w->rank != x->rank)
		return nerr(im, c->n, "weight of rank %d for data of rank %d", w->rank, x->rank);
	int64_t g = attr_i(c->n, "group", 1);
	if (g < 1 || x->dims[1] % g)
		return nerr(im, c->n, "attribute 'group' %lld does not divide the %lld channels",
			    (long long)g, (long long)x->dims[1]);
	int64_t k[3] = {0}, s[3] = {1, 1, 1}, dil[3] = {1, 1, 1}, pb[3] = {0}, pe[3] = {0}, op[3] = {0};
	for (int i = 0; i < sd; i++)
		k[i] = w->dims[2 + i];
	int nk;
	const int64_t *ks = attr_ints(c->n, "kernel_shape", &nk);
	for (int i = 0; ks && i < sd && i < nk; i++)
		if (ks[i] != k[i])
			return nerr(im, c->n, "attribute 'kernel_shape' disagrees with the weight's shape");
	if ((rc = spatial_attr(c, "strides", sd, s)) || (rc = spatial_attr(c, "dilations", sd, dil)))
		return rc;
	int64_t cin = transposed ? w->dims[0] : w->dims[1] * g;
	int64_t cout = transposed ? w->dims[1] * g : w->dims[0];
	if (cin != x->dims[1])
		return nerr(im, c->n, "the weight takes %lld channels; the data has %lld",
			    (long long)cin, (long long)x->dims[1]);
	if (b && (!is_const(b) || b->numel != cout))
		return nerr(im, c->n, "the bias must be a constant of %lld values", (long long)cout);
	char *hp = NULL;
	if (hp_add(im, &hp, "out_channels: %lld, kernel_size: %s", (long long)cout, ilist(k, sd)))
		return DL_ERUN;
	if (!all_one(s, sd) && hp_add(im, &hp, "stride: %s", ilist(s, sd)))
		goto fail;
	if (transposed && attr(c->n, "output_shape")) {
		free(hp);
		return nerr(im, c->n, "attribute 'output_shape' is not supported; give pads and output_padding");
	}
	if ((rc = pads_hp(c, &hp, sd, x->dims + 2, k, s, dil, pb, pe, transposed)))
		goto fail;
	if (transposed) {
		int n;
		const int64_t *o = attr_ints(c->n, "output_padding", &n);
		if (o && n != sd) {
			free(hp);
			return nerr(im, c->n, "attribute 'output_padding' has %d values", n);
		}
		for (int i = 0; o && i < sd; i++)
			op[i] = o[i];
		int anyop = 0;
		for (int i = 0; i < sd; i++)
			anyop |= op[i] != 0;
		if (anyop &&
		    hp_add(im, &hp, "output_padding: %s", ilist(op, sd)))
			goto fail;
	}
	if (!all_one(dil, sd) && hp_add(im, &hp, "dilation: %s", ilist(dil, sd)))
		goto fail;
	if (g != 1 && hp_add(im, &hp, "groups: %lld", (long long)g))
		goto fail;
	if (!b && hp_add(im, &hp, "bias: false"))
		goto fail;
	int64_t od[MAXR] = {-1, cout};
	for (int i = 0; i < sd; i++) {
		int64_t L = x->dims[2 + i], ext = (k[i] - 1) * dil[i] + 1;
		if (transposed)
			od[2 + i] = (L - 1) * s[i] + ext + op[i] - pb[i] - pe[i];
		else
			od[2 + i] = (L + pb[i] + pe[i] - ext) / s[i] + 1;
		if (od[2 + i] < 1 || (!transposed && L + pb[i] + pe[i] < ext)) {
			free(hp);
			return nerr(im, c->n, "the kernel does not fit the padded input (size %lld)", (long long)L);
		}
	}
	struct val *o = out_val(c, 0, V_RT);
	if (!o)
		goto fail;
	set_shape(o, x->rank, od);
	char buf[256];
	const char *tp = torch_prefix(w, buf, sizeof buf);
	static const char *const conv_ops[2][3] = {
		{"conv1d", "conv2d", "conv3d"},
		{"conv_transpose1d", "conv_transpose2d", "conv_transpose3d"},
	};
	const char *opn = conv_ops[transposed][sd - 1];
	struct entry *e = emit(im, c->n, tp, NULL, opn, hp, &x, 1, o);
	if (!e)
		return DL_ERUN;
	rc = add_param(im, e, "weight", w->rank, w->dims, w->d);
	if (rc == 0 && b)
		rc = add_param(im, e, "bias", 1, &cout, b->d);
	return rc;
fail:
	free(hp);
	return rc ? rc : oom(im);
}

static int m_pool(struct ctx *c)
{
	struct imp *im = c->im;
	int maxp = strcmp(c->n->op_type, "MaxPool") == 0;
	int rc = need_rt(c, 0);
	if (rc)
		return rc;
	struct val *x = c->in[0];
	int sd = x->rank - 2;
	if (sd < 1 || sd > 3)
		return nerr(im, c->n, "input of rank %d: dlrun has 1D, 2D and 3D pools", x->rank);
	if (c->n->n_output > 1 && c->n->output[1][0])
		return nerr(im, c->n, "output 'Indices' has no dlrun equivalent");
	if (attr_i(c->n, "storage_order", 0))
		return nerr(im, c->n, "attribute 'storage_order' 1 is not supported");
	int nk;
	const int64_t *ks = attr_ints(c->n, "kernel_shape", &nk);
	if (!ks || nk != sd)
		return nerr(im, c->n, "attribute 'kernel_shape' must give %d sizes", sd);
	int64_t k[3] = {0}, s[3] = {1, 1, 1}, dil[3] = {1, 1, 1}, pb[3] = {0}, pe[3] = {0};
	for (int i = 0; i < sd; i++)
		k[i] = ks[i];
	if ((rc = spatial_attr(c, "strides", sd, s)))
		return rc;
	if (maxp && (rc = spatial_attr(c, "dilations", sd, dil)))
		return rc;
	int ceil_mode = (int)attr_i(c->n, "ceil_mode", 0);
	char *hp = NULL;
	if (hp_add(im, &hp, "kernel_size: %s, stride: %s", ilist(k, sd), ilist(s, sd)))
		return DL_ERUN;
	if ((rc = pads_hp(c, &hp, sd, x->dims + 2, k, s, dil, pb, pe, 0)))
		goto fail;
	if (!all_one(dil, sd) && hp_add(im, &hp, "dilation: %s", ilist(dil, sd)))
		goto fail;
	if (ceil_mode && hp_add(im, &hp, "ceil_mode: true"))
		goto fail;
	int anypad = 0;
	for (int i = 0; i < sd; i++)
		anypad |= pb[i] || pe[i];
	if (!maxp && anypad && hp_add(im, &hp, "count_include_pad: %s",
				      attr_i(c->n, "count_include_pad", 0) ? "true" : "false"))
		goto fail;
	int64_t od[MAXR] = {-1, x->dims[1]};
	for (int i = 0; i < sd; i++) {
		int64_t L = x->dims[2 + i], ext = dil[i] * (k[i] - 1) + 1, span = L + pb[i] + pe[i] - ext;
		int64_t num = ceil_mode ? span + s[i] - 1 : span;
		/* floor division: a window larger than the input still gives
		 * one output with ceil_mode, as PyTorch */
		int64_t o = (num >= 0 ? num / s[i] : -((-num + s[i] - 1) / s[i])) + 1;
		if (ceil_mode && o > 1 && (o - 1) * s[i] >= L + pb[i])
			o--;
		if (o < 1) {
			free(hp);
			return nerr(im, c->n, "the window does not fit the padded input (size %lld)", (long long)L);
		}
		od[2 + i] = o;
	}
	struct val *o = out_val(c, 0, V_RT);
	if (!o)
		goto fail;
	set_shape(o, x->rank, od);
	static const char *const pool_ops[2][3] = {
		{"avg_pool1d", "avg_pool2d", "avg_pool3d"},
		{"max_pool1d", "max_pool2d", "max_pool3d"},
	};
	const char *opn = pool_ops[maxp][sd - 1];
	return emit(im, c->n, NULL, NULL, opn, hp, &x, 1, o) ? 0 : DL_ERUN;
fail:
	free(hp);
	return rc ? rc : oom(im);
}

static int m_global_pool(struct ctx *c)
{
	int rc = need_rt(c, 0);
	if (rc)
		return rc;
	struct val *x = c->in[0];
	int sd = x->rank - 2;
	int maxp = strcmp(c->n->op_type, "GlobalMaxPool") == 0;
	if (sd < 1 || sd > 3 || (sd == 3 && maxp))
		return nerr(c->im, c->n, "input of rank %d: dlrun has 1D and 2D global pools, and 3D average ones", x->rank);
	struct val *o = out_val(c, 0, V_RT);
	if (!o)
		return oom(c->im);
	copy_shape(o, x);
	for (int i = 0; i < sd; i++)
		o->dims[2 + i] = 1;
	char *hp = NULL;
	if (hp_add(c->im, &hp, "output_size: 1"))
		return DL_ERUN;
	const char *opn = maxp ? (sd == 1 ? "adaptive_max_pool1d" : "adaptive_max_pool2d")
			       : (sd == 1 ? "adaptive_avg_pool1d" : sd == 2 ? "adaptive_avg_pool2d" : "adaptive_avg_pool3d");
	return emit(c->im, c->n, NULL, NULL, opn, hp, &x, 1, o) ? 0 : DL_ERUN;
}

/* ---- normalisation ---- */

static int m_batch_norm(struct ctx *c)
{
	struct imp *im = c->im;
	int rc = need_rt(c, 0);
	if (rc)
		return rc;
	if (attr_i(c->n, "training_mode", 0) || (c->n->n_output > 1))
		return nerr(im, c->n, "attribute 'training_mode' (batch statistics) is not inference");
	struct val *x = c->in[0];
	if (x->rank < 2 || x->rank > 5)
		return nerr(im, c->n, "input of rank %d: dlrun has batch_norm1d, batch_norm2d and batch_norm3d", x->rank);
	int64_t ch = x->dims[1];
	for (int k = 1; k <= 4; k++)
		if (k >= c->n_in || !is_const(c->in[k]) || c->in[k]->numel != ch)
			return nerr(im, c->n, "input %d must be a constant of %lld values", k, (long long)ch);
	char *hp = NULL;
	double eps = attr_f(c->n, "epsilon", 1e-5);
	if (fabs(eps - 1e-5) > 1e-12 && hp_add(im, &hp, "eps: %s", fnum(eps)))
		return DL_ERUN;
	struct val *o = out_val(c, 0, V_RT);
	if (!o) {
		free(hp);
		return oom(im);
	}
	copy_shape(o, x);
	char buf[256];
	const char *tp = torch_prefix(c->in[1], buf, sizeof buf);
	struct entry *e = emit(im, c->n, tp, NULL, x->rank == 5 ? "batch_norm3d" : x->rank == 4 ? "batch_norm2d" : "batch_norm1d",
			       hp, &x, 1, o);
	if (!e)
		return DL_ERUN;
	static const char *const keys[] = {"weight", "bias", "running_mean", "running_var"};
	for (int k = 0; k < 4 && rc == 0; k++)
		rc = add_param(im, e, keys[k], 1, &ch, c->in[k + 1]->d);
	return rc;
}

static int m_layer_norm(struct ctx *c)
{
	struct imp *im = c->im;
	int rc = need_rt(c, 0);
	if (rc)
		return rc;
	struct val *x = c->in[0], *w = c->n_in > 1 ? c->in[1] : NULL, *b = c->n_in > 2 ? c->in[2] : NULL;
	if (c->n->n_output > 1)
		for (size_t k = 1; k < c->n->n_output; k++)
			if (c->n->output[k][0])
				return nerr(im, c->n, "outputs Mean and InvStdDev have no dlrun equivalent");
	int64_t ax = 0;
	if ((rc = rt_axis(c, attr_i(c->n, "axis", -1), x->rank, &ax)))
		return rc;
	int nd = x->rank - (int)ax;
	int64_t n = numel_of(nd, x->dims + ax);
	if (!is_const(w) || w->numel != n)
		return nerr(im, c->n, "the scale must be a constant of %lld values", (long long)n);
	if (b && (!is_const(b) || b->numel != n))
		return nerr(im, c->n, "the bias must be a constant of %lld values", (long long)n);
	char *hp = NULL;
	double eps = attr_f(c->n, "epsilon", 1e-5);
	if (hp_add(im, &hp, "normalized_shape: %s", ilist(x->dims + ax, nd)))
		return DL_ERUN;
	if (fabs(eps - 1e-5) > 1e-12 && hp_add(im, &hp, "eps: %s", fnum(eps)))
		goto fail;
	if (!b && hp_add(im, &hp, "bias: false"))
		goto fail;
	struct val *o = out_val(c, 0, V_RT);
	if (!o)
		goto fail;
	copy_shape(o, x);
	char buf[256];
	const char *tp = torch_prefix(w, buf, sizeof buf);
	struct entry *e = emit(im, c->n, tp, NULL, "layer_norm", hp, &x, 1, o);
	if (!e)
		return DL_ERUN;
	rc = add_param(im, e, "weight", nd, x->dims + ax, w->d);
	if (rc == 0 && b)
		rc = add_param(im, e, "bias", nd, x->dims + ax, b->d);
	return rc;
fail:
	free(hp);
	return oom(im);
}

static int m_instance_norm(struct ctx *c)
{
	struct imp *im = c->im;
	int rc = need_rt(c, 0);
	if (rc)
		return rc;
	struct val *x = c->in[0];
	if (x->rank < 3 || x->rank > 4)
		return nerr(im, c->n, "input of rank %d: dlrun has instance_norm1d and instance_norm2d", x->rank);
	int64_t ch = x->dims[1];
	for (int k = 1; k <= 2; k++)
		if (k >= c->n_in || !is_const(c->in[k]) || c->in[k]->numel != ch)
			return nerr(im, c->n, "input %d must be a constant of %lld values", k, (long long)ch);
	char *hp = NULL;
	double eps = attr_f(c->n, "epsilon", 1e-5);
	if (hp_add(im, &hp, "affine: true"))
		return DL_ERUN;
	if (fabs(eps - 1e-5) > 1e-12 && hp_add(im, &hp, "eps: %s", fnum(eps))) {
		free(hp);
		return DL_ERUN;
	}
	struct val *o = out_val(c, 0, V_RT);
	if (!o) {
		free(hp);
		return oom(im);
	}
	copy_shape(o, x);
	char buf[256];
	const char *tp = torch_prefix(c->in[1], buf, sizeof buf);
	struct entry *e = emit(im, c->n, tp, NULL,
			       x->rank == 4 ? "instance_norm2d" : "instance_norm1d", hp, &x, 1, o);
	if (!e)
		return DL_ERUN;
	rc = add_param(im, e, "weight", 1, &ch, c->in[1]->d);
	if (rc == 0)
		rc = add_param(im, e, "bias", 1, &ch, c->in[2]->d);
	return rc;
}

/* ---- shapes ---- */

/* A reshape entry of x to the full shape d (d[0] the batch). */
static int emit_reshape(struct ctx *c, struct val *x, int rank, const int64_t *d,
			struct val *o, const char *suffix)
{
	set_shape(o, rank, d);
	if (rank == x->rank && memcmp(d + 1, x->dims + 1, (size_t)(rank - 1) * sizeof *d) == 0) {
		o->kind = V_RT;
		o->ref = x->ref;
		o->entry = x->entry;
		o->port = x->port;
		return 0;
	}
	char *hp = NULL;
	if (rank == 1) {
		/* one value per sample ([N, 1] squeezed, a greedy decoder's
		 * topk(1) index): reshape cannot give [N]; a sum over the
		 * dimensions of size 1 does, exactly */
		int64_t ax[MAXR];
		for (int i = 1; i < x->rank; i++)
			ax[i - 1] = i;
		if (numel_of(x->rank - 1, x->dims + 1) != 1 || x->rank < 2)
			return nerr(c->im, c->n, "data of shape %s reshaped to one value per sample",
				    ilist(x->dims, x->rank));
		if (hp_add(c->im, &hp, "dim: %s", ilist(ax, x->rank - 1)))
			return DL_ERUN;
		o->isint = x->isint;
		return emit(c->im, c->n, NULL, suffix, "sum", hp, &x, 1, o) ? 0 : DL_ERUN;
	}
	if (hp_add(c->im, &hp, "shape: %s", ilist(d + 1, rank - 1)))
		return DL_ERUN;
	return emit(c->im, c->n, NULL, suffix, "reshape", hp, &x, 1, o) ? 0 : DL_ERUN;
}

static int m_reshape(struct ctx *c)
{
	struct imp *im = c->im;
	struct val *x = c->in[0], *s = c->n_in > 1 ? c->in[1] : NULL;
	if (!x || !is_const(s))
		return nerr(im, c->n, "the target shape must be a constant (or folded from static sizes)");
	if (s->numel < 1 || s->numel > MAXR)
		return nerr(im, c->n, "target shape of %lld dimensions", (long long)s->numel);
	int allowzero = (int)attr_i(c->n, "allowzero", 0);
	int r = (int)s->numel;
	if (is_const(x)) {
		if (has_dyn(s))
			return nerr(im, c->n, "a constant reshaped by the batch size");
		int64_t d[MAXR], known = 1;
		int neg = -1;
		for (int i = 0; i < r; i++) {
			d[i] = to_i64(s->d[i]);
			if (d[i] == 0 && !allowzero)
				d[i] = i < x->rank ? x->dims[i] : 0;
			if (d[i] == -1)
				neg = i;
			else
				known *= d[i];
		}
		if (neg >= 0)
			d[neg] = known ? x->numel / known : 0;
		if (numel_of(r, d) != x->numel)
			return nerr(im, c->n, "cannot reshape %lld values to %s", (long long)x->numel, ilist(d, r));
		struct val *o = new_const(im, c->n->output[0], r, d, x->isint);
		if (!o)
			return oom(im);
		o->node = c->node;
		memcpy(o->d, x->d, (size_t)x->numel * sizeof *o->d);
		return 0;
	}
	if (x->bad)
		return nerr(im, c->n, "%s", x->bad);
	if (x->layout == L_RNN_Y2 && r == 3) {
		/* [T, N, D, H] -> [T, N, D*H] */
		double t0 = s->d[0], t1 = s->d[1], t2 = s->d[2];
		int64_t dh = x->dims[2] * x->dims[3];
		if ((t0 == 0 || t0 == (double)x->dims[0]) &&
		    (t1 == 0 || t1 == DYN || (im->fixed_batch > 0 && t1 == (double)im->fixed_batch)) &&
		    (t2 == -1 || t2 == (double)dh)) {
			if (alias(c, x, 0))
				return DL_ERUN;
			struct val *o = im->v[im->nv - 1];
			o->layout = L_TIME;
			o->rank = 3;
			o->dims[2] = dh;
			return 0;
		}
	}
	int rc0 = need_rt(c, 0);
	if (rc0)
		return rc0;
	int64_t d[MAXR], per = numel_of(x->rank - 1, x->dims + 1);
	int neg = -1;
	int64_t known = 1;
	for (int i = 0; i < r; i++) {
		double v = s->d[i];
		if (i == 0) {
			if (v == DYN || (v == 0 && !allowzero) ||
			    (im->fixed_batch > 0 && v == (double)im->fixed_batch))
				d[0] = -1;
			else if (v == -1)
				d[0] = -2;   /* the batch when the rest is whole samples */
			else
				return nerr(im, c->n, "target shape %s changes the batch dimension, which dlrun keeps first",
					    ilist((int64_t[]){to_i64(v)}, 1));
			continue;
		}
		if (v == DYN)
			return nerr(im, c->n, "the batch size inside the target shape (dimension %d): a shape that cannot be folded", i);
		d[i] = to_i64(v);
		if (d[i] == 0 && !allowzero) {
			if (i >= x->rank)
				return nerr(im, c->n, "target shape copies dimension %d the input does not have", i);
			d[i] = x->dims[i];
		}
		if (d[i] == -1) {
			if (neg >= 0 || d[0] == -2)
				return nerr(im, c->n, "target shape has more than one -1");
			neg = i;
		} else if (d[i] < 0) {
			return nerr(im, c->n, "target shape has a negative size %lld", (long long)d[i]);
		} else {
			known *= d[i];
		}
	}
	if (neg >= 0)
		d[neg] = known ? per / known : 0;
	if (numel_of(r - 1, d + 1) != per)
		return nerr(im, c->n, "cannot reshape samples of %lld values to %s", (long long)per,
			    ilist(d + 1, r - 1));
	d[0] = -1;
	struct val *o = out_val(c, 0, V_RT);
	if (!o)
		return oom(im);
	return emit_reshape(c, x, r, d, o, NULL);
}

/* axes for Squeeze/Unsqueeze: the input (opset 13) or the attribute. */
static int get_axes(struct ctx *c, int k, int64_t *axes, int *n)
{
	*n = 0;
	if (k < c->n_in && c->in[k])
		return const_ints(c, k, "axes", axes, MAXR, n);
	int na;
	const int64_t *a = attr_ints(c->n, "axes", &na);
	if (na > MAXR)
		return nerr(c->im, c->n, "attribute 'axes' has %d values", na);
	for (int i = 0; i < na; i++)
		axes[i] = a[i];
	*n = na;
	return 0;
}

static int m_squeeze_like(struct ctx *c)
{
	struct imp *im = c->im;
	int unsq = strcmp(c->n->op_type, "Unsqueeze") == 0;
	struct val *x = c->in[0];
	if (!x)
		return nerr(im, c->n, "input 0 is missing");
	int64_t axes[MAXR];
	int na, rc = get_axes(c, 1, axes, &na);
	if (rc)
		return rc;
	if (is_rt(x) && x->layout == L_RNN_Y && !unsq && na == 1 &&
	    (axes[0] == 1 || axes[0] == -3) && x->dirs == 1) {
		/* Y [T, 1, N, H] -> [T, N, H] */
		if (alias(c, x, 0))
			return DL_ERUN;
		struct val *o = c->im->v[c->im->nv - 1];
		o->layout = L_TIME;
		o->rank = 3;
		o->dims[0] = x->dims[0];
		o->dims[1] = -1;
		o->dims[2] = x->dims[3];
		return 0;
	}
	if (is_rt(x) && (rc = need_rt(c, 0)))
		return rc;
	int r = unsq ? x->rank + na : x->rank;
	if (r > MAXR)
		return nerr(im, c->n, "rank %d is more than dlrun's %d", r, MAXR);
	int mark[MAXR] = {0};
	for (int i = 0; i < na; i++) {
		int64_t a = 0;
		if ((rc = norm_axis(c, axes[i], r, &a)))
			return rc;
		mark[a] = 1;
	}
	int64_t d[MAXR];
	int nr = 0;
	if (unsq) {
		for (int i = 0, j = 0; i < r; i++)
			d[nr++] = mark[i] ? 1 : x->dims[j++];
	} else {
		for (int i = 0; i < x->rank; i++) {
			if (na == 0 && x->dims[i] == 1 && !(is_rt(x) && i == 0))
				continue;
			if (mark[i]) {
				if (x->dims[i] != 1 && !(is_rt(x) && i == 0))
					return nerr(im, c->n, "dimension %d has size %lld, not 1", i, (long long)x->dims[i]);
				if (is_rt(x) && i == 0)
					return nerr(im, c->n, "axis 0 is the batch dimension, which dlrun ops do not change");
				continue;
			}
			d[nr++] = x->dims[i];
		}
	}
	if (is_const(x)) {
		struct val *o = new_const(im, c->n->output[0], nr, d, x->isint);
		if (!o)
			return oom(im);
		o->node = c->node;
		memcpy(o->d, x->d, (size_t)x->numel * sizeof *o->d);
		return 0;
	}
	if (unsq && mark[0])
		return nerr(im, c->n, "axis 0 is the batch dimension, which dlrun ops do not change");
	if (x->bad)
		return nerr(im, c->n, "%s", x->bad);
	struct val *o = out_val(c, 0, V_RT);
	if (!o)
		return oom(im);
	d[0] = -1;
	return emit_reshape(c, x, nr, d, o, NULL);
}

static int m_flatten(struct ctx *c)
{
	struct imp *im = c->im;
	struct val *x = c->in[0];
	int64_t axis = attr_i(c->n, "axis", 1), ax = 0;
	if (!x)
		return nerr(im, c->n, "input 0 is missing");
	int rc = norm_axis(c, axis, x->rank + (axis == x->rank), &ax);
	if (rc)
		return rc;
	if (is_const(x)) {
		int64_t d[2] = {numel_of((int)ax, x->dims), numel_of(x->rank - (int)ax, x->dims + ax)};
		struct val *o = new_const(im, c->n->output[0], 2, d, x->isint);
		if (!o)
			return oom(im);
		o->node = c->node;
		memcpy(o->d, x->d, (size_t)x->numel * sizeof *o->d);
		return 0;
	}
	if ((rc = need_rt(c, 0)))
		return rc;
	if (ax != 1)
		return nerr(im, c->n, "attribute 'axis' %lld: only axis 1 keeps the batch dimension apart", (long long)axis);
	struct val *o = out_val(c, 0, V_RT);
	if (!o)
		return oom(im);
	int64_t d[2] = {-1, numel_of(x->rank - 1, x->dims + 1)};
	set_shape(o, 2, d);
	if (x->rank == 2)
		return alias(c, x, 0) == 0 ? 0 : DL_ERUN;
	return emit(im, c->n, NULL, NULL, "flatten", NULL, &x, 1, o) ? 0 : DL_ERUN;
}

/* ---- nn.MultiheadAttention ---- */

/* Whether node j reads value name. */
static int reads(const Onnx__NodeProto *n, const char *name)
{
	for (size_t k = 0; k < n->n_input; k++)
		if (strcmp(n->input[k], name) == 0)
			return 1;
	return 0;
}

static int is_graph_output(struct imp *im, const char *name)
{
	for (size_t i = 0; i < im->g->n_output; i++)
		/* an output without a name is refused after the nodes run */
		if (im->g->output[i]->name && strcmp(im->g->output[i]->name, name) == 0)
			return 1;
	return 0;
}

/* The one node after node i that reads output 0 of node i other than
 * through Shape (the data consumer), when it has op type op; else -1. */
static int next_node(struct imp *im, int i, const char *op)
{
	const Onnx__NodeProto *n = im->g->node[i];
	if (n->n_output != 1 || is_graph_output(im, n->output[0]))
		return -1;
	int found = -1;
	for (size_t j = (size_t)i + 1; j < im->g->n_node; j++) {
		const Onnx__NodeProto *m = im->g->node[j];
		if (strcmp(m->op_type, "Shape") == 0 || !reads(m, n->output[0]))
			continue;
		if (found >= 0)
			return -1;
		found = (int)j;
	}
	return found >= 0 && strcmp(im->g->node[found]->op_type, op) == 0 ? found : -1;
}

/* The value of input k of node n when it is a constant already known or
 * the output of a Constant node not yet run (its data copied into out,
 * at most max values); the count, or -1. */
static int64_t peek_const(struct imp *im, const Onnx__NodeProto *n, size_t k,
			  double *out, int64_t max)
{
	if (k >= n->n_input || !n->input[k][0])
		return -1;
	struct val *v = find(im, n->input[k]);
	int tmp = 0;
	if (!v) {
		for (size_t j = 0; j < im->g->n_node && !v; j++) {
			const Onnx__NodeProto *c = im->g->node[j];
			if (strcmp(c->op_type, "Constant") != 0 || c->n_output != 1 ||
			    strcmp(c->output[0], n->input[k]) != 0)
				continue;
			const Onnx__AttributeProto *a = attr(c, "value");
			if (!a || !a->t || tensor_val(im, a->t, c->output[0], "Constant", &v))
				return -1;
			tmp = 1;
		}
	}
	int64_t cnt = -1;
	if (is_const(v) && v->numel <= max) {
		memcpy(out, v->d, (size_t)v->numel * sizeof *out);
		cnt = v->numel;
	}
	if (tmp) {
		im->nv--;
		val_free(v);
	}
	return cnt;
}

static int perm_is(const Onnx__NodeProto *n, int a, int b, int c)
{
	int np;
	const int64_t *p = attr_ints(n, "perm", &np);
	return p && np == 3 && p[0] == a && p[1] == b && p[2] == c;
}

/* The Add after node i with a constant operand of numel values (either
 * order, an initializer or a Constant node not yet run): its index, with
 * the constant's values in buf (numel of them); else -1. */
static int next_add_const(struct imp *im, int i, int64_t numel, double *buf)
{
	int a = next_node(im, i, "Add");
	if (a < 0)
		return -1;
	const Onnx__NodeProto *n = im->g->node[a];
	for (size_t s = 0; s < 2 && n->n_input == 2; s++)
		if (strcmp(n->input[1 - s], im->g->node[i]->output[0]) == 0 &&
		    peek_const(im, n, s, buf, numel) == numel)
			return a;
	return -1;
}

/* The scalar constant operand of binary node j (the other operand being
 * the output of node i) into *k; 0 when it has none. */
static int scalar_of(struct imp *im, int j, int i, double *k)
{
	const Onnx__NodeProto *n = im->g->node[j];
	for (size_t s = 0; s < 2 && n->n_input == 2; s++)
		if (strcmp(n->input[1 - s], im->g->node[i]->output[0]) == 0 &&
		    peek_const(im, n, s, k, 1) == 1)
			return 1;
	return 0;
}

/* Whether m [T, T] (or [1, T, T]) is the causal mask: 0 on and below the
 * diagonal, -inf (or below -1e9) above it. */
static int is_causal_mask(const double *m, int64_t t)
{
	for (int64_t i = 0; i < t; i++)
		for (int64_t j = 0; j < t; j++) {
			double x = m[i * t + j];
			if (j <= i ? x != 0 : !(x < -1e9))
				return 0;
		}
	return 1;
}

/* Self attention of nn.MultiheadAttention(batch_first=True) as
 * torch.onnx.export (torch 1.13) writes it, starting at the Transpose
 * (node i0) that makes x time major:
 *   Transpose[1,0,2] -> MatMul(in_proj_weight^T) [-> Add(in_proj_bias)]
 *   -> three Slices (q, k, v) -> Reshape -> Transpose ([1,0,2] for q
 *   and v, [1,2,0] for k); q -> Div(sqrt(head_dim)); MatMul(q, k)
 *   [-> Mul(1) -> Add(causal mask)] -> Softmax -> MatMul(., v)
 *   -> Transpose[1,0,2] -> Reshape -> Gemm(out_proj) -> Reshape
 *   -> Transpose[1,0,2].
 * When the graph is exactly that (no value inside it used elsewhere),
 * emits one multihead_attention entry, marks the nodes it took over (and
 * the shape arithmetic that only they read) in im->skip, and returns 1;
 * 0 when it is not that; an error code. */
static int match_mha(struct ctx *c)
{
	struct imp *im = c->im;
	struct val *x = c->in[0];
	int i0 = c->node;
	if (!is_rt(x) || x->bad || x->rank != 3 || x->layout != L_BATCH || !perm_is(c->n, 1, 0, 2))
		return 0;
	int64_t T = x->dims[1], E = x->dims[2];
	int chain[32], nc = 0;
	chain[nc++] = i0;
	int mm = next_node(im, i0, "MatMul");
	if (mm < 0 || strcmp(im->g->node[mm]->input[0], c->n->output[0]) != 0)
		return 0;
	struct val *w = node_in(im, im->g->node[mm], 1), *b = NULL;
	if (!is_const(w) || w->rank != 2 || w->dims[0] != E || w->dims[1] != 3 * E)
		return 0;
	chain[nc++] = mm;
	int a = next_node(im, mm, "Add");
	const Onnx__NodeProto *an = a < 0 ? NULL : im->g->node[a];
	for (size_t s = 0; an && s < 2 && an->n_input == 2; s++) {
		struct val *v = node_in(im, an, s);
		if (strcmp(an->input[1 - s], im->g->node[mm]->output[0]) == 0 &&
		    is_const(v) && v->numel == 3 * E)
			b = v;
	}
	if (b)
		chain[nc++] = a;
	else
		a = mm;
	if (im->g->node[a]->n_output != 1)
		return 0;
	/* the three Slices of the packed projection, in q, k, v order */
	const char *packed = im->g->node[a]->output[0];
	int sl[3], ns = 0;
	for (size_t j = (size_t)a + 1; j < im->g->n_node; j++) {
		const Onnx__NodeProto *n = im->g->node[j];
		if (strcmp(n->op_type, "Shape") == 0 || !reads(n, packed))
			continue;
		if (strcmp(n->op_type, "Slice") != 0 || ns == 3 || strcmp(n->input[0], packed) != 0)
			return 0;
		double ax[2], st[2];
		if (peek_const(im, n, 3, ax, 1) != 1 || !(ax[0] == -1 || ax[0] == 2))
			return 0;
		if (n->n_input > 4 && (peek_const(im, n, 4, st, 1) != 1 || st[0] != 1))
			return 0;
		sl[ns++] = (int)j;
	}
	if (ns != 3 || is_graph_output(im, packed))
		return 0;
	int tr[3];
	for (int s = 0; s < 3; s++) {
		int r = next_node(im, sl[s], "Reshape");
		tr[s] = r < 0 ? -1 : next_node(im, r, "Transpose");
		if (tr[s] < 0 || !(s == 1 ? perm_is(im->g->node[tr[s]], 1, 2, 0)
					  : perm_is(im->g->node[tr[s]], 1, 0, 2)))
			return 0;
		chain[nc++] = sl[s];
		chain[nc++] = r;
		chain[nc++] = tr[s];
	}
	/* q / sqrt(head_dim) */
	int qs = next_node(im, tr[0], "Div");
	double scale;
	if (qs < 0 || strcmp(im->g->node[qs]->input[0], im->g->node[tr[0]]->output[0]) != 0 ||
	    !scalar_of(im, qs, tr[0], &scale) || !(scale > 0))
		return 0;
	chain[nc++] = qs;
	int64_t hd = (int64_t)llround(scale * scale);
	if (hd < 1 || E % hd != 0 || fabs(sqrt((double)hd) - scale) > 1e-5 * scale)
		return 0;
	int s1 = next_node(im, qs, "MatMul");
	if (s1 < 0 || im->g->node[s1]->n_input != 2 || strcmp(im->g->node[s1]->input[0], im->g->node[qs]->output[0]) != 0 ||
	    strcmp(im->g->node[s1]->input[1], im->g->node[tr[1]]->output[0]) != 0 ||
	    next_node(im, tr[1], "MatMul") != s1)
		return 0;
	chain[nc++] = s1;
	/* baddbmm(mask, q, k): Mul(1) then Add(mask) */
	int at = s1, causal = 0;
	int mul = next_node(im, at, "Mul");
	double one;
	if (mul >= 0) {
		if (!scalar_of(im, mul, s1, &one) || one != 1)
			return 0;
		chain[nc++] = at = mul;
	}
	/* a [T, T] mask constant must fit in the file (2 GB at most): past
	 * T = 2^15 there is none to look for */
	int add = -1, cand = next_node(im, at, "Add");
	int sized = 0;
	for (size_t k = 0; cand >= 0 && k < 2 && im->g->node[cand]->n_input == 2; k++) {
		struct val *v = node_in(im, im->g->node[cand], k);
		sized |= v && is_const(v) && v->numel == T * T;
	}
	if (sized && T <= (int64_t)1 << 15) {
		double *mask = malloc((size_t)(T * T) * sizeof *mask);
		if (!mask)
			return oom(im);
		add = next_add_const(im, at, T * T, mask);
		causal = add >= 0 && is_causal_mask(mask, T);
		free(mask);
	}
	if (add >= 0 && !causal)
		return 0;
	if (add >= 0)
		chain[nc++] = at = add;
	int sm = next_node(im, at, "Softmax");
	if (sm < 0 || !(attr_i(im->g->node[sm], "axis", -1) == -1 || attr_i(im->g->node[sm], "axis", -1) == 2))
		return 0;
	chain[nc++] = sm;
	int s2 = next_node(im, sm, "MatMul");
	if (s2 < 0 || im->g->node[s2]->n_input != 2 || strcmp(im->g->node[s2]->input[0], im->g->node[sm]->output[0]) != 0 ||
	    strcmp(im->g->node[s2]->input[1], im->g->node[tr[2]]->output[0]) != 0 ||
	    next_node(im, tr[2], "MatMul") != s2)
		return 0;
	chain[nc++] = s2;
	int t4 = next_node(im, s2, "Transpose");
	int r3 = t4 < 0 ? -1 : next_node(im, t4, "Reshape");
	int gm = r3 < 0 ? -1 : next_node(im, r3, "Gemm");
	int r4 = gm < 0 ? -1 : next_node(im, gm, "Reshape");
	int t5 = r4 < 0 ? -1 : next_node(im, r4, "Transpose");
	if (t5 < 0 || !perm_is(im->g->node[t4], 1, 0, 2) || !perm_is(im->g->node[t5], 1, 0, 2))
		return 0;
	const Onnx__NodeProto *g = im->g->node[gm];
	struct val *wo = node_in(im, g, 1), *bo = node_in(im, g, 2);
	if (strcmp(g->input[0], im->g->node[r3]->output[0]) != 0 || !is_const(wo) ||
	    wo->rank != 2 || wo->dims[0] != E || wo->dims[1] != E ||
	    attr_i(g, "transA", 0) || attr_f(g, "alpha", 1) != 1 || attr_f(g, "beta", 1) != 1 ||
	    (bo && (!is_const(bo) || bo->numel != E)) || (!bo) != (!b))
		return 0;
	int tb = (int)attr_i(g, "transB", 0);
	chain[nc++] = t4;
	chain[nc++] = r3;
	chain[nc++] = gm;
	chain[nc++] = r4;
	chain[nc++] = t5;

	/* the nodes taken over: the chain, then whatever only they read */
	size_t nn = im->g->n_node;
	if (!im->skip && !(im->skip = calloc(nn, 1)))
		return oom(im);
	char *take = calloc(nn, 1);
	if (!take)
		return oom(im);
	for (int k = 0; k < nc; k++)
		take[chain[k]] = 1;
	for (int grew = 1; grew;) {
		grew = 0;
		for (int j = t5 - 1; j > i0; j--) {
			const Onnx__NodeProto *n = im->g->node[j];
			if (take[j] || im->skip[j] || n->n_output < 1)
				continue;
			int all = 1;
			for (size_t o = 0; o < n->n_output && all; o++) {
				int used = 0;
				if (is_graph_output(im, n->output[o]))
					all = 0;
				for (size_t u = (size_t)j + 1; u < nn && all; u++)
					if (reads(im->g->node[u], n->output[o])) {
						used = 1;
						all = take[u];
					}
				all = all && used;
			}
			if (all)
				take[j] = grew = 1;
		}
	}
	/* nothing inside but the last node feeds the rest of the graph */
	for (int j = i0; j < t5; j++) {
		const Onnx__NodeProto *n = im->g->node[j];
		for (size_t o = 0; take[j] && o < n->n_output; o++) {
			int bad = is_graph_output(im, n->output[o]);
			for (size_t u = (size_t)j + 1; u < nn && !bad; u++)
				bad = !take[u] && reads(im->g->node[u], n->output[o]);
			if (bad) {
				free(take);
				return 0;
			}
		}
	}

	char *hp = NULL;
	int rc = hp_add(im, &hp, "num_heads: %lld", (long long)(E / hd));
	if (rc == 0 && !b)
		rc = hp_add(im, &hp, "bias: false");
	if (rc == 0 && causal)
		rc = hp_add(im, &hp, "causal: true");
	struct val *o = rc ? NULL : new_val(im, im->g->node[t5]->output[0], V_RT);
	if (!o) {
		free(take);
		free(hp);
		return rc ? rc : oom(im);
	}
	o->node = t5;
	copy_shape(o, x);
	/* the PyTorch module: "enc.layers.0.self_attn" from its out_proj */
	char pname[256] = "", *pn = NULL;
	if (wo->init && strlen(wo->init) < sizeof pname) {
		snprintf(pname, sizeof pname, "%s", wo->init);
		char *suf = strstr(pname, ".out_proj.weight");
		if (suf && suf[strlen(".out_proj.weight")] == 0 && suf != pname) {
			*suf = 0;
			pn = pname;
		}
	}
	struct entry *e = emit(im, c->n, pn, NULL, "multihead_attention", hp, &x, 1, o);
	double *t = malloc((size_t)(3 * E * E) * sizeof *t);
	if (!e || !t) {
		free(take);
		free(t);
		return e ? oom(im) : DL_ERUN;
	}
	for (int64_t r = 0; r < 3 * E; r++)
		for (int64_t k = 0; k < E; k++)
			t[r * E + k] = w->d[k * 3 * E + r];
	int64_t wd[2] = {3 * E, E}, bd[1] = {3 * E}, od[2] = {E, E}, obd[1] = {E};
	rc = add_param(im, e, "in_proj_weight", 2, wd, t);
	if (rc == 0 && b)
		rc = add_param(im, e, "in_proj_bias", 1, bd, b->d);
	for (int64_t r = 0; r < E; r++)
		for (int64_t k = 0; k < E; k++)
			t[r * E + k] = tb ? wo->d[r * E + k] : wo->d[k * E + r];
	if (rc == 0)
		rc = add_param(im, e, "out_proj.weight", 2, od, t);
	if (rc == 0 && bo)
		rc = add_param(im, e, "out_proj.bias", 1, obd, bo->d);
	free(t);
	for (size_t j = 0; j < nn; j++)
		im->skip[j] |= take[j];
	free(take);
	return rc ? rc : 1;
}

/* Transpose of a constant (shape arithmetic, Swin's pads), folded. */
static int fold_transpose(struct ctx *c, struct val *x, const int64_t *p, int np)
{
	int r = x->rank;
	if (p && np != r)
		return nerr(c->im, c->n, "attribute 'perm' has %d values for rank %d", np, r);
	int64_t perm[MAXR], d[MAXR], st[MAXR];
	int seen = 0;
	for (int i = 0; i < r; i++) {
		perm[i] = p ? p[i] : r - 1 - i;
		if (perm[i] < 0 || perm[i] >= r || (seen & (1 << perm[i])))
			return nerr(c->im, c->n, "attribute 'perm' %s is not a permutation", ilist(perm, r));
		seen |= 1 << perm[i];
		d[i] = x->dims[perm[i]];
	}
	/* the strides of x, read in the output's order */
	int64_t xs[MAXR], m = 1;
	for (int i = r - 1; i >= 0; i--) {
		xs[i] = m;
		m *= x->dims[i];
	}
	for (int i = 0; i < r; i++)
		st[i] = xs[perm[i]];
	struct val *o = new_const(c->im, c->n->output[0], r, d, x->isint);
	if (!o)
		return oom(c->im);
	o->node = c->node;
	int64_t idx[MAXR] = {0};
	for (int64_t k = 0; k < o->numel; k++) {
		int64_t off = 0;
		for (int i = 0; i < r; i++)
			off += idx[i] * st[i];
		o->d[k] = x->d[off];
		for (int i = r - 1; i >= 0; i--) {
			if (++idx[i] < d[i])
				break;
			idx[i] = 0;
		}
	}
	return 0;
}

static int m_transpose(struct ctx *c)
{
	struct imp *im = c->im;
	struct val *x = c->in[0];
	int np;
	const int64_t *p = attr_ints(c->n, "perm", &np);
	if (is_rt(x) && !x->bad && p && np == x->rank) {
		/* batch first <-> time major around ONNX's recurrent ops */
		int swap01 = x->rank == 3 && p[0] == 1 && p[1] == 0 && p[2] == 2;
		int layout = -1;
		if (swap01 && x->layout == L_BATCH) {
			int rc = match_mha(c);
			if (rc)
				return rc < 0 ? rc : 0;
			layout = L_TIME;
		}
		else if (swap01 && x->layout == L_TIME)
			layout = L_BATCH;
		else if (x->layout == L_RNN_Y && x->rank == 4 && p[0] == 0 && p[1] == 2 &&
			 p[2] == 1 && p[3] == 3)
			layout = L_RNN_Y2;
		if (layout >= 0) {
			if (alias(c, x, 0))
				return DL_ERUN;
			struct val *o = c->im->v[c->im->nv - 1];
			o->layout = layout;
			for (int i = 0; i < x->rank; i++)
				o->dims[i] = x->dims[p[i]];
			return 0;
		}
	}
	if (is_const(x))
		return fold_transpose(c, x, p, np);
	int rc = need_rt(c, 0);
	if (rc)
		return rc;
	if (p && np != x->rank)
		return nerr(im, c->n, "attribute 'perm' has %d values for rank %d", np, x->rank);
	int64_t perm[MAXR] = {0};
	for (int i = 0; i < x->rank; i++)
		perm[i] = p ? p[i] : x->rank - 1 - i;
	if (perm[0] != 0)
		return nerr(im, c->n, "attribute 'perm' %s moves the batch dimension, which dlrun keeps first",
			    ilist(perm, x->rank));
	int64_t d[MAXR];
	int seen = 0;
	for (int i = 0; i < x->rank; i++) {
		if (perm[i] < 0 || perm[i] >= x->rank || (seen & (1 << perm[i])))
			return nerr(im, c->n, "attribute 'perm' %s is not a permutation", ilist(perm, x->rank));
		seen |= 1 << perm[i];
		d[i] = x->dims[perm[i]];
	}
	struct val *o = out_val(c, 0, V_RT);
	if (!o)
		return oom(im);
	set_shape(o, x->rank, d);
	char *hp = NULL;
	if (hp_add(im, &hp, "dims: %s", ilist(perm, x->rank)))
		return DL_ERUN;
	return emit(im, c->n, NULL, NULL, "permute", hp, &x, 1, o) ? 0 : DL_ERUN;
}

static int m_concat(struct ctx *c)
{
	struct imp *im = c->im;
	int allc = 1, anyc = 0;
	if (c->n_in < 1)
		return nerr(im, c->n, "needs inputs");
	for (int i = 0; i < c->n_in; i++) {
		if (!c->in[i])
			return nerr(im, c->n, "input %d is missing", i);
		allc &= is_const(c->in[i]);
		anyc |= is_const(c->in[i]);
	}
	struct val *x = c->in[0];
	int64_t ax = 0;
	int rc = norm_axis(c, attr_i(c->n, "axis", 0), x->rank, &ax);
	if (rc)
		return rc;
	int64_t d[MAXR];
	memcpy(d, x->dims, sizeof d);
	d[ax] = 0;
	for (int i = 0; i < c->n_in; i++) {
		if (c->in[i]->rank != x->rank)
			return nerr(im, c->n, "inputs of different ranks");
		for (int j = 0; j < x->rank; j++)
			if (j != ax && j > 0 && c->in[i]->dims[j] != x->dims[j])
				return nerr(im, c->n, "input %d has size %lld in dimension %d, input 0 %lld",
					    i, (long long)c->in[i]->dims[j], j, (long long)x->dims[j]);
		d[ax] += c->in[i]->dims[ax];
	}
	if (allc) {
		int isint = 1;
		for (int i = 0; i < c->n_in; i++)
			isint &= c->in[i]->isint;
		struct val *o = new_const(im, c->n->output[0], x->rank, d, isint);
		if (!o)
			return oom(im);
		o->node = c->node;
		int64_t outer = numel_of((int)ax, x->dims), inner = numel_of(x->rank - (int)ax - 1, x->dims + ax + 1);
		int64_t off = 0;
		for (int64_t q = 0; q < outer; q++)
			for (int i = 0; i < c->n_in; i++) {
				int64_t n = c->in[i]->dims[ax] * inner;
				memcpy(o->d + off, c->in[i]->d + q * n, (size_t)n * sizeof *o->d);
				off += n;
			}
		return 0;
	}
	if (anyc)
		return nerr(im, c->n, "a constant concatenated with data has no dlrun op");
	if (c->n_in == 1)   /* torch.cat([x]): DenseNet's first layers */
		return alias(c, x, 0);
	if (ax == 0)
		return nerr(im, c->n, "axis 0 is the batch dimension, which dlrun ops do not change");
	for (int i = 0; i < c->n_in; i++)
		if (c->in[i]->bad)
			return nerr(im, c->n, "%s", c->in[i]->bad);
	struct val *o = out_val(c, 0, V_RT);
	if (!o)
		return oom(im);
	set_shape(o, x->rank, d);
	char *hp = NULL;
	if (hp_add(im, &hp, "dim: %lld", (long long)ax))
		return DL_ERUN;
	return emit(im, c->n, NULL, NULL, "concat", hp, c->in, c->n_in, o) ? 0 : DL_ERUN;
}

/* One slice entry [start, end) with step along dim of x into o. */
static int emit_slice(struct ctx *c, struct val *x, int64_t dim, int64_t st,
		      int64_t en, int64_t step, struct val *o, const char *suffix)
{
	int64_t L = x->dims[dim];
	int64_t s = st < 0 ? st + L : st, e = en < 0 ? en + L : en;
	s = s < 0 ? 0 : s > L ? L : s;
	e = e < 0 ? 0 : e > L ? L : e;
	int64_t len = e > s ? (e - s + step - 1) / step : 0;
	copy_shape(o, x);
	o->dims[dim] = len;
	if (s == 0 && e == L && step == 1) {
		o->kind = V_RT;
		o->ref = x->ref;
		o->entry = x->entry;
		o->port = x->port;
		return 0;
	}
	if (len == 0)
		return nerr(c->im, c->n, "an empty slice");
	char *hp = NULL;
	if (hp_add(c->im, &hp, "dim: %lld, start: %lld, end: %lld", (long long)dim,
		   (long long)s, (long long)e))
		return DL_ERUN;
	if (step != 1 && hp_add(c->im, &hp, "step: %lld", (long long)step))
		return DL_ERUN;
	return emit(c->im, c->n, NULL, suffix, "slice", hp, &x, 1, o) ? 0 : DL_ERUN;
}

static int m_slice(struct ctx *c)
{
	struct imp *im = c->im;
	struct val *x = c->in[0];
	if (!x)
		return nerr(im, c->n, "input 0 is missing");
	int64_t st[MAXR], en[MAXR], ax[MAXR], sp[MAXR];
	int ns, ne, na, nsp, rc;
	if (c->im->opset < 10) {
		return nerr(im, c->n, "Slice before opset 10 (attributes) is not supported");
	}
	if ((rc = const_ints(c, 1, "starts", st, MAXR, &ns)) ||
	    (rc = const_ints(c, 2, "ends", en, MAXR, &ne)))
		return rc;
	if (ns != ne)
		return nerr(im, c->n, "starts and ends differ in length");
	na = ns;
	for (int i = 0; i < ns; i++)
		ax[i] = i;
	if (c->n_in > 3 && c->in[3] && (rc = const_ints(c, 3, "axes", ax, MAXR, &na)))
		return rc;
	nsp = ns;
	for (int i = 0; i < ns; i++)
		sp[i] = 1;
	if (c->n_in > 4 && c->in[4] && (rc = const_ints(c, 4, "steps", sp, MAXR, &nsp)))
		return rc;
	if (na != ns || nsp != ns)
		return nerr(im, c->n, "axes or steps differ in length from starts");
	if (is_const(x)) {
		/* fold (shape arithmetic: one axis at a time on small constants) */
		struct val *cur = x;
		double *tmp = NULL;
		int64_t d[MAXR];
		memcpy(d, x->dims, sizeof d);
		tmp = malloc((size_t)(x->numel + 1) * sizeof *tmp);
		if (!tmp)
			return oom(im);
		memcpy(tmp, x->d, (size_t)x->numel * sizeof *tmp);
		for (int i = 0; i < ns; i++) {
			int64_t a = 0;
			if ((rc = norm_axis(c, ax[i], cur->rank, &a))) {
				free(tmp);
				return rc;
			}
			if (sp[i] == 0) {
				free(tmp);
				return nerr(im, c->n, "step 0");
			}
			int64_t L = d[a], s = st[i] < 0 ? st[i] + L : st[i], e = en[i] < 0 ? en[i] + L : en[i];
			int64_t len;
			if (sp[i] > 0) {
				s = s < 0 ? 0 : s > L ? L : s;
				e = e < 0 ? 0 : e > L ? L : e;
				len = e > s ? (e - s + sp[i] - 1) / sp[i] : 0;
			} else {
				/* backwards (the exporter reverses pads so) */
				s = s < 0 ? -1 : s > L - 1 ? L - 1 : s;
				e = e < -1 ? -1 : e > L - 1 ? L - 1 : e;
				len = s > e ? (s - e - sp[i] - 1) / -sp[i] : 0;
			}
			int64_t outer = numel_of((int)a, d), inner = numel_of(cur->rank - (int)a - 1, d + a + 1);
			double *nt = malloc((size_t)(outer * len * inner + 1) * sizeof *nt);
			if (!nt) {
				free(tmp);
				return oom(im);
			}
			for (int64_t q = 0; q < outer; q++)
				for (int64_t j = 0; j < len; j++)
					memcpy(nt + (q * len + j) * inner, tmp + (q * L + s + j * sp[i]) * inner,
					       (size_t)inner * sizeof *nt);
			free(tmp);
			tmp = nt;
			d[a] = len;
		}
		struct val *o = new_const(im, c->n->output[0], x->rank, d, x->isint);
		if (!o) {
			free(tmp);
			return oom(im);
		}
		o->node = c->node;
		memcpy(o->d, tmp, (size_t)o->numel * sizeof *o->d);
		free(tmp);
		return 0;
	}
	if ((rc = need_rt(c, 0)))
		return rc;
	if (x->bad)
		return nerr(im, c->n, "%s", x->bad);
	struct val *cur = x;
	struct val tmpv[MAXR];
	for (int i = 0; i < ns; i++) {
		int64_t a = 0;
		if ((rc = norm_axis(c, ax[i], x->rank, &a)))
			return rc;
		if (sp[i] < 1)
			return nerr(im, c->n, "step %lld: dlrun's slice takes positive steps", (long long)sp[i]);
		if (a == 0) {
			if (st[i] == 0 && en[i] >= INT32_MAX && sp[i] == 1)
				continue;
			return nerr(im, c->n, "a slice of axis 0, the batch dimension");
		}
		int last = 1;
		for (int j = i + 1; j < ns; j++)
			last &= ax[j] == 0;
		struct val *o;
		if (last) {
			o = out_val(c, 0, V_RT);
			if (!o)
				return oom(im);
		} else {
			memset(&tmpv[i], 0, sizeof tmpv[i]);
			o = &tmpv[i];
			o->name = "";
		}
		char suf[16];
		snprintf(suf, sizeof suf, "%d", i);
		if ((rc = emit_slice(c, cur, a, st[i], en[i], sp[i], o, i ? suf : NULL)))
			return rc;
		cur = o;
	}
	if (cur == x)
		return alias(c, x, 0);
	return 0;
}

static int m_split(struct ctx *c)
{
	struct imp *im = c->im;
	struct val *x = c->in[0];
	int rc = need_rt(c, 0);
	if (rc)
		return rc;
	int64_t ax = 0;
	if ((rc = rt_axis(c, attr_i(c->n, "axis", 0), x->rank, &ax)))
		return rc;
	int no = (int)c->n->n_output;
	int64_t sz[64];
	int ns = 0;
	if (no > 64)
		return nerr(im, c->n, "%d outputs", no);
	if (c->n_in > 1 && c->in[1]) {
		if ((rc = const_ints(c, 1, "split", sz, 64, &ns)))
			return rc;
	} else {
		const int64_t *a = attr_ints(c->n, "split", &ns);
		if (a && ns <= 64)
			memcpy(sz, a, (size_t)ns * sizeof *sz);
		else {
			int64_t L = x->dims[ax], each = (L + no - 1) / no;
			ns = no;
			for (int i = 0; i < no; i++)
				sz[i] = i < no - 1 ? each : L - each * (no - 1);
		}
	}
	if (ns != no)
		return nerr(im, c->n, "%d split sizes for %d outputs", ns, no);
	int64_t at = 0;
	for (int i = 0; i < no; i++) {
		struct val *o = out_val(c, i, V_RT);
		if (!o)
			return oom(im);
		char suf[16];
		snprintf(suf, sizeof suf, "%d", i);
		if ((rc = emit_slice(c, x, ax, at, at + sz[i], 1, o, suf)))
			return rc;
		at += sz[i];
	}
	if (at != x->dims[ax])
		return nerr(im, c->n, "split sizes add up to %lld, the dimension has %lld",
			    (long long)at, (long long)x->dims[ax]);
	return 0;
}

static int m_gather(struct ctx *c)
{
	struct imp *im = c->im;
	struct val *x = c->in[0], *idx = c->n_in > 1 ? c->in[1] : NULL;
	if (!x || !idx)
		return nerr(im, c->n, "needs data and indices");
	int64_t ax = 0;
	int rc = norm_axis(c, attr_i(c->n, "axis", 0), x->rank, &ax);
	if (rc)
		return rc;
	if (is_const(x) && is_const(idx)) {
		int64_t d[MAXR];
		int r = 0;
		for (int i = 0; i < ax; i++)
			d[r++] = x->dims[i];
		for (int i = 0; i < idx->rank; i++)
			d[r++] = idx->dims[i];
		for (int i = (int)ax + 1; i < x->rank; i++)
			d[r++] = x->dims[i];
		if (r > MAXR)
			return nerr(im, c->n, "result of rank %d", r);
		struct val *o = new_const(im, c->n->output[0], r, d, x->isint);
		if (!o)
			return oom(im);
		o->node = c->node;
		int64_t outer = numel_of((int)ax, x->dims), inner = numel_of(x->rank - (int)ax - 1, x->dims + ax + 1);
		int64_t L = x->dims[ax], k = 0;
		for (int64_t q = 0; q < outer; q++)
			for (int64_t j = 0; j < idx->numel; j++) {
				int64_t i = to_i64(idx->d[j]);
				if (i < 0)
					i += L;
				if (i < 0 || i >= L)
					return nerr(im, c->n, "index %lld out of range for size %lld",
						    (long long)to_i64(idx->d[j]), (long long)L);
				memcpy(o->d + k, x->d + (q * L + i) * inner, (size_t)inner * sizeof *o->d);
				k += inner;
			}
		return 0;
	}
	if (is_const(x) && is_rt(idx)) {
		/* an embedding lookup */
		if (ax != 0 || x->rank != 2 || x->isint)
			return nerr(im, c->n, "data indexed by data: dlrun has embedding lookups (a float table [V, D], axis 0) only");
		if (!idx->isint)
			return nerr(im, c->n, "indices must be an integer model input (dtype: int)");
		if (idx->rank + 1 > MAXR)
			return nerr(im, c->n, "indices of rank %d", idx->rank);
		char *hp = NULL;
		if (hp_add(im, &hp, "num_embeddings: %lld, embedding_dim: %lld",
			   (long long)x->dims[0], (long long)x->dims[1]))
			return DL_ERUN;
		struct val *o = out_val(c, 0, V_RT);
		if (!o) {
			free(hp);
			return oom(im);
		}
		int64_t d[MAXR];
		memcpy(d, idx->dims, sizeof d);
		d[idx->rank] = x->dims[1];
		set_shape(o, idx->rank + 1, d);
		char buf[256];
		const char *tp = torch_prefix(x, buf, sizeof buf);
		struct entry *e = emit(im, c->n, tp, NULL, "embedding", hp, &idx, 1, o);
		return e ? add_param(im, e, "weight", 2, x->dims, x->d) : DL_ERUN;
	}
	/* data indexed by a constant: slices (and a reshape for a scalar) */
	if (!is_const(idx))
		return nerr(im, c->n, "data indexed by data has no dlrun op");
	if ((rc = rt_axis(c, ax, x->rank, &ax)))
		return rc;
	if (idx->numel != 1)
		return nerr(im, c->n, "a gather of %lld indices from data: dlrun slices one index at a time",
			    (long long)idx->numel);
	int64_t i = to_i64(idx->d[0]);
	if (i < 0)
		i += x->dims[ax];
	if (i < 0 || i >= x->dims[ax])
		return nerr(im, c->n, "index %lld out of range for size %lld", (long long)to_i64(idx->d[0]),
			    (long long)x->dims[ax]);
	struct val *o = out_val(c, 0, V_RT);
	if (!o)
		return oom(im);
	if (idx->rank == 1)
		return emit_slice(c, x, ax, i, i + 1, 1, o, NULL);
	struct val mid = {.name = ""};
	if ((rc = emit_slice(c, x, ax, i, i + 1, 1, &mid, "slice")))
		return rc;
	int64_t d[MAXR];
	int r = 0;
	for (int k = 0; k < x->rank; k++)
		if (k != ax)
			d[r++] = x->dims[k];
	return emit_reshape(c, &mid, r, d, o, NULL);
}

static int m_pad(struct ctx *c)
{
	struct imp *im = c->im;
	struct val *x = c->in[0];
	int rc = need_rt(c, 0);
	if (rc)
		return rc;
	if (!attr_s_is(c->n, "mode", "constant", 1))
		return nerr(im, c->n, "attribute 'mode': only constant padding has a dlrun op");
	int64_t p[2 * MAXR];
	int np;
	if (c->n_in > 1 && c->in[1]) {
		if ((rc = const_ints(c, 1, "pads", p, 2 * MAXR, &np)))
			return rc;
	} else {
		const int64_t *a = attr_ints(c->n, "pads", &np);
		if (np > 2 * MAXR)
			return nerr(im, c->n, "attribute 'pads' has %d values", np);
		for (int i = 0; i < np; i++)
			p[i] = a[i];
	}
	if (c->n_in > 3 && c->in[3])
		return nerr(im, c->n, "input 'axes' is not supported");
	if (np != 2 * x->rank)
		return nerr(im, c->n, "pads has %d values for rank %d", np, x->rank);
	double value = attr_f(c->n, "value", 0);
	if (c->n_in > 2 && c->in[2]) {
		if (!is_const(c->in[2]) || c->in[2]->numel != 1)
			return nerr(im, c->n, "the padding value must be a constant scalar");
		value = c->in[2]->d[0];
	}
	if (p[0] || p[x->rank])
		return nerr(im, c->n, "padding of axis 0, the batch dimension");
	int first = -1;
	for (int i = 1; i < x->rank; i++)
		if (p[i] || p[x->rank + i]) {
			first = i;
			break;
		}
	if (first < 0)
		return alias(c, x, 0);
	int64_t fp[2 * MAXR], d[MAXR];
	int nf = 0;
	for (int i = x->rank - 1; i >= first; i--) {
		fp[nf++] = p[i];
		fp[nf++] = p[x->rank + i];
	}
	for (int i = 0; i < x->rank; i++)
		d[i] = x->dims[i] + (i ? p[i] + p[x->rank + i] : 0);
	for (int i = 1; i < x->rank; i++)
		if (d[i] < 1)
			return nerr(im, c->n, "padding leaves dimension %d empty", i);
	char *hp = NULL;
	if (hp_add(im, &hp, "padding: %s", ilist(fp, nf)))
		return DL_ERUN;
	if (value != 0 && hp_add(im, &hp, "value: %s", fnum(value)))
		return DL_ERUN;
	struct val *o = out_val(c, 0, V_RT);
	if (!o) {
		free(hp);
		return oom(im);
	}
	set_shape(o, x->rank, d);
	return emit(im, c->n, NULL, NULL, "pad", hp, &x, 1, o) ? 0 : DL_ERUN;
}

static int m_reduce_mean(struct ctx *c)
{
	struct imp *im = c->im;
	struct val *x = c->in[0];
	int rc = need_rt(c, 0);
	if (rc)
		return rc;
	int64_t axes[MAXR];
	int na;
	if ((rc = get_axes(c, 1, axes, &na)))
		return rc;
	if (na == 0) {
		if (attr_i(c->n, "noop_with_empty_axes", 0))
			return alias(c, x, 0);
		for (int i = 0; i < x->rank; i++)
			axes[na++] = i;
	}
	int keep = (int)attr_i(c->n, "keepdims", 1);
	int mark[MAXR] = {0};
	for (int i = 0; i < na; i++) {
		int64_t a = 0;
		if ((rc = rt_axis(c, axes[i], x->rank, &a)))
			return rc;
		axes[i] = a;
		mark[a] = 1;
	}
	int64_t d[MAXR];
	int r = 0;
	for (int i = 0; i < x->rank; i++) {
		if (mark[i] && !keep)
			continue;
		d[r++] = mark[i] ? 1 : x->dims[i];
	}
	struct val *o = out_val(c, 0, V_RT);
	if (!o)
		return oom(im);
	set_shape(o, r, d);
	char *hp = NULL;
	if (hp_add(im, &hp, "dim: %s", na == 1 ? ilist(axes, 1) + 0 : ilist(axes, na)))
		return DL_ERUN;
	if (na == 1) {
		/* one dim as a number */
		free(hp);
		hp = NULL;
		if (hp_add(im, &hp, "dim: %lld", (long long)axes[0]))
			return DL_ERUN;
	}
	if (keep && hp_add(im, &hp, "keepdim: true"))
		return DL_ERUN;
	const char *t = c->n->op_type;
	const char *dlop = strcmp(t, "ReduceMax") == 0 ? "max" : strcmp(t, "ReduceMin") == 0 ? "min"
			 : strcmp(t, "ReduceSum") == 0 ? "sum" : "mean";
	return emit(im, c->n, NULL, NULL, dlop, hp, &x, 1, o) ? 0 : DL_ERUN;
}

/* ---- recurrent layers ---- */

/* True when the activations attribute lists want (per direction). */
static int acts_are(const Onnx__NodeProto *n, const char *const *want, int k, int dirs)
{
	const Onnx__AttributeProto *a = attr(n, "activations");
	if (!a)
		return 1;
	if ((int)a->n_strings != k * dirs)
		return 0;
	for (int i = 0; i < k * dirs; i++) {
		const char *w = want[i % k];
		if (a->strings[i].len != strlen(w) || strncasecmp((const char *)a->strings[i].data, w, strlen(w)) != 0)
			return 0;
	}
	return 1;
}

static int m_rnn(struct ctx *c)
{
	struct imp *im = c->im;
	const char *t = c->n->op_type;
	int lstm = strcmp(t, "LSTM") == 0, gru = strcmp(t, "GRU") == 0;
	int G = lstm ? 4 : gru ? 3 : 1;
	/* PyTorch's gate k is ONNX's block map[k]: LSTM i,o,f,c -> i,f,g,o;
	 * GRU z,r,h -> r,z,n */
	static const int lstm_map[4] = {0, 2, 3, 1}, gru_map[3] = {1, 0, 2}, rnn_map[1] = {0};
	const int *map = lstm ? lstm_map : gru ? gru_map : rnn_map;
	struct val *x = c->in[0];
	if (!is_rt(x) || x->bad)
		return nerr(im, c->n, "input X must be data");
	if (x->layout != L_TIME || x->rank != 3)
		return nerr(im, c->n, "input X must be time major [T, N, F], the Transpose of batch-first data that exporters write");
	struct val *w = c->n_in > 1 ? c->in[1] : NULL, *r = c->n_in > 2 ? c->in[2] : NULL;
	struct val *b = c->n_in > 3 ? c->in[3] : NULL;
	int64_t H = attr_i(c->n, "hidden_size", -1), T = x->dims[0], I = x->dims[2];
	int dirs = attr_s_is(c->n, "direction", "bidirectional", 0) ? 2 : 1;
	if (attr_s_is(c->n, "direction", "reverse", 0))
		return nerr(im, c->n, "attribute 'direction' reverse has no dlrun equivalent (bidirectional has)");
	if (!is_const(w) || w->rank != 3 || w->dims[0] != dirs || w->dims[1] != G * H || w->dims[2] != I)
		return nerr(im, c->n, "input W must be a constant [%d, %lld, %lld]", dirs, (long long)(G * H), (long long)I);
	if (!is_const(r) || r->rank != 3 || r->dims[0] != dirs || r->dims[1] != G * H || r->dims[2] != H)
		return nerr(im, c->n, "input R must be a constant [%d, %lld, %lld]", dirs, (long long)(G * H), (long long)H);
	if (b && (!is_const(b) || b->numel != dirs * 2 * G * H))
		return nerr(im, c->n, "input B must be a constant of %lld values", (long long)(dirs * 2 * G * H));
	if (c->n_in > 4 && c->in[4])
		return nerr(im, c->n, "input sequence_lens is not supported (every sequence has the full length)");
	for (int k = 5; k < c->n_in && k < 7; k++) {
		struct val *h = c->in[k];
		if (!h)
			continue;
		int zero = is_const(h);
		for (int64_t i = 0; zero && i < h->numel; i++)
			zero = h->d[i] == 0;
		if (!zero)
			return nerr(im, c->n, "input %s must be absent or zeros (dlrun import does not wire an initial state)",
				    k == 5 ? "initial_h" : "initial_c");
	}
	if (c->n_in > 7 && c->in[7])
		return nerr(im, c->n, "input P (peepholes) has no dlrun equivalent");
	if (attr(c->n, "clip"))
		return nerr(im, c->n, "attribute 'clip' has no dlrun equivalent");
	if (attr(c->n, "activation_alpha") || attr(c->n, "activation_beta"))
		return nerr(im, c->n, "attribute 'activation_alpha' has no dlrun equivalent");
	if (attr_i(c->n, "input_forget", 0))
		return nerr(im, c->n, "attribute 'input_forget' 1 has no dlrun equivalent");
	if (attr_i(c->n, "layout", 0))
		return nerr(im, c->n, "attribute 'layout' 1 is not supported");
	static const char *const lstm_acts[] = {"Sigmoid", "Tanh", "Tanh"};
	static const char *const gru_acts[] = {"Sigmoid", "Tanh"};
	static const char *const tanh_act[] = {"Tanh"}, *const relu_act[] = {"Relu"};
	int relu = 0;
	if (lstm ? !acts_are(c->n, lstm_acts, 3, dirs) : gru ? !acts_are(c->n, gru_acts, 2, dirs)
	    : !acts_are(c->n, tanh_act, 1, dirs) && !(relu = acts_are(c->n, relu_act, 1, dirs)))
		return nerr(im, c->n, "attribute 'activations' other than the defaults has no dlrun equivalent");
	char *hp = NULL;
	if (hp_add(im, &hp, "hidden_size: %lld", (long long)H))
		return DL_ERUN;
	if (dirs == 2 && hp_add(im, &hp, "bidirectional: true"))
		goto fail;
	if (gru && !attr_i(c->n, "linear_before_reset", 0) && hp_add(im, &hp, "linear_before_reset: false"))
		goto fail;
	if (relu && hp_add(im, &hp, "nonlinearity: relu"))
		goto fail;
	if (!b && hp_add(im, &hp, "bias: false"))
		goto fail;
	struct val *y = out_val(c, 0, V_RT);
	if (!y)
		goto fail;
	y->layout = L_RNN_Y;
	y->dirs = dirs;
	y->rank = 4;
	y->dims[0] = T;
	y->dims[1] = dirs;
	y->dims[2] = -1;
	y->dims[3] = H;
	struct val *o = y;
	struct entry *e = emit(im, c->n, NULL, NULL, lstm ? "lstm" : gru ? "gru" : "rnn", hp, &x, 1, NULL);
	if (!e)
		return DL_ERUN;
	o->ref = e->name;
	o->entry = im->ne - 1;
	/* the final states are not imported */
	for (size_t k = 1; k < c->n->n_output; k++) {
		if (!c->n->output[k][0])
			continue;
		struct val *st = out_val(c, (int)k, V_RT);
		char buf[600];
		if (!st)
			return oom(im);
		snprintf(buf, sizeof buf, "node '%s' (%s): output %s (the final state) is not imported; use the sequence output",
			 c->n->name ? c->n->name : "?", t, k == 1 ? "Y_h" : "Y_c");
		st->rank = 3;
		st->dims[0] = dirs;
		st->dims[1] = -1;
		st->dims[2] = H;
		if (!(st->bad = strdup(buf)))
			return oom(im);
	}
	int rc = 0;
	double *tmp = malloc((size_t)(G * H * (I > H ? I : H) + 1) * sizeof *tmp);
	if (!tmp)
		return oom(im);
	static const char *const keys[2][4] = {
		{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"},
		{"weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse"},
	};
	for (int d = 0; d < dirs && rc == 0; d++) {
		for (int which = 0; which < 4 && rc == 0; which++) {
			if (which >= 2 && !b)
				break;
			int64_t cols = which == 0 ? I : which == 1 ? H : 1;
			const double *src = which == 0 ? w->d + d * G * H * I
					  : which == 1 ? r->d + d * G * H * H
					  : b->d + d * 2 * G * H + (which == 3 ? G * H : 0);
			for (int g = 0; g < G; g++)
				memcpy(tmp + g * H * cols, src + map[g] * H * cols, (size_t)(H * cols) * sizeof *tmp);
			int64_t dims[2] = {G * H, cols};
			rc = add_param(im, e, keys[d][which], which < 2 ? 2 : 1, dims, tmp);
		}
	}
	free(tmp);
	return rc;
fail:
	free(hp);
	return oom(im);
}

/* ---- constants and shape arithmetic (folded) ---- */

static int m_constant(struct ctx *c)
{
	const Onnx__AttributeProto *a = attr(c->n, "value");
	struct val *v = NULL;
	int rc;
	if (a && a->t) {
		rc = tensor_val(c->im, a->t, c->n->output[0], "Constant", &v);
		if (v)
			v->init = NULL, v->node = c->node;
		return rc;
	}
	int64_t one = 1;
	if ((a = attr(c->n, "value_float")) || (a = attr(c->n, "value_int"))) {
		v = new_const(c->im, c->n->output[0], 0, &one, a->has_i);
		if (!v)
			return oom(c->im);
		v->d[0] = a->has_i ? (double)a->i : a->f;
	} else if ((a = attr(c->n, "value_floats")) || (a = attr(c->n, "value_ints"))) {
		int64_t n = a->n_ints ? (int64_t)a->n_ints : (int64_t)a->n_floats;
		v = new_const(c->im, c->n->output[0], 1, &n, a->n_ints > 0);
		if (!v)
			return oom(c->im);
		for (int64_t i = 0; i < n; i++)
			v->d[i] = a->n_ints ? (double)a->ints[i] : a->floats[i];
	} else {
		return nerr(c->im, c->n, "a Constant without a value, value_float(s) or value_int(s) attribute");
	}
	v->node = c->node;
	return 0;
}

static int m_shape(struct ctx *c)
{
	struct val *x = c->in[0];
	if (!x)
		return nerr(c->im, c->n, "input 0 is missing");
	int64_t r = x->rank;
	int64_t st = attr_i(c->n, "start", 0), en = attr_i(c->n, "end", r);
	st = st < 0 ? st + r : st;
	en = en < 0 ? en + r : en;
	st = st < 0 ? 0 : st > r ? r : st;
	en = en < 0 ? 0 : en > r ? r : en;
	int64_t n = en > st ? en - st : 0;
	struct val *o = new_const(c->im, c->n->output[0], 1, &n, 1);
	if (!o)
		return oom(c->im);
	o->node = c->node;
	for (int64_t i = 0; i < n; i++)
		o->d[i] = (is_rt(x) && x->dims[st + i] == -1) ? DYN : (double)x->dims[st + i];
	return 0;
}

static int need_all_const(struct ctx *c)
{
	for (int i = 0; i < c->n_in; i++)
		if (c->in[i] && !is_const(c->in[i]))
			return nerr(c->im, c->n, "input %d ('%s') depends on the data; this op is folded on constants only",
				    i, c->in[i]->name);
	return 0;
}

static int m_cast(struct ctx *c)
{
	struct val *x = c->in[0];
	if (!x)
		return nerr(c->im, c->n, "input 0 is missing");
	int64_t to = attr_i(c->n, "to", 1);
	int toint = to != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT && to != ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE &&
		    to != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16;
	if (is_rt(x)) {
		if (toint == x->isint || x->castfree)
			return alias(c, x, 0);
		/* integers are floats that hold them already */
		if (x->isint && !toint) {
			if (alias(c, x, 0))
				return DL_ERUN;
			c->im->v[c->im->nv - 1]->isint = 0;
			return 0;
		}
		return nerr(c->im, c->n, "attribute 'to' %lld converts data between integers and floats, which dlrun does not",
			    (long long)to);
	}
	if (alias(c, x, 0))
		return DL_ERUN;
	struct val *o = c->im->v[c->im->nv - 1];
	o->isint = toint;
	for (int64_t i = 0; i < o->numel; i++) {
		if (o->d[i] == DYN)
			continue;
		if (toint)
			o->d[i] = trunc(o->d[i]);
		else if (to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
			o->d[i] = (float)o->d[i];
		if (to == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL)
			o->d[i] = o->d[i] != 0;
	}
	return 0;
}

static int m_range(struct ctx *c)
{
	int rc = need_all_const(c);
	if (rc)
		return rc;
	for (int i = 0; i < 3; i++)
		if (i >= c->n_in || !c->in[i] || c->in[i]->numel != 1 || c->in[i]->d[0] == DYN)
			return nerr(c->im, c->n, "start, limit and delta must be static scalars");
	double s = c->in[0]->d[0], l = c->in[1]->d[0], d = c->in[2]->d[0];
	if (d == 0)
		return nerr(c->im, c->n, "delta 0");
	double nn = ceil((l - s) / d);
	int64_t n = nn > 0 ? (int64_t)nn : 0;
	if (n > 100000000)
		return nerr(c->im, c->n, "a range of %lld values", (long long)n);
	struct val *o = new_const(c->im, c->n->output[0], 1, &n, c->in[0]->isint);
	if (!o)
		return oom(c->im);
	o->node = c->node;
	for (int64_t i = 0; i < n; i++)
		o->d[i] = s + (double)i * d;
	return 0;
}

static int m_constant_of_shape(struct ctx *c)
{
	int64_t d[MAXR];
	int n, rc, dynzero = 0;
	struct val *sv = c->in[0];
	if (!is_const(sv) || sv->numel > MAXR)
		return nerr(c->im, c->n, "the shape must be a constant of at most %d values", MAXR);
	n = (int)sv->numel;
	for (int i = 0; i < n; i++) {
		/* zeros the size of the batch: an RNN's initial state */
		dynzero |= sv->d[i] == DYN;
		d[i] = sv->d[i] == DYN ? 1 : to_i64(sv->d[i]);
	}
	const Onnx__AttributeProto *a = attr(c->n, "value");
	struct val *v = NULL;
	double fill = 0;
	int isint = 0;
	if (a && a->t) {
		if ((rc = tensor_val(c->im, a->t, "value", "ConstantOfShape value", &v)))
			return rc;
		fill = v->numel ? v->d[0] : 0;
		isint = v->isint;
		/* drop the temporary value */
		c->im->nv--;
		val_free(v);
	}
	for (int i = 0; i < n; i++)
		if (d[i] < 0)
			return nerr(c->im, c->n, "a negative size");
	if (numel_of(n, d) > 100000000)
		return nerr(c->im, c->n, "too large");
	struct val *o = new_const(c->im, c->n->output[0], n, d, isint);
	if (!o)
		return oom(c->im);
	o->node = c->node;
	for (int64_t i = 0; i < o->numel; i++)
		o->d[i] = fill;
	o->dynzero = dynzero;
	if (dynzero && fill != 0)
		return nerr(c->im, c->n, "a constant of the batch's size other than zeros: a shape that cannot be folded");
	return 0;
}

/* Expand of a constant to a shape whose first size is the batch (ViT's
 * class token, x.expand(n, -1, -1)): a parameter entry holding one
 * sample, the constant broadcast to the other sizes. */
static int expand_to_batch(struct ctx *c, struct val *x, const int64_t *od, int r)
{
	struct imp *im = c->im;
	if (r < 2 || (x->rank == r && x->dims[0] != 1))
		return nerr(im, c->n, "a constant of shape %s expanded to the batch: dlrun's parameter holds one sample",
			    ilist(x->dims, x->rank));
	int64_t n = numel_of(r - 1, od + 1);
	double *d = malloc((size_t)(n + 1) * sizeof *d);
	if (!d)
		return oom(im);
	int64_t idx[MAXR] = {0};
	for (int64_t k = 0; k < n; k++) {
		int64_t kx = 0;
		for (int i = 1; i < r; i++) {
			int ix = i - (r - x->rank);
			if (ix >= 0)
				kx = kx * x->dims[ix] + (x->dims[ix] == 1 ? 0 : idx[i]);
		}
		d[k] = x->d[kx];
		for (int i = r - 1; i >= 1; i--) {
			if (++idx[i] < od[i])
				break;
			idx[i] = 0;
		}
	}
	char *hp = NULL;
	struct val *o = out_val(c, 0, V_RT);
	if (!o || hp_add(im, &hp, "shape: %s", ilist(od + 1, r - 1))) {
		free(d);
		return oom(im);
	}
	set_shape(o, r, od);
	struct entry *e = emit(im, c->n, x->init, NULL, "parameter", hp, NULL, 0, o);
	int rc = e ? add_param(im, e, "", r - 1, od + 1, d) : DL_ERUN;
	free(d);
	return rc;
}

static int m_expand(struct ctx *c)
{
	int rc = need_all_const(c);
	if (rc)
		return rc;
	int64_t d[MAXR];
	int n;
	struct val *sv = c->n_in > 1 ? c->in[1] : NULL;
	int tobatch = is_const(sv) && sv->numel >= 1 && sv->numel <= MAXR && sv->d[0] == DYN;
	if (tobatch) {
		for (int i = 1; i < (int)sv->numel; i++)
			if (sv->d[i] == DYN)
				return nerr(c->im, c->n, "the batch size inside the target shape: a shape that cannot be folded");
		n = (int)sv->numel;
		d[0] = 1;
		for (int i = 1; i < n; i++)
			d[i] = to_i64(sv->d[i]);
	} else if ((rc = const_ints(c, 1, "shape", d, MAXR, &n))) {
		return rc;
	}
	struct val *x = c->in[0];
	int r = n > x->rank ? n : x->rank;
	int64_t od[MAXR] = {0};
	for (int i = 0; i < r; i++) {
		int ix = i - (r - x->rank), is = i - (r - n);
		int64_t dx = ix >= 0 ? x->dims[ix] : 1, ds = is >= 0 ? d[is] : 1;
		if (dx != ds && dx != 1 && ds != 1)
			return nerr(c->im, c->n, "shape %s does not broadcast", ilist(d, n));
		od[i] = dx == 1 ? ds : dx;
	}
	if (tobatch && r == n) {
		od[0] = -1;
		return expand_to_batch(c, x, od, r);
	}
	/* fold via a multiply by ones */
	struct val ones = {.name = "", .kind = V_CONST, .rank = r, .isint = x->isint};
	memcpy(ones.dims, od, sizeof od);
	ones.numel = numel_of(r, od);
	ones.d = malloc((size_t)(ones.numel + 1) * sizeof *ones.d);
	if (!ones.d)
		return oom(c->im);
	for (int64_t i = 0; i < ones.numel; i++)
		ones.d[i] = 1;
	struct val *keep = c->in[1];
	c->in[1] = &ones;
	rc = fold_binary(c, '*');
	c->in[1] = keep;
	free(ones.d);
	return rc;
}

static int m_not(struct ctx *c)
{
	int rc = need_all_const(c);
	if (rc)
		return rc;
	if (alias(c, c->in[0], 0))
		return DL_ERUN;
	struct val *o = c->im->v[c->im->nv - 1];
	for (int64_t i = 0; i < o->numel; i++)
		o->d[i] = o->d[i] == 0;
	return 0;
}

#include "onnx_masks.inc"

/* ---- the op table ---- */

struct onnx_op {
	const char *type;
	const char *attrs;     /* the attributes it reads, space separated */
	int (*map)(struct ctx *c);
};

static const struct onnx_op ops[] = {
	{"Abs", "", m_abs},
	{"Add", "", m_add},
	{"And", "", m_compare_any},
	{"AveragePool", "auto_pad ceil_mode count_include_pad kernel_shape pads strides", m_pool},
	{"BatchNormalization", "epsilon momentum training_mode spatial", m_batch_norm},
	{"ArgMax", "axis keepdims select_last_index", m_argmax},
	{"Cast", "to saturate", m_cast_any},
	{"Clip", "min max", m_clip},
	{"Concat", "axis", m_concat},
	{"Constant", "value value_float value_floats value_int value_ints", m_constant},
	{"ConstantOfShape", "value", m_constant_of_shape},
	{"Conv", "auto_pad dilations group kernel_shape pads strides", m_conv},
	{"ConvTranspose", "auto_pad dilations group kernel_shape output_padding output_shape pads strides", m_conv},
	{"Div", "", m_div},
	{"Dropout", "ratio seed training_mode", m_identity},
	{"Elu", "alpha", m_elu},
	{"Equal", "", m_compare_any},
	{"Einsum", "equation", m_einsum},
	{"Erf", "", m_erf},
	{"Exp", "", m_exp},
	{"Expand", "", m_expand_any},
	{"Flatten", "axis", m_flatten},
	{"Gather", "axis", m_gather},
	{"Gelu", "approximate", m_gelu},
	{"GRU", "activation_alpha activation_beta activations clip direction hidden_size layout linear_before_reset", m_rnn},
	{"Gemm", "alpha beta transA transB", m_gemm},
	{"GlobalAveragePool", "", m_global_pool},
	{"GlobalMaxPool", "", m_global_pool},
	{"Greater", "", m_compare_any},
	{"GreaterOrEqual", "", m_compare_any},
	{"HardSigmoid", "alpha beta", m_hardsigmoid},
	{"HardSwish", "", m_hardswish},
	{"Identity", "", m_identity},
	{"InstanceNormalization", "epsilon", m_instance_norm},
	{"LayerNormalization", "axis epsilon stash_type", m_layer_norm},
	{"LeakyRelu", "alpha", m_leaky_relu},
	{"Less", "", m_compare_any},
	{"LessOrEqual", "", m_compare_any},
	{"Log", "", m_log},
	{"LSTM", "activation_alpha activation_beta activations clip direction hidden_size input_forget layout", m_rnn},
	{"LogSoftmax", "axis", m_log_softmax},
	{"MatMul", "", m_matmul},
	{"MaxPool", "auto_pad ceil_mode dilations kernel_shape pads storage_order strides", m_pool},
	{"Mish", "", m_mish},
	{"Mod", "fmod", m_mod},
	{"Mul", "", m_mul},
	{"Neg", "", m_neg},
	{"Not", "", m_not_any},
	{"Or", "", m_compare_any},
	{"Pad", "mode pads value", m_pad},
	{"Pow", "", m_pow},
	{"RNN", "activation_alpha activation_beta activations clip direction hidden_size layout", m_rnn},
	{"Range", "", m_range},
	{"ReduceMax", "axes keepdims noop_with_empty_axes", m_reduce},
	{"ReduceMean", "axes keepdims noop_with_empty_axes", m_reduce},
	{"ReduceMin", "axes keepdims noop_with_empty_axes", m_reduce},
	{"ReduceProd", "axes keepdims noop_with_empty_axes", m_reduce},
	{"ReduceSum", "axes keepdims noop_with_empty_axes", m_reduce},
	{"Relu", "", m_relu},
	{"Reshape", "allowzero", m_reshape},
	{"ScatterND", "reduction", m_scatter_nd},
	{"Selu", "alpha gamma", m_selu},
	{"Shape", "end start", m_shape},
	{"Sigmoid", "", m_sigmoid},
	{"Slice", "", m_slice},
	{"Softmax", "axis", m_softmax},
	{"Softplus", "", m_softplus},
	{"Split", "axis split num_outputs", m_split},
	{"Sqrt", "", m_sqrt},
	{"Squeeze", "axes", m_squeeze_like},
	{"Sub", "", m_sub},
	{"Tanh", "", m_tanh},
	{"Tile", "", m_tile},
	{"TopK", "axis largest sorted", m_topk},
	{"Transpose", "perm", m_transpose},
	{"Trilu", "upper", m_trilu},
	{"Unsqueeze", "axes", m_squeeze_like},
	{"Where", "", m_where_any},
};

static const struct onnx_op *op_find(const char *type)
{
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
		if (strcmp(ops[i].type, type) == 0)
			return &ops[i];
	return NULL;
}

static int word_in(const char *w, const char *list)
{
	size_t n = strlen(w);
	if (n == 0)
		return 0;    /* strstr would find it everywhere, and never move on */
	for (const char *p = list; (p = strstr(p, w)); p += n)
		if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' '))
			return 1;
	return 0;
}

/* Every unsupported op type of the graph in one line; 0 when none. */
static int check_op_types(struct imp *im)
{
	char list[600] = "";
	const Onnx__NodeProto *first = NULL;
	for (size_t i = 0; i < im->g->n_node; i++) {
		const Onnx__NodeProto *n = im->g->node[i];
		int known = op_find(n->op_type) != NULL &&
			    (!n->domain || !*n->domain || strcmp(n->domain, "ai.onnx") == 0);
		if (known)
			continue;
		if (!first)
			first = n;
		char item[160];
		snprintf(item, sizeof item, "%s%s%s", n->domain && *n->domain ? n->domain : "",
			 n->domain && *n->domain ? "." : "", n->op_type);
		if (!word_in(item, list) && strlen(list) + strlen(item) + 3 < sizeof list) {
			if (*list)
				strcat(list, " ");
			strcat(list, item);
		}
	}
	if (!first)
		return 0;
	for (char *p = list; *p; p++)
		if (*p == ' ')
			*p = ',';
	char pretty[900] = "";
	for (char *p = list, *q; p && *p; p = q) {
		q = strchr(p, ',');
		if (q)
			*q++ = 0;
		if (*pretty)
			strcat(pretty, ", ");
		strcat(pretty, p);
	}
	return nerr(im, first, "op type '%s' has no dlrun equivalent (unsupported op types in this file: %s)",
		    first->op_type, pretty);
}

/* ---- the graph ---- */

static int read_inputs(struct imp *im)
{
	Onnx__GraphProto *g = im->g;
	im->inputs = calloc(g->n_input + 1, sizeof *im->inputs);
	if (!im->inputs)
		return oom(im);
	im->fixed_batch = 0;
	for (size_t i = 0; i < g->n_input; i++) {
		Onnx__ValueInfoProto *vi = g->input[i];
		if (!vi->name || find(im, vi->name))
			continue;   /* an initializer listed as an input (IR < 4) */
		Onnx__TypeProto *t = vi->type;
		if (!t || t->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ||
		    !t->tensor_type->shape)
			return ierr(im, "input '%s' is not a tensor of known rank", vi->name);
		Onnx__TensorShapeProto *s = t->tensor_type->shape;
		int et = t->tensor_type->has_elem_type ? t->tensor_type->elem_type : 0;
		if (s->n_dim < 1 || s->n_dim > MAXR)
			return ierr(im, "input '%s' has rank %zu; dlrun inputs are batch first, rank 1 to %d",
				    vi->name, s->n_dim, MAXR);
		struct val *v = new_val(im, vi->name, V_RT);
		if (!v)
			return oom(im);
		v->rank = (int)s->n_dim;
		v->dims[0] = -1;
		Onnx__TensorShapeProto__Dimension *d0 = s->dim[0];
		int64_t b = d0->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ? d0->dim_value : -1;
		if (im->fixed_batch == 0)
			im->fixed_batch = b;
		else if (im->fixed_batch != b)
			im->fixed_batch = -1;
		for (size_t k = 1; k < s->n_dim; k++) {
			Onnx__TensorShapeProto__Dimension *d = s->dim[k];
			if (d->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE || d->dim_value < 1)
				return ierr(im, "input '%s': dimension %zu is dynamic ('%s'); dlrun import needs static sizes except the batch (export with a fixed size there)",
					    vi->name, k,
					    d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM ? d->dim_param : "?");
			v->dims[k] = d->dim_value;
		}
		switch (et) {
		case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
		case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
			break;
		case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
		case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
			v->isint = 1;
			break;
		default:
			return ierr(im, "input '%s' has element type %d; dlrun inputs are float or integer", vi->name, et);
		}
		v->ref = claim_name(im, vi->name);
		if (!v->ref)
			return oom(im);
		im->inputs[im->n_inputs++] = im->nv - 1;
	}
	if (im->n_inputs == 0)
		return ierr(im, "the graph has no inputs besides its initializers");
	return 0;
}

static int run_nodes(struct imp *im)
{
	for (size_t i = 0; i < im->g->n_node; i++) {
		const Onnx__NodeProto *n = im->g->node[i];
		const struct onnx_op *op = op_find(n->op_type);
		if (im->skip && im->skip[i])
			continue;
		struct ctx c = {.im = im, .n = n, .node = (int)i};
		int dynzero_in = 0;
		for (size_t k = 0; k < n->n_attribute; k++) {
			const char *an = n->attribute[k]->name ? n->attribute[k]->name : "";
			if (!word_in(an, op->attrs))
				return nerr(im, n, "attribute '%s' is not supported", an);
		}
		if (n->n_input > MAX_NODE_INPUTS)
			return nerr(im, n, "%zu inputs; dlrun import reads nodes of at most %d",
				    n->n_input, MAX_NODE_INPUTS);
		c.n_in = (int)n->n_input;
		for (size_t k = 0; k < n->n_input; k++) {
			if (!n->input[k][0])
				continue;
			c.in[k] = find(im, n->input[k]);
			if (!c.in[k])
				return nerr(im, n, "input '%s' is not defined before this node (the graph is not in topological order, or the name is wrong)",
					    n->input[k]);
			/* batch-sized zeros pass through shape ops to an RNN's state */
			if (c.in[k]->dynzero && k == 0 && word_in(n->op_type,
				"Slice Squeeze Unsqueeze Gather Identity Cast Split"))
				dynzero_in = 1;
			else if (c.in[k]->dynzero && !(k >= 5 && (strcmp(n->op_type, "LSTM") == 0 ||
								   strcmp(n->op_type, "GRU") == 0 ||
								   strcmp(n->op_type, "RNN") == 0)))
				return nerr(im, n, "input '%s' has the batch size in its shape (a shape that cannot be folded)",
					    n->input[k]);
		}
		if (n->n_output < 1)
			return nerr(im, n, "no outputs");
		/* integer ids, 0/1 masks and indices stay what they are through
		 * ops that only move or pick values */
		struct val *x0 = c.n_in > 0 && is_rt(c.in[0]) ? c.in[0] : NULL;
		int keeps = x0 && (x0->isint || x0->castfree) && word_in(n->op_type,
			"Reshape Unsqueeze Squeeze Slice Transpose Flatten Split Expand Tile Gather");
		int before = im->nv;
		int rc = op->map(&c);
		if (rc)
			return rc;
		for (int k = before; dynzero_in && k < im->nv; k++)
			im->v[k]->dynzero = im->v[k]->kind == V_CONST;
		for (int k = before; keeps && k < im->nv; k++) {
			if (im->v[k]->kind == V_RT && im->v[k]->node == (int)i) {
				im->v[k]->isint |= x0->isint;
				im->v[k]->castfree |= x0->castfree;
			}
		}
	}
	return 0;
}

/* Marks the entries the outputs need. */
static void mark_live(struct imp *im, int e)
{
	while (e >= 0 && !im->e[e]->live) {
		im->e[e]->live = 1;
		for (int k = 1; k < im->e[e]->n_in; k++)
			mark_live(im, im->e[e]->in_e[k]);
		e = im->e[e]->n_in ? im->e[e]->in_e[0] : -1;
	}
}

/* Names again, for the live entries only, so that entries that were
 * dropped (the pieces of a fused pattern) leave no gaps in the numbering;
 * in: lists and outputs follow. */
static int rename_live(struct imp *im, char **outs, int n_outs)
{
	int *oe = calloc((size_t)n_outs + 1, sizeof *oe);
	if (!oe)
		return oom(im);
	for (int i = 0; i < n_outs; i++) {
		oe[i] = -1;
		for (int j = 0; j < im->ne; j++)
			if (im->e[j]->name == outs[i])
				oe[i] = j;
	}
	/* keep the model inputs' names, forget the entries' */
	int keep = 0;
	for (int i = 0; i < im->n_names; i++) {
		int input = 0;
		for (int k = 0; k < im->n_inputs; k++)
			input |= im->v[im->inputs[k]]->ref == im->names[i];
		if (input)
			im->names[keep++] = im->names[i];
		else
			free(im->names[i]);
	}
	im->n_names = keep;
	for (int j = 0; j < im->ne; j++) {
		struct entry *e = im->e[j];
		e->name = e->live ? claim_name(im, e->base) : NULL;
		if (e->live && !e->name) {
			free(oe);
			return oom(im);
		}
		for (int k = 0; k < e->n_in; k++)
			if (e->in_e[k] >= 0)
				e->in[k] = im->e[e->in_e[k]]->name;
	}
	for (int i = 0; i < n_outs; i++)
		if (oe[i] >= 0)
			outs[i] = im->e[oe[i]]->name;
	free(oe);
	return 0;
}

/* ---- writing ---- */

static char *weights_path(const char *yaml)
{
	size_t n = strlen(yaml);
	const char *base = strrchr(yaml, '/');
	base = base ? base + 1 : yaml;
	size_t cut = n;
	if (n >= 5 && strcmp(yaml + n - 5, ".yaml") == 0 && yaml + n - 5 > base)
		cut = n - 5;
	else if (n >= 4 && strcmp(yaml + n - 4, ".yml") == 0 && yaml + n - 4 > base)
		cut = n - 4;
	char *s = malloc(cut + 13);
	if (s) {
		memcpy(s, yaml, cut);
		strcpy(s + cut, ".safetensors");
	}
	return s;
}

static int write_files(struct imp *im, const char *yaml_path, char **outs, int n_outs)
{
	int n_par = 0;
	for (int i = 0; i < im->ne; i++)
		if (im->e[i]->live)
			n_par += im->e[i]->n_par;
	struct dl_st_entry *st = calloc((size_t)n_par + 1, sizeof *st);
	char **keys = calloc((size_t)n_par + 1, sizeof *keys);
	char *wpath = weights_path(yaml_path);
	int rc = 0, k = 0;
	if (!st || !keys || !wpath)
		rc = oom(im);
	for (int i = 0; rc == 0 && i < im->ne; i++) {
		struct entry *e = im->e[i];
		for (int j = 0; e->live && j < e->n_par && rc == 0; j++) {
			size_t len = strlen(e->name) + strlen(e->par[j].key) + 2;
			keys[k] = malloc(len);
			if (!keys[k]) {
				rc = oom(im);
				break;
			}
			/* a parameter entry's key is its scope alone */
			snprintf(keys[k], len, "%s%s%s", e->name, *e->par[j].key ? "." : "",
				 e->par[j].key);
			st[k].name = keys[k];
			st[k].shape.ndim = e->par[j].rank;
			memcpy(st[k].shape.d, e->par[j].dims, (size_t)e->par[j].rank * sizeof(int64_t));
			st[k].f32 = e->par[j].data;
			k++;
		}
	}
	struct dl_atomic a = {0};
	if (rc == 0)
		rc = dl_atomic_open(&a, yaml_path, im->err);
	if (rc == 0) {
		FILE *f = a.f;
		const char *base = strrchr(im->path, '/');
		base = base ? base + 1 : im->path;
		fprintf(f, "# Imported from %s by dlrun import", base);
		if (im->m->producer_name && *im->m->producer_name)
			fprintf(f, " (written by %s%s%s, opset %lld)", im->m->producer_name,
				im->m->producer_version && *im->m->producer_version ? " " : "",
				im->m->producer_version ? im->m->producer_version : "", (long long)im->opset);
		fprintf(f, ".\n# Weights: %s (the default path: this file's name with .safetensors).\n",
			strrchr(wpath, '/') ? strrchr(wpath, '/') + 1 : wpath);
		fprintf(f, "inputs:\n");
		for (int i = 0; i < im->n_inputs; i++) {
			struct val *v = im->v[im->inputs[i]];
			fprintf(f, "  %s: {shape: %s%s}\n", v->ref, ilist(v->dims + 1, v->rank - 1),
				v->isint ? ", dtype: int" : "");
		}
		fprintf(f, "outputs: [");
		for (int i = 0; i < n_outs; i++)
			fprintf(f, "%s%s", i ? ", " : "", outs[i]);
		fprintf(f, "]\nlayers:\n");
		for (int i = 0; i < im->ne; i++) {
			struct entry *e = im->e[i];
			if (!e->live)
				continue;
			fprintf(f, "  - name: %s\n", e->name);
			if (e->n_in)
				fprintf(f, "    in: ");
			if (e->n_in == 0) {
				/* parameter: no input */
			} else {
				fprintf(f, "%s", e->n_in > 1 ? "[" : "");
				for (int j = 0; j < e->n_in; j++) {
					fprintf(f, "%s%s", j ? ", " : "", e->in[j]);
					if (e->in_p[j] > 0)
						fprintf(f, ".%d", e->in_p[j]);
				}
				fprintf(f, "%s\n", e->n_in > 1 ? "]" : "");
			}
			fprintf(f, "    %s: {%s}\n", e->op, e->hp ? e->hp : "");
		}
		if (ferror(f))
			rc = dl_error_set(im->err, DL_ERUN, "%s: write error: %s", yaml_path, strerror(errno));
	}
	/* the weights first, then the model file that names them */
	if (rc == 0) {
		const char *meta[] = {"format", "pt"};
		rc = dl_st_write(wpath, st, k, meta, 1, im->err);
	}
	if (rc == 0)
		rc = dl_atomic_commit(&a, im->err);
	else
		dl_atomic_abort(&a);
	for (int i = 0; i < k; i++)
		free(keys[i]);
	free(keys);
	free(st);
	free(wpath);
	return rc;
}

static int translate(struct imp *im, const char *yaml_path)
{
	Onnx__ModelProto *m = im->m;
	if (!m->graph)
		return ierr(im, "not an ONNX model: no graph");
	im->g = m->graph;
	im->opset = -1;
	for (size_t i = 0; i < m->n_opset_import; i++) {
		const Onnx__OperatorSetIdProto *o = m->opset_import[i];
		if (!o->domain || !*o->domain || strcmp(o->domain, "ai.onnx") == 0)
			im->opset = o->has_version ? o->version : 1;
	}
	if (im->opset < 0)
		return ierr(im, "not an ONNX model: no default opset in opset_import");
	if (im->opset < 7 || im->opset > 21)
		return ierr(im, "opset %lld; dlrun import reads opsets 7 to 21 (torch.onnx.export writes 13 to 17)",
			    (long long)im->opset);
	for (size_t i = 0; i < im->g->n_node; i++)
		if (!im->g->node[i]->op_type || !*im->g->node[i]->op_type)
			return ierr(im, "node %zu ('%s') has no op type", i,
				    im->g->node[i]->name ? im->g->node[i]->name : "?");
	int rc = check_op_types(im);
	if (rc)
		return rc;
	for (size_t i = 0; i < im->g->n_initializer; i++) {
		struct val *v;
		const Onnx__TensorProto *t = im->g->initializer[i];
		if (!t->name || !*t->name)
			return ierr(im, "initializer %zu has no name", i);
		if ((rc = tensor_val(im, t, t->name, "initializer", &v)))
			return rc;
	}
	if ((rc = read_inputs(im)) || (rc = run_nodes(im)))
		return rc;
	if (im->g->n_output < 1)
		return ierr(im, "the graph has no outputs");
	char **outs = calloc(im->g->n_output, sizeof *outs);
	if (!outs)
		return oom(im);
	for (size_t i = 0; i < im->g->n_output && rc == 0; i++) {
		const char *on = im->g->output[i]->name;
		struct val *v = on ? find(im, on) : NULL;
		if (!v)
			rc = ierr(im, "output '%s' is not computed by any node", on ? on : "?");
		else if (v->kind == V_CONST)
			rc = ierr(im, "output '%s' is a constant (it does not depend on the inputs)", on);
		else if (v->bad)
			rc = ierr(im, "%s", v->bad);
		if (rc)
			break;
		/* an output that is a model input, or that another output already
		 * names, gets an identity entry of its own */
		int dup = v->entry < 0 || v->port > 0;
		for (size_t j = 0; j < i; j++)
			dup |= strcmp(outs[j], v->ref) == 0;
		if (dup) {
			struct val *src = v;
			struct entry *e = emit(im, NULL, on, NULL, "identity", NULL, &src, 1, NULL);
			if (!e) {
				rc = DL_ERUN;
				break;
			}
			outs[i] = e->name;
			mark_live(im, im->ne - 1);
		} else {
			outs[i] = (char *)v->ref;
			mark_live(im, v->entry);
		}
	}
	if (rc == 0)
		rc = rename_live(im, outs, (int)im->g->n_output);
	if (rc == 0)
		rc = write_files(im, yaml_path, outs, (int)im->g->n_output);
	free(outs);
	return rc;
}

int dl_onnx_import_buffer(const void *buf, size_t size, const char *onnx_path,
			  const char *yaml_path, struct dl_error *err)
{
	struct imp im = {.path = onnx_path, .err = err,
			 .const_left = (int64_t)size + CONST_FOLD_ELEMS};
	if (size == 0)
		return dl_error_set(err, DL_EINPUT, "%s: empty file, not an ONNX model", onnx_path);
	im.m = onnx__model_proto__unpack(NULL, size, buf);
	if (!im.m)
		return dl_error_set(err, DL_EINPUT,
				    "%s: not an ONNX model (the protobuf message does not parse: truncated or another format)",
				    onnx_path);
	int rc = translate(&im, yaml_path);
	/* a mapper that saw a helper fail returns DL_ERUN; the message and
	 * its code are the helper's */
	if (rc && err && err->code)
		rc = err->code;
	for (int i = 0; i < im.nv; i++)
		val_free(im.v[i]);
	free(im.v);
	for (int i = 0; i < im.ne; i++) {
		free(im.e[i]->hp);
		free(im.e[i]->base);
		free(im.e[i]->in);
		free(im.e[i]->in_e);
		free(im.e[i]->in_p);
		for (int j = 0; j < im.e[i]->n_par; j++)
			free(im.e[i]->par[j].data);
		free(im.e[i]);
	}
	free(im.e);
	for (int i = 0; i < im.n_names; i++)
		free(im.names[i]);
	free(im.names);
	free(im.inputs);
	free(im.skip);
	onnx__model_proto__free_unpacked(im.m, NULL);
	return rc;
}

int dl_onnx_import(const char *onnx_path, const char *yaml_path, struct dl_error *err)
{
	FILE *f = fopen(onnx_path, "rb");
	if (!f)
		return dl_error_set(err, DL_EINPUT, "%s: %s", onnx_path, strerror(errno));
	unsigned char *buf = NULL;
	long size = -1;
	if (fseek(f, 0, SEEK_END) == 0)
		size = ftell(f);
	if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
		fclose(f);
		return dl_error_set(err, DL_EINPUT, "%s: not a regular file", onnx_path);
	}
	if (size > MAX_FILE_BYTES) {
		fclose(f);
		return dl_error_set(err, DL_EINPUT, "%s: %ld bytes; dlrun import reads files up to 2 GB (no external data)",
				    onnx_path, size);
	}
	buf = malloc((size_t)size + 1);
	if (!buf) {
		fclose(f);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
		free(buf);
		fclose(f);
		return dl_error_set(err, DL_ERUN, "%s: read error", onnx_path);
	}
	fclose(f);
	int rc = dl_onnx_import_buffer(buf, (size_t)size, onnx_path, yaml_path, err);
	free(buf);
	return rc;
}
