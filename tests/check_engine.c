/* Engine tests: the loader's scopes and wiring, literal typing, the memory
 * plan's reuse and non-overlap, composites inside the plan, symbolic sizes,
 * GEMM against its reference, the RNG's determinism. */
#include <check.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_suites.h"
#include "model/model.h"
#include "engine/fuse.h"
#include "engine/gemm.h"
#include "engine/graph.h"
#include "engine/threads.h"
#include "engine/vmath.h"
#include "engine/xwt.h"
#include "model/yamlutil.h"

static char *write_model(const char *text)
{
	static char path[64];
	snprintf(path, sizeof path, "/tmp/dlrun-check-%d.yaml", (int)getpid());
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	return path;
}

static struct dl_graph *load(const char *text, struct dl_error *err)
{
	struct dl_graph *g = NULL;
	char *path = write_model(text);
	dl_error_clear(err);
	dl_model_load(&g, path, err);
	unlink(path);
	return g;
}

static int has_param(struct dl_graph *g, const char *key)
{
	return dl_graph_param(g, key, NULL) != NULL;
}

START_TEST(scopes_follow_nn_sequential)
{
	struct dl_error err;
	struct dl_graph *g = load(
		"inputs: {x: {shape: [6]}}\n"
		"blocks:\n"
		"  mlp: [linear: {out_features: 6}, relu]\n"
		"layers:\n"
		"  - linear: {out_features: 6}\n"
		"  - name: enc\n"
		"    sequential: [linear: {out_features: 6}, tanh, linear: {out_features: 6}]\n"
		"  - residual: [linear: {out_features: 6}, relu, linear: {out_features: 6}]\n"
		"  - residual: {body: [linear: {out_features: 5}], shortcut: [linear: {out_features: 5}]}\n"
		"  - repeat: {times: 3, body: [linear: {out_features: 5}, relu]}\n"
		"  - repeat: {times: 2, use: mlp}\n"
		"  - use: mlp\n"
		"  - name: head\n"
		"    linear: {out_features: 2, bias: false}\n",
		&err);
	ck_assert_msg(g != NULL, "%s", err.msg);
	const char *want[] = {
		"0.weight", "0.bias", "enc.0.weight", "enc.2.bias", "2.0.weight",
		"2.2.weight", "3.0.weight", "3.shortcut.0.weight", "4.0.0.weight",
		"4.1.0.weight", "4.2.0.bias", "5.0.0.weight", "5.1.0.weight",
		"6.0.weight", "head.weight"};
	for (size_t i = 0; i < sizeof want / sizeof *want; i++)
		ck_assert_msg(has_param(g, want[i]), "missing %s", want[i]);
	ck_assert(!has_param(g, "head.bias"));
	ck_assert(!has_param(g, "enc.1.weight"));
	/* 6*6+6 three times before the residuals, ... : count exactly */
	int64_t want_params = 42 + 3 * 42 + 2 * 42 + 2 * 30 + (30 + 30 + 30) +
			      2 * 30 + 30 + 10;
	ck_assert_int_eq(dl_model_count_params(g, NULL), want_params);
	dl_graph_free(g);
}
END_TEST

START_TEST(wiring_by_name_and_outputs)
{
	struct dl_error err;
	struct dl_graph *g = load(
		"inputs:\n"
		"  a: {shape: [3]}\n"
		"  b: {shape: [3]}\n"
		"outputs: [s, p]\n"
		"layers:\n"
		"  - name: s\n"
		"    in: [a, b]\n"
		"    add: {}\n"
		"  - name: p\n"
		"    in: [s, a, s]\n"
		"    mul: {}\n",
		&err);
	ck_assert_msg(g != NULL, "%s", err.msg);
	ck_assert_int_eq(g->n_outputs, 2);
	ck_assert_int_eq(g->n_nodes, 2);
	ck_assert_int_eq(g->nodes[1].n_in, 3);
	ck_assert_int_eq(g->nodes[1].in[0], g->nodes[0].out);
	ck_assert_int_eq(g->nodes[1].in[1], 0);
	ck_assert_int_eq(g->outputs[0], g->nodes[0].out);
	dl_graph_free(g);
}
END_TEST

static void expect_error(const char *model, const char *where, const char *what)
{
	struct dl_error err;
	struct dl_graph *g = load(model, &err);
	ck_assert_msg(g == NULL, "loaded a bad model: %s", model);
	ck_assert_int_eq(err.code, DL_EINPUT);
	ck_assert_msg(strstr(err.msg, where), "'%s' lacks '%s'", err.msg, where);
	ck_assert_msg(strstr(err.msg, what), "'%s' lacks '%s'", err.msg, what);
	ck_assert_msg(!strchr(err.msg, '\n'), "message is not one line");
}

START_TEST(located_errors)
{
	expect_error("inputs: {x: {shape: [4]}}\nlayers:\n  - linear: {out_feature: 3}\n",
		     ":3:14:", "did you mean 'out_features'");
	expect_error("inputs: {x: {shape: [4]}}\nlayers:\n  - rleu\n", ":3:5:",
		     "did you mean 'relu'");
	expect_error("inputs: {x: {shape: [4]}}\nlayers:\n  - linear: {out_features: 010}\n",
		     ":3:28:", "decimal integer");
	expect_error("inputs: {x: {shape: [4]}}\nlayers:\n  - linear: {out_features: 3, bias: yes}\n",
		     ":3:37:", "true or false");
	expect_error("inputs: {x: {shape: [4]}}\nlayers:\n  - relu\n  - name: y\n    in: z\n    relu: {}\n",
		     ":5:9:", "'z' is not defined");
	expect_error("inputs: {x: {shape: [4]}}\nlayers:\n  - name: y\n    relu: {}\n  - name: y\n    tanh: {}\n",
		     ":5:11:", "defined twice");
	expect_error("inputs: {x: {shape: [4]}}\nlayer: []\n", ":2:1:", "did you mean 'layers'");
	expect_error("inputs: {x: {shape: [4]}}\nlayers:\n  - repeat: {times: 0, body: [relu]}\n",
		     ":3:21:", "positive");
	expect_error("inputs: {x: {shape: [4]}}\nblocks: {b: [use: b]}\nlayers:\n  - use: b\n",
		     ":2:19:", "uses itself");
	expect_error("inputs: {x: {shape: [4]}}\nlayers:\n  - relu\n  - linear: {out_features: 2}\n"
		     "    out_features: 3\n", ":5:5:", "hyperparameter of linear");
	expect_error("inputs: {x: {shape: [4]}}\noutputs: [nope]\nlayers: [relu]\n",
		     ":2:11:", "not a top-level");
	expect_error("inputs: {x: {shape: [4]}}\nlayers:\n  - residual: [linear: {out_features: 3}]\n",
		     ":3:5:", "add");
	expect_error("inputs: {x: {shape: [4, 0]}}\nlayers: [relu]\n", ":1:25:", "positive");
	expect_error("inputs: {x: {shape: [4]}\nlayers: [relu]\n", ":", "malformed YAML");
}
END_TEST

START_TEST(literals_are_strict)
{
	int64_t i;
	double f;
	ck_assert_int_eq(dl_parse_int("42", &i), 0);
	ck_assert_int_eq(i, 42);
	ck_assert_int_eq(dl_parse_int("-7", &i), 0);
	ck_assert_int_eq(i, -7);
	ck_assert_int_eq(dl_parse_int("010", &i), -1);
	ck_assert_int_eq(dl_parse_int("0x10", &i), -1);
	ck_assert_int_eq(dl_parse_int("1:20", &i), -1);
	ck_assert_int_eq(dl_parse_int("1.5", &i), -1);
	ck_assert_int_eq(dl_parse_int("", &i), -1);
	ck_assert_int_eq(dl_parse_int("-", &i), -1);
	ck_assert_int_eq(dl_parse_float("1e-5", &f), 0);
	ck_assert(f == 1e-5);
	ck_assert_int_eq(dl_parse_float("0.5", &f), 0);
	ck_assert_int_eq(dl_parse_float("0x1p3", &f), -1);
	ck_assert_int_eq(dl_parse_float("01.5", &f), -1);
	ck_assert_int_eq(dl_parse_float("nan", &f), -1);
	ck_assert_int_eq(dl_parse_float("1e999", &f), -1);
}
END_TEST

