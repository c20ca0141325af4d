/* dlrun generate: autoregressive decoding of a model's token input, on a
 * stepped session (engine/generate.h): prompts from the command line or
 * stdin, text through the model's vocabulary, the new tokens streamed. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/generate.h"
#include "engine/session.h"
#include "io/npy.h"
#include "model/vocab.h"
#include "verbs/verbs.h"

enum { FMT_TEXT, FMT_IDS, FMT_JSONL };

struct gen {
	struct dl_session *s;
	struct dl_graph *g;
	const struct dl_vocab *voc;
	int fmt, fmt_set;
	int verbose;
	int64_t n;              /* prompts */
	int64_t **prompt;
	size_t *plen;
	int streamed;           /* one prompt, text or ids: token by token */
	int64_t printed;
	int64_t firsts;         /* on_token calls: the first n end the prompts */
	double t_prompts;       /* when every prompt had its first new token */
	FILE *out;
	int logits;             /* the logits output */
};

static volatile sig_atomic_t interrupted;
static volatile int interrupt_flag;

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
	interrupt_flag = 1;
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Writes token id's text; a line of several prompts escapes newlines,
 * tabs and backslashes so that it stays one line. */
static void put_token(struct gen *G, int64_t id, int escape)
{
	size_t len;
	const char *t = dl_vocab_token(G->voc, id, &len);
	if (!t)
		return;
	for (size_t i = 0; i < len; i++) {
		char c = t[i];
		if (escape && c == '\n')
			fputs("\\n", G->out);
		else if (escape && c == '\t')
			fputs("\\t", G->out);
		else if (escape && c == '\\')
			fputs("\\\\", G->out);
		else
			fputc(c, G->out);
	}
}

static int on_token(void *arg, int64_t prompt, int64_t id, double lp)
{
	struct gen *G = arg;
	(void)prompt;
	(void)lp;
	if (++G->firsts == G->n)
		G->t_prompts = now_s();
	if (!G->streamed)
		return interrupted ? DL_ESIGNAL - SIGINT : 0;
	if (G->fmt == FMT_TEXT)
		put_token(G, id, 0);
	else
		fprintf(G->out, "%s%lld", G->printed ? " " : "", (long long)id);
	G->printed++;
	if (fflush(G->out) != 0)
		return errno == EPIPE ? DL_EPIPE : DL_ERUN;
	return interrupted ? DL_ESIGNAL - SIGINT : 0;
}

/* the vocabulary's size against the logits', once they are known */
static int check_vocab(void *arg, struct dl_error *err)
{
	struct gen *G = arg;
	return G->voc ? dl_vocab_check_output(G->g, G->logits, err) : 0;
}

/* "3 1 4" (spaces, tabs or commas) into ids */
static int parse_ids(const char *s, const char *what, int64_t **ids, size_t *n,
		     struct dl_error *err)
{
	size_t cap = 16, k = 0;
	int64_t *v = malloc(cap * sizeof *v);
	if (!v)
		return dl_error_set(err, DL_ERUN, "out of memory");
	const char *p = s;
	for (;;) {
		while (*p == ' ' || *p == '\t' || *p == ',' || *p == '\n' || *p == '\r')
			p++;
		if (!*p)
			break;
		char *end;
		errno = 0;
		long long x = strtoll(p, &end, 10);
		if (end == p || errno || x < 0) {
			free(v);
			return dl_error_set(err, DL_EINPUT, "%s: '%.*s' is not a token id (a "
					    "whole number from 0)", what,
					    (int)strcspn(p, " \t,\n"), p);
		}
		if (k == cap) {
			int64_t *w = realloc(v, 2 * cap * sizeof *w);
			if (!w) {
				free(v);
				return dl_error_set(err, DL_ERUN, "out of memory");
			}
			v = w;
			cap *= 2;
		}
		v[k++] = x;
		p = end;
	}
	*ids = v;
	*n = k;
	return 0;
}

