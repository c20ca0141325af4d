/* Tests of the model's vocabulary (src/model/vocab.c): the three forms of
 * `vocab:`, longest match from the left, multi-byte UTF-8 tokens, decoding
 * back, and the message for an uncovered character. Models are built in
 * memory with dl_model_load_buffer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "model/model.h"
#include "model/vocab.h"

static struct dl_graph *load(const char *yaml, struct dl_error *err)
{
	struct dl_graph *g = NULL;
	dl_error_clear(err);
	dl_model_load_buffer(&g, "m.yaml", yaml, strlen(yaml), err);
	return g;
}

#define MODEL(V, VOCAB) \
	"inputs: {idx: {shape: [T], dtype: int}}\n" \
	"vocab: " VOCAB "\n" \
	"layers: [embedding: {num_embeddings: " #V ", embedding_dim: 4}, linear: {out_features: " #V "}]\n"

/* Decodes ids back to text: the tokens' bytes concatenated. */
static char *decode(const struct dl_vocab *v, const int64_t *ids, size_t n)
{
	char *out = malloc(n * 8 + 1);
	size_t used = 0;
	for (size_t i = 0; i < n; i++) {
		size_t len;
		const char *t = dl_vocab_token(v, ids[i], &len);
		ck_assert_ptr_nonnull(t);
		memcpy(out + used, t, len);
		used += len;
	}
	out[used] = 0;
	return out;
}

START_TEST(test_longest_match)
{
	struct dl_error err;
	/* "ab" and "abc" beside their letters: longest match from the left
	 * takes "abc", then "a", "b"... */
	struct dl_graph *g = load(MODEL(7, "[a, b, c, ab, abc, \"\\n\", \"é\"]"), &err);
	ck_assert_msg(g != NULL, "%s", err.msg);
	const struct dl_vocab *v = dl_model_vocab(g);
	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(dl_vocab_size(v), 7);
	ck_assert_int_eq(dl_vocab_eos(v), -1);
	ck_assert_int_eq(dl_vocab_bos(v), -1);
	const char *text = "abcabé\nba";
	int64_t *ids;
	size_t n;
	ck_assert_int_eq(dl_vocab_encode(v, text, strlen(text), "--prompt", &ids, &n, &err), 0);
	int64_t want[] = {4, 3, 6, 5, 1, 0};
	ck_assert_uint_eq(n, 6);
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(ids[i], want[i]);
	char *back = decode(v, ids, n);
	ck_assert_str_eq(back, text);
	free(back);
	free(ids);
	size_t len;
	ck_assert_ptr_null(dl_vocab_token(v, 7, &len));
	ck_assert_ptr_null(dl_vocab_token(v, -1, &len));
	/* the empty text is no ids */
	ck_assert_int_eq(dl_vocab_encode(v, "", 0, "--prompt", &ids, &n, &err), 0);
	ck_assert_uint_eq(n, 0);
	free(ids);
	dl_graph_free(g);
}
END_TEST

START_TEST(test_uncovered)
{
	struct dl_error err;
	struct dl_graph *g = load(MODEL(3, "[a, b, \"é\"]"), &err);
	ck_assert_msg(g != NULL, "%s", err.msg);
	const struct dl_vocab *v = dl_model_vocab(g);
	int64_t *ids = (int64_t *)&err;
	size_t n = 7;
	/* position counts characters: é is one */
	const char *text = "aébxa";
	dl_error_clear(&err);
	ck_assert_int_eq(dl_vocab_encode(v, text, strlen(text), "--prompt", &ids, &n, &err),
			 DL_EINPUT);
	ck_assert_ptr_null(ids);
	ck_assert_uint_eq(n, 0);
	ck_assert_str_eq(err.msg, "--prompt: character 'x' (U+0078) at position 3 "
			 "is not in the vocabulary of m.yaml");
	/* a multi-byte character is shown whole, a newline escaped */
	dl_error_clear(&err);
	dl_vocab_encode(v, "a€", 4, "p.txt", &ids, &n, &err);
	ck_assert_str_eq(err.msg, "p.txt: character '€' (U+20AC) at position 1 "
			 "is not in the vocabulary of m.yaml");
	dl_error_clear(&err);
	dl_vocab_encode(v, "\n", 1, "p.txt", &ids, &n, &err);
	ck_assert_str_eq(err.msg, "p.txt: character '\\n' (U+000A) at position 0 "
			 "is not in the vocabulary of m.yaml");
	dl_error_clear(&err);
	dl_vocab_encode(v, "a\xff", 2, "p.txt", &ids, &n, &err);
	ck_assert_str_eq(err.msg, "p.txt: byte 0xFF at position 1 is not UTF-8 and "
			 "not in the vocabulary of m.yaml");
	dl_graph_free(g);
}
END_TEST

