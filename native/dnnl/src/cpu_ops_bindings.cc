// Node-API bindings of the OpenMP kernels (see cpu_ops_bindings.h): each function unpacks
// its JS arguments, checks the ops, shapes and buffer sizes (a wrong call raises a TypeError
// or RangeError instead of touching memory out of bounds) and calls the raw kernel.
#include "cpu_ops_bindings.h"

#include <string>
#include <vector>

#include "cpu_common.h"
#include "elementwise.h"
#include "norm.h"
#include "pool.h"
#include "reduce.h"
#include "softmax.h"
#include "tile_transpose.h"

namespace sz {
namespace {

using cpu::product;

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

// ------------------------------------------------------------------------- element-wise

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
  if (op < cpu::kAdd || op > cpu::kGeluGrad) throw Napi::RangeError::New(env, "unknown binary op");
  cpu::binary(static_cast<cpu::BinaryOp>(op), a.data, b.data, out.data, shape, sa, sb);
  return env.Undefined();
}

// unary(op, x, out, alpha)
Napi::Value Unary(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int op = static_cast<int>(num(info[0]));
  F32 x = f32(env, info[1], "x"), y = f32(env, info[2], "out");
  const float alpha = info[3].As<Napi::Number>().FloatValue();
  const int64_t n = static_cast<int64_t>(x.length);
  need(env, y, n, "out");
  if (op < cpu::kRelu || op > cpu::kGelu) throw Napi::RangeError::New(env, "unknown unary op");
  cpu::unary(static_cast<cpu::UnaryOp>(op), x.data, y.data, n, alpha);
  return env.Undefined();
}

// softmax(x, out, rows, n) / softmaxGrad(y, dy, out, rows, n): over the last axis of [rows, n]
Napi::Value Softmax(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  F32 x = f32(env, info[0], "x"), y = f32(env, info[1], "out");
  const int64_t rows = num(info[2]), n = num(info[3]);
  if (rows <= 0 || n <= 0) throw Napi::RangeError::New(env, "bad softmax shape");
  need(env, x, rows * n, "x");
  need(env, y, rows * n, "out");
  cpu::softmaxRows(x.data, y.data, rows, n);
  return env.Undefined();
}

Napi::Value SoftmaxGrad(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  F32 y = f32(env, info[0], "y"), dy = f32(env, info[1], "dy"), dx = f32(env, info[2], "out");
  const int64_t rows = num(info[3]), n = num(info[4]);
  if (rows <= 0 || n <= 0) throw Napi::RangeError::New(env, "bad softmax shape");
  need(env, y, rows * n, "y");
  need(env, dy, rows * n, "dy");
  need(env, dx, rows * n, "out");
  cpu::softmaxGradRows(y.data, dy.data, dx.data, rows, n);
  return env.Undefined();
}

// ------------------------------------------------------------ reduction, tile, transpose

// reduce(op, x, out, O, R, I, scale)
Napi::Value Reduce(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int op = static_cast<int>(num(info[0]));
  F32 x = f32(env, info[1], "x"), out = f32(env, info[2], "out");
  const int64_t O = num(info[3]), R = num(info[4]), I = num(info[5]);
  const double scale = info[6].As<Napi::Number>().DoubleValue();
  if (O <= 0 || R <= 0 || I <= 0 || op < cpu::kSum || op > cpu::kRMin) throw Napi::RangeError::New(env, "bad reduction");
  need(env, x, O * R * I, "x");
  need(env, out, O * I, "out");
  cpu::reduce(static_cast<cpu::ReduceOp>(op), x.data, out.data, O, R, I, scale);
  return env.Undefined();
}

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
  cpu::tile(x.data, out.data, xs, os);
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
  cpu::transpose(x.data, out.data, xs, perm);
  return env.Undefined();
}

// ------------------------------------------------------------------------ normalisation

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
  auto param = [](const F32& p) { return cpu::ChannelParam{p.data, p.length}; };
  cpu::batchNorm(x.data, out.data, n / C, C, param(mean), param(var), param(scale), param(offset), eps);
  return env.Undefined();
}

// bnTrain(x, y, C, scale|null, offset|null, eps, meanOut, varianceOut)
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
  cpu::bnTrain(x.data, y.data, n / C, C, scale.data, offset.data, eps, meanOut.data, varOut.data);
  return env.Undefined();
}

// bnTrainGrad(dy, x, C, scale|null, mean, variance, dmean|null, dvariance|null, eps, dx, dscale, doffset)
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
  cpu::bnTrainGrad(dy.data, x.data, n / C, C, scale.data, mean.data, var.data, dmean.data, dvar.data, eps, dx.data,
                   dscale.data, doffset.data);
  return env.Undefined();
}

cpu::GroupShape groupShape(const Napi::Env& env, int64_t n, int64_t B, int64_t C, int64_t G) {
  if (B <= 0 || C <= 0 || G <= 0 || C % G != 0 || n == 0 || n % (B * C) != 0) {
    throw Napi::RangeError::New(env, "group norm: bad batch, channel or group count");
  }
  return {B, n / (B * C), C, G, C / G};
}

