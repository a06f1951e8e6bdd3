/* Test-and-test-and-set spinlock with PAUSE, shared by the ID generator and the cache shards.
 * Spins read-only while the lock is held (no cache-line ping-pong), and yields every 1024 spins:
 * with more runnable threads than cores the holder may be preempted, and spinning would only
 * keep it off the CPU. */
#ifndef SF_UTIL_SPINLOCK_H
#define SF_UTIL_SPINLOCK_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

static inline void spin_lock(_Atomic int *lock)
{
    unsigned spins = 0;
    for (;;) {
        if (!atomic_exchange_explicit(lock, 1, memory_order_acquire))
            return;
        while (atomic_load_explicit(lock, memory_order_relaxed)) {
            cpu_relax();
            if (++spins % 1024 == 0)
                sched_yield();
        }
    }
}

/* Takes the lock if it is free: true if taken. */
static inline bool spin_trylock(_Atomic int *lock)
{
    return !atomic_load_explicit(lock, memory_order_relaxed) &&
           !atomic_exchange_explicit(lock, 1, memory_order_acquire);
}

static inline void spin_unlock(_Atomic int *lock)
{
    atomic_store_explicit(lock, 0, memory_order_release);
}

#endif
