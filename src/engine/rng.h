/* Deterministic random numbers (xoshiro256**, seeded by splitmix64): the
 * same seed gives the same stream on every machine. The state is plain data
 * so checkpoints can save and restore it. */
#ifndef DL_RNG_H
#define DL_RNG_H

#include <stdint.h>

struct dl_rng {
	uint64_t s[4];
	int has_spare;    /* Box-Muller gives normals in pairs */
	double spare;
};

void dl_rng_seed(struct dl_rng *r, uint64_t seed);
uint64_t dl_rng_next(struct dl_rng *r);
/* Uniform in [0, 1), 53 random bits. */
double dl_rng_uniform(struct dl_rng *r);
/* Standard normal. */
double dl_rng_normal(struct dl_rng *r);
/* Uniform integer in [0, n), n > 0, without modulo bias. */
uint64_t dl_rng_below(struct dl_rng *r, uint64_t n);

#endif
