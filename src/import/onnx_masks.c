/* dlrun import: the ONNX ops of masks and selections computed from the
 * data (Where, the comparisons, Not/And/Or, Expand, Tile, Trilu, TopK)
 * and the reductions other than ReduceMean. Each still folds when every
 * input is a constant; otherwise it maps onto dlrun's round 3 ops (where,
 * eq..ge, logical_*, expand, tile, triu/tril, topk, max/min/sum).
 *
 * Included by onnx.c just before its op table, so that it shares that
 * file's static helpers (struct ctx, emit, nerr...); not compiled on its
 * own. */

/* The rank of the widest data input: what a constant operand broadcasts
 * against. */
static const struct val *widest_data(struct ctx *c, int n)
{
	const struct val *w = NULL;
	for (int k = 0; k < n && k < c->n_in; k++)
		if (is_rt(c->in[k]) && (!w || c->in[k]->rank > w->rank))
			w = c->in[k];
	return w;
}

/* Input k as something an entry reads: data as it is, a constant as a
 * parameter entry holding one sample (its leading 1s dropped, a scalar
 * as [1]), which broadcasts over the batch as ONNX's aligned-right
 * broadcasting does. *fromconst tells which. */
static int mask_operand(struct ctx *c, int k, const struct val *like, struct val **out,
			int *fromconst)
{
	struct imp *im = c->im;
	struct val *v = k < c->n_in ? c->in[k] : NULL;
	*out = NULL;
	*fromconst = 0;
	if (!v)
		return nerr(im, c->n, "input %d is missing", k);
	if (is_rt(v)) {
		int rc = need_rt(c, k);
		if (rc == 0)
			*out = v;
		return rc;
	}
	if (has_dyn(v))
		return nerr(im, c->n, "input %d holds the batch size: a shape that cannot be folded", k);
	int r = v->rank;
	const int64_t *d = v->dims;
	while (r > 0 && r >= like->rank && d[0] == 1)
		d++, r--;
	if (r >= like->rank)
		return nerr(im, c->n, "constant input %d of shape %s does not broadcast over the batch of data of rank %d (a dlrun parameter holds one value per sample)",
			    k, ilist(v->dims, v->rank), like->rank);
	int64_t one = 1;
	if (r == 0)
		d = &one, r = 1;
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
	p->isint = v->isint;
	struct entry *e = emit(im, c->n, v->init, v->init ? NULL : "const", "parameter", hp, NULL, 0, p);
	if (!e || add_param(im, e, "", r, d, v->d))
		return DL_ERUN;
	*out = p;
	*fromconst = 1;
	return 0;
}

/* An op of n inputs that broadcast (where, the comparisons, logical_*),
 * with at least one input of data: one entry of dlop. */
static int mask_nary(struct ctx *c, int n, const char *dlop, int castfree)
{
	const struct val *like = widest_data(c, n);
	struct val *ins[3];
	int fc[3], rc;
	for (int k = 0; k < n; k++)
		if ((rc = mask_operand(c, k, like, &ins[k], &fc[k])))
			return rc;
	struct val *o = out_val(c, 0, V_RT);
	if (!o)
		return oom(c->im);
	copy_shape(o, ins[0]);
	for (int k = 1, allc = fc[0]; k < n; allc &= fc[k], k++) {
		struct val acc = *o;
		/* two data operands broadcast when of one rank (batch first) */
		if ((rc = bcast(c, &acc, ins[k], o, fc[k] || allc)))
			return rc;
	}
	o->castfree = castfree;
	o->isint = !castfree && ins[n - 2]->isint && ins[n - 1]->isint;
	return emit(c->im, c->n, NULL, NULL, dlop, NULL, ins, n, o) ? 0 : DL_ERUN;
}

static int all_inputs_const(struct ctx *c)
{
	for (int k = 0; k < c->n_in; k++)
		if (c->in[k] && !is_const(c->in[k]))
			return 0;
	return 1;
}

static int m_compare_any(struct ctx *c)
{
	static const struct {
		const char *onnx, *dl;
		char fold;
	} cmp[] = {
		{"Equal", "eq", '='}, {"Less", "lt", '<'}, {"Greater", "gt", '>'},
		{"LessOrEqual", "le", 'l'}, {"GreaterOrEqual", "ge", 'g'},
		{"And", "logical_and", '&'}, {"Or", "logical_or", '|'},
	};
	int i = 0;
	while (strcmp(cmp[i].onnx, c->n->op_type) != 0)
		i++;
	if (c->n_in < 2 || !c->in[0] || !c->in[1])
		return nerr(c->im, c->n, "needs two inputs");
	if (all_inputs_const(c))
		return fold_binary(c, cmp[i].fold);
	return mask_nary(c, 2, cmp[i].dl, 1);
}