/* Buffers alive at the same time never overlap, and a long chain reuses
 * memory instead of holding every activation. */
START_TEST(plan_reuses_without_overlap)
{
	struct dl_error err;
	struct dl_graph *g = load(
		"inputs: {x: {shape: [64]}}\n"
		"layers:\n"
		"  - name: a\n"
		"    linear: {out_features: 64}\n"
		"  - name: deep\n"
		"    repeat: {times: 6, body: [linear: {out_features: 64}, relu]}\n"
		"  - name: b\n"
		"    in: [a, deep]\n"
		"    add: {}\n"
		"  - tanh\n",
		&err);
	ck_assert_msg(g != NULL, "%s", err.msg);
	ck_assert_int_eq(dl_graph_plan(g, 0, &err), 0);
	size_t sum = 0;
	for (int v = g->n_inputs; v < g->n_values; v++)
		sum += g->values[v].bytes;
	ck_assert_msg(g->arena_bytes < sum / 2, "arena %zu of %zu", g->arena_bytes, sum);
	/* liveness intervals [producer, last_use] that intersect must not share bytes */
	for (int u = g->n_inputs; u < g->n_values; u++)
		for (int v = u + 1; v < g->n_values; v++) {
			const struct dl_value *a = &g->values[u], *b = &g->values[v];
			int a_end = a->pinned ? g->n_nodes : (a->last_use < 0 ? a->producer : a->last_use);
			int b_end = b->pinned ? g->n_nodes : (b->last_use < 0 ? b->producer : b->last_use);
			int live_together = a->producer <= b_end && b->producer <= a_end;
			int share = a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
			ck_assert_msg(!(live_together && share && a->bytes && b->bytes),
				      "values %d and %d overlap", u, v);
		}
	/* a training plan: activations and gradients whose lifetimes over the
	 * forward and backward steps meet never share bytes, and memory is
	 * still reused (gradients die as backward passes their producers) */
	ck_assert_int_eq(dl_graph_plan(g, 1, &err), 0);
	struct span { size_t off, bytes; int t0, t1; } sp[256];
	int ns = 0;
	for (int v = g->n_inputs; v < g->n_values && ns < 254; v++) {
		const struct dl_value *x = &g->values[v];
		sp[ns++] = (struct span){x->offset, x->bytes, x->t0, x->t1};
		sp[ns++] = (struct span){x->goffset, x->bytes, x->g0, x->g1};
		ck_assert_int_le(x->t0, x->t1);
		ck_assert_int_le(x->g0, x->g1);
		/* a linear's input stays until its backward, which reads it */
	}
	for (int a = 0; a < ns; a++)
		for (int b = a + 1; b < ns; b++) {
			int meet = sp[a].t0 <= sp[b].t1 && sp[b].t0 <= sp[a].t1;
			int share = sp[a].off < sp[b].off + sp[b].bytes &&
				    sp[b].off < sp[a].off + sp[a].bytes;
			ck_assert_msg(!(meet && share && sp[a].bytes && sp[b].bytes),
				      "training buffers %d and %d overlap", a, b);
		}
	ck_assert_msg(g->arena_bytes < 2 * sum, "training arena %zu, all buffers %zu",
		      g->arena_bytes, 2 * sum);
	dl_graph_free(g);
}
END_TEST

/* p lies in [lo, lo + bytes) */
static int inside(const void *p, const void *lo, size_t bytes)
{
	return (const char *)p >= (const char *)lo && (const char *)p < (const char *)lo + bytes;
}

/* The inner graphs of composites (the transformer layers' nodes, the
 * experts) are planned by their parent: their parameters are views into the
 * one parameter block (no second copy), their activations live in the
 * parent's workspace (inference) or saved state (training). */
START_TEST(composites_live_in_the_plan)
{
	struct dl_error err;
	struct dl_graph *g = load(
		"inputs: {x: {shape: [5, 16]}}\n"
		"layers:\n"
		"  - transformer_encoder_layer: {nhead: 2, dim_feedforward: 32}\n"
		"  - transformer_encoder_layer: {nhead: 4, dim_feedforward: 24, norm_first: true}\n"
		"  - mixture_of_experts:\n"
		"      num_experts: 3\n"
		"      expert: [linear: {out_features: 8}, relu, linear: {out_features: 16}]\n",
		&err);
	ck_assert_msg(g != NULL, "%s", err.msg);
	struct dl_shape in = {3, {3, 5, 16}};
	ck_assert_int_eq(dl_graph_infer(g, &in, &err), 0);
	ck_assert(has_param(g, "0.self_attn.in_proj_weight"));
	ck_assert(has_param(g, "1.linear2.bias"));
	ck_assert(has_param(g, "2.experts.1.2.weight"));
	/* one copy: the block holds exactly the declared parameters */
	size_t declared = 0;
	for (int i = 0; i < g->n_nodes; i++)
		for (int k = 0; k < g->nodes[i].n_params; k++)
			declared += (size_t)dl_shape_numel(&g->nodes[i].params[k].shape);
	ck_assert_uint_eq(declared, g->n_param_floats);
	dl_graph_init_params(g, 1);
	float x[3 * 5 * 16];
	struct dl_rng r;
	dl_rng_seed(&r, 5);
	for (int i = 0; i < 3 * 5 * 16; i++)
		x[i] = (float)dl_rng_normal(&r);
	float *ins[1] = {x};
	for (int train = 0; train < 2; train++) {
		if (train)
			ck_assert_int_eq(dl_graph_train_setup(g, &err), 0);
		ck_assert_int_eq(dl_graph_plan(g, train, &err), 0);
		struct dl_ctx ctx = {0};
		ctx.train = train;
		ctx.rng = &r;
		dl_graph_forward(g, ins, &ctx);
		int inner_params = 0;
		for (int i = 0; i < g->n_nodes; i++) {
			const struct dl_node *n = &g->nodes[i];
			const struct dl_subgraphs *s = n->sub;
			ck_assert_ptr_nonnull(s);
			for (int c = 0; c < s->n; c++) {
				const struct dl_graph *sg = s->g[c];
				ck_assert_ptr_null(sg->param_block);
				ck_assert_ptr_null(sg->grad_block);
				for (int j = 0; j < sg->n_nodes; j++)
					for (int k = 0; k < sg->nodes[j].n_params; k++) {
						const struct dl_param *p = &sg->nodes[j].params[k];
						ck_assert_msg(inside(p->data, g->param_block,
								     g->n_param_floats * sizeof(float)),
							      "node %d: %s outside the parameter block",
							      i, p->name);
						if (train)
							ck_assert(inside(p->grad, g->grad_block,
									 g->n_param_floats * sizeof(float)));
						inner_params++;
					}
				if (i == 2)
					continue;  /* experts ran where the routing sent them */
				/* the inner activations: in this node's planned memory */
				const char *base = train ? g->saved + g->saved_off[i] : g->ws;
				size_t bytes = train ? n->saved_bytes : g->ws_bytes;
				for (int v = sg->n_inputs; v < sg->n_values; v++)
					ck_assert_msg(inside(sg->values[v].data, base, bytes),
						      "node %d value %d outside the plan", i, v);
			}
		}
		ck_assert_int_gt(inner_params, 20);
	}
	dl_graph_free(g);
}
END_TEST

