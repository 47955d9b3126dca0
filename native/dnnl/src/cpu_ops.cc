// Element-wise ops with broadcasting, reductions, tile/transpose, batch norm and pooling as
// plain OpenMP loops. They reproduce the semantics of tfjs-backend-cpu's JS kernels (NaN
// handling, first-maximum tie breaking in max pooling, the divisor of average-pool
// gradients) and sum in double precision like the JS kernels do.
// Work is split statically over the OpenMP team and partial sums are combined in thread
// order, so results are deterministic for a given thread count.
#include "cpu_ops.h"

#include <omp.h>

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace sz {
namespace {

constexpr int64_t kParallelMin = 1 << 17;  // elements (512 KB) below which one thread does the job
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ------------------------------------------------------------------------------ helpers

struct F32 {
  float* data = nullptr;
  size_t length = 0;
};

F32 f32(const Napi::Env& env, const Napi::Value& v, const char* name, bool optional = false) {
  if (optional && (v.IsNull() || v.IsUndefined())) return {};
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) {
    throw Napi::TypeError::New(env, std::string(name) + " must be a Float32Array");
  }
  auto a = v.As<Napi::Float32Array>();
  return {a.Data(), a.ElementLength()};
}

std::vector<int64_t> ints(const Napi::Env& env, const Napi::Value& v, const char* name) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
    throw Napi::TypeError::New(env, std::string(name) + " must be an Int32Array");
  }
  auto a = v.As<Napi::Int32Array>();
  return std::vector<int64_t>(a.Data(), a.Data() + a.ElementLength());
}

int64_t num(const Napi::Value& v) { return static_cast<int64_t>(v.As<Napi::Number>().DoubleValue()); }

void need(const Napi::Env& env, const F32& a, int64_t n, const char* name) {
  if (n < 0 || static_cast<int64_t>(a.length) < n) {
    throw Napi::RangeError::New(env, std::string(name) + " has " + std::to_string(a.length) +
                                         " elements, needs " + std::to_string(n));
  }
}

int64_t product(const std::vector<int64_t>& xs) {
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

// ------------------------------------------------------------------------------- binary

enum BinaryOp { kAdd, kSub, kMul, kDiv, kSquaredDiff, kMaximum, kMinimum, kReluGrad };

struct Add { static float f(float a, float b) { return a + b; } };
struct Sub { static float f(float a, float b) { return a - b; } };
struct Mul { static float f(float a, float b) { return a * b; } };
struct Div { static float f(float a, float b) { return a / b; } };
struct SqDiff { static float f(float a, float b) { const float d = a - b; return d * d; } };
// Math.max / Math.min: NaN if either is NaN.
struct Max { static float f(float a, float b) { return (a != a || b != b) ? kNaN : (a > b ? a : b); } };
struct Min { static float f(float a, float b) { return (a != a || b != b) ? kNaN : (a < b ? a : b); } };
// dy * step(x) as tfjs's Relu gradient computes it: NaN where x is NaN, 0 * dy where x <= 0.
struct ReluGrad { static float f(float dy, float x) { const float r = x > 0.f ? dy : 0.f * dy; return x != x ? x : r; } };

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
 * out[i] = op(a[...], b[...]) over `shape` (the output's), with per-dim element strides of
 * a and b (0 on broadcast dims). Dims are collapsed first; rows of the innermost dim are
 * split into segments so that even a single long row is shared by the team.
 */
template <class Op>
void binary(const float* a, const float* b, float* out, std::vector<int64_t> shape,
            std::vector<int64_t> sa, std::vector<int64_t> sb) {
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

// binary(op, a, b, out, outShape, aStrides, bStrides)
Napi::Value Binary(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int op = static_cast<int>(num(info[0]));
  F32 a = f32(env, info[1], "a"), b = f32(env, info[2], "b"), out = f32(env, info[3], "out");
  auto shape = ints(env, info[4], "shape"), sa = ints(env, info[5], "aStrides"), sb = ints(env, info[6], "bStrides");
  if (sa.size() != shape.size() || sb.size() != shape.size()) throw Napi::RangeError::New(env, "rank mismatch");
  int64_t lastA = 0, lastB = 0;  // largest offsets touched
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] <= 0 || sa[d] < 0 || sb[d] < 0) throw Napi::RangeError::New(env, "bad shape or strides");
    lastA += (shape[d] - 1) * sa[d];
    lastB += (shape[d] - 1) * sb[d];
  }
  need(env, a, lastA + 1, "a");
  need(env, b, lastB + 1, "b");
  need(env, out, product(shape), "out");
  switch (op) {
    case kAdd: binary<Add>(a.data, b.data, out.data, shape, sa, sb); break;
    case kSub: binary<Sub>(a.data, b.data, out.data, shape, sa, sb); break;
    case kMul: binary<Mul>(a.data, b.data, out.data, shape, sa, sb); break;
    case kDiv: binary<Div>(a.data, b.data, out.data, shape, sa, sb); break;
    case kSquaredDiff: binary<SqDiff>(a.data, b.data, out.data, shape, sa, sb); break;
    case kMaximum: binary<Max>(a.data, b.data, out.data, shape, sa, sb); break;
    case kMinimum: binary<Min>(a.data, b.data, out.data, shape, sa, sb); break;
    case kReluGrad: binary<ReluGrad>(a.data, b.data, out.data, shape, sa, sb); break;
    default: throw Napi::RangeError::New(env, "unknown binary op");
  }
  return env.Undefined();
}

