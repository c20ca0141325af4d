/* Image folders (torchvision's ImageFolder: classes are the sorted
 * subfolder names, files in sorted order of (folder, name)) and `PATH
 * LABEL` list files as a dataset whose samples are made when a batch needs
 * them: a prefetch thread makes the next batches of the epoch's order
 * ahead of the step, its samples decoded on OpenMP threads. Each sample's
 * random steps come from (seed, epoch, index), so the batches are the same
 * at any thread count and whether or not they were made ahead. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/data_spec.h"
#include "train/image_data.h"

#define AHEAD 2            /* batches made ahead of the step */
#define MAX_FILES ((int64_t)1 << 26)

void dl_image_rng(struct dl_rng *r, uint64_t seed, int64_t epoch, int64_t index)
{
	uint64_t k = seed * 0x9e3779b97f4a7c15ULL ^ ((uint64_t)epoch + 1) * 0xbf58476d1ce4e5b9ULL ^
		     ((uint64_t)index + 1) * 0x94d049bb133111ebULL;
	dl_rng_seed(r, k);
}

int dl_image_input(const struct dl_graph *g, int train, const struct dl_pipeline **pipe,
		   int *c, int *h, int *w, struct dl_error *err)
{
	const struct dl_data_conf *dc = g->data;
	if (!dc || !(train ? dc->has_train : dc->has_image))
		return dl_error_set(err, DL_EINPUT, "%s: the model has no data: %s pipeline "
				    "to make its input from image files (e.g. data: {image: "
				    "[to_float: {}]}; see dlrun-model(5))", g->file,
				    train ? "image: or train:" : "image:");
	const struct dl_input_spec *s = &g->inputs[0];
	int ok = g->n_inputs == 1 && !s->is_int && s->ndim == 3 && s->d[0] > 0 && s->d[1] > 0 &&
		 s->d[2] > 0 && (s->d[0] == 1 || s->d[0] == 3);
	if (!ok)
		return dl_error_set(err, DL_EINPUT, "%s:%d:%d: image files need a model with one "
				    "float input of shape [C, H, W] (C 1 or 3); input '%s' is not",
				    g->file, s->line, s->col, s->name);
	*pipe = train ? &dc->train : &dc->image;
	*c = (int)s->d[0];
	*h = (int)s->d[1];
	*w = (int)s->d[2];
	return 0;
}

int dl_image_sample(const struct dl_pipeline *pipe, int c, int h, int w, const char *path,
		    struct dl_rng *rng, float *out, struct dl_error *err)
{
	struct dl_image img;
	int rc = dl_image_read(&img, path, err);
	if (rc)
		return rc;
	struct dl_img_buf b;
	rc = dl_pipeline_run(pipe, &img, c, rng, &b, path, err);
	dl_image_free(&img);
	if (rc)
		return rc;
	if (b.c != c || b.h != h || b.w != w)
		rc = dl_error_set(err, DL_EINPUT, "%s: the data: pipeline gives [%d, %d, %d]; the "
				  "model input is [%d, %d, %d]%s", path, b.c, b.h, b.w, c, h, w,
				  b.c == 3 && c == 1 ? " (add a grayscale step)" : "");
	else
		memcpy(out, b.v, (size_t)c * (size_t)h * (size_t)w * sizeof *out);
	free(b.v);
	return rc;
}

/* ---- the file list ---- */

struct entry {
	char *dir, *name;   /* dir relative to the class folder's parent */
	int64_t label;
};

static int has_image_ext(const char *name)
{
	const char *dot = strrchr(name, '.');
	if (!dot)
		return 0;
	char e[8] = "";
	size_t n = strlen(dot + 1);
	if (n >= sizeof e)
		return 0;
	for (size_t i = 0; i <= n; i++)
		e[i] = (char)tolower((unsigned char)dot[1 + i]);
	return !strcmp(e, "png") || !strcmp(e, "jpg") || !strcmp(e, "jpeg");
}

struct list {
	int64_t n, cap;
	struct entry *e;
};