/* The inner graphs' fusion marks follow each forward's wish, both ways:
 * fused (the marks the plan made), unfused, then fused again inside one
 * process. The second fused forward makes the marks again and gives the
 * first one's bits; the unfused one agrees with them to rounding. (An
 * expert that no token chose keeps its marks until it runs: k is all
 * the experts here, so that every inner graph runs.) */
static int inner_fused(const struct dl_graph *g)
{
	int count = 0;
	for (int i = 0; i < g->n_nodes; i++) {
		const struct dl_subgraphs *s = g->nodes[i].sub;
		for (int c = 0; s && c < s->n; c++)
			for (int j = 0; j < s->g[c]->n_nodes; j++)
				count += s->g[c]->nodes[j].fused != 0;
	}
	return count;
}

START_TEST(inner_fusion_both_ways)
{
	struct dl_error err;
	struct dl_graph *g = load(
		"inputs: {x: {shape: [7, 16]}}\n"
		"layers:\n"
		"  - transformer_encoder_layer: {nhead: 2, dim_feedforward: 33, activation: gelu}\n"
		"  - transformer_encoder_layer: {nhead: 4, dim_feedforward: 24, norm_first: true}\n"
		"  - mixture_of_experts:\n"
		"      num_experts: 3\n"
		"      k: 3\n"
		"      expert: [linear: {out_features: 9}, relu, linear: {out_features: 16}]\n",
		&err);
	ck_assert_msg(g != NULL, "%s", err.msg);
	struct dl_shape in = {3, {2, 7, 16}};
	ck_assert_int_eq(dl_graph_infer(g, &in, &err), 0);
	dl_graph_init_params(g, 3);
	ck_assert_int_eq(dl_graph_plan(g, 0, &err), 0);
	enum { N = 2 * 7 * 16 };
	float x[N], y[3][N];
	struct dl_rng r;
	dl_rng_seed(&r, 8);
	for (int i = 0; i < N; i++)
		x[i] = (float)dl_rng_normal(&r);
	float *ins[1] = {x};
	int marks[3];
	for (int run = 0; run < 3; run++) {
		struct dl_ctx ctx = {0};
		ctx.rng = &r;
		ctx.fixed_weights = 1;
		ctx.fuse = run != 1;
		dl_graph_forward(g, ins, &ctx);
		memcpy(y[run], g->values[g->outputs[0]].data, sizeof y[run]);
		marks[run] = inner_fused(g);
	}
	/* each layer: its three dropouts, linear1 + activation, linear2 +
	 * residual; each expert: linear + relu */
	ck_assert_int_eq(marks[0], 13);
	ck_assert_int_eq(marks[1], 0);
	ck_assert_int_eq(marks[2], marks[0]);
	ck_assert_int_eq(memcmp(y[0], y[2], sizeof y[0]), 0);
	for (int i = 0; i < N; i++)
		ck_assert_msg(fabsf(y[1][i] - y[0][i]) <= 1e-5f * (1.0f + fabsf(y[0][i])),
			      "%d: unfused %.9g, fused %.9g", i, y[1][i], y[0][i]);
	dl_graph_free(g);
}
END_TEST

START_TEST(symbolic_sizes_bind_from_data)
{
	struct dl_error err;
	struct dl_graph *g = load(
		"inputs:\n  a: {shape: [T, 4]}\n  b: {shape: [T, 4]}\n"
		"layers:\n  - in: [a, b]\n    add: {}\n", &err);
	ck_assert_msg(g != NULL, "%s", err.msg);
	ck_assert_int_eq(g->shapes_ready, 0);
	struct dl_shape in[2] = {{3, {2, 5, 4}}, {3, {2, 5, 4}}};
	ck_assert_int_eq(dl_graph_infer(g, in, &err), 0);
	ck_assert_int_eq(g->values[g->outputs[0]].shape.d[1], 5);
	in[1].d[1] = 6;
	dl_error_clear(&err);
	ck_assert_int_eq(dl_graph_infer(g, in, &err), DL_EINPUT);
	ck_assert_msg(strstr(err.msg, "T is 5"), "%s", err.msg);
	dl_graph_free(g);
}
END_TEST

/* dl_sgemm against the plain reference at every transpose, on normal
 * A [M, K] and B [K, N] (seed), C starting at i % cmod. */
static void gemm_vs_reference(int M, int N, int K, uint64_t seed, int cmod)
{
	float *A = malloc(sizeof(float) * K * M), *B = malloc(sizeof(float) * K * N);
	float *C1 = malloc(sizeof(float) * M * N), *C2 = malloc(sizeof(float) * M * N);
	ck_assert(A && B && C1 && C2);
	struct dl_rng r;
	dl_rng_seed(&r, seed);
	for (int i = 0; i < K * M; i++)
		A[i] = (float)dl_rng_normal(&r);
	for (int i = 0; i < K * N; i++)
		B[i] = (float)dl_rng_normal(&r);
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++) {
			for (int i = 0; i < M * N; i++)
				C1[i] = C2[i] = (float)(i % cmod);
			dl_sgemm(ta, tb, M, N, K, 0.5f, A, ta ? M : K, B, tb ? K : N, 2.0f, C1, N);
			dl_sgemm_ref(ta, tb, M, N, K, 0.5f, A, ta ? M : K, B, tb ? K : N, 2.0f, C2, N);
			for (int i = 0; i < M * N; i++)
				ck_assert_float_eq_tol(C1[i], C2[i], 1e-4);
		}
	free(A);
	free(B);
	free(C1);
	free(C2);
}

START_TEST(gemm_matches_reference)
{
	gemm_vs_reference(7, 5, 9, 3, 7 * 5);
}
END_TEST

/* Products with more rows than one OpenBLAS call takes (ROWS_MAX, 4096)
 * run in row blocks: the same as the reference, at every transpose. */
START_TEST(gemm_row_blocks_match_reference)
{
	gemm_vs_reference(4096 + 37, 5, 9, 4, 13);
}
END_TEST

/* Products of one row or one column (a batch-1 linear layer) against
 * the reference at every transpose, with leading dimensions longer than
 * the rows (so the vector's elements are lda or ldb apart when it is a
 * column), beta 2, and beta 0 over a C of NaNs, which must not be read. */
static void gemv_vs_reference(int M, int N, int K, uint64_t seed)
{
	const int pad = 3;
	int big = (M > N ? M : N) > K ? (M > N ? M : N) : K;
	int len = (big + pad) * (big + pad);   /* any operand, any transpose */
	float *A = malloc(sizeof(float) * len), *B = malloc(sizeof(float) * len);
	float *C1 = malloc(sizeof(float) * M * (N + pad)), *C2 = malloc(sizeof(float) * M * (N + pad));
	ck_assert(A && B && C1 && C2);
	struct dl_rng r;
	dl_rng_seed(&r, seed);
	for (int i = 0; i < len; i++) {
		A[i] = (float)dl_rng_normal(&r);
		B[i] = (float)dl_rng_normal(&r);
	}
	int ldc = N + pad;
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++)
			for (int z = 0; z < 2; z++) {
				int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad;
				float beta = z ? 0.0f : 2.0f;
				for (int i = 0; i < M * ldc; i++)
					C1[i] = C2[i] = z ? NAN : (float)(i % 5);
				dl_sgemm(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, beta, C1, ldc);
				dl_sgemm_ref(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, beta, C2, ldc);
				for (int i = 0; i < M; i++)
					for (int j = 0; j < N; j++)
						ck_assert_msg(fabsf(C1[i * ldc + j] - C2[i * ldc + j]) < 1e-4f,
							      "M %d N %d K %d ta %d tb %d beta %g: C[%d, %d] %g, reference %g",
							      M, N, K, ta, tb, beta, i, j, C1[i * ldc + j], C2[i * ldc + j]);
			}
	free(A);
	free(B);
	free(C1);
	free(C2);
}