// -------------------------------------------------------------------------------- unary

enum UnaryOp { kRelu, kRelu6, kStep, kSquare, kNeg, kSqrt, kRsqrt, kExp, kLog, kAbs, kSigmoid, kTanh, kReciprocal };

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

template <class Op>
__attribute__((noinline)) void unaryRange(const float* __restrict x, float* __restrict y, int64_t n, float alpha) {
  for (int64_t i = 0; i < n; ++i) y[i] = Op::f(x[i], alpha);
}

template <class Op>
void unary(const float* x, float* y, int64_t n, float alpha) {
  const int threads = teamSize(n);
#pragma omp parallel num_threads(threads)
  {
    int64_t b, e;
    split(n, b, e);
    unaryRange<Op>(x + b, y + b, e - b, alpha);
  }
}

// unary(op, x, out, alpha)
Napi::Value Unary(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int op = static_cast<int>(num(info[0]));
  F32 x = f32(env, info[1], "x"), y = f32(env, info[2], "out");
  const float alpha = info[3].As<Napi::Number>().FloatValue();
  const int64_t n = static_cast<int64_t>(x.length);
  need(env, y, n, "out");
  float* xd = x.data;
  float* yd = y.data;
  switch (op) {
    case kRelu: unary<Relu>(xd, yd, n, alpha); break;
    case kRelu6: unary<Relu6>(xd, yd, n, alpha); break;
    case kStep: unary<Step>(xd, yd, n, alpha); break;
    case kSquare: unary<Square>(xd, yd, n, alpha); break;
    case kNeg: unary<Neg>(xd, yd, n, alpha); break;
    case kSqrt: unary<Sqrt>(xd, yd, n, alpha); break;
    case kRsqrt: unary<Rsqrt>(xd, yd, n, alpha); break;
    case kExp: unary<Exp>(xd, yd, n, alpha); break;
    case kLog: unary<Log>(xd, yd, n, alpha); break;
    case kAbs: unary<Abs>(xd, yd, n, alpha); break;
    case kSigmoid: unary<Sigmoid>(xd, yd, n, alpha); break;
    case kTanh: unary<Tanh>(xd, yd, n, alpha); break;
    case kReciprocal: unary<Reciprocal>(xd, yd, n, alpha); break;
    default: throw Napi::RangeError::New(env, "unknown unary op");
  }
  return env.Undefined();
}

// ---------------------------------------------------------------------------- reduction

enum ReduceOp { kSum, kRMax, kRMin };

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

/**
 * x viewed as [O, R, I]: out[o, i] = reduce_r x[o, r, i] (times `scale` for sums).
 * Sums accumulate in double. Parallel over O when it is large enough, otherwise over R with
 * per-thread partials combined in thread order.
 */