// gnTrain(x, y, B, C, G, scale|null, offset|null, eps, meanOut[B*G], rstdOut[B*G])
Napi::Value GnTrain(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  F32 x = f32(env, info[0], "x"), y = f32(env, info[1], "out");
  const cpu::GroupShape sh = groupShape(env, static_cast<int64_t>(x.length), num(info[2]), num(info[3]), num(info[4]));
  F32 scale = f32(env, info[5], "scale", true), offset = f32(env, info[6], "offset", true);
  const double eps = info[7].As<Napi::Number>().DoubleValue();
  F32 meanOut = f32(env, info[8], "mean"), rstdOut = f32(env, info[9], "rstd");
  need(env, y, static_cast<int64_t>(x.length), "out");
  need(env, meanOut, sh.B * sh.G, "mean");
  need(env, rstdOut, sh.B * sh.G, "rstd");
  if (scale.data) need(env, scale, sh.C, "scale");
  if (offset.data) need(env, offset, sh.C, "offset");
  cpu::gnTrain(sh, x.data, y.data, scale.data, offset.data, eps, meanOut.data, rstdOut.data);
  return env.Undefined();
}

// gnTrainGrad(dy, x, B, C, G, scale|null, mean, rstd, dx, dscale, doffset)
Napi::Value GnTrainGrad(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  F32 dy = f32(env, info[0], "dy"), x = f32(env, info[1], "x");
  const cpu::GroupShape sh = groupShape(env, static_cast<int64_t>(x.length), num(info[2]), num(info[3]), num(info[4]));
  F32 scale = f32(env, info[5], "scale", true), mean = f32(env, info[6], "mean"), rstd = f32(env, info[7], "rstd");
  F32 dx = f32(env, info[8], "dx"), dscale = f32(env, info[9], "dscale"), doffset = f32(env, info[10], "doffset");
  const int64_t n = static_cast<int64_t>(x.length);
  need(env, dy, n, "dy");
  need(env, dx, n, "dx");
  need(env, mean, sh.B * sh.G, "mean");
  need(env, rstd, sh.B * sh.G, "rstd");
  need(env, dscale, sh.C, "dscale");
  need(env, doffset, sh.C, "doffset");
  if (scale.data) need(env, scale, sh.C, "scale");
  cpu::gnTrainGrad(sh, dy.data, x.data, scale.data, mean.data, rstd.data, dx.data, dscale.data, doffset.data);
  return env.Undefined();
}

// ------------------------------------------------------------------------------ pooling

cpu::PoolParams poolParams(const Napi::Env& env, const Napi::Value& v) {
  auto q = ints(env, v, "pool params");
  if (q.size() != 12) throw Napi::RangeError::New(env, "pool params must have 12 values");
  cpu::PoolParams p{q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9], q[10], q[11]};
  for (int i = 0; i < 10; ++i) if (q[i] <= 0) throw Napi::RangeError::New(env, "bad pool params");
  if (p.pt < 0 || p.pl < 0) throw Napi::RangeError::New(env, "bad pool padding");
  return p;
}

// maxPool / avgPool (x, out, params)
Napi::Value PoolFwd(const Napi::CallbackInfo& info, void (*pool)(const cpu::PoolParams&, const float*, float*)) {
  Napi::Env env = info.Env();
  F32 x = f32(env, info[0], "x"), out = f32(env, info[1], "out");
  const cpu::PoolParams p = poolParams(env, info[2]);
  need(env, x, p.N * p.H * p.W * p.C, "x");
  need(env, out, p.N * p.OH * p.OW * p.C, "out");
  pool(p, x.data, out.data);
  return env.Undefined();
}

Napi::Value MaxPool(const Napi::CallbackInfo& info) { return PoolFwd(info, cpu::maxPool); }
Napi::Value AvgPool(const Napi::CallbackInfo& info) { return PoolFwd(info, cpu::avgPool); }

// maxPoolGrad(dy, x, dx, params)
Napi::Value MaxPoolGrad(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  F32 dy = f32(env, info[0], "dy"), x = f32(env, info[1], "x"), dx = f32(env, info[2], "out");
  const cpu::PoolParams p = poolParams(env, info[3]);
  need(env, x, p.N * p.H * p.W * p.C, "x");
  need(env, dx, p.N * p.H * p.W * p.C, "out");
  need(env, dy, p.N * p.OH * p.OW * p.C, "dy");
  cpu::maxPoolGrad(p, dy.data, x.data, dx.data);
  return env.Undefined();
}

// avgPoolGrad(dy, dx, params)
Napi::Value AvgPoolGrad(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  F32 dy = f32(env, info[0], "dy"), dx = f32(env, info[1], "out");
  const cpu::PoolParams p = poolParams(env, info[2]);
  need(env, dx, p.N * p.H * p.W * p.C, "out");
  need(env, dy, p.N * p.OH * p.OW * p.C, "dy");
  cpu::avgPoolGrad(p, dy.data, dx.data);
  return env.Undefined();
}

}  // namespace

void registerCpuOps(Napi::Env env, Napi::Object exports) {
  exports.Set("binary", Napi::Function::New(env, Binary));
  exports.Set("unary", Napi::Function::New(env, Unary));
  exports.Set("softmax", Napi::Function::New(env, Softmax));
  exports.Set("softmaxGrad", Napi::Function::New(env, SoftmaxGrad));
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