static int m_not_any(struct ctx *c)
{
	if (!c->in[0] || is_const(c->in[0]))
		return m_not(c);
	int rc = need_rt(c, 0);
	if (rc)
		return rc;
	struct val *o = out_val(c, 0, V_RT);
	if (!o)
		return oom(c->im);
	copy_shape(o, c->in[0]);
	o->castfree = 1;
	return emit(c->im, c->n, NULL, NULL, "logical_not", NULL, c->in, 1, o) ? 0 : DL_ERUN;
}

/* Where on constants, folded with NumPy broadcasting. */
static int fold_where(struct ctx *c)
{
	struct val *v[3] = {c->in[0], c->in[1], c->in[2]};
	int r = 0;
	/* the batch size passes through a and b (Expand's shapes) */
	if (has_dyn(v[0]))
		return nerr(c->im, c->n, "a condition on the batch size: a shape that cannot be folded");
	for (int k = 0; k < 3; k++)
		r = v[k]->rank > r ? v[k]->rank : r;
	int64_t d[MAXR];
	for (int i = 0; i < r; i++) {
		d[i] = 1;
		for (int k = 0; k < 3; k++) {
			int j = i - (r - v[k]->rank);
			int64_t dk = j >= 0 ? v[k]->dims[j] : 1;
			if (dk != 1 && d[i] != 1 && dk != d[i])
				return nerr(c->im, c->n, "constant operands of shapes %s and %s do not broadcast",
					    ilist(v[k]->dims, v[k]->rank), ilist(d, i + 1));
			d[i] = dk != 1 ? dk : d[i];
		}
	}
	struct val *o = new_const(c->im, c->n->output[0], r, d, v[1]->isint && v[2]->isint);
	if (!o)
		return oom(c->im);
	o->node = c->node;
	int64_t idx[MAXR] = {0};
	for (int64_t n = 0; n < o->numel; n++) {
		int64_t at[3] = {0, 0, 0};
		for (int k = 0; k < 3; k++)
			for (int i = 0; i < r; i++) {
				int j = i - (r - v[k]->rank);
				if (j >= 0)
					at[k] = at[k] * v[k]->dims[j] + (v[k]->dims[j] == 1 ? 0 : idx[i]);
			}
		o->d[n] = v[0]->d[at[0]] != 0 ? v[1]->d[at[1]] : v[2]->d[at[2]];
		for (int i = r - 1; i >= 0; i--) {
			if (++idx[i] < d[i])
				break;
			idx[i] = 0;
		}
	}
	return 0;
}

static int m_where_any(struct ctx *c)
{
	if (c->n_in < 3 || !c->in[0] || !c->in[1] || !c->in[2])
		return nerr(c->im, c->n, "needs three inputs");
	if (all_inputs_const(c))
		return fold_where(c);
	return mask_nary(c, 3, "where", 0);
}

/* Expand of data: expand {shape} (the batch kept); of a constant, folded
 * or a parameter entry as before. */
static int m_expand_any(struct ctx *c)
{
	struct imp *im = c->im;
	struct val *x = c->in[0], *sv = c->n_in > 1 ? c->in[1] : NULL;
	if (!x || is_const(x))
		return m_expand(c);
	int rc = need_rt(c, 0);
	if (rc)
		return rc;
	if (!is_const(sv) || sv->numel < 1 || sv->numel > MAXR)
		return nerr(im, c->n, "the shape must be a constant of 1 to %d values (it depends on the input data)", MAXR);
	int n = (int)sv->numel, r = x->rank;
	if (n > r)
		return nerr(im, c->n, "data of rank %d expanded to rank %d: the new leading dimensions would come before the batch, which dlrun keeps first",
			    r, n);
	int64_t od[MAXR] = {-1};
	for (int i = 0; i < r; i++) {
		int is = i - (r - n);
		double ds = is >= 0 ? sv->d[is] : 1;
		if (i == 0) {
			if (ds != DYN && ds != 1 && !(im->fixed_batch > 0 && ds == (double)im->fixed_batch))
				return nerr(im, c->n, "the shape sets the batch size to %g, which dlrun keeps as it comes",
					    ds);
			continue;
		}
		if (ds == DYN)
			return nerr(im, c->n, "the batch size inside the target shape: a shape that cannot be folded");
		int64_t s = to_i64(ds), dx = x->dims[i];
		if (s < 0)
			return nerr(im, c->n, "a negative size %lld in the target shape", (long long)s);
		if (dx != s && dx != 1 && s != 1)
			return nerr(im, c->n, "size %lld of dimension %d does not broadcast to %lld",
				    (long long)dx, i, (long long)s);
		od[i] = dx == 1 ? s : dx;
	}
	int same = 1;
	for (int i = 1; i < r; i++)
		same &= od[i] == x->dims[i];
	if (same)
		return alias(c, x, 0);
	char *hp = NULL;
	if (hp_add(im, &hp, "shape: %s", ilist(od + 1, r - 1)))
		return DL_ERUN;
	struct val *o = out_val(c, 0, V_RT);
	if (!o) {
		free(hp);
		return oom(im);
	}
	set_shape(o, r, od);
	o->isint = x->isint;
	o->castfree = x->castfree;
	return emit(im, c->n, NULL, NULL, "expand", hp, &x, 1, o) ? 0 : DL_ERUN;
}

