// Helpers shared by the OpenMP kernels (elementwise, reduce, tile_transpose, norm, pool):
// the team size for a job and the static split of a range over the team. Work is split
// statically and partial sums are combined in thread order, so results are deterministic
// for a given thread count.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace sz::cpu {

constexpr int64_t kParallelMin = 1 << 17;  // elements (512 KB) below which one thread does the job
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

inline int64_t product(const std::vector<int64_t>& xs) {
  int64_t p = 1;
  for (int64_t x : xs) p *= x;
  return p;
}

/** Static split of [0, n) among the team: this thread's [begin, end). */
inline void split(int64_t n, int64_t& begin, int64_t& end) {
  const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
  const int64_t q = n / nt, r = n % nt;
  begin = t * q + std::min(t, r);
  end = begin + q + (t < r ? 1 : 0);
}

inline int teamSize(int64_t work) {
  return work >= kParallelMin ? omp_get_max_threads() : 1;
}

}  // namespace sz::cpu
