/* Tests of the data kinds of files (src/io/sniff.c), the CSV reader
 * (src/io/csv.c) and the windows of a text corpus (src/train/text.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_suites.h"
#include "io/csv.h"
#include "io/sniff.h"
#include "model/model.h"
#include "model/vocab.h"
#include "train/data.h"
#include "train/text.h"

static enum dl_file_kind kind_of(const char *s, size_t n, int complete)
{
	return dl_sniff_bytes((const unsigned char *)s, n, complete);
}

/* the kind of a whole file holding the string literal S */
#define KIND(S) kind_of(S, sizeof S - 1, 1)

START_TEST(test_sniff)
{
	ck_assert_int_eq(kind_of("", 0, 1), DL_FILE_EMPTY);
	ck_assert_int_eq(KIND("\x93NUMPY\x01\x00"), DL_FILE_NPY);
	ck_assert_int_eq(KIND("PK\3\4abc"), DL_FILE_ZIP);
	ck_assert_int_eq(KIND("PK\5\6"), DL_FILE_ZIP);
	ck_assert_int_eq(KIND("\x89PNG\r\n\x1a\n...."), DL_FILE_PNG);
	ck_assert_int_eq(KIND("\xff\xd8\xff\xe0"), DL_FILE_JPEG);
	ck_assert_int_eq(KIND("the cat sat.\nthe end\n"), DL_FILE_TEXT);
	ck_assert_int_eq(KIND("h\xc3\xa9 \xe2\x82\xac\n"), DL_FILE_TEXT);
	/* commas on one line only, or in quotes: still text */
	ck_assert_int_eq(KIND("a, b\nc d\n"), DL_FILE_TEXT);
	ck_assert_int_eq(KIND("\"a,b\"\n\"c,d\"\n"), DL_FILE_TEXT);
	ck_assert_int_eq(KIND("a,b,y\n1,2,3\n"), DL_FILE_CSV);
	ck_assert_int_eq(KIND("a,b,y\n"), DL_FILE_CSV);
	ck_assert_int_eq(kind_of("a,b,y\n", 6, 0), DL_FILE_TEXT);
	ck_assert_int_eq(KIND("a,\"b\nc\",y\n1,2,3\n"), DL_FILE_CSV);
	/* NUL bytes, bad UTF-8: not text */
	ck_assert_int_eq(KIND("ab\0cd"), DL_FILE_UNKNOWN);
	ck_assert_int_eq(KIND("ab\xff"), DL_FILE_UNKNOWN);
	ck_assert_int_eq(KIND("ab\xc0\xaf"), DL_FILE_UNKNOWN);
	/* a character cut by the end of a partial read */
	ck_assert_int_eq(kind_of("ab\xe2\x82", 4, 0), DL_FILE_TEXT);
	ck_assert_int_eq(KIND("ab\xe2\x82"), DL_FILE_UNKNOWN);
	struct dl_error err = {0};
	enum dl_file_kind k;
	ck_assert_int_eq(dl_sniff_path("/", &k, &err), 0);
	ck_assert_int_eq(k, DL_FILE_DIR);
	ck_assert_int_eq(dl_sniff_path("/nonexistent/x", &k, &err), DL_EINPUT);
	ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/x: cannot open"));
	ck_assert_str_eq(dl_file_kind_name(DL_FILE_PNG), "a PNG image");
}
END_TEST

/* Writes s to a temporary file; its path in path. */
static void temp_file(char *path, size_t size, const char *s)
{
	snprintf(path, size, "/tmp/dlrun-check-td-XXXXXX");
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, s, strlen(s)), (ssize_t)strlen(s));
	close(fd);
}

START_TEST(test_csv)
{
	char path[64];
	temp_file(path, sizeof path, "a, b ,\"c,\"\"d\"\"\"\r\n\n  \n1,,x\n");
	struct dl_csv c;
	struct dl_error err = {0};
	ck_assert_int_eq(dl_csv_open(&c, path, &err), 0);
	ck_assert_int_eq(dl_csv_next(&c, &err), 1);
	ck_assert_int_eq(c.n, 3);
	ck_assert_int_eq(c.line, 1);
	ck_assert_str_eq(c.field[0], "a");
	ck_assert_str_eq(c.field[1], "b");
	ck_assert_str_eq(c.field[2], "c,\"d\"");
	ck_assert_int_eq(c.col[0], 1);
	ck_assert_int_eq(c.col[1], 4);
	ck_assert_int_eq(c.col[2], 7);
	/* blank lines are skipped, lines still counted */
	ck_assert_int_eq(dl_csv_next(&c, &err), 1);
	ck_assert_int_eq(c.line, 4);
	ck_assert_int_eq(c.n, 3);
	ck_assert_str_eq(c.field[1], "");
	ck_assert_int_eq(c.col[2], 4);
	ck_assert_int_eq(dl_csv_next(&c, &err), 0);
	dl_csv_close(&c);
	unlink(path);
	temp_file(path, sizeof path, "a,b\n1,\"2\n");
	ck_assert_int_eq(dl_csv_open(&c, path, &err), 0);
	ck_assert_int_eq(dl_csv_next(&c, &err), 1);
	ck_assert_int_eq(dl_csv_next(&c, &err), DL_EINPUT);
	ck_assert_ptr_nonnull(strstr(err.msg, ":2:3: a quoted field that does not end"));
	dl_csv_close(&c);
	dl_csv_close(NULL);
	unlink(path);
}
END_TEST

