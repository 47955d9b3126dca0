// Reductions (see reduce.h) as OpenMP loops: parallel over the outer axis when it is large
// enough, otherwise over the reduced axis with per-thread partials combined in thread order.
#include "reduce.h"

#include <algorithm>
#include <vector>

#include "cpu_common.h"

namespace sz::cpu {
namespace {

// JS Max/Min kernels: NaN wins, otherwise the extreme value.
inline float rmax(float acc, float v) { const float m = v > acc ? v : acc; return v != v ? v : m; }
inline float rmin(float acc, float v) { const float m = v < acc ? v : acc; return v != v ? v : m; }

/**
 * acc[i] += sum over rows r in [r0, r1) of x[r * I + i], accumulated in double like the JS
 * kernels. (Float partial sums would be faster, but formulas such as E[x^2] - E[x]^2 on the
 * sums, e.g. synchronised batch norm's, amplify their rounding errors a thousandfold.)
 */
void sumRows(const float* x, int64_t r0, int64_t r1, int64_t I, double* acc) {
  if (I == 1) {
    constexpr int64_t kLanes = 8;
    double lanes[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t r = r0;
    for (; r + kLanes <= r1; r += kLanes)
      for (int64_t j = 0; j < kLanes; ++j) lanes[j] += x[r + j];
    double s = 0;
    for (int64_t j = 0; j < kLanes; ++j) s += lanes[j];
    for (; r < r1; ++r) s += x[r];
    acc[0] += s;
    return;
  }
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = x + r * I;
    for (int64_t i = 0; i < I; ++i) acc[i] += row[i];
  }
}

}  // namespace

void reduce(ReduceOp op, const float* x, float* out, int64_t O, int64_t R, int64_t I, double scale) {
  const int threads = teamSize(O * R * I);
  if (O >= 4 * threads || threads == 1) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t o = 0; o < O; ++o) {
      const float* xo = x + o * R * I;
      float* oo = out + o * I;
      if (op == kSum) {
        std::vector<double> acc(I, 0.0);
        sumRows(xo, 0, R, I, acc.data());
        for (int64_t i = 0; i < I; ++i) oo[i] = static_cast<float>(acc[i] * scale);
      } else {
        for (int64_t i = 0; i < I; ++i) oo[i] = xo[i];
        for (int64_t r = 1; r < R; ++r) {
          const float* row = xo + r * I;
          if (op == kRMax) for (int64_t i = 0; i < I; ++i) oo[i] = rmax(oo[i], row[i]);
          else for (int64_t i = 0; i < I; ++i) oo[i] = rmin(oo[i], row[i]);
        }
      }
    }
    return;
  }
  // Few output rows: split R among the team.
  std::vector<double> partial(static_cast<size_t>(threads) * I);
  std::vector<float> partialF(static_cast<size_t>(threads) * I);
  std::vector<char> has(threads, 0);
  for (int64_t o = 0; o < O; ++o) {
    const float* xo = x + o * R * I;
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num();
      int64_t b, e;
      split(R, b, e);
      has[t] = b < e;
      if (b < e) {
        if (op == kSum) {
          double* acc = partial.data() + t * I;
          std::fill(acc, acc + I, 0.0);
          sumRows(xo, b, e, I, acc);
        } else {
          float* acc = partialF.data() + t * I;
          std::copy(xo + b * I, xo + (b + 1) * I, acc);
          for (int64_t r = b + 1; r < e; ++r) {
            const float* row = xo + r * I;
            if (op == kRMax) for (int64_t i = 0; i < I; ++i) acc[i] = rmax(acc[i], row[i]);
            else for (int64_t i = 0; i < I; ++i) acc[i] = rmin(acc[i], row[i]);
          }
        }
      }
    }
    float* oo = out + o * I;
    if (op == kSum) {
      for (int64_t i = 0; i < I; ++i) {
        double s = 0;
        for (int t = 0; t < threads; ++t) s += has[t] ? partial[t * I + i] : 0.0;
        oo[i] = static_cast<float>(s * scale);
      }
    } else {
      bool first = true;
      for (int t = 0; t < threads; ++t) {
        if (!has[t]) continue;
        for (int64_t i = 0; i < I; ++i) {
          const float v = partialF[t * I + i];
          oo[i] = first ? v : (op == kRMax ? rmax(oo[i], v) : rmin(oo[i], v));
        }
        first = false;
      }
    }
  }
}

}  // namespace sz::cpu
