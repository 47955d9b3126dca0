// Batch norm and group norm kernels (see norm.h) as OpenMP loops. Both end in the same
// per-channel epilogue, y = (x - mean) * a + offset with a = scale * invstd, and their
// gradients in dx = k1 * dy + k2 * (x - mean) + k3; only the statistics differ (over all
// rows for batch norm, per sample and group for group norm).
#include "norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_common.h"

namespace sz::cpu {
namespace {

// ----------------------------------------------------------------- the shared epilogues

/** y = (x - m) * a + o per channel over `rows` rows of C values. */
inline void normalizeRows(const float* x, float* y, int64_t rows, int64_t C, const float* m, const float* a,
                          const float* o) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    float* yr = y + r * C;
    for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m[c]) * a[c] + o[c];
  }
}

/** dx = k1 * dy + k2 * (x - m) + k3 per channel over `rows` rows of C values. */
inline void normalizeGradRows(const float* dy, const float* x, float* dx, int64_t rows, int64_t C, const float* m,
                              const float* k1, const float* k2, const float* k3) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    const float* gr = dy + r * C;
    float* dr = dx + r * C;
    for (int64_t c = 0; c < C; ++c) dr[c] = k1[c] * gr[c] + k2[c] * (xr[c] - m[c]) + k3[c];
  }
}

/** normalizeRows over all rows, split statically over the team. */
void normalizeAll(const float* x, float* y, int64_t rows, int64_t C, const float* m, const float* a, const float* o) {
#pragma omp parallel num_threads(teamSize(rows * C))
  {
    int64_t b, e;
    split(rows, b, e);
    normalizeRows(x + b * C, y + b * C, e - b, C, m, a, o);
  }
}

/**
 * Adds one row's (x - k) and (x - k)^2 into s and ss. Shifting by k, a value of the data
 * near the mean, keeps E[(x-k)^2] - E[x-k]^2 from cancelling catastrophically when
 * |mean| >> std.
 */
inline void addShiftedRow(const float* xr, const double* k, double* s, double* ss, int64_t C) {
  for (int64_t c = 0; c < C; ++c) {
    const double v = static_cast<double>(xr[c]) - k[c];
    s[c] += v;
    ss[c] += v * v;
  }
}

/**
 * Per-channel sums over the rows of [rows, C] data, in double, deterministic: each thread
 * sums a static block of rows, blocks are added in thread order. `f(row, acc)` adds one row
 * into `acc` (K double accumulators of C values each).
 */
template <int K, class F>
void channelSums(int64_t rows, int64_t C, std::vector<double>& total, F f) {
  const int threads = teamSize(rows * C);
  std::vector<double> partial(static_cast<size_t>(threads) * K * C, 0.0);
#pragma omp parallel num_threads(threads)
  {
    int64_t b, e;
    split(rows, b, e);
    double* acc = partial.data() + static_cast<size_t>(omp_get_thread_num()) * K * C;
    for (int64_t r = b; r < e; ++r) f(r, acc);
  }
  total.assign(static_cast<size_t>(K) * C, 0.0);
  for (int t = 0; t < threads; ++t)
    for (int64_t i = 0; i < K * C; ++i) total[i] += partial[static_cast<size_t>(t) * K * C + i];
}

}  // namespace

// --------------------------------------------------------------------------- batch norm

void batchNorm(const float* x, float* y, int64_t rows, int64_t C, ChannelParam mean, ChannelParam var,
               ChannelParam scale, ChannelParam offset, double eps) {
  auto at = [](const ChannelParam& p, int64_t c, float dflt) { return p.data ? p.data[p.length == 1 ? 0 : c] : dflt; };
  std::vector<float> m(C), a(C), o(C);
  for (int64_t c = 0; c < C; ++c) {
    m[c] = at(mean, c, 0.f);
    a[c] = static_cast<float>(at(scale, c, 1.f) / std::sqrt(static_cast<double>(at(var, c, 0.f)) + eps));
    o[c] = at(offset, c, 0.f);
  }
  normalizeAll(x, y, rows, C, m.data(), a.data(), o.data());
}

