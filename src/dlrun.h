/* libdlrun: run (and train) a dlrun model from a C program.
 *
 * The whole public interface of the library: open a model file with its
 * weights, ask for its inputs and outputs, run batches from the caller's
 * float buffers, take training steps, save the weights, close. Every
 * function that can fail returns 0 or a negative DLRUN_E* code and fills a
 * struct dlrun_error (may be NULL) with a one-line message in the program's
 * own words ("mlp.yaml:4:5: linear: ..."). Nothing here prints or exits.
 *
 * Models are independent: two threads may each run their own model at the
 * same time. One model must not be used by two threads at once.
 *
 *     dlrun_model *m;
 *     struct dlrun_error err;
 *     if (dlrun_open(&m, "mlp.yaml", NULL, &err) < 0) { puts(err.message); ... }
 *     struct dlrun_tensor x = {.data = buf, .ndim = 2, .dims = {3, 16}};
 *     struct dlrun_tensor y = {0};               // filled by the library
 *     dlrun_run(m, &x, 1, &y, 1, &err);          // y.data: [3, 4] floats
 *     dlrun_close(m);
 *
 * See dlrun-api(3). */
#ifndef DLRUN_H
#define DLRUN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DLRUN_API_VERSION 1

/* Error codes, the same as the dlrun program's exit statuses. */
enum {
	DLRUN_OK = 0,
	DLRUN_ERUN = -1,    /* a failure while running: I/O, memory, NaN */
	DLRUN_EINPUT = -2,  /* bad input: model file, weights, shapes, call */
};

#define DLRUN_MAX_DIMS 8

struct dlrun_error {
	int code;            /* DLRUN_OK or a DLRUN_E* code */
	char message[4096];  /* one line, no trailing newline */
};

/* A tensor: float32, row-major, batch first. For dlrun_run's outputs, data
 * NULL asks the library for the buffer (valid until the next call with the
 * same model, or dlrun_close); otherwise capacity (in floats) says how much
 * room the caller's buffer has. */
struct dlrun_tensor {
	float *data;
	int ndim;
	int64_t dims[DLRUN_MAX_DIMS];
	size_t capacity;
};

typedef struct dlrun_model dlrun_model;

/* Opens the model file at model_path with the weights at weights_path
 * (NULL: the model's `weights:` key, else its path with .safetensors; a
 * model without parameters needs none). Models with symbolic sizes load
 * their weights at the first dlrun_run. *m gets the model (NULL on
 * failure); dlrun_close frees it. */
int dlrun_open(dlrun_model **m, const char *model_path,
	       const char *weights_path, struct dlrun_error *err);
/* Frees the model and everything the library returned for it. NULL-safe. */
void dlrun_close(dlrun_model *m);

/* Threads of this model's compute (<= 0: all processors; default 1). */
int dlrun_set_threads(dlrun_model *m, int n, struct dlrun_error *err);

/* The model's inputs and outputs: names, and per-sample shapes (batch
 * excluded; -1 where a size is symbolic). dlrun_*_shape returns the rank
 * and writes at most max sizes. */
int dlrun_n_inputs(const dlrun_model *m);
int dlrun_n_outputs(const dlrun_model *m);
const char *dlrun_input_name(const dlrun_model *m, int i);
const char *dlrun_output_name(const dlrun_model *m, int k);
int dlrun_input_shape(const dlrun_model *m, int i, int64_t *dims, int max);
/* An output's per-sample shape is known once a batch ran (or when the
 * model has no symbolic sizes): before the first run of a model with
 * symbolic sizes it returns -1 and writes nothing (the rank is not known
 * yet either); DLRUN_EINPUT for no such output. */
int dlrun_output_shape(const dlrun_model *m, int k, int64_t *dims, int max);

/* Runs one batch (inference: dropout off, batch norm's running
 * statistics). in[i] is input i with its full shape, batch first (token
 * ids of `dtype: int` inputs as floats); out[k] receives output k's shape
 * and values (see struct dlrun_tensor). n_in and n_out must be the model's
 * counts. As `dlrun infer`, it packs the weights of linear layers and
 * attention projections in place at its first call (the same bytes as
 * dlrun infer); a training step or a save puts them back first. */
int dlrun_run(dlrun_model *m, const struct dlrun_tensor *in, int n_in,
	      struct dlrun_tensor *out, int n_out, struct dlrun_error *err);