/* Tile: of data, tile {repeats} (the batch's repeat 1); of a constant,
 * folded. */
static int m_tile(struct ctx *c)
{
	struct imp *im = c->im;
	struct val *x = c->in[0];
	int64_t rp[MAXR];
	int n, rc;
	if (!x)
		return nerr(im, c->n, "input 0 is missing");
	if ((rc = const_ints(c, 1, "repeats", rp, MAXR, &n)))
		return rc;
	if (n != x->rank)
		return nerr(im, c->n, "%d repeats for data of rank %d", n, x->rank);
	int64_t od[MAXR];
	for (int i = 0; i < n; i++) {
		if (rp[i] < 0 || (rp[i] > 0 && x->dims[i] > ((int64_t)1 << 40) / rp[i]))
			return nerr(im, c->n, "repeat %lld is negative or too large", (long long)rp[i]);
		od[i] = x->dims[i] * rp[i];
	}
	if (is_const(x)) {
		if (has_dyn(x))
			return nerr(im, c->n, "arithmetic on the batch size: a shape that cannot be folded");
		struct val *o = new_const(im, c->n->output[0], n, od, x->isint);
		if (!o)
			return oom(im);
		o->node = c->node;
		int64_t idx[MAXR] = {0};
		for (int64_t k = 0; k < o->numel; k++) {
			int64_t kx = 0;
			for (int i = 0; i < n; i++)
				kx = kx * x->dims[i] + idx[i] % x->dims[i];
			o->d[k] = x->d[kx];
			for (int i = n - 1; i >= 0; i--) {
				if (++idx[i] < od[i])
					break;
				idx[i] = 0;
			}
		}
		return 0;
	}
	if ((rc = need_rt(c, 0)))
		return rc;
	if (rp[0] != 1)
		return nerr(im, c->n, "repeats %s the batch dimension, which dlrun keeps as it comes",
			    ilist(rp, n));
	char *hp = NULL;
	if (hp_add(im, &hp, "repeats: %s", ilist(rp + 1, n - 1)))
		return DL_ERUN;
	struct val *o = out_val(c, 0, V_RT);
	if (!o) {
		free(hp);
		return oom(im);
	}
	set_shape(o, n, od);
	o->isint = x->isint;
	o->castfree = x->castfree;
	return emit(im, c->n, NULL, NULL, "tile", hp, &x, 1, o) ? 0 : DL_ERUN;
}

/* Trilu (upper, k): of data, triu/tril {diagonal}; of a constant, folded
 * (nn.Transformer's generate_square_subsequent_mask). */