static int push(struct list *L, const char *dir, const char *name, int64_t label,
		struct dl_error *err)
{
	if (L->n == L->cap) {
		int64_t c = L->cap ? L->cap * 2 : 256;
		struct entry *e = L->n < MAX_FILES ? realloc(L->e, (size_t)c * sizeof *e) : NULL;
		if (!e)
			return dl_error_set(err, DL_ERUN, "%s: too many files or out of memory", dir);
		L->e = e;
		L->cap = c;
	}
	struct entry *e = &L->e[L->n];
	e->dir = strdup(dir);
	e->name = strdup(name);
	e->label = label;
	if (!e->dir || !e->name) {
		free(e->dir);
		free(e->name);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	L->n++;
	return 0;
}

static void list_free(struct list *L)
{
	for (int64_t i = 0; i < L->n; i++) {
		free(L->e[i].dir);
		free(L->e[i].name);
	}
	free(L->e);
	memset(L, 0, sizeof *L);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in dir (no . or ..), sorted; *kinds gets 1 for a directory. */
static int read_dir(const char *dir, char ***names, int **kinds, int *n, struct dl_error *err)
{
	*names = NULL;
	*kinds = NULL;
	*n = 0;
	DIR *d = opendir(dir);
	if (!d)
		return dl_error_set(err, DL_EINPUT, "%s: cannot read the folder: %s", dir,
				    strerror(errno));
	int cap = 0, rc = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;   /* ., .. and hidden files, as os.scandir users skip */
		if (*n == cap) {
			cap = cap ? cap * 2 : 64;
			char **v = cap < (1 << 26) ? realloc(*names, (size_t)cap * sizeof *v) : NULL;
			if (!v) {
				rc = dl_error_set(err, DL_ERUN, "%s: out of memory", dir);
				break;
			}
			*names = v;
		}
		if (!((*names)[*n] = strdup(de->d_name))) {
			rc = dl_error_set(err, DL_ERUN, "out of memory");
			break;
		}
		(*n)++;
	}
	closedir(d);
	if (rc == 0 && *n)
		qsort(*names, (size_t)*n, sizeof **names, cmp_str);
	if (rc == 0)
		*kinds = calloc((size_t)*n + 1, sizeof **kinds);
	if (rc == 0 && !*kinds)
		rc = dl_error_set(err, DL_ERUN, "out of memory");
	for (int i = 0; rc == 0 && i < *n; i++) {
		char p[4096];
		struct stat sb;
		snprintf(p, sizeof p, "%s/%s", dir, (*names)[i]);
		(*kinds)[i] = stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
	}
	if (rc) {
		for (int i = 0; i < *n; i++)
			free((*names)[i]);
		free(*names);
		free(*kinds);
		*names = NULL;
		*kinds = NULL;
		*n = 0;
	}
	return rc;
}

/* The image files under dir (any depth) with label, in push order; depth
 * bounds symbolic-link loops. */
static int walk(struct list *L, const char *dir, int64_t label, int depth,
		struct dl_error *err)
{
	if (depth > 32)
		return dl_error_set(err, DL_EINPUT, "%s: folders nested too deep", dir);
	char **names;
	int *kinds, n;
	int rc = read_dir(dir, &names, &kinds, &n, err);
	for (int i = 0; rc == 0 && i < n; i++)
		if (!kinds[i] && has_image_ext(names[i]))
			rc = push(L, dir, names[i], label, err);
	for (int i = 0; rc == 0 && i < n; i++)
		if (kinds[i]) {
			char p[4096];
			if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, names[i]) >= sizeof p)
				rc = dl_error_set(err, DL_EINPUT, "%s/%s: path too long", dir, names[i]);
			else
				rc = walk(L, p, label, depth + 1, err);
		}
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
	free(kinds);
	return rc;
}

static void path_of(const struct entry *e, char *buf, size_t size)
{
	if (!e->dir[0])
		snprintf(buf, size, "%s", e->name);
	else
		snprintf(buf, size, "%s/%s", e->dir, e->name);
}

static int cmp_entry(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;
	if (x->label != y->label)
		return x->label < y->label ? -1 : 1;
	int c = strcmp(x->dir, y->dir);
	return c ? c : strcmp(x->name, y->name);
}

static int load_folder(struct list *L, const char *root, int64_t *n_classes,
		       struct dl_error *err)
{
	char **names;
	int *kinds, n;
	int rc = read_dir(root, &names, &kinds, &n, err);
	int64_t classes = 0;
	for (int i = 0; rc == 0 && i < n; i++) {
		if (!kinds[i])
			continue;
		char p[4096];
		snprintf(p, sizeof p, "%s/%s", root, names[i]);
		int64_t before = L->n;
		if ((rc = walk(L, p, classes, 0, err)) != 0)
			break;
		if (L->n == before)
			rc = dl_error_set(err, DL_EINPUT, "%s: a class folder with no images "
					  "(.png, .jpg or .jpeg files)", p);
		classes++;
	}
	if (rc == 0 && classes == 0)
		rc = dl_error_set(err, DL_EINPUT, "%s: no class folders; --data DIR takes one "
				  "subfolder of images per class (DIR/cat/1.jpg)", root);
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
	free(kinds);
	/* os.walk sorted: by folder path, then file name, per class */
	if (rc == 0)
		qsort(L->e, (size_t)L->n, sizeof *L->e, cmp_entry);
	*n_classes = classes;
	return rc;
}