/* Training. */
struct dlrun_train_options {
	const char *optimizer;   /* "sgd", "adam" (NULL: adam), "adamw" */
	double lr;               /* <= 0: 1e-3 */
	const char *loss;        /* "cross_entropy" (NULL), "nll", "mse",
	                          * "bce_with_logits" */
	const char *loss_output; /* NULL: the first output */
	uint64_t seed;           /* dropout's random stream */
};
/* Prepares training with the optimizer's state at zero. */
int dlrun_train_begin(dlrun_model *m, const struct dlrun_train_options *o,
		      struct dlrun_error *err);
/* One step on one batch: forward, loss, backward, optimizer update.
 * labels: class ids as floats [N] (or [N, T]) for cross_entropy and nll,
 * targets of the output's shape for mse and bce_with_logits. *loss (may be
 * NULL) gets the batch's loss. */
int dlrun_train_step(dlrun_model *m, const struct dlrun_tensor *in, int n_in,
		     const struct dlrun_tensor *labels, double *loss,
		     struct dlrun_error *err);

/* Decoding step by step (`dlrun generate` is built on these). The model's
 * token input is its first `dtype: int` input of symbolic length; the
 * step keeps each sequence's attention caches and recurrent states, so a
 * new token costs work in proportion to the context, not its square.
 *
 *     dlrun_step_begin(m, 1, 256, &err);
 *     dlrun_step(m, 0, prompt, n, NULL, 0, logits, V, &err);   // [V]
 *     while (...) { id = choose(logits); dlrun_step(m, 0, &id, 1, ...); }
 *     dlrun_step_end(m);
 *
 * Begins `rows` sequences of at most max_len positions each (<= 0: the
 * model's learned positions, or 1024 where it has none). A model that
 * cannot be stepped (a non-causal attention over the tokens, a reduction
 * over them, a fixed-length table added to them) fails at the first
 * dlrun_step, naming the entry. */
int dlrun_step_begin(dlrun_model *m, int rows, int64_t max_len,
		     struct dlrun_error *err);
/* Feeds ids[0 .. n) as the next positions of sequence row and writes
 * the first output's values at the last of them (logits [V]) into
 * out[0 .. capacity). in[] holds the model's other inputs for this
 * sequence, batch 1 (n_in: the model's input count, in[token] ignored;
 * NULL and 0 for a model with the token input alone). Ids out of the
 * embedding's range, and more than max_len positions, are DLRUN_EINPUT. */
int dlrun_step(dlrun_model *m, int row, const int64_t *ids, int n,
	       const struct dlrun_tensor *in, int n_in, float *out,
	       size_t capacity, struct dlrun_error *err);
/* Forgets sequence row's positions: its next dlrun_step starts afresh. */
int dlrun_step_reset(dlrun_model *m, int row, struct dlrun_error *err);
/* Frees the decoding state. NULL-safe. */
void dlrun_step_end(dlrun_model *m);

/* Generation on the step function, as `dlrun generate` (dlrun-api(3)). */
struct dlrun_generate_options {
	int max_new_tokens;      /* <= 0: 100 */
	int greedy;              /* the largest logit (ties: the lowest id) */
	double temperature;      /* <= 0: 1.0 */
	int top_k;               /* 0: all */
	double top_p;            /* <= 0 or >= 1: all */
	uint64_t seed;
	int beams;               /* > 1: beam search */
	double length_penalty;   /* beams; 0 given as 1.0 unless set_lp */
	int set_lp;              /* take length_penalty as it is */
	int64_t eos;             /* an id that ends decoding; < 0: none */
	int64_t context;         /* positions kept; 0: the model's max_len,
	                          * else prompt + max_new_tokens */
};
/* Continues prompt[0 .. n) (token ids; the model's other inputs, if any,
 * in in[] as dlrun_step's) and writes the new ids (eos not included) into
 * out[0 .. capacity), their count in *n_out. */
int dlrun_generate(dlrun_model *m, const int64_t *prompt, size_t n,
		   const struct dlrun_tensor *in, int n_in,
		   const struct dlrun_generate_options *o, int64_t *out,
		   size_t capacity, size_t *n_out, struct dlrun_error *err);

/* Writes the parameters and buffers as a safetensors file, atomically. */
int dlrun_save_weights(dlrun_model *m, const char *path,
		       struct dlrun_error *err);

/* "0.1.0" */
const char *dlrun_version(void);

#ifdef __cplusplus
}
#endif

#endif
