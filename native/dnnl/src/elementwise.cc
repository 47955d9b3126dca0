// Element-wise kernels (see elementwise.h) as OpenMP loops over rows of the collapsed
// output shape (binary) or a static split of the elements (unary).
#include "elementwise.h"

#include <cmath>

#include "cpu_common.h"
#include "fast_math.h"

namespace sz::cpu {
namespace {

// ------------------------------------------------------------------------------- binary

struct Add { static float f(float a, float b) { return a + b; } };
struct Sub { static float f(float a, float b) { return a - b; } };
struct Mul { static float f(float a, float b) { return a * b; } };
struct Div { static float f(float a, float b) { return a / b; } };
struct SqDiff { static float f(float a, float b) { const float d = a - b; return d * d; } };
// Math.max / Math.min: NaN if either is NaN.
struct Max { static float f(float a, float b) { return (a != a || b != b) ? kNaN : (a > b ? a : b); } };
struct Min { static float f(float a, float b) { return (a != a || b != b) ? kNaN : (a < b ? a : b); } };
// erf in float32 as a rational function of x on [-4, 4] (±1 to float precision beyond; NaN stays
// NaN): Eigen's / XLA's approximation, a few ulp from std::erf, and free of calls so loops vectorise.
inline float fastErf(float v) {
  const float x = v < -4.f ? -4.f : (v > 4.f ? 4.f : v);
  const float x2 = x * x;
  float p = x2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
  p = x2 * p + -2.10102402082508e-06f;
  p = x2 * p + -5.69250639462346e-05f;
  p = x2 * p + -7.34990630326855e-04f;
  p = x2 * p + -2.95459980854025e-03f;
  p = x2 * p + -1.60960333262415e-02f;
  float q = x2 * -1.45660718464996e-05f + -2.13374055278905e-04f;
  q = x2 * q + -1.68282697438203e-03f;
  q = x2 * q + -7.37332916720468e-03f;
  q = x2 * q + -1.42647390514189e-02f;
  return x * p / q;
}
// dy * step(x) as tfjs's Relu gradient computes it: NaN where x is NaN, 0 * dy where x <= 0.
struct ReluGrad { static float f(float dy, float x) { const float r = x > 0.f ? dy : 0.f * dy; return x != x ? x : r; } };
// GELU's gradient: dy (Φ(x) + x φ(x)), Φ / φ the standard normal CDF / density.
struct GeluGrad {
  static float f(float dy, float x) {
    const float cdf = 0.5f * (1.f + fastErf(x * 0.70710678118654752f));
    return dy * (cdf + x * 0.39894228040143268f * fastExpNonPositive(-0.5f * x * x));
  }
};

template <class Op>
__attribute__((noinline)) void binaryRow(const float* __restrict a, int64_t sa, const float* __restrict b, int64_t sb,
                                         float* __restrict o, int64_t n) {
  if (sa == 1 && sb == 1) {
    for (int64_t j = 0; j < n; ++j) o[j] = Op::f(a[j], b[j]);
  } else if (sa == 1 && sb == 0) {
    const float bv = *b;
    for (int64_t j = 0; j < n; ++j) o[j] = Op::f(a[j], bv);
  } else if (sa == 0 && sb == 1) {
    const float av = *a;
    for (int64_t j = 0; j < n; ++j) o[j] = Op::f(av, b[j]);
  } else {
    for (int64_t j = 0; j < n; ++j) o[j] = Op::f(a[j * sa], b[j * sb]);
  }
}

/**
 * binary() for one op. Dims are collapsed first; rows of the innermost dim are split into
 * segments so that even a single long row is shared by the team.
 */
template <class Op>
void binaryOp(const float* a, const float* b, float* out, const std::vector<int64_t>& shape,
              const std::vector<int64_t>& sa, const std::vector<int64_t>& sb) {
  // Drop size-1 dims, then merge dims that are contiguous for both inputs.
  std::vector<int64_t> s, xa, xb;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!s.empty() && xa.back() == sa[d] * shape[d] && xb.back() == sb[d] * shape[d]) {
      s.back() *= shape[d];
      xa.back() = sa[d];
      xb.back() = sb[d];
    } else {
      s.push_back(shape[d]);
      xa.push_back(sa[d]);
      xb.push_back(sb[d]);
    }
  }
  if (s.empty()) {
    s = {1};
    xa = {1};
    xb = {1};
  }
  const int nd = static_cast<int>(s.size());
  const int64_t n = s[nd - 1];
  const int64_t total = product(s);
  const int64_t rows = total / n;
  const int threads = teamSize(total);
  const int64_t segsPerRow = rows >= 2 * threads ? 1 : (2 * threads + rows - 1) / rows;
  const int64_t segLen = (n + segsPerRow - 1) / segsPerRow;
  const int64_t tasks = rows * segsPerRow;
  const int64_t ia = xa[nd - 1], ib = xb[nd - 1];
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t t = 0; t < tasks; ++t) {
    int64_t r = t / segsPerRow;
    const int64_t j0 = (t % segsPerRow) * segLen;
    const int64_t j1 = std::min(n, j0 + segLen);
    if (j0 >= j1) continue;
    int64_t oa = 0, ob = 0;
    for (int d = nd - 2; d >= 0; --d) {
      const int64_t i = r % s[d];
      r /= s[d];
      oa += i * xa[d];
      ob += i * xb[d];
    }
    binaryRow<Op>(a + oa + j0 * ia, ia, b + ob + j0 * ib, ib, out + (t / segsPerRow) * n + j0, j1 - j0);
  }
}