START_TEST(test_bytes)
{
	struct dl_error err;
	struct dl_graph *g = load(MODEL(256, "{bytes: true, eos: 0, bos: 10}"), &err);
	ck_assert_msg(g != NULL, "%s", err.msg);
	const struct dl_vocab *v = dl_model_vocab(g);
	ck_assert_int_eq(dl_vocab_size(v), 256);
	ck_assert_int_eq(dl_vocab_eos(v), 0);
	ck_assert_int_eq(dl_vocab_bos(v), 10);
	const char *text = "h\xc3\xa9\xff";   /* any bytes, valid UTF-8 or not */
	int64_t *ids;
	size_t n;
	ck_assert_int_eq(dl_vocab_encode(v, text, 4, "--prompt", &ids, &n, &err), 0);
	ck_assert_uint_eq(n, 4);
	ck_assert_int_eq(ids[0], 'h');
	ck_assert_int_eq(ids[1], 0xc3);
	ck_assert_int_eq(ids[2], 0xa9);
	ck_assert_int_eq(ids[3], 0xff);
	free(ids);
	size_t len;
	const char *t = dl_vocab_token(v, 0xe9, &len);
	ck_assert_uint_eq(len, 1);
	ck_assert_int_eq((unsigned char)t[0], 0xe9);
	dl_graph_free(g);
	g = load(MODEL(256, "bytes"), &err);
	ck_assert_msg(g != NULL, "%s", err.msg);
	ck_assert_int_eq(dl_vocab_size(dl_model_vocab(g)), 256);
	dl_graph_free(g);
	/* no vocab: key, no vocabulary */
	g = load("inputs: {x: {shape: [3]}}\nlayers: [linear: {out_features: 2}]\n", &err);
	ck_assert_msg(g != NULL, "%s", err.msg);
	ck_assert_ptr_null(dl_model_vocab(g));
	dl_graph_free(g);
}
END_TEST

START_TEST(test_size_check)
{
	struct dl_error err;
	/* fixed sizes: checked at load */
	const char *m = "inputs: {idx: {shape: [8], dtype: int}}\n"
			"vocab: [a, b, c]\n"
			"layers: [embedding: {num_embeddings: 3, embedding_dim: 4}, linear: {out_features: 5}]\n";
	struct dl_graph *g = load(m, &err);
	ck_assert_ptr_null(g);
	ck_assert_str_eq(err.msg, "m.yaml:2:8: vocab: 3 tokens, but the logits (output "
			 "'output') have 5 on their last dimension; the vocabulary's "
			 "size must equal it");
	/* a symbolic length: checked once the shape is known */
	g = load(MODEL(3, "[a, b]"), &err);
	ck_assert_msg(g != NULL, "%s", err.msg);
	const char *spec = "idx=4";
	ck_assert_int_eq(dl_model_infer_spec(g, &spec, 1, 2, &err), 0);
	ck_assert_int_eq(dl_vocab_check_output(g, 0, &err), DL_EINPUT);
	ck_assert_ptr_nonnull(strstr(err.msg, "m.yaml:2:8: vocab: 2 tokens"));
	dl_graph_free(g);
}
END_TEST

Suite *make_vocab_suite(void)
{
	Suite *s = suite_create("vocab");
	TCase *tc = tcase_create("vocab");
	tcase_add_test(tc, test_longest_match);
	tcase_add_test(tc, test_uncovered);
	tcase_add_test(tc, test_bytes);
	tcase_add_test(tc, test_size_check);
	suite_add_tcase(s, tc);
	return s;
}
