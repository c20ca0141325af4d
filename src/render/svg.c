/* SVG drawing of a model graph in the book's conventions: a vertical stack
 * of rounded boxes, data flowing top to bottom. One recursive pass over the
 * entry rows places everything on a vertical axis (a dry run first measures
 * a residual's shortcut column); arrows that leave the axis (`in:` wiring,
 * extra inputs and outputs) are routed at the end, each left of everything
 * it passes, so the right-hand side stays free for text. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "render/svg.h"

/* ---- sizes, in px ---- */

#define BOX_H 26.0      /* an op box */
#define COMPLEX_H 46.0  /* attention, recurrent, ops with a sub-model */
#define BOX_MIN_W 110.0
#define GAP 26.0        /* the arrow between two boxes */
#define OVAL_H 38.0     /* inputs and outputs */
#define PAD 10.0        /* frame padding around its content */
#define FRAME_GAP 12.0  /* a box and a frame line below it */
#define FRAME_BELOW 22.0 /* a frame line and the next box below it */
#define LANE 14.0       /* spacing of arrows routed on the left */
#define BRANCH 9.0      /* where a side arrow leaves a box's output */
#define ADD_R 9.0       /* the circled plus of a residual */
#define CORNER 6.0      /* rounded corners of routed arrows */
#define MARGIN 14.0
#define FS_OP 12.0      /* font sizes */
#define FS_HP 11.0
#define FS_SMALL 10.0

#define C_LINE "#333333"
#define C_FILL "#f4f4f4"         /* no trainable parameters */
#define C_FILL_PARAMS "#c4c4c4"  /* trainable parameters: darker */
#define C_GRAY "#666666"
#define C_FRAME "#555555"
#define C_GROUP "#b0b0b0"

/* ---- a growing string (struct dl_svg_buf, svg.h) ---- */

static void bvprintf(struct dl_svg_buf *b, const char *fmt, va_list ap0)
{
	while (!b->oom) {
		size_t room = b->cap - b->n;
		va_list ap;
		va_copy(ap, ap0);
		int k = vsnprintf(b->s ? b->s + b->n : NULL, room, fmt, ap);
		va_end(ap);
		if (k < 0) {
			b->oom = 1;
			return;
		}
		if ((size_t)k < room) {
			b->n += (size_t)k;
			return;
		}
		size_t cap = b->cap ? b->cap * 2 : 4096;
		while (cap < b->n + (size_t)k + 1)
			cap *= 2;
		char *s = realloc(b->s, cap);
		if (!s) {
			b->oom = 1;
			return;
		}
		b->s = s;
		b->cap = cap;
	}
}

static void bprintf(struct dl_svg_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void bprintf(struct dl_svg_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	bvprintf(b, fmt, ap);
	va_end(ap);
}

void dl_svg_printf(struct dl_svg_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	bvprintf(b, fmt, ap);
	va_end(ap);
}

/* Length of the valid UTF-8 sequence at p, or 0. */
static int utf8_len(const unsigned char *p)
{
	int n = p[0] < 0x80 ? 1 : (p[0] & 0xE0) == 0xC0 ? 2
		: (p[0] & 0xF0) == 0xE0 ? 3 : (p[0] & 0xF8) == 0xF0 ? 4 : 0;
	if (n == 2 && p[0] < 0xC2)
		return 0;
	for (int i = 1; i < n; i++)
		if ((p[i] & 0xC0) != 0x80)
			return 0;
	return n;
}

/* s as XML character data: markup escaped, bytes that are not valid
 * UTF-8 or not allowed in XML 1.0 replaced by '?' (file names may hold
 * anything). */
static void bescape(struct dl_svg_buf *b, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	while (*p) {
		int n = utf8_len(p);
		if (n == 0 || (n == 1 && *p < 0x20 && *p != '\t' && *p != '\n')) {
			bprintf(b, "?");
			p++;
			continue;
		}
		switch (*p) {
		case '&': bprintf(b, "&amp;"); break;
		case '<': bprintf(b, "&lt;"); break;
		case '>': bprintf(b, "&gt;"); break;
		case '"': bprintf(b, "&quot;"); break;
		case '\'': bprintf(b, "&apos;"); break;
		default: bprintf(b, "%.*s", n, (const char *)p);
		}
		p += n;
	}
}

/* Width of s in a DejaVu-Sans-like font (the widest of the usual ones, so
 * the layout leaves room in the others), from its advance widths. */
static double text_w(const char *s, double size)
{
	/* a..z, in 1/1000 em */
	static const short lower[26] = {613, 635, 550, 635, 615, 352, 635, 634,
		278, 278, 579, 278, 974, 634, 612, 635, 635, 411, 521, 392, 634,
		592, 818, 592, 592, 525};
	double w = 0;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		unsigned c = *p;
		if ((c & 0xC0) == 0x80)
			continue;
		if (c >= 'a' && c <= 'z')
			w += lower[c - 'a'];
		else if (c >= 'A' && c <= 'Z')
			w += strchr("IJ", (int)c) ? 300 : strchr("MW", (int)c) ? 900 : 720;
		else if (c >= '0' && c <= '9')
			w += 636;
		else if (strchr(" ,.:;'|!", (int)c))
			w += 320;
		else if (strchr("[](){}-", (int)c))
			w += 390;
		else if (c == '_')
			w += 500;
		else
			w += 838;   /* = + x and the rest */
	}
	return w / 1000.0 * size;
}

void dl_svg_escape(struct dl_svg_buf *b, const char *s)
{
	bescape(b, s);
}

double dl_svg_text_width(const char *s, double size)
{
	return text_w(s, size);
}

/* ---- the drawing ---- */

struct pt {
	double x, y;   /* the bottom of the value's box */
	double by;     /* where side arrows branch off below it */
	int set;
};

struct rect {
	double x0, y0, x1, y1;
};

/* An arrow off the axis, routed at the end: from value `value` to the left
 * side of a box at (dx, dy), or (out >= 0) down into output oval `out`. */
struct side {
	int value;
	double dx, dy;
	int out;
};