static int load_list(struct list *L, const char *path, int64_t *n_classes,
		     struct dl_error *err)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return dl_error_set(err, DL_EINPUT, "%s: cannot open: %s", path, strerror(errno));
	char dir[4096] = ".";
	const char *slash = strrchr(path, '/');
	if (slash)
		snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int64_t lineno = 0, maxl = -1;
	int rc = 0;
	while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
		lineno++;
		while (len > 0 && isspace((unsigned char)line[len - 1]))
			line[--len] = '\0';
		char *p = line;
		while (isspace((unsigned char)*p))
			p++;
		if (!*p || *p == '#')
			continue;
		char *sp = p + strlen(p);
		while (sp > p && !isspace((unsigned char)sp[-1]))
			sp--;
		char *end = sp;
		errno = 0;
		long long lab = sp > p ? strtoll(sp, &end, 10) : -1;
		if (sp == p || *end || errno || lab < 0 || lab > (1LL << 30)) {
			rc = dl_error_set(err, DL_EINPUT, "%s:%lld: a line is 'PATH LABEL' with a "
					  "class id LABEL >= 0", path, (long long)lineno);
			break;
		}
		char *e = sp;
		while (e > p && isspace((unsigned char)e[-1]))
			e--;
		*e = '\0';
		if (p[0] == '/')
			rc = push(L, "", p, lab, err);
		else
			rc = push(L, dir, p, lab, err);
		if (lab > maxl)
			maxl = lab;
	}
	free(line);
	fclose(f);
	if (rc == 0 && L->n == 0)
		rc = dl_error_set(err, DL_EINPUT, "%s: the list names no images", path);
	*n_classes = maxl + 1;
	return rc;
}

int dl_image_list_dir(const char *dir, char ***paths, int64_t *n, struct dl_error *err)
{
	struct list L = {0};
	*paths = NULL;
	*n = 0;
	char root[4096];
	size_t len = strlen(dir);
	while (len > 1 && dir[len - 1] == '/')
		len--;   /* DIR/ names its files DIR/a.png, not DIR//a.png */
	if (len >= sizeof root)
		return dl_error_set(err, DL_EINPUT, "%s: path too long", dir);
	snprintf(root, sizeof root, "%.*s", (int)len, dir);
	int rc = walk(&L, root, 0, 0, err);
	if (rc == 0)
		qsort(L.e, (size_t)L.n, sizeof *L.e, cmp_entry);
	char **v = rc ? NULL : calloc((size_t)L.n + 1, sizeof *v);
	if (rc == 0 && !v)
		rc = dl_error_set(err, DL_ERUN, "out of memory");
	for (int64_t i = 0; rc == 0 && i < L.n; i++) {
		size_t size = strlen(L.e[i].dir) + strlen(L.e[i].name) + 2;
		if (!(v[i] = malloc(size)))
			rc = dl_error_set(err, DL_ERUN, "out of memory");
		else
			path_of(&L.e[i], v[i], size);
	}
	if (rc)
		dl_image_paths_free(v, L.n);
	else {
		*paths = v;
		*n = L.n;
	}
	list_free(&L);
	return rc;
}

void dl_image_paths_free(char **paths, int64_t n)
{
	for (int64_t i = 0; paths && i < n; i++)
		free(paths[i]);
	free(paths);
}

int dl_image_data_probe(const char *path)
{
	struct stat sb;
	if (stat(path, &sb) != 0)
		return 0;
	if (S_ISDIR(sb.st_mode))
		return 1;
	FILE *f = fopen(path, "rb");
	if (!f)
		return 0;
	char buf[4096];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	if (dl_image_sniff(buf, n) != DL_IMAGE_NONE)
		return 2;
	if (n == 0 || (unsigned char)buf[0] == 0x93 || memcmp(buf, "PK", 2) == 0 ||
	    memchr(buf, 0, n))
		return 0;
	/* the first line that is not blank or a comment: PATH LABEL, PATH an image */
	char *p = buf;
	for (;;) {
		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
			p++;
		if (*p != '#')
			break;
		p += strcspn(p, "\n");
	}
	size_t l = strcspn(p, "\n");
	p[l] = '\0';
	char *sp = strrchr(p, ' ') ? strrchr(p, ' ') : strrchr(p, '\t');
	if (!sp)
		return 0;
	*sp = '\0';
	return has_image_ext(p);
}