void reduce(int op, const float* x, float* out, int64_t O, int64_t R, int64_t I, double scale) {
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
  // Few outputs rows: split R among the team.
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

// reduce(op, x, out, O, R, I, scale)
Napi::Value Reduce(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int op = static_cast<int>(num(info[0]));
  F32 x = f32(env, info[1], "x"), out = f32(env, info[2], "out");
  const int64_t O = num(info[3]), R = num(info[4]), I = num(info[5]);
  const double scale = info[6].As<Napi::Number>().DoubleValue();
  if (O <= 0 || R <= 0 || I <= 0 || op < kSum || op > kRMin) throw Napi::RangeError::New(env, "bad reduction");
  need(env, x, O * R * I, "x");
  need(env, out, O * I, "out");
  reduce(op, x.data, out.data, O, R, I, scale);
  return env.Undefined();
}

// ------------------------------------------------------------------------ tile, transpose

// tile(x, out, xShape, reps)
Napi::Value Tile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  F32 x = f32(env, info[0], "x"), out = f32(env, info[1], "out");
  auto xs = ints(env, info[2], "xShape"), reps = ints(env, info[3], "reps");
  if (xs.empty() || reps.size() != xs.size()) throw Napi::RangeError::New(env, "bad tile shapes");
  std::vector<int64_t> os(xs.size());
  for (size_t d = 0; d < xs.size(); ++d) {
    if (xs[d] <= 0 || reps[d] <= 0) throw Napi::RangeError::New(env, "bad tile shapes");
    os[d] = xs[d] * reps[d];
  }
  need(env, x, product(xs), "x");
  need(env, out, product(os), "out");
  const int nd = static_cast<int>(xs.size());
  const int64_t inner = xs[nd - 1], outInner = os[nd - 1];
  const int64_t rows = product(os) / outInner;
  std::vector<int64_t> xStride(nd, 1);
  for (int d = nd - 2; d >= 0; --d) xStride[d] = xStride[d + 1] * xs[d + 1];
  const float* xd = x.data;
  float* od = out.data;
#pragma omp parallel for schedule(static) num_threads(teamSize(rows * outInner))
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, src = 0;
    for (int d = nd - 2; d >= 0; --d) {
      const int64_t i = rem % os[d];
      rem /= os[d];
      src += (i % xs[d]) * xStride[d];
    }
    float* dst = od + r * outInner;
    for (int64_t k = 0; k < outInner; k += inner) std::memcpy(dst + k, xd + src, inner * sizeof(float));
  }
  return env.Undefined();
}

// transpose(x, out, xShape, perm)
Napi::Value Transpose(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  F32 x = f32(env, info[0], "x"), out = f32(env, info[1], "out");
  auto xs = ints(env, info[2], "xShape"), perm = ints(env, info[3], "perm");
  const int nd = static_cast<int>(xs.size());
  if (nd == 0 || static_cast<int>(perm.size()) != nd) throw Napi::RangeError::New(env, "bad transpose");
  std::vector<char> seen(nd, 0);
  for (int64_t p : perm) {
    if (p < 0 || p >= nd || seen[p]) throw Napi::RangeError::New(env, "bad permutation");
    seen[p] = 1;
  }
  for (int64_t d : xs) if (d <= 0) throw Napi::RangeError::New(env, "bad transpose shape");
  const int64_t total = product(xs);
  need(env, x, total, "x");
  need(env, out, total, "out");
  std::vector<int64_t> xStride(nd, 1), os(nd), srcStride(nd);
  for (int d = nd - 2; d >= 0; --d) xStride[d] = xStride[d + 1] * xs[d + 1];
  for (int d = 0; d < nd; ++d) {
    os[d] = xs[perm[d]];
    srcStride[d] = xStride[perm[d]];
  }
  const int64_t inner = os[nd - 1], is = srcStride[nd - 1];
  const int64_t rows = total / inner;
  const float* xd = x.data;
  float* od = out.data;
#pragma omp parallel for schedule(static) num_threads(teamSize(total))
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, src = 0;
    for (int d = nd - 2; d >= 0; --d) {
      src += (rem % os[d]) * srcStride[d];
      rem /= os[d];
    }
    float* dst = od + r * inner;
    const float* s = xd + src;
    for (int64_t k = 0; k < inner; ++k) dst[k] = s[k * is];
  }
  return env.Undefined();
}

// --------------------------------------------------------------------------- batch norm