/* One prompt from text or ids; bos put first; ids checked against V */
static int add_prompt(struct gen *G, const char *text, int as_ids, const char *what,
		      struct dl_error *err)
{
	int64_t *ids = NULL;
	size_t n = 0;
	int rc;
	if (as_ids) {
		rc = parse_ids(text, what, &ids, &n, err);
	} else {
		if (!G->voc)
			return dl_error_set(err, DL_EINPUT,
					    "%s: the model has no vocab: key, so text prompts cannot be "
					    "encoded; give --prompt-ids (or add a vocab to the model)",
					    G->g->file);
		rc = dl_vocab_encode(G->voc, text, strlen(text), what, &ids, &n, err);
	}
	if (rc)
		return rc;
	int64_t bos = G->voc ? dl_vocab_bos(G->voc) : -1;
	if (bos >= 0) {
		int64_t *w = realloc(ids, (n + 2) * sizeof *w);
		if (!w) {
			free(ids);
			return dl_error_set(err, DL_ERUN, "out of memory");
		}
		ids = w;
		memmove(ids + 1, ids, n * sizeof *ids);
		ids[0] = bos;
		n++;
	}
	if (n == 0) {
		free(ids);
		return dl_error_set(err, DL_EINPUT, "%s: the prompt is empty; give at least "
				    "one token", what);
	}
	int64_t **pp = realloc(G->prompt, (size_t)(G->n + 1) * sizeof *pp);
	size_t *pl = pp ? realloc(G->plen, (size_t)(G->n + 1) * sizeof *pl) : NULL;
	if (pp)
		G->prompt = pp;
	if (pl)
		G->plen = pl;
	if (!pp || !pl) {
		free(ids);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	G->prompt[G->n] = ids;
	G->plen[G->n] = n;
	G->n++;
	return 0;
}

/* One prompt per line of stdin */
static int read_prompts(struct gen *G, int as_ids, struct dl_error *err)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t got;
	long long no = 0;
	int rc = 0;
	while (rc == 0 && (got = getline(&line, &cap, stdin)) >= 0) {
		no++;
		while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
			line[--got] = '\0';
		if (got == 0)
			continue;
		char what[64];
		snprintf(what, sizeof what, "stdin:%lld", no);
		rc = add_prompt(G, line, as_ids, what, err);
	}
	free(line);
	if (rc == 0 && ferror(stdin))
		rc = dl_error_set(err, DL_ERUN, "stdin: read error: %s", strerror(errno));
	if (rc == 0 && G->n == 0)
		rc = dl_error_set(err, DL_EINPUT, "generate: no prompt: give --prompt TEXT, "
				  "--prompt-ids IDS, or prompts on stdin, one per line");
	return rc;
}