void bnTrain(const float* x, float* y, int64_t rows, int64_t C, const float* scale, const float* offset,
             double eps, float* meanOut, float* varOut) {
  // Sums of (x - k) and (x - k)^2 with k = the first row.
  std::vector<double> k(x, x + C);
  std::vector<double> sums;
  channelSums<2>(rows, C, sums, [&](int64_t r, double* acc) { addShiftedRow(x + r * C, k.data(), acc, acc + C, C); });
  std::vector<float> m(C), a(C), o(C);
  for (int64_t c = 0; c < C; ++c) {
    const double d = sums[c] / rows;
    const double mean = k[c] + d;
    const double var = std::max(0.0, sums[C + c] / rows - d * d);
    meanOut[c] = static_cast<float>(mean);
    varOut[c] = static_cast<float>(var);
    m[c] = static_cast<float>(mean);
    a[c] = static_cast<float>((scale ? scale[c] : 1.0) / std::sqrt(static_cast<double>(varOut[c]) + eps));
    o[c] = offset ? offset[c] : 0.f;
  }
  normalizeAll(x, y, rows, C, m.data(), a.data(), o.data());
}

void bnTrainGrad(const float* dy, const float* x, int64_t rows, int64_t C, const float* scale, const float* mean,
                 const float* var, const float* dmean, const float* dvar, double eps, float* dx, float* dscale,
                 float* doffset) {
  std::vector<double> sums;  // [sum dy, sum dy * (x - mean)]
  channelSums<2>(rows, C, sums, [&](int64_t r, double* acc) {
    const float* xr = x + r * C;
    const float* gr = dy + r * C;
    double* s = acc;
    double* sx = acc + C;
    for (int64_t c = 0; c < C; ++c) {
      s[c] += gr[c];
      sx[c] += static_cast<double>(gr[c]) * (static_cast<double>(xr[c]) - mean[c]);
    }
  });
  std::vector<float> k1(C), k2(C), k3(C);
  for (int64_t c = 0; c < C; ++c) {
    const double g = scale ? scale[c] : 1.0;
    const double invstd = 1.0 / std::sqrt(static_cast<double>(var[c]) + eps);
    const double sdy = sums[c], sdyx = sums[C + c];
    doffset[c] = static_cast<float>(sdy);
    dscale[c] = static_cast<float>(sdyx * invstd);
    const double dm = dmean ? dmean[c] : 0.0;
    const double dv = dvar ? dvar[c] : 0.0;
    k1[c] = static_cast<float>(g * invstd);
    k2[c] = static_cast<float>(-g * invstd * invstd * invstd * sdyx / rows + 2.0 * dv / rows);
    k3[c] = static_cast<float>(-g * invstd * sdy / rows + dm / rows);
  }
#pragma omp parallel num_threads(teamSize(rows * C))
  {
    int64_t b, e;
    split(rows, b, e);
    normalizeGradRows(dy + b * C, x + b * C, dx + b * C, e - b, C, mean, k1.data(), k2.data(), k3.data());
  }
}

// --------------------------------------------------------------------------- group norm

void gnTrain(const GroupShape& sh, const float* x, float* y, const float* scale, const float* offset, double eps,
             float* meanOut, float* rstdOut) {
  const int64_t C = sh.C, S = sh.S, G = sh.G, Cg = sh.Cg;
#pragma omp parallel num_threads(teamSize(sh.B * S * C))
  {
    // Per channel: sums of (x - k) and (x - k)^2 with k the sample's first position, then
    // Chan's combination of the channels of a group.
    std::vector<double> sum(C), sumSq(C), k(C);
    std::vector<float> a(C), o(C), m(C);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < sh.B; ++b) {
      const float* xb = x + b * S * C;
      std::fill(sum.begin(), sum.end(), 0.0);
      std::fill(sumSq.begin(), sumSq.end(), 0.0);
      for (int64_t c = 0; c < C; ++c) k[c] = xb[c];
      for (int64_t s = 0; s < S; ++s) addShiftedRow(xb + s * C, k.data(), sum.data(), sumSq.data(), C);
      for (int64_t g = 0; g < G; ++g) {
        double mean = 0;
        for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c) mean += k[c] + sum[c] / S;
        mean /= Cg;
        double m2 = 0;
        for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c) {
          const double channelMean = k[c] + sum[c] / S;
          const double d = channelMean - mean;
          m2 += std::max(0.0, sumSq[c] - sum[c] * sum[c] / S) + S * d * d;
        }
        const double rstd = 1.0 / std::sqrt(m2 / (S * Cg) + eps);
        meanOut[b * G + g] = static_cast<float>(mean);
        rstdOut[b * G + g] = static_cast<float>(rstd);
        for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c) {
          m[c] = static_cast<float>(mean);
          a[c] = static_cast<float>((scale ? scale[c] : 1.0) * rstd);
          o[c] = offset ? offset[c] : 0.f;
        }
      }
      normalizeRows(xb, y + b * S * C, S, C, m.data(), a.data(), o.data());
    }
  }
}