// batchNorm(x, out, C, mean, variance, scale|null, offset|null, eps): parameters of 1 or C values.
Napi::Value BatchNorm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  F32 x = f32(env, info[0], "x"), out = f32(env, info[1], "out");
  const int64_t C = num(info[2]);
  F32 mean = f32(env, info[3], "mean"), var = f32(env, info[4], "variance");
  F32 scale = f32(env, info[5], "scale", true), offset = f32(env, info[6], "offset", true);
  const double eps = info[7].As<Napi::Number>().DoubleValue();
  const int64_t n = static_cast<int64_t>(x.length);
  if (C <= 0 || n % C != 0) throw Napi::RangeError::New(env, "bad channel count");
  need(env, out, n, "out");
  auto ok = [&](const F32& p) { return p.data == nullptr || p.length == 1 || static_cast<int64_t>(p.length) == C; };
  if (!ok(mean) || !ok(var) || !ok(scale) || !ok(offset) || !mean.data || !var.data) {
    throw Napi::RangeError::New(env, "batch norm parameters must have 1 or C values");
  }
  auto at = [](const F32& p, int64_t c, float dflt) { return p.data ? p.data[p.length == 1 ? 0 : c] : dflt; };
  std::vector<float> m(C), a(C), o(C);
  for (int64_t c = 0; c < C; ++c) {
    m[c] = at(mean, c, 0.f);
    a[c] = static_cast<float>(at(scale, c, 1.f) / std::sqrt(static_cast<double>(at(var, c, 0.f)) + eps));
    o[c] = at(offset, c, 0.f);
  }
  const int64_t rows = n / C;
  const float* xd = x.data;
  float* yd = out.data;
#pragma omp parallel for schedule(static) num_threads(teamSize(n))
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = xd + r * C;
    float* yr = yd + r * C;
    for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m[c]) * a[c] + o[c];
  }
  return env.Undefined();
}

// ---------------------------------------------------- batch norm in training mode (fused)

