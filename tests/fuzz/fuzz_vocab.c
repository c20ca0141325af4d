/* libFuzzer target: the text encoder (src/model/vocab.c): the input is
 * encoded by longest match with a vocabulary of one- to three-byte and
 * multi-byte UTF-8 tokens; when it encodes, decoding the ids gives the
 * input back, and when it does not, the error is the uncovered character.
 * (The vocabulary is read from YAML by dl_vocab_parse alone, so the target
 * links the model layer's vocabulary without the ops.) */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "model/vocab.h"

static const char vocab_yaml[] =
	"[\"\\n\", \" \", a, b, c, ab, abc, ca, \"é\", \"€\", \"é€\", \"\\t\", x]\n";

static struct dl_vocab *load(void)
{
	yaml_parser_t p;
	yaml_document_t doc;
	struct dl_vocab *v = NULL;
	struct dl_error err = {0};
	yaml_parser_initialize(&p);
	yaml_parser_set_input_string(&p, (const unsigned char *)vocab_yaml,
				     sizeof vocab_yaml - 1);
	if (!yaml_parser_load(&p, &doc))
		abort();
	if (dl_vocab_parse(&v, "fuzz.yaml", &doc, yaml_document_get_root_node(&doc), &err))
		abort();
	yaml_document_delete(&doc);
	yaml_parser_delete(&p);
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct dl_vocab *v;
	if (!v)
		v = load();
	struct dl_error err = {0};
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
	} else if (err.code != DL_EINPUT || !strstr(err.msg, "not in the vocabulary of fuzz.yaml")) {
		abort();
	}
	return 0;
}
