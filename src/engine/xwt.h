/* Products y = x W^T with W a weight [O, I] (linear layers, attention's
 * projections) at inference, on dlrun's own kernel from weights packed
 * once.
 *
 * At a batch of a few hundred rows OpenBLAS spends much of such a product
 * packing W, at every call: a GPT-2-shaped decoder at batch 1 (128 rows)
 * spent 12% of its forward in sgemm_incopy against 61% in the kernel, and
 * its LM head ran at 90 GFLOP/s. When the weights stay fixed for the life
 * of the graph (dlrun infer, dlrun bench without --train; dlrun_run,
 * which puts the rows back before a training step or a save), each W is
 * instead rearranged once, at its first product, into dl_sgemm_rows's
 * panels of DL_ROWS_W rows of W, k outermost: in place (each panel takes
 * the place of its own rows), so it costs no memory; the last, partial
 * panel goes to a buffer of its own. Every product after that reads the
 * panels as they are (tools/bench/gemm_rows.c's linear table: 0.79x to
 * 0.91x OpenBLAS's time at 128 rows, 0.95-1.00x at 512 and 4096, where
 * dl_sgemm_rows takes the rows in blocks). Each output is then one chain of
 * fused multiply-adds over i, so its bits do not depend on the batch, the
 * rows of a chunk or the threads.
 *
 * A weight whose storage another entry also reads (`share:`, a shared
 * repeat) is never rearranged: the other reader wants rows. Nor is any
 * weight where dl_sgemm_rows has no AVX-512 kernels (`gemm_rows --avx2`:
 * its AVX2 kernels on packed weights took 1.10-1.21x OpenBLAS's time on
 * GPT-2's layer shapes and 3.3x on its LM head), or when no set is
 * given (training). The choice is made at a weight's first product and
 * kept. */
#ifndef DL_XWT_H
#define DL_XWT_H

#include <stddef.h>

struct dl_graph;
struct dl_xwt_set;

/* A set for the loaded graph g (its parameters placed): it records the
 * storage that tied parameters share. NULL when out of memory (the
 * products then run on dl_sgemm). */
struct dl_xwt_set *dl_xwt_set_new(const struct dl_graph *g);
void dl_xwt_set_free(struct dl_xwt_set *s);

/* out[M, O] = x[M, I] W^T, W [O, I] rows I apart (its storage in the
 * parameter block), x rows ldx apart; out overwritten, rows O apart. With
 * s NULL, or W shared, or no AVX-512: dl_sgemm. Otherwise W is packed in
 * place at its first call (after which its storage no longer holds rows)
 * and every call runs on dl_sgemm_rows, shared among the threads by
 * panels. Thread-safe. */
void dl_xwt(struct dl_xwt_set *s, float *out, const float *x, int ldx, int M, int I, float *W,
	    int O);

/* Puts every weight s packed back into rows and forgets it (the library
 * API, before a training step or saving the weights; its next run packs
 * them again). 0, or -1 when out of memory (rows not all back: s stays
 * consistent, so a later call may finish). */
int dl_xwt_restore(struct dl_xwt_set *s);

/* For the tests: how many weights s has packed. */
int dl_xwt_packed(const struct dl_xwt_set *s);

/* For the tests of the out-of-memory paths: the allocator s's packing
 * and restoring take their scratch from (NULL: malloc again). */
void dl_xwt_test_alloc(struct dl_xwt_set *s, void *(*fn)(size_t));

#endif
