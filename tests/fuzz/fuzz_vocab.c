/* libFuzzer target: the text encoder (src/model/vocab.c): the input is
 * encoded by longest match with a vocabulary of one- to three-byte and
 * multi-byte UTF-8 tokens; when it encodes, decoding the ids gives the
 * input back. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/vocab.h"

static const char model[] =
	"inputs: {idx: {shape: [T], dtype: int}}\n"
	"vocab: [\"\\n\", \" \", a, b, c, ab, abc, ca, \"é\", \"€\", \"é€\", \"\\t\", x]\n"
	"layers: [embedding: {num_embeddings: 13, embedding_dim: 2}, "
	"linear: {out_features: 13}]\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct dl_graph *g;
	struct dl_error err = {0};
	if (!g && dl_model_load_buffer(&g, "fuzz.yaml", model, sizeof model - 1, &err))
		abort();
	const struct dl_vocab *v = dl_model_vocab(g);
	int64_t *ids;
	size_t n;
	if (dl_vocab_encode(v, (const char *)data, size, "fuzz", &ids, &n, &err) == 0) {
		size_t at = 0;
		for (size_t i = 0; i < n; i++) {
			size_t len;
			const char *t = dl_vocab_token(v, ids[i], &len);
			if (!t || at + len > size || memcmp(t, data + at, len) != 0)
				abort();
			at += len;
		}
		if (at != size)
			abort();
		free(ids);
	} else if (err.code != DL_EINPUT || !strstr(err.msg, "is not in the vocabulary")) {
		abort();
	}
	return 0;
}