START_TEST(gemm_vectors_match_reference)
{
	gemv_vs_reference(1, 37, 19, 5);
	gemv_vs_reference(41, 1, 19, 6);
	gemv_vs_reference(1, 1, 23, 7);
}
END_TEST

/* dl_sgemm_skinny against the reference at every column count up to
 * DL_SKINNY_N, row counts around its tile of 4, K below, at and past a
 * vector, leading dimensions longer than the rows; and each element's
 * bits whatever rows and columns the call was given (gemm.h says so:
 * the convolutions split a product's rows among threads). */
START_TEST(gemm_skinny_matches_reference)
{
	static const int Ms[] = {1, 3, 4, 7, 37}, Ks[] = {1, 7, 8, 9, 300};
	struct dl_rng r;
	dl_rng_seed(&r, 23);
	enum { PAD = 3, MAXM = 37, MAXK = 300, MAXN = DL_SKINNY_N };
	static float A[MAXM * (MAXK + PAD)], Bt[MAXN * (MAXK + PAD)];
	static float C[MAXM * (MAXN + PAD)], R[MAXM * (MAXN + PAD)], S[MAXM * (MAXN + PAD)];
	for (size_t i = 0; i < sizeof A / sizeof *A; i++)
		A[i] = (float)dl_rng_normal(&r);
	for (size_t i = 0; i < sizeof Bt / sizeof *Bt; i++)
		Bt[i] = (float)dl_rng_normal(&r);
	for (int mi = 0; mi < 5; mi++)
		for (int ki = 0; ki < 5; ki++)
			for (int N = 1; N <= DL_SKINNY_N; N++) {
				int M = Ms[mi], K = Ks[ki], lda = K + PAD, ldb = K + PAD, ldc = N + PAD;
				dl_sgemm_skinny(M, N, K, A, lda, Bt, ldb, C, ldc);
				dl_sgemm_ref(0, 1, M, N, K, 1.0f, A, lda, Bt, ldb, 0.0f, R, ldc);
				for (int m = 0; m < M; m++)
					for (int n = 0; n < N; n++)
						ck_assert_msg(fabsf(C[m * ldc + n] - R[m * ldc + n]) <=
							      1e-5f * (float)K,
							      "M %d N %d K %d: C[%d, %d] %g, reference %g",
							      M, N, K, m, n, C[m * ldc + n], R[m * ldc + n]);
				if (M < 3 || N < 2)
					continue;
				/* rows 1.. and columns 1.. alone: the same bits */
				dl_sgemm_skinny(M - 1, N - 1, K, A + lda, lda, Bt + ldb, ldb, S, ldc);
				for (int m = 1; m < M; m++)
					for (int n = 1; n < N; n++)
						ck_assert_msg(memcmp(&S[(m - 1) * ldc + n - 1], &C[m * ldc + n],
								     sizeof(float)) == 0,
							      "M %d N %d K %d: C[%d, %d] changes with the rows given",
							      M, N, K, m, n);
			}
}
END_TEST

/* dl_sgemm_rows: every element exactly the chain of fmaf over k from
 * zero (gemm.h says so; whichever of the AVX-512, AVX2 or plain kernels
 * this CPU takes), at row counts around its tiles of 12, 8, 6 and 4, column
 * counts around its panels of 16 and the 8 and 4 of their narrower
 * kernels, K of 1 to past a few vectors, leading dimensions longer than
 * the rows; the same bits for any rows and columns given; k split into
 * two calls, the second adding (dl_sgemm_rows_add); the packed
 * panels' columns past N zero, and the same packed from B as from Bt. */
START_TEST(gemm_rows_exact_chains)
{
	static const int Ms[] = {1, 3, 4, 5, 6, 7, 8, 16, 17, 23, 37};
	static const int Ns[] = {1, 3, 4, 5, 8, 9, 16, 17, 49};
	static const int Ks[] = {1, 7, 16, 129};
	struct dl_rng r;
	dl_rng_seed(&r, 29);
	enum { PAD = 3, MAXM = 37, MAXN = 49, MAXK = 129 };
	static float A[MAXM * (MAXK + PAD)], Bt[MAXN * (MAXK + PAD)];
	static float C[MAXM * (MAXN + PAD)], S[MAXM * (MAXN + PAD)];
	static float P[(MAXN + DL_ROWS_W) * MAXK], Q[(MAXN + DL_ROWS_W) * MAXK];
	static float B[MAXK * (MAXN + PAD)];
	for (size_t i = 0; i < sizeof A / sizeof *A; i++)
		A[i] = (float)dl_rng_normal(&r);
	for (size_t i = 0; i < sizeof Bt / sizeof *Bt; i++)
		Bt[i] = (float)dl_rng_normal(&r);
	ck_assert(dl_sgemm_rows_floats(49, 129) == 4 * DL_ROWS_W * 129);
	for (int lv = 2; lv >= 0; lv--) {
		if (dl_sgemm_rows_kernels(lv) != lv)
			continue;   /* not on this CPU */
		for (int mi = 0; mi < 11; mi++)
			for (int ni = 0; ni < 9; ni++)
				for (int ki = 0; ki < 4; ki++) {
					int M = Ms[mi], N = Ns[ni], K = Ks[ki];
					int lda = K + PAD, ldb = K + PAD, ldc = N + PAD;
					int64_t pf = dl_sgemm_rows_floats(N, K);
					ck_assert(pf <= (int64_t)(sizeof P / sizeof *P));
					for (int64_t i = 0; i < pf; i++)
						P[i] = NAN;
					dl_sgemm_rows_pack(P, 1, Bt, ldb, N, K);
					/* from B [K, N] (Bt transposed, rows N + PAD long):
					 * the same panels */
					for (int n = 0; n < N; n++)
						for (int k = 0; k < K; k++)
							B[k * (N + PAD) + n] = Bt[n * ldb + k];
					dl_sgemm_rows_pack(Q, 0, B, N + PAD, N, K);
					ck_assert_msg(memcmp(P, Q, (size_t)pf * sizeof *P) == 0,
						      "N %d K %d: packed from B and from Bt differ", N, K);
					for (int64_t i = 0; i < pf; i++)   /* the panel's columns past N */
						if ((int)(i / ((int64_t)DL_ROWS_W * K)) * DL_ROWS_W + (int)(i % DL_ROWS_W) >= N)
							ck_assert_msg(P[i] == 0.0f, "N %d K %d: packed float %ld", N, K, (long)i);
					for (size_t i = 0; i < sizeof C / sizeof *C; i++)
						C[i] = NAN;
					dl_sgemm_rows(M, N, K, A, lda, P, C, ldc);
					for (int m = 0; m < M; m++) {
						for (int n = 0; n < N; n++) {
							float e = 0.0f;
							for (int k = 0; k < K; k++)
								e = fmaf(A[m * lda + k], Bt[n * ldb + k], e);
							ck_assert_msg(memcmp(&e, &C[m * ldc + n], sizeof e) == 0,
								      "kernels %d, M %d N %d K %d: C[%d, %d] %.9g, the chain %.9g", lv,
								      M, N, K, m, n, C[m * ldc + n], e);
						}
						for (int n = N; n < ldc; n++)
							ck_assert_msg(isnan(C[m * ldc + n]), "M %d N %d: wrote past N", M, N);
					}
					/* k split in two calls, the second adding
					 * (dl_sgemm_rows_add): the first call's sum
					 * plus the second half's chain from zero;
					 * nothing written past N */
					if (K >= 2) {
						int k1 = K / 2;
						for (size_t i = 0; i < sizeof S / sizeof *S; i++)
							S[i] = NAN;
						dl_sgemm_rows_pack(P, 1, Bt, ldb, N, k1);
						dl_sgemm_rows(M, N, k1, A, lda, P, S, ldc);
						dl_sgemm_rows_pack(P, 1, Bt + k1, ldb, N, K - k1);
						dl_sgemm_rows_add(M, N, K - k1, A + k1, lda, P, S, ldc);
						for (int m = 0; m < M; m++)
							for (int n = 0; n < ldc; n++) {
								float e1 = 0.0f, e2 = 0.0f, e;
								for (int k = 0; n < N && k < K; k++) {
									float *e12 = k < k1 ? &e1 : &e2;
									*e12 = fmaf(A[m * lda + k], Bt[n * ldb + k], *e12);
								}
								e = e1 + e2;
								ck_assert_msg(n < N ? memcmp(&S[m * ldc + n], &e, sizeof e) == 0
										    : isnan(S[m * ldc + n]),
									      "kernels %d, M %d N %d K %d split at %d: C[%d, %d] %.9g, not %.9g",
									      lv, M, N, K, k1, m, n, S[m * ldc + n], e);
							}
					}
					if (M < 3 || N < 2)
						continue;
					/* rows 2.. and columns 1.. alone: the same bits */
					dl_sgemm_rows_pack(P, 1, Bt + ldb, ldb, N - 1, K);
					dl_sgemm_rows(M - 2, N - 1, K, A + 2 * lda, lda, P, S, ldc);
					for (int m = 2; m < M; m++)
						for (int n = 1; n < N; n++)
							ck_assert_msg(memcmp(&S[(m - 2) * ldc + n - 1], &C[m * ldc + n],
									     sizeof(float)) == 0,
								      "M %d N %d K %d: C[%d, %d] changes with the rows given",
								      M, N, K, m, n);
				}
	}
	dl_sgemm_rows_kernels(-1);
}
END_TEST