struct draw {
	const struct dl_graph *g;
	int emit;              /* 0 while measuring: nothing is recorded */
	int labels;            /* shape labels (not in a side column) */
	struct dl_svg_buf back, mid, front; /* frames; arrows; boxes and text */
	struct rect *occ;      /* everything drawn, for routing and bounds */
	int n_occ, cap_occ;
	struct pt *src;        /* [n_values]: where a value leaves its box */
	char *on_axis;         /* [n_values]: an arrow on the axis carries it */
	struct side *side;
	int n_side, cap_side;
	char *pending;         /* [n_values]: its shape goes on the next
	                        * axis arrow that carries it */
	double W;              /* box width */
	double ax;             /* the axis */
	double y;              /* bottom of the last thing on the axis */
	double floor;          /* the lowest frame line so far */
	int cur;               /* the value arriving along the axis at y */
	int oom;
};

/* How far a drawn part reaches left and right of its axis. */
struct ext {
	double l, r;
};

static struct ext ext_max(struct ext a, struct ext b)
{
	return (struct ext){a.l > b.l ? a.l : b.l, a.r > b.r ? a.r : b.r};
}

static void *grow(void *p, int *cap, int need, size_t size, int *oom)
{
	if (need <= *cap)
		return p;
	int c = *cap ? *cap * 2 : 32;
	while (c < need)
		c *= 2;
	void *q = realloc(p, (size_t)c * size);
	if (!q) {
		*oom = 1;
		return p;
	}
	*cap = c;
	return q;
}

static void occupy(struct draw *D, double x0, double y0, double x1, double y1)
{
	if (!D->emit)
		return;
	D->occ = grow(D->occ, &D->cap_occ, D->n_occ + 1, sizeof *D->occ, &D->oom);
	if (D->n_occ < D->cap_occ)
		D->occ[D->n_occ++] = (struct rect){x0, y0, x1, y1};
}

static void add_side(struct draw *D, int value, double dx, double dy, int out)
{
	if (!D->emit || value < 0)
		return;
	D->side = grow(D->side, &D->cap_side, D->n_side + 1, sizeof *D->side, &D->oom);
	if (D->n_side < D->cap_side)
		D->side[D->n_side++] = (struct side){value, dx, dy, out};
}

/* The per-sample shape, book style: "32×16×16". */
static void shape_text(const struct dl_shape *s, char *buf, size_t size)
{
	size_t used = 0;
	buf[0] = '\0';
	if (s->ndim <= 1) {
		snprintf(buf, size, "scalar");
		return;
	}
	for (int i = 1; i < s->ndim && used < size; i++)
		used += (size_t)snprintf(buf + used, size - used, "%s%lld",
					 i > 1 ? "\xc3\x97" : "", (long long)s->d[i]);
}

/* Asks for value v's shape beside the axis arrow that will carry it, when
 * it differs from the shape of value `from` (-1: always). */
static void add_label(struct draw *D, int v, int from)
{
	const struct dl_graph *g = D->g;
	if (!D->emit || !D->labels || !g->shapes_ready || v < 0)
		return;
	if (from >= 0 && dl_shape_equal(&g->values[v].shape, &g->values[from].shape))
		return;
	D->pending[v] = 1;
}

static void set_src(struct draw *D, int v, double x, double y)
{
	if (D->emit && v >= 0)
		D->src[v] = (struct pt){x, y, y + BRANCH, 1};
}

/* An arrow along the axis from y0 down to y1, carrying the current value,
 * with its shape on the right when asked for (below the last frame line
 * it crosses). */
static void axis_arrow(struct draw *D, double y0, double y1)
{
	if (!D->emit)
		return;
	bprintf(&D->mid, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
		"marker-end=\"url(#arrow)\"/>\n", D->ax, y0, D->ax, y1);
	if (D->cur < 0)
		return;
	D->on_axis[D->cur] = 1;
	if (!D->pending[D->cur] || !D->labels)
		return;
	D->pending[D->cur] = 0;
	char text[96];
	shape_text(&D->g->values[D->cur].shape, text, sizeof text);
	if (D->floor > y0 && D->floor < y1)
		y0 = D->floor;
	double y = (y0 + y1) / 2 + FS_HP * 0.35;
	bprintf(&D->front, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%g\" fill=\""
		C_GRAY "\">%s</text>\n", D->ax + 7, y, FS_HP, text);
	occupy(D, D->ax + 7, y - FS_HP, D->ax + 7 + text_w(text, FS_HP), y + 3);
}

/* A polyline with rounded corners; an arrowhead at the end when `arrow`. */
static void path(struct dl_svg_buf *b, const double *x, const double *y, int n,
		 int arrow, const char *extra)
{
	bprintf(b, "<path d=\"M%.1f,%.1f", x[0], y[0]);
	for (int i = 1; i < n - 1; i++) {
		double lx = x[i] - x[i - 1], ly = y[i] - y[i - 1];
		double nx = x[i + 1] - x[i], ny = y[i + 1] - y[i];
		double l1 = sqrt(lx * lx + ly * ly), l2 = sqrt(nx * nx + ny * ny);
		double r = CORNER;
		if (r > l1 / 2)
			r = l1 / 2;
		if (r > l2 / 2)
			r = l2 / 2;
		if (l1 < 1e-9 || l2 < 1e-9) {
			bprintf(b, " L%.1f,%.1f", x[i], y[i]);
			continue;
		}
		bprintf(b, " L%.1f,%.1f Q%.1f,%.1f %.1f,%.1f", x[i] - lx / l1 * r,
			y[i] - ly / l1 * r, x[i], y[i], x[i] + nx / l2 * r,
			y[i] + ny / l2 * r);
	}
	bprintf(b, " L%.1f,%.1f\"%s%s/>\n", x[n - 1], y[n - 1],
		arrow ? " marker-end=\"url(#arrow)\"" : "", extra ? extra : "");
}

static void dot(struct dl_svg_buf *b, double x, double y)
{
	bprintf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"" C_LINE "\"/>\n", x, y);
}

/* ---- hyperparameters ---- */

