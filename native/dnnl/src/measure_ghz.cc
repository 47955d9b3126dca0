// measureGhz (see measure_ghz.h): clock of this core from a chain of dependent integer adds
// (one per cycle), timed with the thread's CPU clock so that preemption does not count.
#include "measure_ghz.h"

#include <time.h>

#include <algorithm>
#include <cstdint>

namespace sz {

double measureGhz(double seconds) {
  auto now = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
  };
  double best = 0;
  const double end = now() + seconds;
  while (now() < end) {
    const uint64_t iters = 10000000;
    uint64_t x = 0;
    const double t0 = now();
    for (uint64_t i = 0; i < iters; ++i) {
      asm volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                   "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
                   : "+r"(x));
    }
    const double dt = now() - t0;
    best = std::max(best, 8.0 * iters / dt / 1e9);
  }
  return best;
}

}  // namespace sz