static int m_trilu(struct ctx *c)
{
	struct imp *im = c->im;
	struct val *x = c->in[0];
	int64_t k = 0;
	int nk = 0, rc;
	int upper = (int)attr_i(c->n, "upper", 1);
	if (!x)
		return nerr(im, c->n, "input 0 is missing");
	if (c->n_in > 1 && c->in[1] && (rc = const_ints(c, 1, "k", &k, 1, &nk)))
		return rc;
	if (x->rank < 2)
		return nerr(im, c->n, "input of rank %d; Trilu needs two dimensions", x->rank);
	if (is_const(x)) {
		if (has_dyn(x))
			return nerr(im, c->n, "arithmetic on the batch size: a shape that cannot be folded");
		struct val *o = new_const(im, c->n->output[0], x->rank, x->dims, x->isint);
		if (!o)
			return oom(im);
		o->node = c->node;
		int64_t R = x->dims[x->rank - 2], C = x->dims[x->rank - 1];
		for (int64_t i = 0; i < x->numel; i++) {
			int64_t col = i % C, row = (i / C) % R;
			int keep = upper ? col - row >= k : col - row <= k;
			o->d[i] = keep ? x->d[i] : 0;
		}
		return 0;
	}
	if ((rc = need_rt(c, 0)))
		return rc;
	if (x->rank < 3)
		return nerr(im, c->n, "data of rank 2: its two last dimensions include the batch, which dlrun ops do not mix");
	char *hp = NULL;
	if (k != 0 && hp_add(im, &hp, "diagonal: %lld", (long long)k))
		return DL_ERUN;
	struct val *o = out_val(c, 0, V_RT);
	if (!o) {
		free(hp);
		return oom(im);
	}
	copy_shape(o, x);
	o->isint = x->isint;
	return emit(im, c->n, NULL, NULL, upper ? "triu" : "tril", hp, &x, 1, o) ? 0 : DL_ERUN;
}

/* TopK with a constant k: topk {k, dim, largest, sorted}; the indices are
 * the entry's second output (NAME.1), floats. */
static int m_topk(struct ctx *c)
{
	struct imp *im = c->im;
	struct val *x = c->in[0];
	int rc = need_rt(c, 0);
	if (rc)
		return rc;
	int64_t k, ax;
	int nk;
	if ((rc = const_ints(c, 1, "k", &k, 1, &nk)))
		return rc;
	if (nk != 1)
		return nerr(im, c->n, "k must be one value");
	if ((rc = rt_axis(c, attr_i(c->n, "axis", -1), x->rank, &ax)))
		return rc;
	if (k < 1 || k > x->dims[ax])
		return nerr(im, c->n, "k %lld for a dimension of size %lld", (long long)k,
			    (long long)x->dims[ax]);
	char *hp = NULL;
	if (hp_add(im, &hp, "k: %lld, dim: %lld", (long long)k, (long long)ax) ||
	    (!attr_i(c->n, "largest", 1) && hp_add(im, &hp, "largest: false")) ||
	    (!attr_i(c->n, "sorted", 1) && hp_add(im, &hp, "sorted: false")))
		return DL_ERUN;
	struct val *o = out_val(c, 0, V_RT);
	if (!o) {
		free(hp);
		return oom(im);
	}
	copy_shape(o, x);
	o->dims[ax] = k;
	struct entry *e = emit(im, c->n, NULL, NULL, "topk", hp, &x, 1, o);
	if (!e)
		return DL_ERUN;
	if (c->n->n_output > 1 && c->n->output[1][0]) {
		struct val *ix = out_val(c, 1, V_RT);
		if (!ix)
			return oom(im);
		copy_shape(ix, o);
		ix->ref = e->name;
		ix->entry = o->entry;
		ix->port = 1;
		ix->isint = 1;
		ix->castfree = 1;
	}
	return 0;
}