void gnTrainGrad(const GroupShape& sh, const float* dy, const float* x, const float* scale, const float* mean,
                 const float* rstd, float* dx, float* dscale, float* doffset) {
  const int64_t C = sh.C, S = sh.S, G = sh.G, Cg = sh.Cg;
  const double count = static_cast<double>(S * Cg);
  const int threads = teamSize(sh.B * S * C);
  // Per-thread partial sums of dscale and doffset over each thread's static block of samples,
  // added in thread order: deterministic for a given thread count.
  std::vector<double> partial(static_cast<size_t>(threads) * 2 * C, 0.0);
#pragma omp parallel num_threads(threads)
  {
    int64_t b0, b1;
    split(sh.B, b0, b1);
    double* pScale = partial.data() + static_cast<size_t>(omp_get_thread_num()) * 2 * C;
    double* pOffset = pScale + C;
    std::vector<double> sdy(C), sdyx(C);
    std::vector<float> k1(C), k2(C), k3(C), mc(C);
    for (int64_t b = b0; b < b1; ++b) {
      const float* xb = x + b * S * C;
      const float* gb = dy + b * S * C;
      const float* mb = mean + b * G;
      const float* rb = rstd + b * G;
      std::fill(sdy.begin(), sdy.end(), 0.0);
      std::fill(sdyx.begin(), sdyx.end(), 0.0);
      for (int64_t s = 0; s < S; ++s) {
        const float* xr = xb + s * C;
        const float* gr = gb + s * C;
        for (int64_t g = 0; g < G; ++g) {
          const double mu = mb[g], r = rb[g];
          for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c) {
            sdy[c] += gr[c];
            sdyx[c] += static_cast<double>(gr[c]) * ((static_cast<double>(xr[c]) - mu) * r);
          }
        }
      }
      // With xhat = (x - mean) * rstd and dxhat = dy * scale, per group:
      // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) = k1 * dy + k2 * (x - mean) + k3.
      for (int64_t g = 0; g < G; ++g) {
        double sumDxhat = 0, sumDxhatXhat = 0;
        for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c) {
          const double gamma = scale ? scale[c] : 1.0;
          sumDxhat += gamma * sdy[c];
          sumDxhatXhat += gamma * sdyx[c];
        }
        const double r = rb[g];
        for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c) {
          const double gamma = scale ? scale[c] : 1.0;
          k1[c] = static_cast<float>(r * gamma);
          k2[c] = static_cast<float>(-r * r * sumDxhatXhat / count);
          k3[c] = static_cast<float>(-r * sumDxhat / count);
          mc[c] = mb[g];
        }
      }
      for (int64_t c = 0; c < C; ++c) {
        pScale[c] += sdyx[c];
        pOffset[c] += sdy[c];
      }
      normalizeGradRows(gb, xb, dx + b * S * C, S, C, mc.data(), k1.data(), k2.data(), k3.data());
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    double ds = 0, dof = 0;
    for (int t = 0; t < threads; ++t) {
      ds += partial[static_cast<size_t>(t) * 2 * C + c];
      dof += partial[static_cast<size_t>(t) * 2 * C + C + c];
    }
    dscale[c] = static_cast<float>(ds);
    doffset[c] = static_cast<float>(dof);
  }
}

}  // namespace sz::cpu
