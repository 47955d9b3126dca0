// Pooling kernels (see pool.h) as OpenMP loops over output rows (forward) or samples
// (gradients, which scatter into overlapping windows).
#include "pool.h"

#include <algorithm>
#include <vector>

#include "cpu_common.h"

namespace sz::cpu {
namespace {

/** Visits the valid input positions (h, w) of the window of output (oh, ow). */
template <class F>
inline void window(const PoolParams& p, int64_t oh, int64_t ow, F f) {
  const int64_t h0 = oh * p.sh - p.pt, w0 = ow * p.sw - p.pl;
  const int64_t hs = std::max<int64_t>(0, h0), he = std::min(p.H, h0 + p.KH);
  const int64_t ws = std::max<int64_t>(0, w0), we = std::min(p.W, w0 + p.KW);
  for (int64_t h = hs; h < he; ++h)
    for (int64_t w = ws; w < we; ++w) f(h, w);
}

void poolForward(const PoolParams& p, const float* xd, float* yd, bool isMax) {
  const int64_t C = p.C;
#pragma omp parallel for schedule(static) num_threads(teamSize(p.N * p.OH * p.OW * p.C * p.KH * p.KW))
  for (int64_t nh = 0; nh < p.N * p.OH; ++nh) {
    const int64_t n = nh / p.OH, oh = nh % p.OH;
    const float* xn = xd + n * p.H * p.W * C;
    for (int64_t ow = 0; ow < p.OW; ++ow) {
      float* y = yd + ((n * p.OH + oh) * p.OW + ow) * C;
      if (isMax) {
        // JS: keep the first strictly greater value (NaN never wins).
        for (int64_t c = 0; c < C; ++c) y[c] = -kInf;
        window(p, oh, ow, [&](int64_t h, int64_t w) {
          const float* xp = xn + (h * p.W + w) * C;
          for (int64_t c = 0; c < C; ++c) y[c] = xp[c] > y[c] ? xp[c] : y[c];
        });
      } else {
        for (int64_t c = 0; c < C; ++c) y[c] = 0.f;
        int count = 0;
        window(p, oh, ow, [&](int64_t h, int64_t w) {
          const float* xp = xn + (h * p.W + w) * C;
          for (int64_t c = 0; c < C; ++c) y[c] += xp[c];
          ++count;
        });
        const float inv = 1.f / static_cast<float>(count);
        for (int64_t c = 0; c < C; ++c) y[c] = count ? y[c] * inv : kNaN;
      }
    }
  }
}

}  // namespace

void maxPool(const PoolParams& p, const float* x, float* y) { poolForward(p, x, y, true); }

void avgPool(const PoolParams& p, const float* x, float* y) { poolForward(p, x, y, false); }

void maxPoolGrad(const PoolParams& p, const float* dy, const float* x, float* dx) {
  const int64_t C = p.C;
  const int64_t imgIn = p.H * p.W * C, imgOut = p.OH * p.OW * C;
  std::fill(dx, dx + p.N * imgIn, 0.f);
#pragma omp parallel num_threads(teamSize(p.N * imgOut * p.KH * p.KW))
  {
    std::vector<float> best(C);
    std::vector<int64_t> pos(C);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < p.N; ++n) {
      const float* xn = x + n * imgIn;
      float* dxn = dx + n * imgIn;
      const float* dyn = dy + n * imgOut;
      for (int64_t oh = 0; oh < p.OH; ++oh) {
        for (int64_t ow = 0; ow < p.OW; ++ow) {
          std::fill(best.begin(), best.end(), -kInf);
          std::fill(pos.begin(), pos.end(), -1);
          window(p, oh, ow, [&](int64_t h, int64_t w) {
            const int64_t off = (h * p.W + w) * C;
            const float* xp = xn + off;
            for (int64_t c = 0; c < C; ++c) {
              if (xp[c] > best[c]) {
                best[c] = xp[c];
                pos[c] = off + c;
              }
            }
          });
          const float* g = dyn + (oh * p.OW + ow) * C;
          for (int64_t c = 0; c < C; ++c) {
            if (pos[c] >= 0) dxn[pos[c]] += g[c];
          }
        }
      }
    }
  }
}

void avgPoolGrad(const PoolParams& p, const float* dy, float* dx) {
  const int64_t C = p.C;
  const int64_t imgIn = p.H * p.W * C, imgOut = p.OH * p.OW * C;
  const float mult = 1.f / static_cast<float>(p.KH * p.KW);
  std::fill(dx, dx + p.N * imgIn, 0.f);
#pragma omp parallel for schedule(static) num_threads(teamSize(p.N * imgOut * p.KH * p.KW))
  for (int64_t n = 0; n < p.N; ++n) {
    float* dxn = dx + n * imgIn;
    const float* dyn = dy + n * imgOut;
    for (int64_t oh = 0; oh < p.OH; ++oh) {
      for (int64_t ow = 0; ow < p.OW; ++ow) {
        const float* g = dyn + (oh * p.OW + ow) * C;
        window(p, oh, ow, [&](int64_t h, int64_t w) {
          float* d = dxn + (h * p.W + w) * C;
          for (int64_t c = 0; c < C; ++c) d[c] += g[c] * mult;
        });
      }
    }
  }
}

}  // namespace sz::cpu