/* The length of the valid UTF-8 sequence at p[0 .. n), or 0 */
static size_t utf8_len(const unsigned char *p, size_t n)
{
	size_t k = p[0] < 0x80 ? 1 : (p[0] >> 5) == 6 ? 2 : (p[0] >> 4) == 14 ? 3 :
		   (p[0] >> 3) == 30 ? 4 : 0;
	if (k == 0 || k > n)
		return 0;
	for (size_t i = 1; i < k; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	uint32_t c = k == 1 ? p[0] : k == 2 ? p[0] & 0x1fu : k == 3 ? p[0] & 0x0fu : p[0] & 0x07u;
	for (size_t i = 1; i < k; i++)
		c = c << 6 | (p[i] & 0x3fu);
	if ((k == 2 && c < 0x80) || (k == 3 && c < 0x800) || (k == 4 && c < 0x10000) ||
	    c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	return k;
}

/* The new tokens' text as a JSON string: the bytes of the tokens joined,
 * escaped as JSON needs; a byte that is not part of valid UTF-8 (a byte
 * vocabulary's model can emit any) becomes U+FFFD, as Python's
 * decode(errors="replace"). */
static int json_text(struct gen *G, const int64_t *ids, size_t n)
{
	size_t len = 0;
	for (size_t k = 0; k < n; k++) {
		size_t l = 0;
		if (dl_vocab_token(G->voc, ids[k], &l))
			len += l;
	}
	unsigned char *b = malloc(len + 1);
	if (!b)
		return -1;
	len = 0;
	for (size_t k = 0; k < n; k++) {
		size_t l = 0;
		const char *t = dl_vocab_token(G->voc, ids[k], &l);
		if (t) {
			memcpy(b + len, t, l);
			len += l;
		}
	}
	fputc('"', G->out);
	for (size_t i = 0; i < len;) {
		unsigned char c = b[i];
		size_t k = utf8_len(b + i, len - i);
		if (k == 0) {
			fputs("\\ufffd", G->out);
			i++;
			continue;
		}
		if (c == '"' || c == '\\')
			fprintf(G->out, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", G->out);
		else if (c == '\t')
			fputs("\\t", G->out);
		else if (c == '\r')
			fputs("\\r", G->out);
		else if (c < 0x20)
			fprintf(G->out, "\\u%04x", c);
		else
			fwrite(b + i, 1, k, G->out);
		i += k;
	}
	fputc('"', G->out);
	free(b);
	return 0;
}

static const char *why_name(int why)
{
	return why == DL_GEN_EOS ? "eos" : why == DL_GEN_STOP ? "stop" : "length";
}

static void write_result(struct gen *G, int64_t p, const struct dl_gen_result *r)
{
	if (G->fmt == FMT_JSONL) {
		fputs("{\"prompt_ids\":[", G->out);
		for (size_t i = 0; i < G->plen[p]; i++)
			fprintf(G->out, "%s%lld", i ? "," : "", (long long)G->prompt[p][i]);
		fputs("],\"ids\":[", G->out);
		for (size_t i = 0; i < r->n; i++)
			fprintf(G->out, "%s%lld", i ? "," : "", (long long)r->ids[i]);
		fputs("]", G->out);
		if (G->voc) {
			fputs(",\"text\":", G->out);
			json_text(G, r->ids, r->n);
		}
		fputs(",\"logprobs\":[", G->out);
		for (size_t i = 0; i < r->n; i++) {
			if (isfinite(r->logprobs[i]))
				fprintf(G->out, "%s%.9g", i ? "," : "", r->logprobs[i]);
			else
				fprintf(G->out, "%snull", i ? "," : "");
		}
		fprintf(G->out, "],\"stop\":\"%s\"}\n", why_name(r->why));
	} else if (G->fmt == FMT_IDS) {
		for (size_t i = 0; i < r->n; i++)
			fprintf(G->out, "%s%lld", i ? " " : "", (long long)r->ids[i]);
		fputc('\n', G->out);
	} else {
		for (size_t i = 0; i < r->n; i++)
			put_token(G, r->ids[i], 1);
		fputc('\n', G->out);
	}
}

/* --stop ID or TEXT (a text must be one token of the vocabulary) */
static int stop_id(struct gen *G, const char *s, int64_t *id, struct dl_error *err)
{
	char *end;
	errno = 0;
	long long x = strtoll(s, &end, 10);
	if (*s && !*end && !errno && x >= 0) {
		*id = x;
		return 0;
	}
	if (!G->voc)
		return dl_error_set(err, DL_EINPUT, "generate: --stop '%s' is not an id, and "
				    "the model has no vocab to read it as text", s);
	int64_t *ids;
	size_t n;
	int rc = dl_vocab_encode(G->voc, s, strlen(s), "--stop", &ids, &n, err);
	if (rc)
		return rc;
	if (n != 1) {
		free(ids);
		return dl_error_set(err, DL_EINPUT, "generate: --stop '%s' is %zu tokens of the "
				    "vocabulary; it must be one token (or give its id)", s, n);
	}
	*id = ids[0];
	free(ids);
	return 0;
}

static int gen_main(int argc, char **argv, struct dl_error *err)
{
	static const struct option opts[] = {
		{"weights", required_argument, NULL, 'w'},
		{"prompt", required_argument, NULL, 'p'},
		{"prompt-ids", required_argument, NULL, 'P'},
		{"prompt-format", required_argument, NULL, 'F'},
		{"max-new-tokens", required_argument, NULL, 'n'},
		{"stop", required_argument, NULL, 'S'},
		{"context", required_argument, NULL, 'c'},
		{"greedy", no_argument, NULL, 'g'},
		{"temperature", required_argument, NULL, 'T'},
		{"top-k", required_argument, NULL, 'k'},
		{"top-p", required_argument, NULL, 'q'},
		{"seed", required_argument, NULL, 's'},
		{"beams", required_argument, NULL, 'B'},
		{"length-penalty", required_argument, NULL, 'L'},
		{"input", required_argument, NULL, 'i'},
		{"source", required_argument, NULL, 'R'},
		{"format", required_argument, NULL, 'f'},
		{"output", required_argument, NULL, 'o'},
		{"verbose", no_argument, NULL, 'v'},
		{"threads", required_argument, NULL, 't'},
		{"ignore-extra", no_argument, NULL, 'X'},
		{"max-memory", required_argument, NULL, 'M'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct gen G;
	memset(&G, 0, sizeof G);
	G.out = stdout;
	struct dl_gen_opts o = {.max_new = 100, .temperature = 1.0, .top_p = 1.0,
				.length_penalty = 1.0, .eos = -1};
	const char *wflag = NULL, *prompt = NULL, *prompt_ids = NULL, *threads = NULL;
	const char *max_memory = NULL, *model = NULL, *output = NULL, *source = NULL;
	int prompt_ids_fmt = 0, ignore_extra = 0, rc = 0;
	char **stops = calloc((size_t)argc + 1, sizeof *stops);
	char **ins = calloc((size_t)argc + 1, sizeof *ins);
	int n_stops = 0, n_ins = 0;
	if (!stops || !ins) {
		free(stops);
		free(ins);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	long long v;
	char *end;
	int c;
	opterr = 0;
	while (rc == 0 && (c = getopt_long(argc, argv, ":w:n:i:o:t:f:vh", opts, NULL)) != -1) {
		switch (c) {
		case 'w': wflag = optarg; break;
		case 'p': prompt = optarg; break;
		case 'P': prompt_ids = optarg; break;
		case 'F':
			if (strcmp(optarg, "text") == 0)
				prompt_ids_fmt = 0;
			else if (strcmp(optarg, "ids") == 0)
				prompt_ids_fmt = 1;
			else
				rc = dl_error_set(err, DL_EINPUT, "generate: --prompt-format is text "
						  "or ids, got '%s'", optarg);
			break;
		case 'n':
			rc = verb_int("generate", "--max-new-tokens", optarg, 0, (long long)1 << 40, &v, err);
			o.max_new = v;
			break;
		case 'S': stops[n_stops++] = optarg; break;
		case 'c':
			rc = verb_int("generate", "--context", optarg, 1, (long long)1 << 40, &v, err);
			o.context = v;
			break;
		case 'g': o.greedy = 1; break;
		case 'T':
			errno = 0;
			o.temperature = strtod(optarg, &end);
			if (end == optarg || *end || errno || !(o.temperature > 0) || isinf(o.temperature))
				rc = dl_error_set(err, DL_EINPUT, "generate: --temperature takes a "
						  "number above 0, got '%s'", optarg);
			break;
		case 'k':
			rc = verb_int("generate", "--top-k", optarg, 1, (long long)1 << 40, &v, err);
			o.top_k = v;
			break;
		case 'q':
			errno = 0;
			o.top_p = strtod(optarg, &end);
			if (end == optarg || *end || errno || !(o.top_p > 0 && o.top_p <= 1))
				rc = dl_error_set(err, DL_EINPUT, "generate: --top-p takes a "
						  "probability in (0, 1], got '%s'", optarg);
			break;
		case 's':
			errno = 0;
			o.seed = strtoull(optarg, &end, 10);
			if (end == optarg || *end || errno || optarg[0] == '-')
				rc = dl_error_set(err, DL_EINPUT, "generate: --seed takes a whole "
						  "number from 0, got '%s'", optarg);
			break;
		case 'B':
			rc = verb_int("generate", "--beams", optarg, 1, 1024, &v, err);
			o.beams = (int)v;
			break;
		case 'L':
			errno = 0;
			o.length_penalty = strtod(optarg, &end);
			if (end == optarg || *end || errno || !isfinite(o.length_penalty))
				rc = dl_error_set(err, DL_EINPUT, "generate: --length-penalty takes a "
						  "number, got '%s'", optarg);
			break;
		case 'i': ins[n_ins++] = optarg; break;
		case 'R': source = optarg; break;
		case 'f':
			G.fmt_set = 1;
			if (strcmp(optarg, "text") == 0)
				G.fmt = FMT_TEXT;
			else if (strcmp(optarg, "ids") == 0)
				G.fmt = FMT_IDS;
			else if (strcmp(optarg, "jsonl") == 0)
				G.fmt = FMT_JSONL;
			else
				rc = dl_error_set(err, DL_EINPUT, "generate: --format is text, ids or "
						  "jsonl, got '%s'", optarg);
			break;
		case 'o': output = optarg; break;
		case 'v': G.verbose = 1; break;
		case 't': threads = optarg; break;
		case 'X': ignore_extra = 1; break;
		case 'M': max_memory = optarg; break;
		case 'h':
			verb_usage(&verb_generate);
			free(stops);
			free(ins);
			return 0;
		default:
			rc = verb_bad_option("generate", c, argv, err);
		}
	}
	if (rc == 0 && o.beams == 0)
		o.beams = 1;
	if (rc == 0 && prompt && prompt_ids)
		rc = dl_error_set(err, DL_EINPUT, "generate: give --prompt or --prompt-ids, not both");
	if (rc == 0)
		rc = verb_model_arg("generate", argc, argv, &model, err);
	if (rc == 0)
		rc = verb_threads("generate", threads, err);
	if (rc == 0)
		rc = verb_max_memory("generate", max_memory, err);
	if (rc == 0)
		rc = dl_session_open(&G.s, model, wflag, ignore_extra, err);
	int tok = -1;
	if (rc == 0) {
		G.g = G.s->g;
		verb_session_env(G.s);
		G.voc = dl_model_vocab(G.g);
		tok = dl_session_token_input(G.s);
		if (tok < 0)
			rc = dl_error_set(err, DL_EINPUT,
					  "%s: no token input: generate decodes a model whose input has "
					  "dtype: int and a symbolic length (idx: {shape: [T], dtype: int})",
					  G.g->file);
	}
	if (rc == 0 && output) {
		o.out = -1;
		for (int k = 0; k < G.g->n_outputs; k++)
			if (strcmp(G.g->output_names[k], output) == 0)
				o.out = k;
		if (o.out < 0)
			rc = dl_error_set(err, DL_EINPUT, "%s: no output named '%s'", G.g->file, output);
	}
	if (rc == 0 && !G.fmt_set)
		G.fmt = G.voc ? FMT_TEXT : FMT_IDS;
	if (rc == 0 && G.fmt == FMT_TEXT && !G.voc)
		rc = dl_error_set(err, DL_EINPUT, "%s: the model has no vocab: key, so its tokens "
				  "have no text; give --format ids or jsonl (or add a vocab)",
				  G.g->file);
	for (int k = 0; rc == 0 && k < n_stops; k++) {
		int64_t id = -1;
		rc = stop_id(&G, stops[k], &id, err);
		if (rc == 0) {
			int64_t *sv = realloc((void *)o.stop, (size_t)(o.n_stop + 1) * sizeof *sv);
			if (!sv)
				rc = dl_error_set(err, DL_ERUN, "out of memory");
			else {
				sv[o.n_stop++] = id;
				o.stop = sv;
			}
		}
	}
	if (rc == 0 && G.voc)
		o.eos = dl_vocab_eos(G.voc);
	/* prompts */
	if (rc == 0) {
		if (prompt)
			rc = add_prompt(&G, prompt, 0, "--prompt", err);
		else if (prompt_ids)
			rc = add_prompt(&G, prompt_ids, 1, "--prompt-ids", err);
		else
			rc = read_prompts(&G, prompt_ids_fmt, err);
	}
	/* the model's longest context */
	if (rc == 0) {
		int64_t longest = dl_model_max_len(G.g);
		if (o.context > 0 && longest > 0 && o.context > longest)
			rc = dl_error_set(err, DL_EINPUT, "generate: --context %lld is longer than "
					  "the model's %lld positions (its max_len)",
					  (long long)o.context, (long long)longest);
		else if (o.context == 0)
			o.context = longest;
	}
	/* the other inputs: -i NAME=PATH (.npy) or --source TEXT */
	struct dl_shape *shape = NULL;
	float **in = NULL;
	if (rc == 0) {
		shape = calloc((size_t)G.g->n_inputs + 1, sizeof *shape);
		in = calloc((size_t)G.g->n_inputs + 1, sizeof *in);
		if (!shape || !in)
			rc = dl_error_set(err, DL_ERUN, "out of memory");
	}
	for (int k = 0; rc == 0 && k < n_ins; k++) {
		const char *eq = strchr(ins[k], '=');
		int idx = -1;
		for (int i = 0; eq && i < G.g->n_inputs; i++)
			if (strlen(G.g->inputs[i].name) == (size_t)(eq - ins[k]) &&
			    strncmp(G.g->inputs[i].name, ins[k], (size_t)(eq - ins[k])) == 0)
				idx = i;
		if (!eq || idx < 0 || idx == tok) {
			rc = dl_error_set(err, DL_EINPUT, "generate: -i takes NAME=PATH for one of "
					  "the model's other inputs, got '%s'", ins[k]);
			break;
		}
		FILE *f = fopen(eq + 1, "rb");
		if (!f) {
			rc = dl_error_set(err, DL_EINPUT, "%s: %s", eq + 1, strerror(errno));
			break;
		}
		struct dl_tensor t;
		int got = dl_npy_read(f, eq + 1, &t, err);
		fclose(f);
		if (got < 0) {
			rc = got;
			break;
		}
		if (got == 0) {
			rc = dl_error_set(err, DL_EINPUT, "%s: no array", eq + 1);
			break;
		}
		free(in[idx]);
		in[idx] = t.data;
		shape[idx] = t.shape;
		if (rc == 0)
			rc = dl_graph_check_input_ids(G.g, idx, t.data, dl_shape_numel(&t.shape),
						      eq + 1, err);
	}
	if (rc == 0 && source) {
		int idx = -1;
		for (int i = 0; i < G.g->n_inputs && idx < 0; i++)
			if (i != tok && G.g->inputs[i].is_int && !in[i])
				idx = i;
		if (idx < 0)
			rc = dl_error_set(err, DL_EINPUT, "%s: --source needs a second input of "
					  "dtype: int (the source ids) that -i does not give",
					  G.g->file);
		int64_t *ids = NULL;
		size_t n = 0;
		if (rc == 0 && !G.voc)
			rc = parse_ids(source, "--source", &ids, &n, err);
		else if (rc == 0)
			rc = dl_vocab_encode(G.voc, source, strlen(source), "--source", &ids, &n, err);
		if (rc == 0) {
			in[idx] = malloc(sizeof(float) * (n + 1));
			if (!in[idx])
				rc = dl_error_set(err, DL_ERUN, "out of memory");
			for (size_t i = 0; rc == 0 && i < n; i++)
				in[idx][i] = (float)ids[i];
			int64_t d[2] = {1, (int64_t)n};
			shape[idx] = dl_shape_make(2, d);
		}
		free(ids);
	}
	for (int i = 0; rc == 0 && i < G.g->n_inputs; i++)
		if (i != tok && !in[i])
			rc = dl_error_set(err, DL_EINPUT, "%s: input '%s' is not given; give it with "
					  "-i %s=PATH (.npy, one row per prompt)%s", G.g->file,
					  G.g->inputs[i].name, G.g->inputs[i].name,
					  G.g->inputs[i].is_int ? " or --source TEXT" : "");
	/* prompt ids in range of the embedding that reads them */
	for (int64_t p = 0; rc == 0 && p < G.n; p++) {
		for (size_t t = 0; rc == 0 && t < G.plen[p]; t++) {
			float f = (float)G.prompt[p][t];
			rc = dl_graph_check_input_ids(G.g, tok, &f, 1, prompt ? "--prompt" :
						      prompt_ids ? "--prompt-ids" : "stdin", err);
		}
	}
	int64_t total = 0;
	struct dl_gen_result *res = NULL;
	if (rc == 0) {
		res = calloc((size_t)G.n, sizeof *res);
		if (!res)
			rc = dl_error_set(err, DL_ERUN, "out of memory");
	}
	double t0 = now_s();
	if (rc == 0) {
		G.streamed = G.n == 1 && G.fmt != FMT_JSONL && o.beams <= 1;
		o.on_token = on_token;
		o.check = check_vocab;
		G.logits = o.out;
		o.arg = &G;
		o.interrupt = &interrupt_flag;
		struct sigaction sa, old;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_sigint;
		sigaction(SIGINT, &sa, &old);
		rc = dl_generate(G.s, tok, G.n, (const int64_t *const *)G.prompt, G.plen, in,
				 shape, &o, res, err);
		sigaction(SIGINT, &old, NULL);
		if (rc == 0 && interrupted)
			rc = DL_ESIGNAL - SIGINT;
		if (G.streamed && G.printed > 0 && rc != DL_EPIPE)
			fputc('\n', G.out);
		if (rc == DL_ESIGNAL - SIGINT)
			dl_error_set(err, rc, "generate: interrupted after %lld tokens",
				     (long long)G.printed);
	}
	double t1 = now_s();
	for (int64_t p = 0; res && p < G.n; p++) {
		total += (int64_t)res[p].n;
		if ((rc == 0 || rc == DL_ESIGNAL - SIGINT) && !G.streamed)
			write_result(&G, p, &res[p]);
	}
	if (rc == 0 && fflush(G.out) != 0)
		rc = errno == EPIPE ? DL_EPIPE : dl_error_set(err, DL_ERUN, "stdout: %s",
							     strerror(errno));
	if (rc == 0 && G.verbose) {
		int64_t ptok = 0;
		for (int64_t p = 0; p < G.n; p++)
			ptok += (int64_t)G.plen[p];
		double tp = G.t_prompts > 0 ? G.t_prompts - t0 : t1 - t0;
		int64_t rest = total - G.n;
		fprintf(stderr, "dlrun: %lld prompt%s, %lld tokens, and their first new tokens in "
			"%.1f ms (%.1f prompt tokens/s); %lld more new tokens in %.1f ms (%.3f ms "
			"per step of %lld, %.1f new tokens/s)\n", (long long)G.n,
			G.n == 1 ? "" : "s", (long long)ptok, 1e3 * tp,
			tp > 0 ? (double)ptok / tp : 0.0, (long long)(rest > 0 ? rest : 0),
			1e3 * (t1 - t0 - tp),
			rest > 0 ? 1e3 * (t1 - t0 - tp) / ((double)rest / (double)G.n) : 0.0,
			(long long)G.n, rest > 0 && t1 - t0 > tp ? (double)rest / (t1 - t0 - tp) : 0.0);
	}
	for (int64_t p = 0; res && p < G.n; p++)
		dl_gen_result_free(&res[p]);
	free(res);
	for (int i = 0; in && G.g && i < G.g->n_inputs; i++)
		free(in[i]);
	free(in);
	free(shape);
	for (int64_t p = 0; p < G.n; p++)
		free(G.prompt[p]);
	free(G.prompt);
	free(G.plen);
	free((void *)o.stop);
	free(stops);
	free(ins);
	dl_session_free(G.s);
	return rc;
}

const struct verb verb_generate = {
	"generate",
	"decode a language or sequence-to-sequence model token by token",
	"usage: dlrun generate MODEL.yaml [-w WEIGHTS] [--prompt TEXT | --prompt-ids IDS]\n"
	"                     [-n N] [--greedy | --temperature T --top-k K --top-p P]\n"
	"                     [--beams B] [--seed S] [--format text|ids|jsonl]\n"
	"\n"
	"Runs the prompt through the model's token input (the first dtype: int input\n"
	"of symbolic length), then chooses one token at a time from the last\n"
	"position's logits, keeping the attention caches and recurrent states\n"
	"between steps. Without --prompt or --prompt-ids, reads one prompt per line\n"
	"of stdin and decodes them as a batch.\n"
	"\n"
	"  -w, --weights PATH       weights (default: the model's weights: key, else\n"
	"                           MODEL with .yaml replaced by .safetensors)\n"
	"      --prompt TEXT        a prompt, encoded with the model's vocab\n"
	"      --prompt-ids IDS     a prompt as token ids (\"3 1 4\")\n"
	"      --prompt-format text|ids  what the lines of stdin are (default text)\n"
	"  -n, --max-new-tokens N   new tokens per prompt at most (default 100)\n"
	"      --stop ID|TEXT       end a prompt's decoding at this token (repeatable);\n"
	"                           the vocab's eos ends it too\n"
	"      --context N          positions kept (default: the model's max_len);\n"
	"                           older tokens are dropped past it\n"
	"      --greedy             the largest logit (ties: the lowest id)\n"
	"      --temperature T      sample from softmax(logits / T) (default 1.0)\n"
	"      --top-k K            sample among the K largest logits only\n"
	"      --top-p P            ... and the smallest set of probability >= P\n"
	"      --seed S             the sampling's seed (default 0)\n"
	"      --beams B            beam search with B beams; prints the best\n"
	"      --length-penalty A   beams: score = sum log p / length^A (default 1.0)\n"
	"  -i, --input NAME=PATH    another input (.npy, one row per prompt or one)\n"
	"      --source TEXT        seq2seq: the source, encoded with the vocab (ids\n"
	"                           without one), for the second int input\n"
	"  -f, --format text|ids|jsonl  output (default text with a vocab, else ids)\n"
	"  -o, --output NAME        the logits output (default the first)\n"
	"  -v, --verbose            prompt and decoding speed on stderr\n"
	"  -t, --threads N          BLAS and op threads (default: all cores)\n"
	"      --ignore-extra       skip (and count) weights the model does not use\n"
	"      --max-memory SIZE    refuse a plan needing more (default: 80% of RAM)\n"
	"  -h, --help               this help\n",
	gen_main,
};
