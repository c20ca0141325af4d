/* A loaded model's weights (load, check, save), default paths, training
 * defaults, and shape inference from user-given per-sample shapes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "io/safetensors.h"
#include "model/yamlutil.h"

const char *dl_model_train_default(const struct dl_graph *g, const char *key,
				   int *line, int *col)
{
	for (int i = 0; i < g->n_train; i++)
		if (strcmp(g->train[i].key, key) == 0) {
			if (line)
				*line = g->train[i].line;
			if (col)
				*col = g->train[i].col;
			return g->train[i].val;
		}
	return NULL;
}

char *dl_model_default_weights(const struct dl_graph *g)
{
	if (g->weights)
		return strdup(g->weights);
	size_t len = strlen(g->file);
	const char *dot = strrchr(g->file, '.');
	const char *slash = strrchr(g->file, '/');
	if (dot && (!slash || dot > slash) &&
	    (strcmp(dot, ".yaml") == 0 || strcmp(dot, ".yml") == 0))
		len = (size_t)(dot - g->file);
	char *out = malloc(len + sizeof ".safetensors");
	if (out)
		sprintf(out, "%.*s.safetensors", (int)len, g->file);
	return out;
}

int dl_model_infer_spec(struct dl_graph *g, const char *const *specs,
			int n_specs, int64_t batch, struct dl_error *err)
{
	struct dl_shape *in = calloc((size_t)g->n_inputs + 1, sizeof *in);
	if (!in)
		return dl_error_set(err, DL_ERUN, "out of memory");
	int rc = 0;
	for (int i = 0; i < g->n_inputs; i++) {
		const struct dl_input_spec *s = &g->inputs[i];
		in[i].ndim = s->ndim + 1;
		in[i].d[0] = batch;
		for (int d = 0; d < s->ndim; d++)
			in[i].d[d + 1] = s->d[d];
	}
	for (int k = 0; rc == 0 && k < n_specs; k++) {
		const char *eq = strchr(specs[k], '=');
		int i = -1;
		for (int j = 0; eq && j < g->n_inputs; j++)
			if (strlen(g->inputs[j].name) == (size_t)(eq - specs[k]) &&
			    strncmp(g->inputs[j].name, specs[k], (size_t)(eq - specs[k])) == 0)
				i = j;
		if (!eq && g->n_inputs == 1)
			i = 0;
		if (i < 0) {
			rc = dl_error_set(err, DL_EINPUT,
					  "--input-shape '%s': write NAME=d1,d2,... with NAME a model input",
					  specs[k]);
			break;
		}
		char *copy = strdup(eq ? eq + 1 : specs[k]);
		if (!copy) {
			rc = dl_error_set(err, DL_ERUN, "out of memory");
			break;
		}
		int nd = 0;
		for (char *tok = strtok(copy, ",x "); tok; tok = strtok(NULL, ",x ")) {
			int64_t v;
			if (nd >= DL_MAX_DIMS - 1 || dl_parse_int(tok, &v) || v < 0) {
				rc = dl_error_set(err, DL_EINPUT,
						  "--input-shape '%s': sizes are non-negative integers",
						  specs[k]);
				break;
			}
			in[i].d[++nd] = v;
		}
		free(copy);
		if (rc == 0 && nd != g->inputs[i].ndim)
			rc = dl_error_set(err, DL_EINPUT,
					  "--input-shape '%s': input '%s' has %d per-sample dimensions",
					  specs[k], g->inputs[i].name, g->inputs[i].ndim);
	}
	for (int i = 0; rc == 0 && i < g->n_inputs; i++)
		for (int d = 0; d < g->inputs[i].ndim; d++)
			if (in[i].d[d + 1] < 0)
				rc = dl_error_set(err, DL_EINPUT,
						  "input '%s' has the symbolic size %s: give it with "
						  "--input-shape %s=...", g->inputs[i].name,
						  g->inputs[i].sym[d], g->inputs[i].name);
	if (rc == 0)
		rc = dl_graph_infer(g, in, err);
	free(in);
	return rc;
}

/* Tensors a weights file may hold beyond the model's: PyTorch's batch
 * counters, and a checkpoint's optimizer state. */
static int ignored_extra(const char *name)
{
	if (strncmp(name, "__optim__.", 10) == 0)
		return 1;
	const char *suffix = "num_batches_tracked";
	size_t l = strlen(name), s = strlen(suffix);
	return l >= s && strcmp(name + l - s, suffix) == 0 &&
	       (l == s || name[l - s - 1] == '.');
}