/* An INTS, FLOATS or integer PADDING value: a scalar or "[a, b]". */
static int list_text(const struct dl_hp_desc *d, const struct dl_hp_value *v,
		     char *buf, size_t size)
{
	size_t used = 0;
	buf[0] = '\0';
	for (int k = 0; k < v->n && used < size; k++) {
		if (d->type == DL_HP_FLOATS)
			used += (size_t)snprintf(buf + used, size - used, "%s%g",
						 k ? ", " : v->scalar ? "" : "[", v->fv[k]);
		else
			used += (size_t)snprintf(buf + used, size - used, "%s%lld",
						 k ? ", " : v->scalar ? "" : "[", (long long)v->v[k]);
	}
	if (!v->scalar && used < size)
		snprintf(buf + used, size - used, v->n ? "]" : "[]");
	return 1;
}

/* Writes value v of hyperparameter d as in a model file; 0 when there is
 * nothing to show (a sub-model). */
static int hp_text(const struct dl_hp_desc *d, const struct dl_hp_value *v,
		   char *buf, size_t size)
{
	size_t used = 0;
#define PUT(...) (used += used < size ? (size_t)snprintf(buf + used, size - used, __VA_ARGS__) : 0)
	buf[0] = '\0';
	switch (d->type) {
	case DL_HP_INT:
		PUT("%lld", (long long)v->i);
		return 1;
	case DL_HP_FLOAT:
		PUT("%g", v->f);
		return 1;
	case DL_HP_BOOL:
		PUT("%s", v->i ? "true" : "false");
		return 1;
	case DL_HP_ENUM: {
		const char *c = d->choices ? d->choices : "";
		for (int64_t k = 0; k < v->i && c; k++) {
			c = strchr(c, '|');
			if (c)
				c++;
		}
		if (!c)
			c = "?";
		PUT("%.*s", (int)strcspn(c, "|"), c);
		return 1;
	}
	case DL_HP_PADDING:
		if (v->pad == DL_PAD_SAME || v->pad == DL_PAD_VALID) {
			PUT("%s", v->pad == DL_PAD_SAME ? "same" : "valid");
			return 1;
		}
		if (v->pad == DL_PAD_PAIRS) {
			PUT("[");
			for (int k = 0; k < v->n; k++)
				PUT("%s[%lld, %lld]", k ? ", " : "", (long long)v->v[2 * k],
				    (long long)v->v[2 * k + 1]);
			PUT("]");
			return 1;
		}
		return list_text(d, v, buf, size);
	case DL_HP_INTS:
	case DL_HP_FLOATS:
		return list_text(d, v, buf, size);
	case DL_HP_ENTRIES:
	case DL_HP_INPUT:
		return 0;
	}
#undef PUT
	return 0;
}

/* Whether a value given in the file differs from the op's default. */
static int hp_differs(const struct dl_hp_desc *d, const struct dl_hp_value *v,
		      const char *text)
{
	if (!v->set)
		return 0;
	if ((d->flags & (DL_HP_REQUIRED | DL_HP_DERIVED)) || !d->def)
		return 1;
	if (d->type == DL_HP_FLOAT || (d->type == DL_HP_FLOATS && v->scalar)) {
		char *end;
		double def = strtod(d->def, &end);
		if (*end == '\0')
			return (d->type == DL_HP_FLOAT ? v->f : v->fv[0]) != def;
	}
	return strcmp(text, d->def) != 0;
}

#define MAX_PIECES 48
#define HP_LINE_W 260.0  /* wrap the text right of a box beyond this */
#define HP_LINE_H 12.5

/* The text right of a box: the entry's name (gray), then "name=value" of
 * each hyperparameter to show (blue), wrapped into at most max_lines
 * lines of about equal width. */
struct side_text {
	int n;                          /* pieces; piece 0 is the name */
	char piece[MAX_PIECES][160];
	int line_of[MAX_PIECES];
	int lines;
	double w;                       /* the widest line */
};

/* Width of pieces [a, b) on one line: " " after the name, ", " between
 * hyperparameters, a trailing "," when the line goes on below. */
static double span_w(const struct side_text *t, const char *name, int a, int b)
{
	double w = 0;
	for (int k = a; k < b; k++) {
		w += text_w(t->piece[k], FS_HP);
		if (k > a && (k > 1 || *name))
			w += text_w(k > 1 ? ", " : " ", FS_HP);
	}
	if (b < t->n && b > a)
		w += text_w(",", FS_HP);
	return w;
}

static void side_text(const struct dl_node *n, const char *name, int max_lines,
		      struct side_text *t)
{
	char one[128];
	snprintf(t->piece[0], sizeof t->piece[0], "%s", name);
	t->n = 1;
	for (int i = 0; i < n->op->n_hp && t->n < MAX_PIECES; i++) {
		const struct dl_hp_desc *d = &n->op->hp[i];
		if (!hp_text(d, &n->hp[i], one, sizeof one) ||
		    !hp_differs(d, &n->hp[i], one))
			continue;
		snprintf(t->piece[t->n++], sizeof t->piece[0], "%s=%s", d->name, one);
	}
	int lines = (int)ceil(span_w(t, name, 0, t->n) / HP_LINE_W);
	if (lines > max_lines)
		lines = max_lines;
	if (lines > t->n - (*name ? 0 : 1))
		lines = t->n - (*name ? 0 : 1);
	if (lines < 1)
		lines = 1;
	/* the breaks that make the widest line narrowest (two or three lines:
	 * try them all) */
	int best1 = t->n, best2 = t->n;
	double best = span_w(t, name, 0, t->n);
	for (int b1 = 1; lines > 1 && b1 < t->n; b1++)
		for (int b2 = lines > 2 ? b1 + 1 : t->n; b2 <= t->n; b2++) {
			if (lines > 2 && b2 == t->n)
				break;
			double w0 = span_w(t, name, 0, b1), w1 = span_w(t, name, b1, b2),
			       w2 = span_w(t, name, b2, t->n), m = w0;
			if (w0 <= 0 || w1 <= 0)
				continue;
			if (w1 > m)
				m = w1;
			if (w2 > m)
				m = w2;
			if (best1 == t->n || m < best) {
				best = m;
				best1 = b1;
				best2 = b2;
			}
		}
	for (int k = 0; k < t->n; k++)
		t->line_of[k] = k < best1 ? 0 : k < best2 ? 1 : 2;
	t->lines = t->line_of[t->n - 1] + 1;
	t->w = best;
}