/* ---- the sample source ---- */

struct slot {
	int state;                /* 0 free, 1 being made, 2 made */
	int64_t epoch, b;
	int64_t *idx;             /* [batch] */
	float *x;                 /* [batch * per] */
	int rc;
	struct dl_error err;
};

struct source {
	struct list files;
	const struct dl_pipeline *pipe;
	int c, h, w;
	int64_t per;              /* floats per sample */
	uint64_t seed;
	int threads;
	/* prefetch */
	pthread_t thread;
	int started, quit;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int64_t epoch, n, batch, next;   /* the epoch's order and the next
	                                  * batch offset to make */
	int64_t *order;
	int64_t order_cap, slot_cap;     /* samples in order; in each slot */
	struct slot slot[AHEAD];
};

/* Makes samples idx[0..b) into x; the error of the first failing sample
 * in batch order. */
static int make_batch(struct source *S, int64_t epoch, const int64_t *idx, int64_t b,
		      float *x, struct dl_error *err)
{
	int64_t bad = b;
	struct dl_error *errs = calloc((size_t)b, sizeof *errs);
	if (!errs)
		return dl_error_set(err, DL_ERUN, "out of memory");
#pragma omp parallel for schedule(dynamic, 1) num_threads(S->threads)
	for (int64_t i = 0; i < b; i++) {
		char path[8192];
		struct dl_rng r;
		path_of(&S->files.e[idx[i]], path, sizeof path);
		dl_image_rng(&r, S->seed, epoch, idx[i]);
		if (dl_image_sample(S->pipe, S->c, S->h, S->w, path, &r, x + i * S->per,
				    &errs[i]) != 0) {
#pragma omp critical
			if (i < bad)
				bad = i;
		}
	}
	int rc = 0;
	if (bad < b) {
		rc = errs[bad].code ? errs[bad].code : DL_EINPUT;
		dl_error_set(err, rc, "%s", errs[bad].msg);
	}
	free(errs);
	return rc;
}

static void *prefetch(void *arg)
{
	struct source *S = arg;
	pthread_mutex_lock(&S->mu);
	for (;;) {
		struct slot *free_slot = NULL;
		for (int k = 0; k < AHEAD; k++)
			if (S->slot[k].state == 0)
				free_slot = &S->slot[k];
		if (S->quit)
			break;
		if (!free_slot || !S->order || S->next >= S->n) {
			pthread_cond_wait(&S->cv, &S->mu);
			continue;
		}
		struct slot *s = free_slot;
		int64_t off = S->next, b = S->n - off < S->batch ? S->n - off : S->batch;
		S->next += b;
		s->state = 1;
		s->epoch = S->epoch;
		s->b = b;
		memcpy(s->idx, S->order + off, (size_t)b * sizeof *s->idx);
		pthread_mutex_unlock(&S->mu);
		dl_error_clear(&s->err);
		s->rc = make_batch(S, s->epoch, s->idx, b, s->x, &s->err);
		pthread_mutex_lock(&S->mu);
		s->state = 2;
		pthread_cond_broadcast(&S->cv);
	}
	pthread_mutex_unlock(&S->mu);
	return NULL;
}

static void src_plan(void *user, int64_t epoch, const int64_t *order, int64_t n, int64_t batch)
{
	struct source *S = user;
	pthread_mutex_lock(&S->mu);
	for (int k = 0; k < AHEAD; k++) {
		while (S->slot[k].state == 1)
			pthread_cond_wait(&S->cv, &S->mu);
		S->slot[k].state = 0;
	}
	if (n > S->order_cap) {
		free(S->order);
		S->order = malloc((size_t)n * sizeof *S->order);
		S->order_cap = S->order ? n : 0;
	}
	if (batch > S->slot_cap) {
		S->slot_cap = batch;
		for (int k = 0; k < AHEAD; k++) {
			free(S->slot[k].idx);
			free(S->slot[k].x);
			S->slot[k].idx = malloc((size_t)batch * sizeof *S->slot[k].idx);
			S->slot[k].x = malloc((size_t)(batch * S->per) * sizeof *S->slot[k].x);
			if (!S->slot[k].idx || !S->slot[k].x)
				S->slot_cap = 0;
		}
	}
	if (S->order_cap < n || S->slot_cap < batch) {   /* out of memory: */
		S->n = S->next = 0;                       /* no batches ahead */
		pthread_mutex_unlock(&S->mu);
		return;
	}
	memcpy(S->order, order, (size_t)n * sizeof *S->order);
	S->epoch = epoch;
	S->n = n;
	S->batch = batch;
	S->next = 0;
	if (!S->started && pthread_create(&S->thread, NULL, prefetch, S) == 0)
		S->started = 1;
	pthread_cond_broadcast(&S->cv);
	pthread_mutex_unlock(&S->mu);
}

