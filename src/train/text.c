/* Text corpora for training (train/text.h): the file is memory-mapped and
 * encoded once, by longest match, into ids in an unlinked temporary file
 * that is mapped too, so neither copy has to fit in memory; windows of T
 * ids are read from it per batch. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/rng.h"
#include "train/data.h"
#include "train/text.h"

static int64_t id_at(const struct dl_text *x, int64_t i)
{
	const unsigned char *p = x->ids + (size_t)i * (size_t)x->width;
	switch (x->width) {
	case 1: return p[0];
	case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
	default: { uint32_t v; memcpy(&v, p, 4); return v; }
	}
}

static void put_id(unsigned char *ids, int width, int64_t i, int64_t id)
{
	unsigned char *p = ids + (size_t)i * (size_t)width;
	if (width == 1) {
		p[0] = (unsigned char)id;
	} else if (width == 2) {
		uint16_t v = (uint16_t)id;
		memcpy(p, &v, 2);
	} else {
		uint32_t v = (uint32_t)id;
		memcpy(p, &v, 4);
	}
}

void dl_text_free(struct dl_text *x)
{
	if (!x)
		return;
	if (x->map)
		munmap(x->map, x->map_len);
	free(x->heap);
	free(x);
}

/* Room for bytes of ids: a mapping of an unlinked temporary file (in
 * $TMPDIR, else /var/tmp), whose pages the kernel can write back, or
 * else the heap. */
static unsigned char *id_store(size_t bytes, struct dl_text *x)
{
	const char *dir = getenv("TMPDIR");
	char path[4096];
	snprintf(path, sizeof path, "%s/dlrun-ids.XXXXXX", dir && *dir ? dir : "/var/tmp");
	int fd = mkstemp(path);
	if (fd >= 0) {
		unlink(path);
		void *m = MAP_FAILED;
		if (ftruncate(fd, (off_t)bytes) == 0)
			m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
		if (m != MAP_FAILED) {
			x->map = m;
			x->map_len = bytes;
			return m;
		}
	}
	x->heap = malloc(bytes);
	return x->heap;
}

/* The line, column and character position of text[at], for a message. */
static void place(const unsigned char *text, size_t at, long long *line, long long *col,
		  size_t *pos)
{
	*line = 1;
	*col = 1;
	*pos = 0;
	for (size_t i = 0; i < at; i++) {
		if ((text[i] & 0xc0) == 0x80)
			continue;
		++*pos;
		if (text[i] == '\n') {
			++*line;
			*col = 1;
		} else {
			++*col;
		}
	}
}

static int64_t windows(int64_t len, int64_t T)
{
	return len / T;
}

static int set_shape(struct dl_dataset *d, int64_t n, int64_t T)
{
	d->n = n;
	int64_t dims[2] = {n, T};
	d->x[0].shape = dl_shape_make(2, dims);
	d->y.shape = dl_shape_make(2, dims);
	return 0;
}

int dl_text_load(struct dl_dataset *d, const char *path, const struct dl_vocab *v,
		 int64_t T, struct dl_error *err)
{
	memset(d, 0, sizeof *d);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return dl_error_set(err, DL_EINPUT, "%s: cannot open: %s", path, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) != 0 || st.st_size == 0) {
		close(fd);
		return dl_error_set(err, DL_EINPUT, "%s: an empty text; a corpus needs at least "
				    "%lld tokens (a window of --context %lld and its next token)",
				    path, (long long)T + 1, (long long)T);
	}
	size_t size = (size_t)st.st_size;
	const unsigned char *text = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (text == MAP_FAILED)
		return dl_error_set(err, DL_EINPUT, "%s: cannot map the text (a corpus is "
				    "read from a file, not a pipe): %s", path, strerror(errno));
	madvise((void *)text, size, MADV_SEQUENTIAL);
	struct dl_text *x = calloc(1, sizeof *x);
	d->x = calloc(1, sizeof *d->x);
	if (!x || !d->x) {
		free(x);
		free(d->x);
		d->x = NULL;
		munmap((void *)text, size);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	d->n_x = 1;
	d->text = x;
	x->T = T;
	int64_t V = dl_vocab_size(v);
	x->width = V <= 256 ? 1 : V <= 65536 ? 2 : 4;
	unsigned char *ids = id_store(size * (size_t)x->width, x);
	int rc = 0;
	int64_t count = 0;
	if (!ids)
		rc = dl_error_set(err, DL_ERUN, "out of memory");
	for (size_t i = 0; rc == 0 && i < size;) {
		int64_t id = 0;
		size_t k = dl_vocab_match(v, (const char *)text + i, size - i, &id);
		if (k == 0) {
			long long line, col;
			size_t pos;
			place(text, i, &line, &col, &pos);
			char where[4200];
			snprintf(where, sizeof where, "%s:%lld:%lld", path, line, col);
			rc = dl_vocab_uncovered(v, (const char *)text, size, i, pos, where, err);
			break;
		}
		put_id(ids, x->width, count++, id);
		if (id > x->max_id)
			x->max_id = id;
		i += k;
	}
	munmap((void *)text, size);
	if (rc == 0 && count < T + 1)
		rc = dl_error_set(err, DL_EINPUT, "%s: %lld tokens; a corpus needs at least %lld "
				  "(a window of --context %lld and its next token)", path,
				  (long long)count, (long long)T + 1, (long long)T);
	if (rc) {
		dl_dataset_free(d);
		return rc;
	}
	if (x->map)
		madvise(x->map, x->map_len, MADV_RANDOM);
	x->ids = ids;
	x->len = count;
	return set_shape(d, windows(count, T), T);
}

