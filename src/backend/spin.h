/* What the pool and the cpu device share for their brief spins before sleeping:
 * a monotonic clock in nanoseconds and the CPU's spin-wait hint. Internal to
 * src/backend. */
#ifndef OG_SPIN_H
#define OG_SPIN_H

#include <stdint.h>
#include <time.h>

#define OG_SPIN_NS 50000 /* spin before sleeping: a futex wake costs ~10 us */

static inline uint64_t og_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void og_cpu_relax(void) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
}

#endif