/* dl_sgemm_rows_add over k of 600: blocks of 256, 256 and 88, each a
 * chain of fmaf from zero added to C in turn (gemm.h), the same bits at
 * every kernel level this CPU has; rows around the tiles, columns around
 * the panels (one, two, four at once), C's columns past N untouched. */
START_TEST(gemm_rows_add_blocks)
{
	enum { M = 13, N = 67, K = 600, LDC = N + 5 };
	static float A[M * K], Bt[N * K], C0[M * LDC], C[M * LDC];
	static float P[(N + DL_ROWS_W) * K];
	struct dl_rng r;
	dl_rng_seed(&r, 31);
	for (int i = 0; i < M * K; i++)
		A[i] = (float)dl_rng_normal(&r);
	for (int i = 0; i < N * K; i++)
		Bt[i] = (float)dl_rng_normal(&r);
	for (int i = 0; i < M * LDC; i++)
		C0[i] = (float)dl_rng_normal(&r) * 10.0f;
	dl_sgemm_rows_pack(P, 1, Bt, K, N, K);
	for (int lv = 2; lv >= 0; lv--) {
		if (dl_sgemm_rows_kernels(lv) != lv)
			continue;
		for (int m0 = 0; m0 < M; m0 += 7) {   /* rows 0..12, then 7..12 */
			int rows = M - m0;
			memcpy(C, C0, sizeof C);
			dl_sgemm_rows_add(rows, N, K, A + m0 * K, K, P, C + m0 * LDC, LDC);
			for (int m = m0; m < M; m++)
				for (int n = 0; n < LDC; n++) {
					float e = C0[m * LDC + n];
					for (int k0 = 0; n < N && k0 < K; k0 += 256) {
						float s = 0.0f;
						for (int k = k0; k < K && k < k0 + 256; k++)
							s = fmaf(A[m * K + k], Bt[n * K + k], s);
						e += s;
					}
					ck_assert_msg(memcmp(&C[m * LDC + n], &e, sizeof e) == 0,
						      "kernels %d, rows from %d: C[%d, %d] %.9g, not %.9g",
						      lv, m0, m, n, C[m * LDC + n], e);
				}
		}
	}
	dl_sgemm_rows_kernels(-1);
}
END_TEST

/* dl_transpose at every kernel level, storing and adding: sizes below,
 * at and past the 8 x 8 blocks and the 16-column blocks (1 x 1, 7 x 130,
 * 8 x 64, 19 x 67, 130 x 9), rows of both sides longer than needed,
 * whose extra floats stay as they were; the bits compared */
START_TEST(transpose_exact)
{
	static const int sz[][2] = {{1, 1}, {7, 130}, {8, 64}, {19, 67}, {130, 9}};
	enum { MAXF = 140 * 140 };
	static float src[MAXF], dst[MAXF];
	for (int i = 0; i < MAXF; i++)   /* negative zeros stored as they are */
		src[i] = i % 5 == 1 ? -0.0f : (float)i + 0.5f;
	for (int lv = 2; lv >= 0; lv--) {
		if (dl_sgemm_rows_kernels(lv) != lv)
			continue;
		for (int add = 0; add < 2; add++)
			for (size_t t = 0; t < sizeof sz / sizeof *sz; t++) {
				int rows = sz[t][0], cols = sz[t][1], lds = cols + 3, ldd = rows + 5;
				for (int i = 0; i < MAXF; i++)
					dst[i] = -0.25f * (float)(i % 7);
				dl_transpose(dst, ldd, src, lds, rows, cols, add);
				for (int c = 0; c < cols; c++)
					for (int r = 0; r < ldd; r++) {
						float was = -0.25f * (float)((c * ldd + r) % 7);
						float e = r >= rows ? was
							  : add     ? was + src[r * lds + c]
								    : src[r * lds + c];
						ck_assert_msg(memcmp(&dst[c * ldd + r], &e, sizeof e) == 0,
							      "kernels %d, add %d, %d x %d: dst[%d, %d] %g, "
							      "not %g", lv, add, rows, cols, c, r,
							      dst[c * ldd + r], e);
					}
				ck_assert_msg(dst[cols * ldd] == -0.25f * (float)(cols * ldd % 7),
					      "kernels %d, %d x %d: wrote past dst", lv, rows, cols);
			}
	}
	dl_sgemm_rows_kernels(-1);
}
END_TEST

/* y = x W^T on packed weights (engine/xwt.h). W [O, I]: O a partial
 * panel alone, whole panels, and both (5, 16, 37, 301); I short, past
 * one k block, and a multiple of 512 (dl_sgemm_rows copies such rows'
 * tiles); M from 1 to 35 rows (1 to 3 take four panels at once), in
 * one set, so the first call packs and the others read the panels;
 * x's rows 3 floats longer than I but for I 512. With AVX-512 every output is the
 * fmaf chain over i, bit for bit, at 1 and 2 threads (301 x 512 x 35
 * is shared among them) and on the AVX2 kernels after packing, W's
 * storage changed and back to its rows after dl_xwt_restore, then
 * packed again. Elsewhere nothing is packed: OpenBLAS, within 1e-5. */
static void xwt_check(const float *y, const float *x, int ldx, const float *W, int M,
		      int I, int O, int exact, const char *what)
{
	for (int m = 0; m < M; m++)
		for (int o = 0; o < O; o++) {
			float e = 0.0f, s = 0.0f;
			for (int i = 0; i < I; i++) {
				e = fmaf(x[m * ldx + i], W[o * I + i], e);
				s += fabsf(x[m * ldx + i] * W[o * I + i]);
			}
			float got = y[m * O + o];
			if (exact)
				ck_assert_msg(memcmp(&e, &got, sizeof e) == 0,
					      "%s: M %d I %d O %d: y[%d, %d] %.9g, the chain %.9g", what,
					      M, I, O, m, o, got, e);
			else
				ck_assert_msg(fabsf(got - e) <= 1e-5f * s + 1e-30f,
					      "%s: M %d I %d O %d: y[%d, %d] %.9g, the chain %.9g", what,
					      M, I, O, m, o, got, e);
		}
}

