/* onnx2npy, a helper of tests/import_node.sh (the ONNX node tests), so
 * that they need no Python:
 *   onnx2npy TENSOR.pb OUT.npy   writes a serialized TensorProto (a node
 *                                test's input_N.pb or output_N.pb) as .npy:
 *                                float and double as float32 ('<f4'),
 *                                int8 to int64 and bool as int64 ('<i8')
 *   onnx2npy --ops MODEL.onnx... prints, per model, a line with its path
 *                                and the op types of its graph's nodes
 * Exit 0, or 1 with a message (3 for an element type it does not write). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import/onnx.h"
#include "import/onnx.pb-c.h"

/* The whole file at path in a buffer the caller frees; *size its bytes. */
static unsigned char *slurp(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "onnx2npy: %s: %s\n", path, strerror(errno));
		return NULL;
	}
	size_t cap = 1 << 16, n = 0;
	unsigned char *buf = malloc(cap);
	for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
		n += got;
		if (n == cap) {
			unsigned char *more = realloc(buf, cap *= 2);
			if (!more) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = more;
		}
	}
	fclose(f);
	if (!buf)
		fprintf(stderr, "onnx2npy: out of memory\n");
	*size = n;
	return buf;
}

static int print_ops(const char *path)
{
	size_t size;
	unsigned char *buf = slurp(path, &size);
	if (!buf)
		return 1;
	Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, size, buf);
	free(buf);
	if (!m || !m->graph) {
		fprintf(stderr, "onnx2npy: %s: not an ONNX model\n", path);
		if (m)
			onnx__model_proto__free_unpacked(m, NULL);
		return 1;
	}
	printf("%s", path);
	for (size_t i = 0; i < m->graph->n_node; i++)
		printf(" %s", m->graph->node[i]->op_type);
	printf("\n");
	onnx__model_proto__free_unpacked(m, NULL);
	return 0;
}

static int to_npy(const char *in, const char *out)
{
	size_t size;
	unsigned char *buf = slurp(in, &size);
	if (!buf)
		return 1;
	Onnx__TensorProto *t = onnx__tensor_proto__unpack(NULL, size, buf);
	free(buf);
	if (!t) {
		fprintf(stderr, "onnx2npy: %s: not a TensorProto\n", in);
		return 1;
	}
	int dt = t->data_type, rc = 0;
	int isf = dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT || dt == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
	int isi = dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 || dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT32 ||
		  dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT8 || dt == ONNX__TENSOR_PROTO__DATA_TYPE__UINT8 ||
		  dt == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
	if (!isf && !isi) {
		fprintf(stderr, "onnx2npy: %s: element type %d is not written\n", in, dt);
		onnx__tensor_proto__free_unpacked(t, NULL);
		return 3;
	}
	size_t n = 1;
	char shape[400] = "(";
	for (size_t i = 0; i < t->n_dims; i++) {
		n *= (size_t)t->dims[i];
		snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%lld,%s",
			 (long long)t->dims[i], i + 1 < t->n_dims ? " " : "");
	}
	strcat(shape, ")");
	size_t have = t->has_raw_data ? t->raw_data.len :
		      dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT ? t->n_float_data * 4 :
		      dt == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE ? t->n_double_data * 8 :
		      dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 ? t->n_int64_data * 8 :
		      t->n_int32_data * 4;
	size_t esize = dt == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE || dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 ? 8 :
		       dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT || dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT32 ? 4 :
		       t->has_raw_data ? 1 : 4;
	if (have < n * esize) {
		fprintf(stderr, "onnx2npy: %s: %zu bytes of data for %zu elements\n", in, have, n);
		onnx__tensor_proto__free_unpacked(t, NULL);
		return 1;
	}
	FILE *f = fopen(out, "wb");
	if (!f) {
		fprintf(stderr, "onnx2npy: %s: %s\n", out, strerror(errno));
		onnx__tensor_proto__free_unpacked(t, NULL);
		return 1;
	}
	char hdr[512];
	int len = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
			   isf ? "<f4" : "<i8", shape);
	int total = 10 + len + 1;
	int pad = (64 - total % 64) % 64;
	fwrite("\x93NUMPY\x01\x00", 1, 8, f);
	unsigned short hl = (unsigned short)(len + pad + 1);
	fputc(hl & 0xff, f);
	fputc(hl >> 8, f);
	fwrite(hdr, 1, (size_t)len, f);
	for (int i = 0; i < pad; i++)
		fputc(' ', f);
	fputc('\n', f);
	for (size_t i = 0; i < n; i++) {
		double d = 0;
		int64_t k = 0;
		dl_onnx_tensor_elem(t, i, &d, &k);
		if (isf) {
			float v = (float)d;
			fwrite(&v, 4, 1, f);
		} else {
			fwrite(&k, 8, 1, f);
		}
	}
	if (fclose(f) != 0) {
		fprintf(stderr, "onnx2npy: %s: write error\n", out);
		rc = 1;
	}
	onnx__tensor_proto__free_unpacked(t, NULL);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && strcmp(argv[1], "--ops") == 0) {
		int rc = 0;
		for (int i = 2; i < argc; i++)
			rc |= print_ops(argv[i]);
		return rc;
	}
	if (argc == 3)
		return to_npy(argv[1], argv[2]);
	fprintf(stderr, "usage: onnx2npy TENSOR.pb OUT.npy | onnx2npy --ops MODEL.onnx...\n");
	return 1;
}