/* Writes the side text at x, its lines centred on height yc. */
static void side_text_emit(struct dl_svg_buf *b, const struct side_text *t, double x,
			   double yc)
{
	for (int line = 0; line < t->lines; line++) {
		double y = yc + (line - (t->lines - 1) / 2.0) * HP_LINE_H + FS_HP * 0.35;
		bprintf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%g\">", x, y, FS_HP);
		int open = 0;
		for (int k = 0; k < t->n; k++) {
			if (t->line_of[k] != line)
				continue;
			if (k == 0) {
				if (*t->piece[0]) {
					bprintf(b, "<tspan fill=\"" C_GRAY "\" font-style=\"italic\">");
					bescape(b, t->piece[0]);
					bprintf(b, "</tspan>");
				}
				continue;
			}
			if (!open) {
				bprintf(b, "%s<tspan fill=\"blue\">",
					k == 1 && *t->piece[0] && t->line_of[0] == line ? " " : "");
				open = 1;
			} else {
				bprintf(b, ", ");
			}
			bescape(b, t->piece[k]);
		}
		/* a line that goes on below ends with the comma */
		if (open)
			bprintf(b, "%s</tspan>", line + 1 < t->lines ? "," : "");
		bprintf(b, "</text>\n");
	}
}

/* ---- rows ---- */

static int is_number(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return 0;
	return 1;
}

/* One past the last row of row r's subtree. */
static int subtree_end(const struct dl_graph *g, int r)
{
	int e = r + 1;
	while (e < g->n_rows && g->rows[e].depth > g->rows[r].depth)
		e++;
	return e;
}

