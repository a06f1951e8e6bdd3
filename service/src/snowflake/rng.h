/* Random bits for IDs, from the kernel's CSPRNG (getrandom(2)), buffered per thread.
 *
 * The kernel's generator is the one to trust: it is seeded and reseeded by the kernel, survives
 * VM snapshots and holds no key in our memory. A system call costs ~1 us, so each thread keeps a
 * 4 KiB buffer and refills it in one call: ~2 ns per random byte. No allocation, no lock; a
 * forked child starts with an empty buffer (never the parent's bytes). Bytes handed out are
 * wiped from the buffer, so a later memory disclosure cannot replay earlier IDs' random bits.
 *
 * Failures (-1 with errno) are rare and not retried forever: EAGAIN before the kernel's pool is
 * initialised (sf_rng_probe waits for that once at start), ENOSYS/EPERM where getrandom is
 * missing or filtered. Callers refuse the request then; they never fall back to weaker bits.
 */
#ifndef SF_SNOWFLAKE_RNG_H
#define SF_SNOWFLAKE_RNG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SF_RNG_BUFFER_BYTES 4096

/* Once at start, before the loops: waits (blocking) until the kernel's pool is initialised,
 * logging nothing itself; *waited says whether it had to. Returns 0, or -1 with a reason in err
 * (getrandom unavailable). */
int sf_rng_probe(bool *waited, char *err, size_t errlen);

/* n random bytes into out. Returns 0, or -1 with errno set (nothing useful in out). */
int sf_rng_fill(void *out, size_t n);

/* One random 64-bit word. Returns 0 or -1 (errno). */
int sf_rng_u64(uint64_t *out);

/* Failures since start (all threads), for the metrics. */
uint64_t sf_rng_failures(void);

#endif
