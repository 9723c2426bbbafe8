/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A small, platform-independent PRNG: splitmix64 (Steele, Lea, Flood 2014).
 * Only 64-bit integer arithmetic, so every machine and compiler produces the
 * same stream.  Generators are counter-based: the numbers for element i are
 * drawn from a stream seeded by (seed, stream, i), so any process can make
 * any part of an input without making the rest, and the inputs do not depend
 * on how the work is decomposed.
 */
#ifndef APPS_PRNG_H
#define APPS_PRNG_H

#include <stdint.h>

struct rng {
	uint64_t s;
};

static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The generator for element `i` of stream `stream` of an input with `seed`. */
static inline struct rng rng_at(uint64_t seed, uint64_t stream, uint64_t i)
{
	struct rng r = { mix64(mix64(seed ^ (stream * 0xd1b54a32d192ed03ull)) +
			       i * 0x9e3779b97f4a7c15ull) };
	return r;
}

static inline uint64_t rng_u64(struct rng *r)
{
	r->s += 0x9e3779b97f4a7c15ull;
	return mix64(r->s);
}

/* Uniform in [0, 1), 53 random bits. */
static inline double rng_unit(struct rng *r)
{
	return (double)(rng_u64(r) >> 11) * 0x1p-53;
}

/* Uniform integer in [0, n), n > 0 (multiply-shift; bias < n / 2^64). */
static inline uint64_t rng_below(struct rng *r, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)rng_u64(r) * n) >> 64);
}

/*
 * Standard normal by Irwin-Hall (sum of 12 uniforms minus 6): only additions,
 * so the same on every IEEE machine; its tails stop at +-6, which the inputs
 * here do not need.
 */
static inline double rng_normal(struct rng *r)
{
	double s = 0.0;
	for (int k = 0; k < 12; k++)
		s += rng_unit(r);
	return s - 6.0;
}

#endif