static int has_prefix(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* The rows of [from, to) whose scope starts with prefix (NULL: any) but
 * not with except (NULL: none), at the given depth, or when depth is -1
 * at the smallest depth among them: the entries of one list (a repeat's
 * used block has no row of its own, so its entries sit one level deeper).
 * Returns a malloc()ed array and its length in *n. */
static int *entries(struct draw *D, int from, int to, const char *prefix,
		    const char *except, int depth, int *n)
{
	const struct dl_graph *g = D->g;
	*n = 0;
	int least = -1;
	for (int r = from; r < to && depth < 0; r++) {
		const char *s = g->rows[r].scope;
		if ((!prefix || has_prefix(s, prefix)) && !(except && has_prefix(s, except)) &&
		    (least < 0 || g->rows[r].depth < least))
			least = g->rows[r].depth;
	}
	if (depth < 0)
		depth = least;
	int *out = malloc((size_t)(to - from + 1) * sizeof *out);
	if (!out) {
		D->oom = 1;
		return NULL;
	}
	for (int r = from; r < to; r++) {
		const char *s = g->rows[r].scope;
		if ((!prefix || has_prefix(s, prefix)) && !(except && has_prefix(s, except)) &&
		    g->rows[r].depth == depth)
			out[(*n)++] = r;
	}
	return out;
}

static struct ext draw_list(struct draw *D, const int *rows, int n);

/* Whether the node is drawn taller: the op says so, or it holds a
 * sub-model (an expert, a layer stack). */
static int is_complex(const struct dl_node *n)
{
	if (n->op->flags & DL_OP_COMPLEX)
		return 1;
	for (int i = 0; i < n->op->n_hp; i++)
		if (n->op->hp[i].type == DL_HP_ENTRIES)
			return 1;
	return 0;
}

static int has_params(const struct dl_graph *g, const struct dl_node *n)
{
	if (!g->shapes_ready)   /* not declared yet: what the op can hold */
		return n->op->params && strncmp(n->op->params, "buffers", 7) != 0;
	for (int k = 0; k < n->n_params; k++)
		if (!n->params[k].buffer)
			return 1;
	return 0;
}

static struct ext draw_op(struct draw *D, int r)
{
	const struct dl_graph *g = D->g;
	const struct dl_row *row = &g->rows[r];
	const struct dl_node *n = &g->nodes[row->first];
	double h = is_complex(n) ? COMPLEX_H : BOX_H;
	double top = D->y + GAP;
	if (top < D->floor + FRAME_BELOW)
		top = D->floor + FRAME_BELOW;
	double x0 = D->ax - D->W / 2;

	/* inputs: the one arriving on the axis, the others from the left */
	int axis = -1, n_side = 0;
	for (int k = 0; k < n->n_in; k++) {
		if (axis < 0 && n->in[k] == D->cur && D->cur >= 0)
			axis = k;
		else
			n_side++;
	}
	if (axis >= 0)
		axis_arrow(D, D->y, top);
	for (int k = 0, slot = 0; k < n->n_in; k++)
		if (k != axis) {
			slot++;
			add_side(D, n->in[k], x0, top + h * slot / (n_side + 1), -1);
		}

	/* the box, the entry's name and its hyperparameters */
	struct side_text *st = malloc(sizeof *st);
	if (!st) {
		D->oom = 1;
		return (struct ext){0, 0};
	}
	side_text(n, is_number(row->label) ? "" : row->label, h > BOX_H ? 3 : 2, st);
	double tw = st->w;
	if (D->emit) {
		bprintf(&D->front, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
			"rx=\"6\" fill=\"%s\" stroke=\"" C_LINE "\"/>\n", x0, top, D->W, h,
			has_params(g, n) ? C_FILL_PARAMS : C_FILL);
		bprintf(&D->front, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
			"font-size=\"%g\">", D->ax, top + h / 2 + FS_OP * 0.35, FS_OP);
		bescape(&D->front, n->op->name);
		bprintf(&D->front, "</text>\n");
		if (tw > 0)
			side_text_emit(&D->front, st, x0 + D->W + 8, top + h / 2);
	}
	free(st);
	occupy(D, x0, top, x0 + D->W + (tw > 0 ? 8 + tw : 0), top + h);
	set_src(D, n->out, D->ax, top + h);
	for (int k = 1; k < n->n_out; k++)   /* further outputs leave there too */
		set_src(D, n->out + k, D->ax, top + h);
	add_label(D, n->out, n->n_in ? n->in[axis >= 0 ? axis : 0] : -1);
	D->y = top + h;
	D->cur = n->out;
	return (struct ext){D->W / 2, D->W / 2 + (tw > 0 ? 8 + tw : 0)};
}

/* A frame's top line below the last thing drawn. */
static double frame_top(struct draw *D)
{
	double fy = D->y + FRAME_GAP;
	if (fy < D->floor + FRAME_GAP)
		fy = D->floor + FRAME_GAP;
	D->floor = fy;
	return fy;
}

/* A frame's bottom line; the value leaving the frame branches off to the
 * side below it. */
static double frame_bottom(struct draw *D)
{
	double fy = D->y + PAD;
	if (fy < D->floor + PAD)
		fy = D->floor + PAD;
	D->floor = fy;
	if (D->emit && D->cur >= 0 && D->src[D->cur].set && D->src[D->cur].by < fy + 8)
		D->src[D->cur].by = fy + 8;
	return fy;
}

/* sequential and use: the body in line; a named one in a light frame. */
static struct ext draw_group(struct draw *D, int r)
{
	const struct dl_graph *g = D->g;
	const struct dl_row *row = &g->rows[r];
	char prefix[1024];
	snprintf(prefix, sizeof prefix, "%s.", row->scope);
	int n, *list = entries(D, r + 1, subtree_end(g, r), prefix, NULL,
				  row->depth + 1, &n);
	if (!list)
		return (struct ext){0, 0};
	int named = !is_number(row->label);
	double fy0 = named ? frame_top(D) : 0;
	struct ext e = draw_list(D, list, n);
	free(list);
	if (!named)
		return e;
	double fy1 = frame_bottom(D);
	double lw = text_w(row->label, FS_SMALL);
	if (e.r < lw + 4)
		e.r = lw + 4;
	double x0 = D->ax - e.l - PAD, x1 = D->ax + e.r + PAD;
	if (D->emit) {
		bprintf(&D->back, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
			"rx=\"8\" fill=\"none\" stroke=\"" C_GROUP "\"/>\n",
			x0, fy0, x1 - x0, fy1 - fy0);
		bprintf(&D->front, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" "
			"font-size=\"%g\" fill=\"" C_GRAY "\" font-style=\"italic\">",
			x1 - 5, fy0 + FS_SMALL + 1, FS_SMALL);
		bescape(&D->front, row->label);
		bprintf(&D->front, "</text>\n");
	}
	occupy(D, x0, fy0, x1, fy1);
	return (struct ext){e.l + PAD, e.r + PAD};
}

/* repeat: the first copy in a dashed frame, "×N" on its right. */
static struct ext draw_repeat(struct draw *D, int r)
{
	const struct dl_graph *g = D->g;
	const struct dl_row *row = &g->rows[r];
	int end = subtree_end(g, r);
	char prefix[1024];
	int plen = snprintf(prefix, sizeof prefix, "%s.", row->scope);

	/* the count: distinct copy indices in the scopes below */
	int times = 0;
	long long seen = -1;
	for (int k = r + 1; k < end; k++) {
		const char *s = g->rows[k].scope;
		if (!has_prefix(s, prefix))
			continue;
		long long c = strtoll(s + plen, NULL, 10);
		if (c != seen) {   /* copies come in order, each in one run */
			times++;
			seen = c;
		}
	}
	snprintf(prefix, sizeof prefix, "%s.0.", row->scope);
	int n, *list = entries(D, r + 1, end, prefix, NULL, -1, &n);
	if (!list)
		return (struct ext){0, 0};
	int in = D->cur;
	double fy0 = frame_top(D);
	struct ext e = draw_list(D, list, n);
	free(list);
	double fy1 = frame_bottom(D);

	/* the frame's output is the last copy's: it leaves at the bottom */
	if (D->emit && D->cur >= 0)
		D->pending[D->cur] = 0;
	set_src(D, row->value, D->ax, D->y);
	if (D->emit && D->cur >= 0)
		D->src[row->value].by = D->src[D->cur].by;
	D->cur = row->value;
	add_label(D, row->value, in);

	char times_s[32];
	snprintf(times_s, sizeof times_s, "\xc3\x97%d%s", times,
		 row->shared ? ", shared" : "");
	const char *name = is_number(row->label) ? "" : row->label;
	double lw = text_w(times_s, FS_OP + 2);
	if (text_w(name, FS_SMALL) > lw)
		lw = text_w(name, FS_SMALL);
	double x0 = D->ax - e.l - PAD, x1 = D->ax + e.r + PAD;
	double ym = (fy0 + fy1) / 2;
	if (D->emit) {
		/* the frame's tooltip spells the label as cli.md does, "x N"
		 * (the picture writes the book's multiplication sign) */
		bprintf(&D->back, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
			"rx=\"8\" fill=\"none\" stroke=\"" C_FRAME "\" stroke-width=\"1.2\" "
			"stroke-dasharray=\"5,4\"><title>x %d%s</title></rect>\n", x0, fy0,
			x1 - x0, fy1 - fy0, times, row->shared ? ", shared" : "");
		bprintf(&D->front, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%g\">%s</text>\n",
			x1 + 7, ym + (FS_OP + 2) * 0.35, FS_OP + 2, times_s);
		if (*name) {
			bprintf(&D->front, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%g\" "
				"fill=\"" C_GRAY "\" font-style=\"italic\">", x1 + 7,
				ym + (FS_OP + 2) * 0.35 + FS_SMALL + 4, FS_SMALL);
			bescape(&D->front, name);
			bprintf(&D->front, "</text>\n");
		}
	}
	occupy(D, x0, fy0, x1 + 7 + lw, fy1);
	return (struct ext){e.l + PAD, e.r + PAD + 7 + lw};
}

/* residual: the body on the axis, the input skipping around it on the
 * left (or through the shortcut column there) into a circled plus. */
static struct ext draw_residual(struct draw *D, int r)
{
	const struct dl_graph *g = D->g;
	const struct dl_row *row = &g->rows[r];
	const struct dl_node *add = &g->nodes[row->last];
	int end = subtree_end(g, r);
	char prefix[1024], sc_prefix[1024];
	snprintf(prefix, sizeof prefix, "%s.", row->scope);
	snprintf(sc_prefix, sizeof sc_prefix, "%s.shortcut.", row->scope);
	int nb, nsc;
	int *body = entries(D, r + 1, end, prefix, sc_prefix, row->depth + 1, &nb);
	int *sc = entries(D, r + 1, end, sc_prefix, NULL, row->depth + 1, &nsc);
	if (!body || !sc) {
		free(body);
		free(sc);
		return (struct ext){0, 0};
	}
	/* the residual's input: what the add or the shortcut reads */
	int in = add->n_in ? add->in[0] : -1;
	if (nsc) {
		const struct dl_node *s0 = &g->nodes[g->rows[sc[0]].first];
		in = s0->n_in ? s0->in[0] : -1;
	}
	if (in != D->cur) {
		/* `in:` names another entry: it comes from the left, joins the
		 * axis, and the value above ends there */
		double y = D->y + 8;
		if (y < D->floor + 8)
			y = D->floor + 8;
		add_side(D, in, D->ax, y, -1);
		D->y = y;
		D->cur = in;
	}
	double by = D->y + BRANCH;
	if (by < D->floor + 8)
		by = D->floor + 8;
	struct ext e = draw_list(D, body, nb);
	double body_end = D->y;
	int body_out = D->cur;
	double side_end = body_end, xs = 0, lane = 0;
	struct ext left = {0, 0};
	if (nsc) {
		/* measure the shortcut column, then draw it left of the body */
		struct draw save = *D;
		D->emit = 0;
		D->y = by;
		D->cur = in;
		D->floor = by;
		struct ext s = draw_list(D, sc, nsc);
		D->emit = save.emit;
		xs = save.ax - e.l - LANE - 4 - s.r;
		D->ax = xs;
		D->y = by;
		D->cur = in;
		D->floor = by;
		D->labels = 0;
		if (D->emit)
			bprintf(&D->mid, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n",
				save.ax, by, xs, by);
		draw_list(D, sc, nsc);
		side_end = D->y;
		D->ax = save.ax;
		D->labels = save.labels;
		D->floor = save.floor;
		left.l = e.l + LANE + 4 + s.r + s.l;
	} else {
		lane = D->ax - e.l - LANE;
		left.l = e.l + LANE + 1;
	}
	double yc = (side_end > body_end ? side_end : body_end) + GAP * 0.8 + ADD_R;
	if (yc < D->floor + FRAME_BELOW)
		yc = D->floor + FRAME_BELOW;
	D->y = body_end;
	D->cur = body_out;
	axis_arrow(D, body_end, yc - ADD_R);
	if (D->emit) {
		if (nsc) {
			double px[] = {xs, xs, D->ax - ADD_R};
			double py[] = {side_end, yc, yc};
			path(&D->mid, px, py, 3, 1, NULL);
		} else {
			double px[] = {D->ax, lane, lane, D->ax - ADD_R};
			double py[] = {by, by, yc, yc};
			path(&D->mid, px, py, 4, 1, NULL);
		}
		dot(&D->front, D->ax, by);
		bprintf(&D->front, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%g\" fill=\"#ffffff\" "
			"stroke=\"" C_LINE "\" stroke-width=\"1.2\"/>\n"
			"<path d=\"M%.1f,%.1fh%gM%.1f,%.1fv%g\" stroke=\"" C_LINE "\" "
			"stroke-width=\"1.2\"/>\n",
			D->ax, yc, ADD_R, D->ax - ADD_R + 3, yc, 2 * ADD_R - 6, D->ax,
			yc - ADD_R + 3, 2 * ADD_R - 6);
	}
	const char *name = is_number(row->label) ? "" : row->label;
	double nw = *name ? text_w(name, FS_HP) + ADD_R + 8 : ADD_R;
	if (D->emit && *name) {
		bprintf(&D->front, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%g\" fill=\""
			C_GRAY "\" font-style=\"italic\">", D->ax + ADD_R + 8,
			yc + FS_HP * 0.35, FS_HP);
		bescape(&D->front, name);
		bprintf(&D->front, "</text>\n");
	}
	if (!nsc)
		occupy(D, lane - 1, by, D->ax, yc);
	occupy(D, D->ax - ADD_R, yc - ADD_R, D->ax + nw, yc + ADD_R);
	set_src(D, add->out, D->ax, yc + ADD_R);
	add_label(D, add->out, body_out);
	D->y = yc + ADD_R;
	D->cur = add->out;
	free(body);
	free(sc);
	left.r = e.r > nw ? e.r : nw;
	return left;
}

static struct ext draw_row(struct draw *D, int r)
{
	const char *kind = D->g->rows[r].kind;
	if (strcmp(kind, "residual") == 0)
		return draw_residual(D, r);
	if (strcmp(kind, "repeat") == 0)
		return draw_repeat(D, r);
	if (strcmp(kind, "sequential") == 0 || strcmp(kind, "use") == 0)
		return draw_group(D, r);
	return draw_op(D, r);
}

static struct ext draw_list(struct draw *D, const int *rows, int n)
{
	struct ext e = {D->W / 2, D->W / 2};
	for (int i = 0; i < n && !D->oom; i++)
		e = ext_max(e, draw_row(D, rows[i]));
	return e;
}

/* ---- inputs, outputs, routing ---- */

/* An oval centred at (x, y top) with a name and a shape inside. */
static double oval_w(const char *name, const char *shape)
{
	double w = text_w(name, FS_OP), s = text_w(shape, FS_SMALL);
	return (w > s ? w : s) + 30;
}

static void oval(struct draw *D, double x, double y, const char *name,
		 const char *shape)
{
	double w = oval_w(name, shape);
	bprintf(&D->front, "<ellipse cx=\"%.1f\" cy=\"%.1f\" rx=\"%.1f\" ry=\"%.1f\" "
		"fill=\"#ffffff\" stroke=\"" C_LINE "\" stroke-width=\"1.2\"/>\n",
		x, y + OVAL_H / 2, w / 2, OVAL_H / 2);
	double ty = *shape ? y + OVAL_H / 2 - 2 : y + OVAL_H / 2 + FS_OP * 0.35;
	bprintf(&D->front, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
		"font-size=\"%g\" font-weight=\"bold\">", x, ty, FS_OP);
	bescape(&D->front, name);
	bprintf(&D->front, "</text>\n");
	if (*shape)
		bprintf(&D->front, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
			"font-size=\"%g\" fill=\"" C_GRAY "\">%s</text>\n", x,
			ty + FS_SMALL + 2, FS_SMALL, shape);
	occupy(D, x - w / 2, y, x + w / 2, y + OVAL_H);
}

static void input_shape(const struct dl_input_spec *s, char *buf, size_t size)
{
	size_t used = 0;
	buf[0] = '\0';
	for (int d = 0; d < s->ndim && used < size; d++) {
		if (s->sym[d])
			used += (size_t)snprintf(buf + used, size - used, "%s%s",
						 d ? "\xc3\x97" : "", s->sym[d]);
		else
			used += (size_t)snprintf(buf + used, size - used, "%s%lld",
						 d ? "\xc3\x97" : "", (long long)s->d[d]);
	}
	if (s->ndim == 0)
		snprintf(buf, size, "scalar");
}

/* Leftmost x of anything drawn between heights y0 and y1. */
static double left_of(const struct draw *D, double y0, double y1)
{
	double x = D->ax - D->W / 2;
	for (int i = 0; i < D->n_occ; i++) {
		const struct rect *o = &D->occ[i];
		if (o->y1 > y0 - 2 && o->y0 < y1 + 2 && o->x0 < x)
			x = o->x0;
	}
	return x;
}

/* A route: the side arrows of one value that starts off the axis (an
 * extra model input: one oval, one lane) or one side arrow. */
struct route {
	int input;      /* model input placed on the left, or -1 */
	int side;       /* the side arrow, when input < 0 */
	double y0, y1;  /* heights it spans */
};

static int by_span(const void *a, const void *b)
{
	const struct route *p = a, *q = b;
	double d = (p->y1 - p->y0) - (q->y1 - q->y0);
	return d < 0 ? -1 : d > 0 ? 1 : 0;
}

/* The output ovals: one row at the bottom. */
struct outs {
	double y;
	char *placed;   /* [n_outputs] */
};

static void output_oval(struct draw *D, struct outs *O, int k, double x)
{
	const struct dl_graph *g = D->g;
	char shape[96] = "";
	if (g->shapes_ready)
		shape_text(&g->values[g->outputs[k]].shape, shape, sizeof shape);
	oval(D, x, O->y, g->output_names[k], shape);
	O->placed[k] = 1;
}

static double output_w(const struct draw *D, int k)
{
	const struct dl_graph *g = D->g;
	char shape[96] = "";
	if (g->shapes_ready)
		shape_text(&g->values[g->outputs[k]].shape, shape, sizeof shape);
	return oval_w(g->output_names[k], shape);
}

/* Draws the arrows of a route in lane x; the source point (sx, sy) is the
 * bottom of the value's box or oval, or the lane top for an extra input. */
static void route_side(struct draw *D, const struct side *s, struct outs *O,
		       double lane, double sx, double sy, double by, int from_lane)
{
	double px[6], py[6];
	int n = 0;
	if (!from_lane) {
		px[n] = sx, py[n++] = sy;
		px[n] = sx, py[n++] = by;
		if (D->on_axis[s->value])
			dot(&D->front, sx, by);
	}
	px[n] = lane, py[n++] = from_lane ? sy : by;
	if (s->out >= 0) {
		if (!O->placed[s->out])
			output_oval(D, O, s->out, lane);
		px[n] = lane, py[n++] = O->y;
	} else {
		px[n] = lane, py[n++] = s->dy;
		px[n] = s->dx, py[n++] = s->dy;
	}
	path(&D->mid, px, py, n, 1, NULL);
}

static void route_all(struct draw *D, struct outs *O, double top)
{
	const struct dl_graph *g = D->g;
	struct route *rt = calloc((size_t)(D->n_side + g->n_inputs + 1), sizeof *rt);
	if (!rt) {
		D->oom = 1;
		return;
	}
	int n = 0;
	for (int i = 0; i < g->n_inputs; i++) {
		if (D->src[i].set)
			continue;
		rt[n] = (struct route){i, -1, top, top};
		for (int k = 0; k < D->n_side; k++)
			if (D->side[k].value == i) {
				double y = D->side[k].out >= 0 ? O->y : D->side[k].dy;
				if (y > rt[n].y1)
					rt[n].y1 = y;
			}
		if (rt[n].y1 > top)
			n++;
	}
	for (int k = 0; k < D->n_side; k++) {
		const struct side *s = &D->side[k];
		if (!D->src[s->value].set)
			continue;
		double y1 = s->out >= 0 ? O->y + OVAL_H : s->dy;
		rt[n++] = (struct route){-1, k, D->src[s->value].y, y1};
	}
	/* inputs nothing reads: at the top, left of the others */
	for (int i = 0; i < g->n_inputs; i++) {
		int used = D->src[i].set;
		for (int k = 0; k < D->n_side && !used; k++)
			used = D->side[k].value == i;
		if (!used)
			rt[n++] = (struct route){i, -1, top, top + OVAL_H};
	}
	qsort(rt, (size_t)n, sizeof *rt, by_span);
	for (int i = 0; i < n; i++) {
		struct route *r = &rt[i];
		double half = 0;
		if (r->input >= 0) {
			char shape[96];
			input_shape(&g->inputs[r->input], shape, sizeof shape);
			half = oval_w(g->inputs[r->input].name, shape) / 2;
			for (int k = 0; k < D->n_side; k++)
				if (D->side[k].value == r->input && D->side[k].out >= 0)
					r->y1 = O->y + OVAL_H;
		} else if (D->side[r->side].out >= 0) {
			half = output_w(D, D->side[r->side].out) / 2;
		}
		double lane = left_of(D, r->y0, r->y1) - LANE - half;
		if (r->input >= 0) {
			char shape[96];
			input_shape(&g->inputs[r->input], shape, sizeof shape);
			oval(D, lane, top, g->inputs[r->input].name, shape);
			for (int k = 0; k < D->n_side; k++)
				if (D->side[k].value == r->input)
					route_side(D, &D->side[k], O, lane, lane, top + OVAL_H, 0, 1);
		} else {
			const struct side *s = &D->side[r->side];
			route_side(D, s, O, lane, D->src[s->value].x, D->src[s->value].y,
				   D->src[s->value].by, 0);
		}
		occupy(D, lane - 1, r->y0, lane + 1, r->y1);
	}
	free(rt);
}

/* ---- the document ---- */

static int render(struct draw *D, char **svg, size_t *len)
{
	const struct dl_graph *g = D->g;
	D->emit = 1;
	D->labels = 1;
	D->floor = -1e9;

	/* one box width for all: the longest op name */
	D->W = BOX_MIN_W;
	for (int i = 0; i < g->n_nodes; i++) {
		double w = text_w(g->nodes[i].op->name, FS_OP) + 28;
		if (w > D->W)
			D->W = w;
	}

	/* the input the first op reads goes on the axis at the top */
	double top = 0;
	int first = 0;
	if (g->n_nodes && g->nodes[0].n_in && g->nodes[0].in[0] < g->n_inputs)
		first = g->nodes[0].in[0];
	if (g->n_inputs) {
		char shape[96];
		input_shape(&g->inputs[first], shape, sizeof shape);
		oval(D, D->ax, top, g->inputs[first].name, shape);
		set_src(D, first, D->ax, top + OVAL_H);
		D->y = top + OVAL_H;
		D->cur = first;
	} else {
		D->cur = -1;
	}

	int n, *list = entries(D, 0, g->n_rows, NULL, NULL, 0, &n);
	if (!list)
		return -1;
	draw_list(D, list, n);
	free(list);

	/* outputs: the one the last entry gives on the axis, the others on
	 * the left, fed by side arrows */
	struct outs O = {0, calloc((size_t)g->n_outputs + 1, 1)};
	if (!O.placed)
		return -1;
	O.y = D->y + GAP;
	if (O.y < D->floor + FRAME_BELOW)
		O.y = D->floor + FRAME_BELOW;
	int on_axis = -1;
	for (int k = 0; k < g->n_outputs; k++)
		if (on_axis < 0 && g->outputs[k] == D->cur && D->cur >= 0)
			on_axis = k;
	if (on_axis >= 0) {
		D->pending[D->cur] = 0;   /* the oval shows it */
		axis_arrow(D, D->y, O.y);
		output_oval(D, &O, on_axis, D->ax);
	}
	for (int k = 0; k < g->n_outputs; k++)
		if (k != on_axis)
			add_side(D, g->outputs[k], 0, O.y, k);
	route_all(D, &O, top);
	free(O.placed);

	/* bounds, then the shape column right of everything */
	double x0 = 0, x1 = 0, y1 = O.y + OVAL_H;
	for (int i = 0; i < D->n_occ; i++) {
		if (D->occ[i].x0 < x0)
			x0 = D->occ[i].x0;
		if (D->occ[i].x1 > x1)
			x1 = D->occ[i].x1;
		if (D->occ[i].y1 > y1)
			y1 = D->occ[i].y1;
	}
	x0 -= MARGIN;
	x1 += MARGIN;
	double y0 = top - MARGIN;
	y1 += MARGIN;

	struct dl_svg_buf out = {0};
	bprintf(&out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
		"viewBox=\"%.1f %.1f %.1f %.1f\" font-family=\"DejaVu Sans, Helvetica, "
		"Arial, sans-serif\">\n<title>", ceil(x1 - x0), ceil(y1 - y0), x0, y0,
		x1 - x0, y1 - y0);
	bescape(&out, g->name ? g->name : g->file ? g->file : "model");
	bprintf(&out, "</title>\n<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" "
		"refX=\"10\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" "
		"orient=\"auto\"><path d=\"M0,0L10,5L0,10z\" fill=\"" C_LINE "\"/>"
		"</marker></defs>\n"
		"<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#ffffff\"/>\n",
		x0, y0, x1 - x0, y1 - y0);
	bprintf(&out, "<g fill=\"none\">\n%s</g>\n", D->back.s ? D->back.s : "");
	bprintf(&out, "<g fill=\"none\" stroke=\"" C_LINE "\" stroke-width=\"1.2\">\n%s</g>\n",
		D->mid.s ? D->mid.s : "");
	bprintf(&out, "<g>\n%s</g>\n", D->front.s ? D->front.s : "");
	bprintf(&out, "</svg>\n");
	if (out.oom || D->back.oom || D->mid.oom || D->front.oom) {
		free(out.s);
		return -1;
	}
	*svg = out.s;
	*len = out.n;
	return 0;
}

int dl_svg_render(const struct dl_graph *g, char **svg, size_t *len,
		  struct dl_error *err)
{
	struct draw D;
	memset(&D, 0, sizeof D);
	D.g = g;
	D.src = calloc((size_t)g->n_values + 1, sizeof *D.src);
	D.on_axis = calloc((size_t)g->n_values + 1, 1);
	D.pending = calloc((size_t)g->n_values + 1, 1);
	*svg = NULL;
	*len = 0;
	int rc = 0;
	if (!D.src || !D.on_axis || !D.pending || render(&D, svg, len) != 0 || D.oom) {
		free(*svg);
		*svg = NULL;
		rc = dl_error_set(err, DL_ERUN, "out of memory drawing the model");
	}
	free(D.back.s);
	free(D.mid.s);
	free(D.front.s);
	free(D.occ);
	free(D.src);
	free(D.on_axis);
	free(D.side);
	free(D.pending);
	return rc;
}
