/* xoshiro256** (Blackman and Vigna), seeded through splitmix64. */
#include <math.h>

#include "engine/rng.h"

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void dl_rng_seed(struct dl_rng *r, uint64_t seed)
{
	uint64_t x = seed;
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&x);
	r->has_spare = 0;
	r->spare = 0;
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t dl_rng_next(struct dl_rng *r)
{
	uint64_t *s = r->s;
	uint64_t result = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

double dl_rng_uniform(struct dl_rng *r)
{
	return (double)(dl_rng_next(r) >> 11) * 0x1.0p-53;
}

double dl_rng_normal(struct dl_rng *r)
{
	if (r->has_spare) {
		r->has_spare = 0;
		return r->spare;
	}
	double u1, u2;
	do
		u1 = dl_rng_uniform(r);
	while (u1 <= 0.0);
	u2 = dl_rng_uniform(r);
	double rad = sqrt(-2.0 * log(u1));
	r->spare = rad * sin(2.0 * M_PI * u2);
	r->has_spare = 1;
	return rad * cos(2.0 * M_PI * u2);
}

uint64_t dl_rng_below(struct dl_rng *r, uint64_t n)
{
	uint64_t limit = UINT64_MAX - UINT64_MAX % n;
	uint64_t x;
	do
		x = dl_rng_next(r);
	while (x >= limit);
	return x % n;
}