/**
 * Per-channel sums over the rows of [rows, C] data, in double (see sumRows), deterministic:
 * each thread sums a static block of rows, blocks are added in thread order. `f(row, acc)`
 * adds one row into `acc` (K double accumulators of C values each).
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

// bnTrain(x, y, C, scale|null, offset|null, eps, meanOut, varianceOut):
// batch statistics over all rows (biased variance) and y = (x - mean) / sqrt(var + eps) * scale + offset.
Napi::Value BnTrain(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  F32 x = f32(env, info[0], "x"), y = f32(env, info[1], "out");
  const int64_t C = num(info[2]);
  F32 scale = f32(env, info[3], "scale", true), offset = f32(env, info[4], "offset", true);
  const double eps = info[5].As<Napi::Number>().DoubleValue();
  F32 meanOut = f32(env, info[6], "mean"), varOut = f32(env, info[7], "variance");
  const int64_t n = static_cast<int64_t>(x.length);
  if (C <= 0 || n % C != 0 || n == 0) throw Napi::RangeError::New(env, "bad channel count");
  need(env, y, n, "out");
  need(env, meanOut, C, "mean");
  need(env, varOut, C, "variance");
  if (scale.data) need(env, scale, C, "scale");
  if (offset.data) need(env, offset, C, "offset");
  const int64_t rows = n / C;
  const float* xd = x.data;
  // Sums of (x - k) and (x - k)^2 with k = the first row: shifting by a value near the mean
  // keeps E[(x-k)^2] - E[x-k]^2 from cancelling catastrophically when |mean| >> std.
  std::vector<double> k(xd, xd + C);
  std::vector<double> sums;
  channelSums<2>(rows, C, sums, [&](int64_t r, double* acc) {
    const float* xr = xd + r * C;
    double* s = acc;
    double* ss = acc + C;
    for (int64_t c = 0; c < C; ++c) {
      const double v = static_cast<double>(xr[c]) - k[c];
      s[c] += v;
      ss[c] += v * v;
    }
  });
  std::vector<float> m(C), a(C), o(C);
  for (int64_t c = 0; c < C; ++c) {
    const double d = sums[c] / rows;
    const double mean = k[c] + d;
    const double var = std::max(0.0, sums[C + c] / rows - d * d);
    meanOut.data[c] = static_cast<float>(mean);
    varOut.data[c] = static_cast<float>(var);
    m[c] = static_cast<float>(mean);
    a[c] = static_cast<float>((scale.data ? scale.data[c] : 1.0) / std::sqrt(static_cast<double>(varOut.data[c]) + eps));
    o[c] = offset.data ? offset.data[c] : 0.f;
  }
  float* yd = y.data;
#pragma omp parallel for schedule(static) num_threads(teamSize(n))
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = xd + r * C;
    float* yr = yd + r * C;
    for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m[c]) * a[c] + o[c];
  }
  return env.Undefined();
}

// bnTrainGrad(dy, x, C, scale|null, mean, variance, dmean|null, dvariance|null, eps, dx, dscale, doffset)
// Gradient of bnTrain's outputs (y, mean, variance) with respect to x, scale and offset.
Napi::Value BnTrainGrad(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  F32 dy = f32(env, info[0], "dy"), x = f32(env, info[1], "x");
  const int64_t C = num(info[2]);
  F32 scale = f32(env, info[3], "scale", true), mean = f32(env, info[4], "mean"), var = f32(env, info[5], "variance");
  F32 dmean = f32(env, info[6], "dmean", true), dvar = f32(env, info[7], "dvariance", true);
  const double eps = info[8].As<Napi::Number>().DoubleValue();
  F32 dx = f32(env, info[9], "dx"), dscale = f32(env, info[10], "dscale"), doffset = f32(env, info[11], "doffset");
  const int64_t n = static_cast<int64_t>(x.length);
  if (C <= 0 || n % C != 0 || n == 0) throw Napi::RangeError::New(env, "bad channel count");
  need(env, dy, n, "dy");
  need(env, dx, n, "dx");
  for (const F32* p : {&mean, &var, &dscale, &doffset}) need(env, *p, C, "per-channel value");
  if (scale.data) need(env, scale, C, "scale");
  if (dmean.data) need(env, dmean, C, "dmean");
  if (dvar.data) need(env, dvar, C, "dvariance");
  const int64_t rows = n / C;
  const float* xd = x.data;
  const float* gd = dy.data;
  const float* md = mean.data;
  std::vector<double> sums;  // [sum dy, sum dy * (x - mean)]
  channelSums<2>(rows, C, sums, [&](int64_t r, double* acc) {
    const float* xr = xd + r * C;
    const float* gr = gd + r * C;
    double* s = acc;
    double* sx = acc + C;
    for (int64_t c = 0; c < C; ++c) {
      s[c] += gr[c];
      sx[c] += static_cast<double>(gr[c]) * (static_cast<double>(xr[c]) - md[c]);
    }
  });
  // dx = k1 * dy + k2 * (x - mean) + k3, per channel.
  std::vector<float> k1(C), k2(C), k3(C);
  for (int64_t c = 0; c < C; ++c) {
    const double g = scale.data ? scale.data[c] : 1.0;
    const double invstd = 1.0 / std::sqrt(static_cast<double>(var.data[c]) + eps);
    const double sdy = sums[c], sdyx = sums[C + c];
    doffset.data[c] = static_cast<float>(sdy);
    dscale.data[c] = static_cast<float>(sdyx * invstd);
    const double dm = dmean.data ? dmean.data[c] : 0.0;
    const double dv = dvar.data ? dvar.data[c] : 0.0;
    k1[c] = static_cast<float>(g * invstd);
    k2[c] = static_cast<float>(-g * invstd * invstd * invstd * sdyx / rows + 2.0 * dv / rows);
    k3[c] = static_cast<float>(-g * invstd * sdy / rows + dm / rows);
  }
  float* dxd = dx.data;
#pragma omp parallel for schedule(static) num_threads(teamSize(n))
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = xd + r * C;
    const float* gr = gd + r * C;
    float* dr = dxd + r * C;
    for (int64_t c = 0; c < C; ++c) dr[c] = k1[c] * gr[c] + k2[c] * (xr[c] - md[c]) + k3[c];
  }
  return env.Undefined();
}

// ------------------------------------------------- group normalisation, training (fused)

// x viewed as [B, S, C] with C = G * Cg (S spatial positions, 1 for [B, C] data): statistics
// per (sample b, group g) over its S * Cg values, as torch.nn.GroupNorm; LayerNorm over the
// last axis is the case S = 1, G = 1 with every position a sample.
struct GroupShape {
  int64_t B, S, C, G, Cg;
};

GroupShape groupShape(const Napi::Env& env, int64_t n, int64_t B, int64_t C, int64_t G) {
  if (B <= 0 || C <= 0 || G <= 0 || C % G != 0 || n == 0 || n % (B * C) != 0) {
    throw Napi::RangeError::New(env, "group norm: bad batch, channel or group count");
  }
  return {B, n / (B * C), C, G, C / G};
}

// gnTrain(x, y, B, C, G, scale|null, offset|null, eps, meanOut[B*G], rstdOut[B*G]):
// y = (x - mean) * rstd * scale + offset, with the biased variance inside rstd = 1/sqrt(var + eps).
Napi::Value GnTrain(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  F32 x = f32(env, info[0], "x"), y = f32(env, info[1], "out");
  const GroupShape sh = groupShape(env, static_cast<int64_t>(x.length), num(info[2]), num(info[3]), num(info[4]));
  F32 scale = f32(env, info[5], "scale", true), offset = f32(env, info[6], "offset", true);
  const double eps = info[7].As<Napi::Number>().DoubleValue();
  F32 meanOut = f32(env, info[8], "mean"), rstdOut = f32(env, info[9], "rstd");
  const int64_t n = static_cast<int64_t>(x.length), C = sh.C, S = sh.S, G = sh.G, Cg = sh.Cg;
  need(env, y, n, "out");
  need(env, meanOut, sh.B * G, "mean");
  need(env, rstdOut, sh.B * G, "rstd");
  if (scale.data) need(env, scale, C, "scale");
  if (offset.data) need(env, offset, C, "offset");
  const float* xd = x.data;
  float* yd = y.data;
#pragma omp parallel num_threads(teamSize(n))
  {
    // Per channel: sums of (x - k) and (x - k)^2 with k the sample's first position (no
    // cancellation when |mean| >> std), then Chan's combination of the channels of a group.
    std::vector<double> sum(C), sumSq(C), k(C);
    std::vector<float> a(C), o(C), m(C);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < sh.B; ++b) {
      const float* xb = xd + b * S * C;
      std::fill(sum.begin(), sum.end(), 0.0);
      std::fill(sumSq.begin(), sumSq.end(), 0.0);
      for (int64_t c = 0; c < C; ++c) k[c] = xb[c];
      for (int64_t s = 0; s < S; ++s) {
        const float* row = xb + s * C;
        for (int64_t c = 0; c < C; ++c) {
          const double v = static_cast<double>(row[c]) - k[c];
          sum[c] += v;
          sumSq[c] += v * v;
        }
      }
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
        meanOut.data[b * G + g] = static_cast<float>(mean);
        rstdOut.data[b * G + g] = static_cast<float>(rstd);
        for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c) {
          m[c] = static_cast<float>(mean);
          a[c] = static_cast<float>((scale.data ? scale.data[c] : 1.0) * rstd);
          o[c] = offset.data ? offset.data[c] : 0.f;
        }
      }
      float* yb = yd + b * S * C;
      for (int64_t s = 0; s < S; ++s) {
        const float* xr = xb + s * C;
        float* yr = yb + s * C;
        for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m[c]) * a[c] + o[c];
      }
    }
  }
  return env.Undefined();
}

// gnTrainGrad(dy, x, B, C, G, scale|null, mean, rstd, dx, dscale, doffset): the gradient of
// gnTrain's y with respect to x, scale and offset (mean and rstd are not differentiable outputs).
Napi::Value GnTrainGrad(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  F32 dy = f32(env, info[0], "dy"), x = f32(env, info[1], "x");
  const GroupShape sh = groupShape(env, static_cast<int64_t>(x.length), num(info[2]), num(info[3]), num(info[4]));
  F32 scale = f32(env, info[5], "scale", true), mean = f32(env, info[6], "mean"), rstd = f32(env, info[7], "rstd");
  F32 dx = f32(env, info[8], "dx"), dscale = f32(env, info[9], "dscale"), doffset = f32(env, info[10], "doffset");
  const int64_t n = static_cast<int64_t>(x.length), C = sh.C, S = sh.S, G = sh.G, Cg = sh.Cg;
  need(env, dy, n, "dy");
  need(env, dx, n, "dx");
  need(env, mean, sh.B * G, "mean");
  need(env, rstd, sh.B * G, "rstd");
  need(env, dscale, C, "dscale");
  need(env, doffset, C, "doffset");
  if (scale.data) need(env, scale, C, "scale");
  const double count = static_cast<double>(S * Cg);
  const int threads = teamSize(n);
  // Per-thread partial sums of dscale and doffset over each thread's static block of samples,
  // added in thread order: deterministic for a given thread count.
  std::vector<double> partial(static_cast<size_t>(threads) * 2 * C, 0.0);
  const float* xd = x.data;
  const float* gd = dy.data;
  float* dxd = dx.data;
#pragma omp parallel num_threads(threads)
  {
    int64_t b0, b1;
    split(sh.B, b0, b1);
    double* pScale = partial.data() + static_cast<size_t>(omp_get_thread_num()) * 2 * C;
    double* pOffset = pScale + C;
    std::vector<double> sdy(C), sdyx(C);
    std::vector<float> k1(C), k2(C), k3(C), mc(C);
    for (int64_t b = b0; b < b1; ++b) {
      const float* xb = xd + b * S * C;
      const float* gb = gd + b * S * C;
      const float* mb = mean.data + b * G;
      const float* rb = rstd.data + b * G;
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
          const double gamma = scale.data ? scale.data[c] : 1.0;
          sumDxhat += gamma * sdy[c];
          sumDxhatXhat += gamma * sdyx[c];
        }
        const double r = rb[g];
        for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c) {
          const double gamma = scale.data ? scale.data[c] : 1.0;
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
      float* db = dxd + b * S * C;
      for (int64_t s = 0; s < S; ++s) {
        const float* xr = xb + s * C;
        const float* gr = gb + s * C;
        float* dr = db + s * C;
        for (int64_t c = 0; c < C; ++c) dr[c] = k1[c] * gr[c] + k2[c] * (xr[c] - mc[c]) + k3[c];
      }
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    double ds = 0, dof = 0;
    for (int t = 0; t < threads; ++t) {
      ds += partial[static_cast<size_t>(t) * 2 * C + c];
      dof += partial[static_cast<size_t>(t) * 2 * C + C + c];
    }
    dscale.data[c] = static_cast<float>(ds);
    doffset.data[c] = static_cast<float>(dof);
  }
  return env.Undefined();
}

// ------------------------------------------------------------------------------ pooling

struct Pool {
  int64_t N, H, W, C, OH, OW, KH, KW, sh, sw, pt, pl;
};

Pool poolParams(const Napi::Env& env, const Napi::Value& v) {
  auto q = ints(env, v, "pool params");
  if (q.size() != 12) throw Napi::RangeError::New(env, "pool params must have 12 values");
  Pool p{q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9], q[10], q[11]};
  for (int i = 0; i < 10; ++i) if (q[i] <= 0) throw Napi::RangeError::New(env, "bad pool params");
  if (p.pt < 0 || p.pl < 0) throw Napi::RangeError::New(env, "bad pool padding");
  return p;
}

/** Visits the valid input positions (h, w) of the window of output (oh, ow). */
template <class F>
inline void window(const Pool& p, int64_t oh, int64_t ow, F f) {
  const int64_t h0 = oh * p.sh - p.pt, w0 = ow * p.sw - p.pl;
  const int64_t hs = std::max<int64_t>(0, h0), he = std::min(p.H, h0 + p.KH);
  const int64_t ws = std::max<int64_t>(0, w0), we = std::min(p.W, w0 + p.KW);
  for (int64_t h = hs; h < he; ++h)
    for (int64_t w = ws; w < we; ++w) f(h, w);
}

