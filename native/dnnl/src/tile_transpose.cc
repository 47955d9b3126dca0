// Tile and transpose (see tile_transpose.h) as OpenMP loops over the rows of the output's
// innermost axis.
#include "tile_transpose.h"

#include <cstring>

#include "cpu_common.h"

namespace sz::cpu {

void tile(const float* x, float* out, const std::vector<int64_t>& xs, const std::vector<int64_t>& os) {
  const int nd = static_cast<int>(xs.size());
  const int64_t inner = xs[nd - 1], outInner = os[nd - 1];
  const int64_t rows = product(os) / outInner;
  std::vector<int64_t> xStride(nd, 1);
  for (int d = nd - 2; d >= 0; --d) xStride[d] = xStride[d + 1] * xs[d + 1];
#pragma omp parallel for schedule(static) num_threads(teamSize(rows * outInner))
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, src = 0;
    for (int d = nd - 2; d >= 0; --d) {
      const int64_t i = rem % os[d];
      rem /= os[d];
      src += (i % xs[d]) * xStride[d];
    }
    float* dst = out + r * outInner;
    for (int64_t k = 0; k < outInner; k += inner) std::memcpy(dst + k, x + src, inner * sizeof(float));
  }
}

void transpose(const float* x, float* out, const std::vector<int64_t>& xs, const std::vector<int64_t>& perm) {
  const int nd = static_cast<int>(xs.size());
  const int64_t total = product(xs);
  std::vector<int64_t> xStride(nd, 1), os(nd), srcStride(nd);
  for (int d = nd - 2; d >= 0; --d) xStride[d] = xStride[d + 1] * xs[d + 1];
  for (int d = 0; d < nd; ++d) {
    os[d] = xs[perm[d]];
    srcStride[d] = xStride[perm[d]];
  }
  const int64_t inner = os[nd - 1], is = srcStride[nd - 1];
  const int64_t rows = total / inner;
#pragma omp parallel for schedule(static) num_threads(teamSize(total))
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, src = 0;
    for (int d = nd - 2; d >= 0; --d) {
      src += (rem % os[d]) * srcStride[d];
      rem /= os[d];
    }
    float* dst = out + r * inner;
    const float* s = x + src;
    for (int64_t k = 0; k < inner; ++k) dst[k] = s[k * is];
  }
}

}  // namespace sz::cpu