START_TEST(xwt_packed_chains)
{
	static const int Os[] = {5, 16, 37, 301}, Is[] = {3, 300, 512}, Ms[] = {1, 2, 3, 6, 21, 35};
	enum { MAXO = 301, MAXI = 512, MAXM = 35, LDX = MAXI + 3 };
	static float W[MAXO * MAXI], W0[MAXO * MAXI], x[MAXM * LDX], y[MAXM * MAXO],
		y0[MAXM * MAXO];
	struct dl_graph g;
	memset(&g, 0, sizeof g);   /* no parameters: nothing tied */
	struct dl_rng r;
	dl_rng_seed(&r, 31);
	int keep = dl_threads(), avx512 = dl_sgemm_rows_level() == 2;
	for (size_t i = 0; i < sizeof x / sizeof *x; i++)
		x[i] = (float)dl_rng_normal(&r);
	for (int threads = 1; threads <= 2; threads++) {
		dl_set_threads(threads);
		if (threads > 1)
			dl_threads_pin(threads);
		for (int oi = 0; oi < 4; oi++)
			for (int ii = 0; ii < 3; ii++) {
				/* rows 512 apart: copied tiles (with 128+ columns) */
				int O = Os[oi], I = Is[ii], ldx = I == 512 ? I : I + 3;
				for (int i = 0; i < O * I; i++)
					W[i] = W0[i] = (float)dl_rng_normal(&r);
				struct dl_xwt_set *set = dl_xwt_set_new(&g);
				ck_assert(set != NULL);
				for (int mi = 0; mi < 6; mi++) {
					int M = Ms[mi];
					for (int i = 0; i < M * O; i++)
						y[i] = NAN;
					dl_xwt(set, y, x, ldx, M, I, W, O);
					xwt_check(y, x, ldx, W0, M, I, O, avx512, "packed");
				}
				ck_assert_int_eq(dl_xwt_packed(set), avx512);
				if (avx512 && O >= DL_ROWS_W)
					ck_assert_msg(memcmp(W, W0, (size_t)O * I * sizeof *W) != 0,
						      "O %d I %d: W not packed in place", O, I);
				if (avx512) {
					/* packed, then on the AVX2 kernels: the same bits */
					dl_xwt(set, y0, x, ldx, MAXM, I, W, O);
					ck_assert(dl_sgemm_rows_kernels(1) == 1);
					dl_xwt(set, y, x, ldx, MAXM, I, W, O);
					dl_sgemm_rows_kernels(-1);
					ck_assert(memcmp(y, y0, (size_t)MAXM * O * sizeof *y) == 0);
				}
				ck_assert_int_eq(dl_xwt_restore(set), 0);
				ck_assert_int_eq(dl_xwt_packed(set), 0);
				ck_assert_msg(memcmp(W, W0, (size_t)O * I * sizeof *W) == 0,
					      "O %d I %d: W's rows not restored", O, I);
				dl_xwt(set, y, x, ldx, MAXM, I, W, O);
				xwt_check(y, x, ldx, W0, MAXM, I, O, avx512, "packed again");
				dl_xwt_set_free(set);
			}
	}
	dl_set_threads(keep);
}
END_TEST

/* W0 [nw] and then x [nx] standard normal from seed, and a set for a
 * graph without parameters (nothing tied) */
static struct dl_xwt_set *xwt_setup(uint64_t seed, float *W0, int nw, float *x, int nx)
{
	struct dl_rng r;
	dl_rng_seed(&r, seed);
	for (int i = 0; i < nw; i++)
		W0[i] = (float)dl_rng_normal(&r);
	for (int i = 0; i < nx; i++)
		x[i] = (float)dl_rng_normal(&r);
	struct dl_graph g;
	memset(&g, 0, sizeof g);
	struct dl_xwt_set *set = dl_xwt_set_new(&g);
	ck_assert(set != NULL);
	return set;
}

/* A weight first multiplied by many rows is packed too (there was a
 * 512-row limit until dl_sgemm_rows took many rows in blocks): 1037 rows,
 * five blocks of 208 and 205 rows (gemm_rows.c, rows_avx512_tall), every
 * output the fmaf chain with AVX-512; then 5 rows on the same panels. */
START_TEST(xwt_many_rows)
{
	enum { O = 37, I = 300, M = 1037 };
	static float W[O * I], W0[O * I], x[M * I], y[M * O];
	struct dl_xwt_set *set = xwt_setup(41, W0, O * I, x, M * I);
	memcpy(W, W0, sizeof W0);
	int avx512 = dl_sgemm_rows_level() == 2;
	dl_xwt(set, y, x, I, M, I, W, O);
	xwt_check(y, x, I, W0, M, I, O, avx512, "first call, 1037 rows");
	ck_assert_int_eq(dl_xwt_packed(set), avx512);
	dl_xwt(set, y, x, I, 5, I, W, O);
	xwt_check(y, x, I, W0, 5, I, O, avx512, "then 5 rows");
	dl_xwt_set_free(set);
}
END_TEST

/* Out of memory in engine/xwt.c: packing that cannot get its scratch
 * (the copy of a panel's rows, or the tail panel's buffer) leaves W as
 * rows and the product on OpenBLAS, for good; a restore that cannot get
 * its scratch returns -1 with W still packed and still right, and
 * finishes on a later call. */
static int xwt_allocs_left;

static void *xwt_failing_alloc(size_t n)
{
	return xwt_allocs_left-- > 0 ? malloc(n) : NULL;
}

START_TEST(xwt_out_of_memory)
{
	enum { O = 37, I = 24, M = 5 };
	static float W[3][O * I], W0[O * I], x[M * I], y[M * O];
	struct dl_xwt_set *set = xwt_setup(43, W0, O * I, x, M * I);
	for (int w = 0; w < 3; w++)
		memcpy(W[w], W0, sizeof W0);
	int avx512 = dl_sgemm_rows_level() == 2;
	dl_xwt_test_alloc(set, xwt_failing_alloc);
	/* no panel copy (W[0]), then no tail buffer (W[1]) */
	for (int w = 0; w < 2; w++) {
		xwt_allocs_left = w;
		dl_xwt(set, y, x, I, M, I, W[w], O);
		xwt_check(y, x, I, W0, M, I, O, 0, "packing out of memory");
		ck_assert_msg(memcmp(W[w], W0, sizeof W0) == 0, "weight %d changed", w);
	}
	ck_assert_int_eq(dl_xwt_packed(set), 0);
	dl_xwt_test_alloc(set, NULL);
	dl_xwt(set, y, x, I, M, I, W[0], O);
	xwt_check(y, x, I, W0, M, I, O, 0, "memory again: still rows");
	ck_assert_int_eq(dl_xwt_packed(set), 0);
	ck_assert(memcmp(W[0], W0, sizeof W0) == 0);
	/* W[2] packed, then a restore without memory */
	dl_xwt(set, y, x, I, M, I, W[2], O);
	ck_assert_int_eq(dl_xwt_packed(set), avx512);
	dl_xwt_test_alloc(set, xwt_failing_alloc);
	xwt_allocs_left = 0;
	ck_assert_int_eq(dl_xwt_restore(set), avx512 ? -1 : 0);
	ck_assert_int_eq(dl_xwt_packed(set), avx512);
	dl_xwt(set, y, x, I, M, I, W[2], O);
	xwt_check(y, x, I, W0, M, I, O, avx512, "after a failed restore");
	dl_xwt_test_alloc(set, NULL);
	ck_assert_int_eq(dl_xwt_restore(set), 0);
	ck_assert_int_eq(dl_xwt_packed(set), 0);
	ck_assert_msg(memcmp(W[2], W0, sizeof W0) == 0, "rows not back after the second restore");
	dl_xwt_set_free(set);
}
END_TEST