// maxPool / avgPool (x, out, params)
Napi::Value PoolFwd(const Napi::CallbackInfo& info, bool isMax) {
  Napi::Env env = info.Env();
  F32 x = f32(env, info[0], "x"), out = f32(env, info[1], "out");
  const Pool p = poolParams(env, info[2]);
  need(env, x, p.N * p.H * p.W * p.C, "x");
  need(env, out, p.N * p.OH * p.OW * p.C, "out");
  const float* xd = x.data;
  float* yd = out.data;
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
  return env.Undefined();
}

Napi::Value MaxPool(const Napi::CallbackInfo& info) { return PoolFwd(info, true); }
Napi::Value AvgPool(const Napi::CallbackInfo& info) { return PoolFwd(info, false); }

// maxPoolGrad(dy, x, dx, params): dy goes to the first maximum of each window.
Napi::Value MaxPoolGrad(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  F32 dy = f32(env, info[0], "dy"), x = f32(env, info[1], "x"), dx = f32(env, info[2], "out");
  const Pool p = poolParams(env, info[3]);
  need(env, x, p.N * p.H * p.W * p.C, "x");
  need(env, dx, p.N * p.H * p.W * p.C, "out");
  need(env, dy, p.N * p.OH * p.OW * p.C, "dy");
  const int64_t C = p.C;
  const int64_t imgIn = p.H * p.W * C, imgOut = p.OH * p.OW * C;
  std::fill(dx.data, dx.data + p.N * imgIn, 0.f);
#pragma omp parallel num_threads(teamSize(p.N * imgOut * p.KH * p.KW))
  {
    std::vector<float> best(C);
    std::vector<int64_t> pos(C);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < p.N; ++n) {
      const float* xn = x.data + n * imgIn;
      float* dxn = dx.data + n * imgIn;
      const float* dyn = dy.data + n * imgOut;
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
  return env.Undefined();
}

// avgPoolGrad(dy, dx, params): like the JS kernel, every window divides by KH * KW.
Napi::Value AvgPoolGrad(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  F32 dy = f32(env, info[0], "dy"), dx = f32(env, info[1], "out");
  const Pool p = poolParams(env, info[2]);
  need(env, dx, p.N * p.H * p.W * p.C, "out");
  need(env, dy, p.N * p.OH * p.OW * p.C, "dy");
  const int64_t C = p.C;
  const int64_t imgIn = p.H * p.W * C, imgOut = p.OH * p.OW * C;
  const float mult = 1.f / static_cast<float>(p.KH * p.KW);
  std::fill(dx.data, dx.data + p.N * imgIn, 0.f);
#pragma omp parallel for schedule(static) num_threads(teamSize(p.N * imgOut * p.KH * p.KW))
  for (int64_t n = 0; n < p.N; ++n) {
    float* dxn = dx.data + n * imgIn;
    const float* dyn = dy.data + n * imgOut;
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
  return env.Undefined();
}

// measureGhz(seconds): clock of this core from a chain of dependent integer adds (one per
// cycle), timed with the thread's CPU clock so that preemption does not count.
Napi::Value MeasureGhz(const Napi::CallbackInfo& info) {
  const double seconds = info.Length() > 0 ? info[0].As<Napi::Number>().DoubleValue() : 0.2;
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
  return Napi::Number::New(info.Env(), best);
}

}  // namespace

void registerCpuOps(Napi::Env env, Napi::Object exports) {
  exports.Set("binary", Napi::Function::New(env, Binary));
  exports.Set("measureGhz", Napi::Function::New(env, MeasureGhz));
  exports.Set("unary", Napi::Function::New(env, Unary));
  exports.Set("reduce", Napi::Function::New(env, Reduce));
  exports.Set("tile", Napi::Function::New(env, Tile));
  exports.Set("transpose", Napi::Function::New(env, Transpose));
  exports.Set("batchNorm", Napi::Function::New(env, BatchNorm));
  exports.Set("bnTrain", Napi::Function::New(env, BnTrain));
  exports.Set("bnTrainGrad", Napi::Function::New(env, BnTrainGrad));
  exports.Set("gnTrain", Napi::Function::New(env, GnTrain));
  exports.Set("gnTrainGrad", Napi::Function::New(env, GnTrainGrad));
  exports.Set("maxPool", Napi::Function::New(env, MaxPool));
  exports.Set("avgPool", Napi::Function::New(env, AvgPool));
  exports.Set("maxPoolGrad", Napi::Function::New(env, MaxPoolGrad));
  exports.Set("avgPoolGrad", Napi::Function::New(env, AvgPoolGrad));
}

}  // namespace sz