static int src_fill(void *user, int64_t epoch, const int64_t *idx, int64_t b, float *x,
		    struct dl_error *err)
{
	struct source *S = user;
	pthread_mutex_lock(&S->mu);
	for (int k = 0; S->started && k < AHEAD; k++) {
		struct slot *s = &S->slot[k];
		if (s->state == 0 || s->epoch != epoch || s->b != b ||
		    memcmp(s->idx, idx, (size_t)b * sizeof *idx) != 0)
			continue;
		while (s->state == 1)
			pthread_cond_wait(&S->cv, &S->mu);
		int rc = s->rc;
		if (rc)
			dl_error_set(err, rc, "%s", s->err.msg);
		else
			memcpy(x, s->x, (size_t)(b * S->per) * sizeof *x);
		s->state = 0;
		pthread_cond_broadcast(&S->cv);
		pthread_mutex_unlock(&S->mu);
		return rc;
	}
	pthread_mutex_unlock(&S->mu);
	return make_batch(S, epoch, idx, b, x, err);
}

static void src_free(void *user)
{
	struct source *S = user;
	if (!S)
		return;
	if (S->started) {
		pthread_mutex_lock(&S->mu);
		S->quit = 1;
		pthread_cond_broadcast(&S->cv);
		pthread_mutex_unlock(&S->mu);
		pthread_join(S->thread, NULL);
	}
	pthread_mutex_destroy(&S->mu);
	pthread_cond_destroy(&S->cv);
	for (int k = 0; k < AHEAD; k++) {
		free(S->slot[k].idx);
		free(S->slot[k].x);
	}
	free(S->order);
	list_free(&S->files);
	free(S);
}

int dl_image_data_load(struct dl_dataset *d, const char *path, const struct dl_graph *g,
		       int train, uint64_t seed, int threads, int64_t *n_classes,
		       struct dl_error *err)
{
	memset(d, 0, sizeof *d);
	const struct dl_pipeline *pipe;
	int c, h, w;
	int rc = dl_image_input(g, train, &pipe, &c, &h, &w, err);
	if (rc)
		return rc;
	struct source *S = calloc(1, sizeof *S);
	if (!S)
		return dl_error_set(err, DL_ERUN, "out of memory");
	pthread_mutex_init(&S->mu, NULL);
	pthread_cond_init(&S->cv, NULL);
	S->pipe = pipe;
	S->c = c;
	S->h = h;
	S->w = w;
	S->per = (int64_t)c * h * w;
	S->seed = seed;
	S->threads = threads > 0 ? threads : 1;
	int64_t classes = 0;
	struct stat sb;
	if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
		rc = load_folder(&S->files, path, &classes, err);
	else
		rc = load_list(&S->files, path, &classes, err);
	struct dl_sample_source *src = rc ? NULL : calloc(1, sizeof *src);
	d->x = rc ? NULL : calloc(2, sizeof *d->x);
	d->y.ids = rc ? NULL : malloc((size_t)S->files.n * sizeof *d->y.ids + 1);
	if (rc == 0 && (!src || !d->x || !d->y.ids))
		rc = dl_error_set(err, DL_ERUN, "out of memory");
	if (rc) {
		free(src);
		free(d->x);
		free(d->y.ids);
		memset(d, 0, sizeof *d);
		src_free(S);
		return rc;
	}
	src->user = S;
	src->fill = src_fill;
	src->plan = train ? src_plan : NULL;
	src->free = src_free;
	d->src = src;
	d->n = S->files.n;
	d->n_x = 1;
	d->x[0].shape = (struct dl_shape){4, {d->n, c, h, w}};
	d->y.shape = (struct dl_shape){1, {d->n}};
	for (int64_t i = 0; i < d->n; i++)
		d->y.ids[i] = S->files.e[i].label;
	if (n_classes)
		*n_classes = classes;
	/* the first sample now: a wrong shape or an unreadable file fails
	 * before training starts */
	float *one = malloc((size_t)S->per * sizeof *one);
	int64_t first = 0;
	if (!one)
		rc = dl_error_set(err, DL_ERUN, "out of memory");
	else
		rc = make_batch(S, 0, &first, 1, one, err);
	free(one);
	if (rc)
		dl_dataset_free(d);
	return rc;
}