int dl_text_as_val(struct dl_dataset *d, const char *what, struct dl_error *err)
{
	struct dl_text *x = d->text;
	x->consecutive = 1;
	if (x->len < x->T + 1)
		return dl_error_set(err, DL_EINPUT, "%s: %lld validation tokens; a window of "
				    "--context %lld needs %lld", what, (long long)x->len,
				    (long long)x->T, (long long)x->T + 1);
	return set_shape(d, (x->len - 1) / x->T, x->T);
}

int dl_text_split(struct dl_dataset *train, struct dl_dataset *val, double fraction,
		  struct dl_error *err)
{
	memset(val, 0, sizeof *val);
	struct dl_text *t = train->text;
	int64_t nv = (int64_t)(fraction * (double)t->len + 0.5), nt = t->len - nv;
	if (nt < t->T + 1 || nv < t->T + 1)
		return dl_error_set(err, DL_EINPUT, "--val-split %g of %lld tokens leaves %lld "
				    "for training and %lld for validation; each needs a window of "
				    "--context %lld and its next token (%lld)", fraction,
				    (long long)t->len, (long long)nt, (long long)nv,
				    (long long)t->T, (long long)t->T + 1);
	struct dl_text *x = malloc(sizeof *x);
	val->x = calloc(1, sizeof *val->x);
	if (!x || !val->x) {
		free(x);
		free(val->x);
		val->x = NULL;
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	*x = *t;
	x->map = NULL;   /* the training set's storage, borrowed */
	x->heap = NULL;
	x->start = t->start + nt;
	x->len = nv;
	val->n_x = 1;
	val->text = x;
	t->len = nt;
	set_shape(train, windows(nt, t->T), t->T);
	return dl_text_as_val(val, "--val-split", err);
}

void dl_text_offsets(const struct dl_text *x, int64_t seed, int64_t epoch, int shuffle,
		     int64_t *off, int64_t n)
{
	if (!shuffle) {   /* in order; the last window ends at the text's end */
		for (int64_t i = 0; i < n; i++)
			off[i] = i * x->T < x->len - x->T ? i * x->T : x->len - x->T - 1;
		return;
	}
	/* seeded as dl_trainer_run seeds an epoch's shuffle */
	struct dl_rng r;
	dl_rng_seed(&r, (uint64_t)seed * 1000003u + (uint64_t)epoch + 1);
	for (int64_t i = 0; i < n; i++)
		off[i] = (int64_t)dl_rng_below(&r, (uint64_t)(x->len - x->T));
}

void dl_text_window(const struct dl_text *x, int64_t off, float *in, int64_t *labels)
{
	int64_t at = x->start + off;
	for (int64_t j = 0; j < x->T; j++) {
		in[j] = (float)id_at(x, at + j);
		labels[j] = id_at(x, at + j + 1);
	}
}

int64_t dl_model_max_context(const struct dl_graph *g)
{
	int64_t best = -1;
	for (int i = 0; i < g->n_nodes; i++) {
		const struct dl_node *n = &g->nodes[i];
		for (int h = 0; h < n->op->n_hp; h++)
			if (n->hp[h].set && strcmp(n->op->hp[h].name, "max_len") == 0 &&
			    (best < 0 || n->hp[h].i < best))
				best = n->hp[h].i;
	}
	return best;
}