/* Windows are the encoded text at the drawn offsets, labels one later;
 * the offsets lie in [0, len - T) and depend only on (seed, epoch). */
START_TEST(test_windows)
{
	const char *yaml = "inputs: {idx: {shape: [T], dtype: int}}\n"
			   "vocab: [a, b, c, ab, \"\\n\"]\n"
			   "layers: [embedding: {num_embeddings: 5, embedding_dim: 2}, "
			   "linear: {out_features: 5}]\n";
	struct dl_graph *g = NULL;
	struct dl_error err = {0};
	ck_assert_int_eq(dl_model_load_buffer(&g, "m.yaml", yaml, strlen(yaml), &err), 0);
	char path[64];
	const char *text = "abcab\ncabba\nabab\n";
	temp_file(path, sizeof path, text);
	struct dl_dataset d;
	ck_assert_int_eq(dl_text_load(&d, path, dl_model_vocab(g), 3, &err), 0);
	int64_t *want, nw;
	size_t n;
	ck_assert_int_eq(dl_vocab_encode(dl_model_vocab(g), text, strlen(text), "t", &want,
					 &n, &err), 0);
	nw = (int64_t)n;
	ck_assert_int_eq(d.text->len, nw);
	ck_assert_int_eq(d.n, nw / 3);
	int64_t off[8], again[8];
	dl_text_offsets(d.text, 5, 1, 1, off, 8);
	dl_text_offsets(d.text, 5, 1, 1, again, 8);
	int differ = 0;
	for (int i = 0; i < 8; i++) {
		ck_assert_int_ge(off[i], 0);
		ck_assert_int_lt(off[i], nw - 3);
		ck_assert_int_eq(off[i], again[i]);
		float in[3];
		int64_t lab[3];
		dl_text_window(d.text, off[i], in, lab);
		for (int j = 0; j < 3; j++) {
			ck_assert_int_eq((int64_t)in[j], want[off[i] + j]);
			ck_assert_int_eq(lab[j], want[off[i] + j + 1]);
		}
	}
	dl_text_offsets(d.text, 5, 2, 1, again, 8);
	for (int i = 0; i < 8; i++)
		differ |= off[i] != again[i];
	ck_assert_msg(differ, "epochs 1 and 2 drew the same offsets");
	/* in order without shuffle, the last window inside the text */
	dl_text_offsets(d.text, 5, 1, 0, off, 5);
	ck_assert_int_eq(off[0], 0);
	ck_assert_int_eq(off[1], 3);
	ck_assert_int_le(off[4], nw - 4);
	/* the held-out end: consecutive windows of the last tokens */
	struct dl_dataset v;
	ck_assert_int_eq(dl_text_split(&d, &v, 0.4, &err), 0);
	int64_t nv = v.text->len;
	ck_assert_int_eq(d.text->len + nv, nw);
	ck_assert_int_eq(v.n, (nv - 1) / 3);
	float in[3];
	int64_t lab[3];
	dl_text_window(v.text, 0, in, lab);
	ck_assert_int_eq((int64_t)in[0], want[nw - nv]);
	ck_assert_int_eq(lab[2], want[nw - nv + 3]);
	dl_dataset_free(&v);
	dl_dataset_free(&d);
	free(want);
	unlink(path);
	dl_graph_free(g);
}
END_TEST

Suite *make_textdata_suite(void)
{
	Suite *s = suite_create("textdata");
	TCase *tc = tcase_create("textdata");
	tcase_add_test(tc, test_sniff);
	tcase_add_test(tc, test_csv);
	tcase_add_test(tc, test_windows);
	suite_add_tcase(s, tc);
	return s;
}