/* ReduceMax/Min/Sum/Prod/Mean of a constant, folded. */
static int fold_reduce(struct ctx *c)
{
	struct imp *im = c->im;
	struct val *x = c->in[0];
	const char *t = c->n->op_type;
	int which = strcmp(t, "ReduceMax") == 0 ? 0 : strcmp(t, "ReduceMin") == 0 ? 1
		  : strcmp(t, "ReduceSum") == 0 ? 2 : strcmp(t, "ReduceProd") == 0 ? 3 : 4;
	int64_t axes[MAXR];
	int na, rc;
	if (has_dyn(x))
		return nerr(im, c->n, "arithmetic on the batch size: a shape that cannot be folded");
	if ((rc = get_axes(c, 1, axes, &na)))
		return rc;
	if (na == 0 && attr_i(c->n, "noop_with_empty_axes", 0))
		return alias(c, x, 0);
	int mark[MAXR] = {0};
	for (int i = 0; i < na; i++) {
		int64_t a = 0;
		if ((rc = norm_axis(c, axes[i], x->rank, &a)))
			return rc;
		mark[a] = 1;
	}
	int keep = (int)attr_i(c->n, "keepdims", 1);
	int64_t od[MAXR], kd[MAXR];
	int r = 0;
	for (int i = 0; i < x->rank; i++) {
		mark[i] |= na == 0;
		kd[i] = mark[i] ? 1 : x->dims[i];
		if (!mark[i] || keep)
			od[r++] = kd[i];
	}
	struct val *o = new_const(im, c->n->output[0], r, od, x->isint && which != 4);
	if (!o)
		return oom(im);
	o->node = c->node;
	int64_t n = o->numel, per = n ? x->numel / n : 0;
	for (int64_t k = 0; k < n; k++)
		o->d[k] = which == 0 ? -INFINITY : which == 1 ? INFINITY : which == 3 ? 1 : 0;
	int64_t idx[MAXR] = {0};
	for (int64_t i = 0; i < x->numel; i++) {
		int64_t ko = 0;
		for (int j = 0; j < x->rank; j++)
			ko = ko * kd[j] + (mark[j] ? 0 : idx[j]);
		double v = x->d[i], *y = &o->d[ko];
		*y = which == 0 ? fmax(*y, v) : which == 1 ? fmin(*y, v) : which == 3 ? *y * v : *y + v;
		for (int j = x->rank - 1; j >= 0; j--) {
			if (++idx[j] < x->dims[j])
				break;
			idx[j] = 0;
		}
	}
	for (int64_t k = 0; k < n && which == 4; k++)
		o->d[k] /= (double)per;
	for (int64_t k = 0; k < n && !o->isint; k++)
		o->d[k] = (float)o->d[k];
	return 0;
}

static int m_reduce(struct ctx *c)
{
	if (!c->in[0])
		return nerr(c->im, c->n, "input 0 is missing");
	if (is_const(c->in[0]))
		return fold_reduce(c);
	if (strcmp(c->n->op_type, "ReduceProd") == 0)
		return nerr(c->im, c->n, "a product over data has no dlrun op (ReduceProd is folded on constants only)");
	return m_reduce_mean(c);
}

/* ArgMax: argmax {dim, keepdim}, float indices as TopK's. */
static int m_argmax(struct ctx *c)
{
	struct imp *im = c->im;
	struct val *x = c->in[0];
	int rc = need_rt(c, 0);
	if (rc)
		return rc;
	int64_t ax;
	if ((rc = rt_axis(c, attr_i(c->n, "axis", 0), x->rank, &ax)))
		return rc;
	if (attr_i(c->n, "select_last_index", 0))
		return nerr(im, c->n, "attribute 'select_last_index' 1: dlrun's argmax gives the first of ties");
	int keep = (int)attr_i(c->n, "keepdims", 1);
	char *hp = NULL;
	if (hp_add(im, &hp, "dim: %lld", (long long)ax) || (keep && hp_add(im, &hp, "keepdim: true")))
		return DL_ERUN;
	struct val *o = out_val(c, 0, V_RT);
	if (!o) {
		free(hp);
		return oom(im);
	}
	int64_t d[MAXR];
	int r = 0;
	for (int i = 0; i < x->rank; i++)
		if (i != ax || keep)
			d[r++] = i == ax ? 1 : x->dims[i];
	set_shape(o, r, d);
	o->isint = 1;
	o->castfree = 1;
	return emit(im, c->n, NULL, NULL, "argmax", hp, &x, 1, o) ? 0 : DL_ERUN;
}

/* Cast of data to bool (`mask.bool()` of a float mask): ne {} against a
 * zero parameter; every other Cast as before. */
static int m_cast_any(struct ctx *c)
{
	struct val *x = c->in[0];
	if (!is_rt(x) || x->castfree ||
	    attr_i(c->n, "to", 1) != ONNX__TENSOR_PROTO__DATA_TYPE__BOOL)
		return m_cast(c);
	int rc = need_rt(c, 0);
	if (rc)
		return rc;
	int64_t one = 1;
	struct val *zero = new_const(c->im, "", 0, &one, x->isint), *p;
	int fc;
	if (!zero)
		return oom(c->im);
	struct val *keep = c->in[1];
	c->in[1] = zero;
	c->n_in = c->n_in > 2 ? c->n_in : 2;
	rc = mask_operand(c, 1, x, &p, &fc);
	c->in[1] = keep;
	if (rc)
		return rc;
	struct val *o = out_val(c, 0, V_RT);
	if (!o)
		return oom(c->im);
	copy_shape(o, x);
	o->castfree = 1;
	struct val *ins[2] = {x, p};
	return emit(c->im, c->n, NULL, NULL, "ne", NULL, ins, 2, o) ? 0 : DL_ERUN;
}