/* A weight whose storage a tied parameter shares (share:, a shared
 * repeat) stays rows; an untied one beside it is packed. */
START_TEST(xwt_tied_rows)
{
	enum { O = 40, I = 24, M = 5 };
	static float W[O * I], W0[O * I], V[O * I], x[M * I], y[M * O];
	struct dl_rng r;
	dl_rng_seed(&r, 37);
	for (int i = 0; i < O * I; i++) {
		W[i] = W0[i] = (float)dl_rng_normal(&r);
		V[i] = (float)dl_rng_normal(&r);
	}
	for (int i = 0; i < M * I; i++)
		x[i] = (float)dl_rng_normal(&r);
	int64_t d[2] = {O, I};
	struct dl_param p[3];
	memset(p, 0, sizeof p);
	for (int k = 0; k < 3; k++)
		p[k].shape = dl_shape_make(2, d);
	p[0].data = W;          /* the owner */
	p[1].data = W;          /* tied to it */
	p[1].tie = &p[0];
	p[2].data = V;          /* a weight of its own */
	struct dl_node nodes[3];
	memset(nodes, 0, sizeof nodes);
	for (int k = 0; k < 3; k++) {
		nodes[k].n_params = 1;
		nodes[k].params = &p[k];
	}
	struct dl_graph g;
	memset(&g, 0, sizeof g);
	g.n_nodes = 3;
	g.nodes = nodes;
	struct dl_xwt_set *set = dl_xwt_set_new(&g);
	ck_assert(set != NULL);
	dl_xwt(set, y, x, I, M, I, W + 2 * I, O - 2);   /* a view inside the tied tensor */
	dl_xwt(set, y, x, I, M, I, W, O);
	xwt_check(y, x, I, W0, M, I, O, 0, "tied");
	ck_assert_msg(memcmp(W, W0, sizeof W) == 0, "the tied weight was rearranged");
	ck_assert_int_eq(dl_xwt_packed(set), 0);
	dl_xwt(set, y, x, I, M, I, V, O);
	ck_assert_int_eq(dl_xwt_packed(set), dl_sgemm_rows_level() == 2);
	dl_xwt_set_free(set);
}
END_TEST

/* dl_sgemm_rows past one block of columns and of k: K 555 (one block of
 * k, columns in blocks of 128), 1100 (five blocks of 256, the later four
 * going on from C; columns in blocks of 256); A's rows 1024 floats apart,
 * whose tiles are copied: K 1008 with a small C (k blocks outermost, each
 * tile copied once) and with a C past 512 KiB (blocks of columns
 * outermost; the copy's rows kept off multiples of 2 KiB). N 261 (a last
 * block of 5 columns), M 21 (tiles of 12, 8 and 1, and of 6 and 1 in
 * AVX2): still exactly the fmaf chains, at each kernel level (every
 * 13th column of the large case). */
static const struct {
	int M, N, K, PAD;
} rows_blocks[] = {{21, 261, 555, 3}, {21, 261, 1100, 3}, {21, 261, 1008, 16},
		   {45, 2920, 1008, 16}};

START_TEST(gemm_rows_blocks)
{
	const int M = rows_blocks[_i].M, N = rows_blocks[_i].N;
	const int K = rows_blocks[_i].K, PAD = rows_blocks[_i].PAD;
	float *A = malloc((size_t)M * (K + PAD) * sizeof(float));
	float *Bt = malloc((size_t)N * (K + PAD) * sizeof(float));
	float *C = malloc((size_t)M * N * sizeof(float));
	float *P = malloc((size_t)dl_sgemm_rows_floats(N, K) * sizeof(float));
	ck_assert(A && Bt && C && P);
	struct dl_rng r;
	dl_rng_seed(&r, 31);
	for (int i = 0; i < M * (K + PAD); i++)
		A[i] = (float)dl_rng_normal(&r);
	for (int i = 0; i < N * (K + PAD); i++)
		Bt[i] = (float)dl_rng_normal(&r);
	for (int lv = 2; lv >= 0; lv--) {
		if (dl_sgemm_rows_kernels(lv) != lv)
			continue;   /* not on this CPU */
		dl_sgemm_rows_pack(P, 1, Bt, K + PAD, N, K);
		dl_sgemm_rows(M, N, K, A, K + PAD, P, C, N);
		for (int m = 0; m < M; m++)
			for (int n = 0; n < N; n += N > 1000 ? 13 : 1) {
				float e = 0.0f;
				for (int k = 0; k < K; k++)
					e = fmaf(A[m * (K + PAD) + k], Bt[n * (K + PAD) + k], e);
				ck_assert_msg(memcmp(&e, &C[m * N + n], sizeof e) == 0,
					      "kernels %d: C[%d, %d] %.9g, the chain %.9g", lv, m, n,
					      C[m * N + n], e);
			}
	}
	dl_sgemm_rows_kernels(-1);
	free(A);
	free(Bt);
	free(C);
	free(P);
}
END_TEST

/* dl_epilogue_lanes (channels in vector lanes: the depthwise forward's
 * fused epilogue) gives the bits of dl_epilogue_row on the same values
 * (fuse.h says so), for each kind of epilogue without a residual, a
 * partial block of lanes and a cell count that is no multiple of a
 * vector; the values straddle every activation's kinks and clamps. */
START_TEST(epilogue_lanes_match_rows)
{
	enum { L = 11, NC = 37, C = 24, c0 = 5 };
	static const struct {
		int bias, bn, act1, act2;
	} t[] = {
		{1, 0, DL_ACT_RELU, DL_ACT_NONE},
		{1, 1, DL_ACT_SILU, DL_ACT_NONE},
		{0, 1, DL_ACT_RELU6, DL_ACT_RELU},
		{1, 0, DL_ACT_GELU, DL_ACT_NONE},
		{1, 1, DL_ACT_GELU_TANH, DL_ACT_NONE},
		{0, 0, DL_ACT_SILU, DL_ACT_RELU6},
	};
	float bias[C], scale[C], shift[C], p[3 * DL_EPI_LANES];
	float lanes[NC * DL_EPI_LANES], row[NC];
	struct dl_rng r;
	dl_rng_seed(&r, 17);
	for (int c = 0; c < C; c++) {
		bias[c] = (float)dl_rng_normal(&r);
		scale[c] = 0.5f + (float)dl_rng_uniform(&r);
		shift[c] = (float)dl_rng_normal(&r);
	}
	for (size_t k = 0; k < sizeof t / sizeof *t; k++) {
		struct dl_epilogue e = {.bn = -1, .act1 = t[k].act1, .act2 = t[k].act2,
					.res = -1, .ready = 1,
					.bias = t[k].bias ? bias : NULL,
					.scale = t[k].bn ? scale : NULL,
					.shift = t[k].bn ? shift : NULL};
		for (int i = 0; i < NC * DL_EPI_LANES; i++)
			lanes[i] = 8.0f * (float)dl_rng_normal(&r);
		float orig[NC * DL_EPI_LANES];
		memcpy(orig, lanes, sizeof orig);
		dl_epilogue_lanes_prepare(&e, p, c0, L);
		dl_epilogue_lanes(&e, p, lanes, NC);
		for (int l = 0; l < L; l++) {
			for (int q = 0; q < NC; q++)
				row[q] = orig[q * DL_EPI_LANES + l];
			dl_epilogue_row(&e, row, NULL, c0 + l, NC);
			for (int q = 0; q < NC; q++)
				ck_assert_msg(memcmp(&row[q], &lanes[q * DL_EPI_LANES + l], sizeof(float)) == 0,
					      "epilogue %zu, lane %d, cell %d: lanes %.9g, row %.9g",
					      k, l, q, lanes[q * DL_EPI_LANES + l], row[q]);
		}
	}
}
END_TEST

