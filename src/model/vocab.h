/* The model's vocabulary (its `vocab:` key, dlrun-model(5) section 1):
 * what the ids of its first int input mean, for text in and out (`dlrun
 * generate`, `dlrun train` on a text corpus). Text is encoded by longest
 * match from the left. */
#ifndef DL_VOCAB_H
#define DL_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "engine/error.h"
#include "engine/graph.h"

struct dl_vocab;   /* opaque; owned by the graph, freed by dl_graph_free */

/* The model's vocabulary (its `vocab:` key), or NULL when it has none. */
const struct dl_vocab *dl_model_vocab(const struct dl_graph *g);
int64_t dl_vocab_size(const struct dl_vocab *v);
int64_t dl_vocab_eos(const struct dl_vocab *v);   /* -1: none */
int64_t dl_vocab_bos(const struct dl_vocab *v);   /* -1: none */
/* Encodes len bytes of UTF-8 text by longest match from the left into
 * *ids (malloc()ed, caller frees) and *n. An uncovered character is
 * DL_EINPUT: "WHAT: character 'x' (U+0078) at position P is not in the
 * vocabulary of MODEL" (WHAT e.g. "--prompt" or a file name; P counts
 * characters from 0). */
int dl_vocab_encode(const struct dl_vocab *v, const char *text, size_t len,
		    const char *what, int64_t **ids, size_t *n, struct dl_error *err);
/* The bytes of token id (not NUL-terminated) and their count in *len;
 * NULL for an id outside the vocabulary. */
const char *dl_vocab_token(const struct dl_vocab *v, int64_t id, size_t *len);

/* The longest token that text[0, len) starts with: its id in *id and its
 * length in bytes as the result; 0 when no token covers text[0] (or len
 * is 0). For encoders that keep their own place (a corpus's line and
 * column). */
size_t dl_vocab_match(const struct dl_vocab *v, const char *text, size_t len,
		      int64_t *id);
/* The message for an uncovered character at text[at] (character number
 * pos, from 0), as dl_vocab_encode words it after "WHERE: ". */
int dl_vocab_uncovered(const struct dl_vocab *v, const char *text, size_t len,
		       size_t at, size_t pos, const char *where,
		       struct dl_error *err);

/* The vocabulary's size must equal the last dimension of the logits, the
 * model's output k: checked once that output's shape is known (after
 * shape inference). An error names the `vocab:` key's place. */
int dl_vocab_check_output(const struct dl_graph *g, int k, struct dl_error *err);

/* For the loader: reads the `vocab:` value y of the YAML document doc of
 * the model file model_file (a `file:` is relative to it) into *out. */
struct yaml_document_s;
struct yaml_node_s;
int dl_vocab_parse(struct dl_vocab **out, const char *model_file,
		   struct yaml_document_s *doc, struct yaml_node_s *y,
		   struct dl_error *err);
/* NULL-safe. */
void dl_vocab_free(struct dl_vocab *v);

#endif