int dl_model_load_weights(struct dl_graph *g, const char *path,
			  struct dl_error *err)
{
	if (!g->params_ready)
		return dl_error_set(err, DL_ERUN, "internal: weights before shape inference");
	struct dl_safetensors st;
	int rc = dl_st_open(&st, path, err);
	if (rc)
		return rc;
	char key[512], a[512], b[128];
	int used = 0;
	for (int i = 0; rc == 0 && i < g->n_nodes; i++) {
		struct dl_node *n = &g->nodes[i];
		for (int k = 0; rc == 0 && k < n->n_params; k++) {
			struct dl_param *p = &n->params[k];
			dl_param_key(n, p, key, sizeof key);
			int t = dl_st_find(&st, key);
			if (t < 0) {
				/* a near-twin in the file is likely the same tensor misspelled */
				const char *twin = NULL;
				for (int j = 0; j < st.n && !twin; j++)
					if (!dl_graph_param(g, st.t[j].name, NULL) &&
					    dl_edit_distance(st.t[j].name, key) <= 2)
						twin = st.t[j].name;
				dl_shape_str(&p->shape, a, sizeof a);
				if (twin)
					rc = dl_error_set(err, DL_EINPUT,
							  "%s: tensor '%s' is missing (the model needs %s, %s:%d:%d); "
							  "the file has '%s' instead: a misspelling?",
							  path, key, a, g->file, n->line, n->col, twin);
				else
					rc = dl_error_set(err, DL_EINPUT,
							  "%s: tensor '%s' is missing; the model needs %s (%s:%d:%d)",
							  path, key, a, g->file, n->line, n->col);
				break;
			}
			if (!dl_shape_equal(&st.t[t].shape, &p->shape)) {
				rc = dl_error_set(err, DL_EINPUT,
						  "%s: tensor '%s' has shape %s, the model needs %s (%s:%d:%d)",
						  path, key, dl_shape_str(&st.t[t].shape, a, sizeof a),
						  dl_shape_str(&p->shape, b, sizeof b), g->file, n->line, n->col);
				break;
			}
			rc = dl_st_read_f32(&st, t, p->data, err);
			used++;
		}
	}
	for (int t = 0; rc == 0 && t < st.n; t++) {
		if (dl_graph_param(g, st.t[t].name, NULL) || ignored_extra(st.t[t].name))
			continue;
		const char *near = NULL;
		int best = 4;
		for (int i = 0; i < g->n_nodes; i++)
			for (int k = 0; k < g->nodes[i].n_params; k++) {
				dl_param_key(&g->nodes[i], &g->nodes[i].params[k], key, sizeof key);
				int d = dl_edit_distance(st.t[t].name, key);
				if (d < best) {
					best = d;
					near = g->nodes[i].params[k].name;
					snprintf(a, sizeof a, "%s", key);
				}
			}
		if (near)
			rc = dl_error_set(err, DL_EINPUT,
					  "%s: tensor '%s' is not a parameter of %s; did you mean '%s'?",
					  path, st.t[t].name, g->file, a);
		else
			rc = dl_error_set(err, DL_EINPUT,
					  "%s: tensor '%s' is not a parameter of %s (see 'dlrun summary')",
					  path, st.t[t].name, g->file);
	}
	dl_st_close(&st);
	return rc;
}

int dl_model_save_weights(struct dl_graph *g, const char *path,
			  const char *const *meta, int n_meta,
			  struct dl_error *err)
{
	int count = 0;
	for (int i = 0; i < g->n_nodes; i++)
		count += g->nodes[i].n_params;
	struct dl_st_entry *e = calloc((size_t)count + 1, sizeof *e);
	char **keys = calloc((size_t)count + 1, sizeof *keys);
	int rc = 0;
	if (!e || !keys)
		rc = dl_error_set(err, DL_ERUN, "out of memory");
	int c = 0;
	for (int i = 0; rc == 0 && i < g->n_nodes; i++)
		for (int k = 0; rc == 0 && k < g->nodes[i].n_params; k++) {
			char key[512];
			struct dl_param *p = &g->nodes[i].params[k];
			keys[c] = strdup(dl_param_key(&g->nodes[i], p, key, sizeof key));
			if (!keys[c])
				rc = dl_error_set(err, DL_ERUN, "out of memory");
			e[c].name = keys[c];
			e[c].shape = p->shape;
			e[c].f32 = p->data;
			c++;
		}
	if (rc == 0)
		rc = dl_st_write(path, e, c, meta, n_meta, err);
	for (int i = 0; keys && i < c; i++)
		free(keys[i]);
	free(keys);
	free(e);
	return rc;
}

int64_t dl_model_count_params(const struct dl_graph *g, int64_t *buffers)
{
	int64_t p = 0, b = 0;
	for (int i = 0; i < g->n_nodes; i++)
		for (int k = 0; k < g->nodes[i].n_params; k++) {
			int64_t c = dl_shape_numel(&g->nodes[i].params[k].shape);
			if (g->nodes[i].params[k].buffer)
				b += c;
			else
				p += c;
		}
	if (buffers)
		*buffers = b;
	return p;
}