/* An output gradient written into the plan's own slot for it
 * (dl_graph_output_grad, as dlrun bench --train does) back-propagates
 * exactly as the same gradient in a caller's buffer. */
START_TEST(output_grad_in_place)
{
	struct dl_error err;
	struct dl_graph *g = load(
		"inputs: {x: {shape: [7]}}\n"
		"layers:\n"
		"  - linear: {out_features: 11}\n"
		"  - gelu: {}\n"
		"  - linear: {out_features: 13}\n",
		&err);
	ck_assert_msg(g != NULL, "%s", err.msg);
	struct dl_shape in = {2, {3, 7}};
	ck_assert_int_eq(dl_graph_infer(g, &in, &err), 0);
	dl_graph_init_params(g, 2);
	ck_assert_int_eq(dl_graph_train_setup(g, &err), 0);
	ck_assert_int_eq(dl_graph_plan(g, 1, &err), 0);
	float x[3 * 7], dy[3 * 13], *g1 = malloc(sizeof(float) * g->n_param_floats);
	ck_assert_ptr_nonnull(g1);
	struct dl_rng r;
	dl_rng_seed(&r, 6);
	for (int i = 0; i < 3 * 7; i++)
		x[i] = (float)dl_rng_normal(&r);
	for (int i = 0; i < 3 * 13; i++)
		dy[i] = (float)dl_rng_normal(&r);
	float *ins[1] = {x};
	struct dl_ctx ctx = {0};
	ctx.train = 1;
	ctx.rng = &r;
	const float *dout[1] = {dy};
	dl_graph_forward(g, ins, &ctx);
	dl_graph_zero_grad(g);
	dl_graph_backward(g, dout, NULL, &ctx);
	memcpy(g1, g->grad_block, sizeof(float) * g->n_param_floats);
	float *slot = dl_graph_output_grad(g, 0);
	ck_assert_ptr_nonnull(slot);
	dl_graph_forward(g, ins, &ctx);
	memcpy(slot, dy, sizeof dy);
	dout[0] = slot;
	dl_graph_zero_grad(g);
	dl_graph_backward(g, dout, NULL, &ctx);
	ck_assert_int_eq(memcmp(g1, g->grad_block, sizeof(float) * g->n_param_floats), 0);
	free(g1);
	dl_graph_free(g);
}
END_TEST

START_TEST(rng_is_deterministic)
{
	struct dl_rng a, b;
	dl_rng_seed(&a, 42);
	dl_rng_seed(&b, 42);
	for (int i = 0; i < 100; i++)
		ck_assert_uint_eq(dl_rng_next(&a), dl_rng_next(&b));
	dl_rng_seed(&b, 43);
	ck_assert_uint_ne(dl_rng_next(&a), dl_rng_next(&b));
	double sum = 0, sq = 0;
	for (int i = 0; i < 20000; i++) {
		double x = dl_rng_normal(&a);
		sum += x;
		sq += x * x;
	}
	ck_assert_double_eq_tol(sum / 20000, 0.0, 0.05);
	ck_assert_double_eq_tol(sq / 20000, 1.0, 0.05);
}
END_TEST

START_TEST(suggestions)
{
	const char *c[] = {"kernel_size", "stride", "padding", NULL};
	ck_assert_str_eq(dl_suggest("kernel", c), "kernel_size");
	ck_assert_str_eq(dl_suggest("strid", c), "stride");
	ck_assert_ptr_null(dl_suggest("banana", c));
}
END_TEST

/* engine/vmath.h's softmax pieces: every length around the 16 lanes,
 * against a double softmax; exact zeros for -inf and far-under scores,
 * NaNs as PyTorch gives them. */
START_TEST(row_softmax_pieces)
{
	static const int lens[] = {0, 1, 5, 15, 16, 17, 33, 100};
	float x[100], y[100];
	for (size_t c = 0; c < sizeof lens / sizeof *lens; c++) {
		int n = lens[c];
		float mx = -INFINITY;
		double sum = 0.0;
		for (int t = 0; t < n; t++) {
			x[t] = (float)(10.0 * sin(0.91 * t + 0.3 * n));
			mx = x[t] > mx ? x[t] : mx;
		}
		ck_assert(dl_row_max(x, n) == mx);
		if (n == 0)
			continue;
		for (int t = 0; t < n; t++)
			sum += exp((double)x[t] - mx);
		float s = dl_row_exp(y, x, n, mx);
		ck_assert(s == dl_row_exp_sum(x, n, mx));
		ck_assert(s == dl_row_sum(y, n));
		ck_assert_msg(fabs(s - sum) <= 1e-6 * sum, "n %d: sum %.9g, double %.9g", n, s, sum);
		dl_row_softmax(y, x, n);
		for (int t = 0; t < n; t++) {
			double p = exp((double)x[t] - mx) / sum;
			ck_assert_msg(fabs(y[t] - p) <= 1e-6 * p + 1e-12, "n %d, t %d: %.9g, double %.9g",
				      n, t, y[t], p);
		}
	}
	/* masked (-inf) and 2000 under the max: exactly 0 */
	float z[19];
	for (int t = 0; t < 19; t++)
		z[t] = t % 3 == 0 ? -INFINITY : t == 7 ? -1000.0f : t == 11 ? 1000.0f : 0.5f * t;
	dl_row_softmax(z, z, 19);
	for (int t = 0; t < 19; t++)
		ck_assert_msg(t == 11 ? z[t] == 1.0f : z[t] == 0.0f, "t %d: %g", t, z[t]);
	/* a NaN, an infinity, or nothing but -inf: NaNs, as PyTorch's */
	for (int k = 0; k < 3; k++) {
		for (int t = 0; t < 17; t++)
			z[t] = k == 2 ? -INFINITY : (float)t;
		if (k == 0)
			z[16] = NAN;
		else if (k == 1)
			z[3] = INFINITY;
		dl_row_softmax(z, z, 17);
		for (int t = 0; t < 17; t++)
			ck_assert_msg(isnan(z[t]), "case %d, t %d: %g", k, t, z[t]);
	}
}
END_TEST

Suite *make_engine_suite(void)
{
	Suite *s = suite_create("engine");
	TCase *tc = tcase_create("engine");
	tcase_add_test(tc, scopes_follow_nn_sequential);
	tcase_add_test(tc, wiring_by_name_and_outputs);
	tcase_add_test(tc, located_errors);
	tcase_add_test(tc, literals_are_strict);
	tcase_add_test(tc, plan_reuses_without_overlap);
	tcase_add_test(tc, symbolic_sizes_bind_from_data);
	tcase_add_test(tc, gemm_matches_reference);
	tcase_add_test(tc, rng_is_deterministic);
	tcase_add_test(tc, suggestions);
	tcase_add_test(tc, composites_live_in_the_plan);
	tcase_add_test(tc, inner_fusion_both_ways);
	tcase_add_test(tc, gemm_row_blocks_match_reference);
	tcase_add_test(tc, gemm_vectors_match_reference);
	tcase_add_test(tc, epilogue_lanes_match_rows);
	tcase_add_test(tc, gemm_skinny_matches_reference);
	tcase_add_test(tc, gemm_rows_exact_chains);
	tcase_add_test(tc, gemm_rows_add_blocks);
	tcase_add_test(tc, transpose_exact);
	tcase_add_loop_test(tc, gemm_rows_blocks, 0,
			    (int)(sizeof rows_blocks / sizeof *rows_blocks));
	tcase_add_test(tc, xwt_packed_chains);
	tcase_add_test(tc, xwt_tied_rows);
	tcase_add_test(tc, xwt_many_rows);
	tcase_add_test(tc, xwt_out_of_memory);
	tcase_add_test(tc, output_grad_in_place);
	tcase_add_test(tc, row_softmax_pieces);
	suite_add_tcase(s, tc);
	return s;
}