// -------------------------------------------------------------------------------- unary

// Branch-free forms so that the loops vectorise (Step on random signs mispredicts otherwise).
struct Relu { static float f(float v, float) { return v < 0.f ? 0.f : v; } };
struct Relu6 { static float f(float v, float) { const float r = v < 0.f ? 0.f : v; return v != v ? v : (r > 6.f ? 6.f : r); } };
struct Step { static float f(float v, float alpha) { const float r = v > 0.f ? 1.f : alpha; return v != v ? v : r; } };
struct Square { static float f(float v, float) { return v * v; } };
struct Neg { static float f(float v, float) { return -v; } };
struct Sqrt { static float f(float v, float) { return std::sqrt(v); } };
struct Rsqrt { static float f(float v, float) { return 1.f / std::sqrt(v); } };
struct Exp { static float f(float v, float) { return std::exp(v); } };
struct Log { static float f(float v, float) { return std::log(v); } };
struct Abs { static float f(float v, float) { return std::fabs(v); } };
struct Sigmoid { static float f(float v, float) { return 1.f / (1.f + std::exp(-v)); } };
struct Tanh { static float f(float v, float) { return std::tanh(v); } };
struct Reciprocal { static float f(float v, float) { return 1.f / v; } };
struct Erf { static float f(float v, float) { return fastErf(v); } };
// GELU, exact erf form: x Φ(x) = 0.5 x (1 + erf(x / √2)).
struct Gelu { static float f(float v, float) { return 0.5f * v * (1.f + fastErf(v * 0.70710678118654752f)); } };

template <class Op>
__attribute__((noinline)) void unaryRange(const float* __restrict x, float* __restrict y, int64_t n, float alpha) {
  for (int64_t i = 0; i < n; ++i) y[i] = Op::f(x[i], alpha);
}

template <class Op>
void unaryOp(const float* x, float* y, int64_t n, float alpha) {
  const int threads = teamSize(n);
#pragma omp parallel num_threads(threads)
  {
    int64_t b, e;
    split(n, b, e);
    unaryRange<Op>(x + b, y + b, e - b, alpha);
  }
}

}  // namespace

void binary(BinaryOp op, const float* a, const float* b, float* out, const std::vector<int64_t>& shape,
            const std::vector<int64_t>& aStrides, const std::vector<int64_t>& bStrides) {
  switch (op) {
    case kAdd: binaryOp<Add>(a, b, out, shape, aStrides, bStrides); break;
    case kSub: binaryOp<Sub>(a, b, out, shape, aStrides, bStrides); break;
    case kMul: binaryOp<Mul>(a, b, out, shape, aStrides, bStrides); break;
    case kDiv: binaryOp<Div>(a, b, out, shape, aStrides, bStrides); break;
    case kSquaredDiff: binaryOp<SqDiff>(a, b, out, shape, aStrides, bStrides); break;
    case kMaximum: binaryOp<Max>(a, b, out, shape, aStrides, bStrides); break;
    case kMinimum: binaryOp<Min>(a, b, out, shape, aStrides, bStrides); break;
    case kReluGrad: binaryOp<ReluGrad>(a, b, out, shape, aStrides, bStrides); break;
    case kGeluGrad: binaryOp<GeluGrad>(a, b, out, shape, aStrides, bStrides); break;
  }
}

void unary(UnaryOp op, const float* x, float* y, int64_t n, float alpha) {
  switch (op) {
    case kRelu: unaryOp<Relu>(x, y, n, alpha); break;
    case kRelu6: unaryOp<Relu6>(x, y, n, alpha); break;
    case kStep: unaryOp<Step>(x, y, n, alpha); break;
    case kSquare: unaryOp<Square>(x, y, n, alpha); break;
    case kNeg: unaryOp<Neg>(x, y, n, alpha); break;
    case kSqrt: unaryOp<Sqrt>(x, y, n, alpha); break;
    case kRsqrt: unaryOp<Rsqrt>(x, y, n, alpha); break;
    case kExp: unaryOp<Exp>(x, y, n, alpha); break;
    case kLog: unaryOp<Log>(x, y, n, alpha); break;
    case kAbs: unaryOp<Abs>(x, y, n, alpha); break;
    case kSigmoid: unaryOp<Sigmoid>(x, y, n, alpha); break;
    case kTanh: unaryOp<Tanh>(x, y, n, alpha); break;
    case kReciprocal: unaryOp<Reciprocal>(x, y, n, alpha); break;
    case kErf: unaryOp<Erf>(x, y, n, alpha); break;
    case kGelu: unaryOp<Gelu>(x, y, n, alpha); break;
  }
}

}  // namespace sz::cpu
