// Softmax forward / backward (see softmax.h) as OpenMP loops over rows. The exponential is
// fastExpNonPositive (its arguments x - max are <= 0), so the per-row loops vectorise.
#include "softmax.h"

#include "cpu_common.h"
#include "fast_math.h"

namespace sz::cpu {

void softmaxRows(const float* x, float* y, int64_t rows, int64_t n) {
  const int threads = teamSize(rows * n);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict xr = x + r * n;
    float* __restrict yr = y + r * n;
    float max = xr[0];
    for (int64_t j = 1; j < n; ++j) max = xr[j] > max ? xr[j] : max;
    for (int64_t j = 0; j < n; ++j) yr[j] = fastExpNonPositive(xr[j] - max);
    float sum = 0.f;
    for (int64_t j = 0; j < n; ++j) sum += yr[j];
    for (int64_t j = 0; j < n; ++j) yr[j] /= sum;
  }
}

void softmaxGradRows(const float* y, const float* dy, float* dx, int64_t rows, int64_t n) {
  const int threads = teamSize(rows * n);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict yr = y + r * n;
    const float* __restrict dyr = dy + r * n;
    float* __restrict dxr = dx + r * n;
    float dot = 0.f;
    for (int64_t j = 0; j < n; ++j) dot += dyr[j] * yr[j];
    for (int64_t j = 0; j < n; ++j) dxr[j] = yr[j] * (dyr[j] - dot);
  }
}

}  // namespace sz::cpu
