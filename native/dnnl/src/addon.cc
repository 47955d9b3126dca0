// Node-API bindings of the ssl-zoo oneDNN addon. All kernels are synchronous: they run on
// the calling (JS) thread, which becomes the master of oneDNN's OpenMP team.
// Sizes of every buffer are checked here, so a wrong shape from JS raises a TypeError
// instead of touching memory out of bounds.
#include <malloc.h>
#include <napi.h>

#include "cpu_ops_bindings.h"
#include "measure_ghz.h"
#include "ops.h"

namespace {

using sz::ConvParams;
using sz::MatmulParams;

struct Buf {
  float* data = nullptr;
  size_t length = 0;
};

Buf f32(const Napi::Env& env, const Napi::Value& v, const char* name, size_t need,
        bool optional = false) {
  if (optional && (v.IsNull() || v.IsUndefined())) return {};
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) {
    throw Napi::TypeError::New(env, std::string(name) + " must be a Float32Array");
  }
  auto a = v.As<Napi::Float32Array>();
  if (a.ElementLength() < need) {
    throw Napi::TypeError::New(env, std::string(name) + " has " + std::to_string(a.ElementLength()) +
                                        " elements, needs " + std::to_string(need));
  }
  return {a.Data(), a.ElementLength()};
}

int64_t i64(const Napi::Value& v) { return static_cast<int64_t>(v.As<Napi::Number>().DoubleValue()); }

void positive(const Napi::Env& env, std::initializer_list<int64_t> xs) {
  for (int64_t x : xs) {
    if (x <= 0) throw Napi::RangeError::New(env, "dimensions must be positive");
  }
}

// matmul(a, b, bias|null, out, batchA, batchB, M, N, K, transA, transB, act, alpha) -> bool
Napi::Value Matmul(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MatmulParams p;
  p.batchA = i64(info[4]);
  p.batchB = i64(info[5]);
  p.M = i64(info[6]);
  p.N = i64(info[7]);
  p.K = i64(info[8]);
  p.transA = info[9].ToBoolean();
  p.transB = info[10].ToBoolean();
  p.act = static_cast<int>(i64(info[11]));
  p.alpha = info[12].As<Napi::Number>().FloatValue();
  positive(env, {p.batchA, p.batchB, p.M, p.N, p.K});
  if (p.batchA != p.batchB && p.batchA != 1 && p.batchB != 1) {
    throw Napi::RangeError::New(env, "matmul batch dims must match or be 1");
  }
  const int64_t B = std::max(p.batchA, p.batchB);
  Buf a = f32(env, info[0], "a", p.batchA * p.M * p.K);
  Buf b = f32(env, info[1], "b", p.batchB * p.K * p.N);
  Buf bias = f32(env, info[2], "bias", p.N, true);
  p.bias = bias.data != nullptr;
  Buf c = f32(env, info[3], "out", B * p.M * p.N);
  return Napi::Boolean::New(env, sz::matmul(p, a.data, b.data, bias.data, c.data));
}

ConvParams convParams(const Napi::Env& env, const Napi::Value& v) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array ||
      v.As<Napi::Int32Array>().ElementLength() != 17) {
    throw Napi::TypeError::New(env, "conv params must be an Int32Array of 17 values");
  }
  const int32_t* q = v.As<Napi::Int32Array>().Data();
  ConvParams p{};
  p.N = q[0], p.H = q[1], p.W = q[2], p.C = q[3];
  p.OH = q[4], p.OW = q[5], p.OC = q[6];
  p.KH = q[7], p.KW = q[8];
  p.sh = q[9], p.sw = q[10], p.dh = q[11], p.dw = q[12];
  p.pt = q[13], p.pl = q[14], p.pb = q[15], p.pr = q[16];
  positive(env, {p.N, p.H, p.W, p.C, p.OH, p.OW, p.OC, p.KH, p.KW, p.sh, p.sw, p.dh, p.dw});
  if (p.pt < 0 || p.pl < 0) throw Napi::RangeError::New(env, "negative padding");
  return p;
}

// conv2d(x, w, bias|null, y, params, act, alpha) -> bool
Napi::Value Conv2d(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ConvParams p = convParams(env, info[4]);
  p.act = static_cast<int>(i64(info[5]));
  p.alpha = info[6].As<Napi::Number>().FloatValue();
  Buf x = f32(env, info[0], "x", p.N * p.H * p.W * p.C);
  Buf w = f32(env, info[1], "filter", p.KH * p.KW * p.C * p.OC);
  Buf bias = f32(env, info[2], "bias", p.OC, true);
  p.bias = bias.data != nullptr;
  Buf y = f32(env, info[3], "out", p.N * p.OH * p.OW * p.OC);
  return Napi::Boolean::New(env, sz::conv2d(p, x.data, w.data, bias.data, y.data));
}

// conv2dBackpropInput(dy, w, dx, params) -> bool
Napi::Value Conv2dBackpropInput(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ConvParams p = convParams(env, info[3]);
  Buf dy = f32(env, info[0], "dy", p.N * p.OH * p.OW * p.OC);
  Buf w = f32(env, info[1], "filter", p.KH * p.KW * p.C * p.OC);
  Buf dx = f32(env, info[2], "out", p.N * p.H * p.W * p.C);
  return Napi::Boolean::New(env, sz::conv2dBackpropInput(p, dy.data, w.data, dx.data));
}

// conv2dBackpropFilter(x, dy, dw, params) -> bool
Napi::Value Conv2dBackpropFilter(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ConvParams p = convParams(env, info[3]);
  Buf x = f32(env, info[0], "x", p.N * p.H * p.W * p.C);
  Buf dy = f32(env, info[1], "dy", p.N * p.OH * p.OW * p.OC);
  Buf dw = f32(env, info[2], "out", p.KH * p.KW * p.C * p.OC);
  return Napi::Boolean::New(env, sz::conv2dBackpropFilter(p, x.data, dy.data, dw.data));
}

Napi::Value SetNumThreads(const Napi::CallbackInfo& info) {
  sz::setNumThreads(static_cast<int>(i64(info[0])));
  return info.Env().Undefined();
}

Napi::Value NumThreads(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), sz::numThreads());
}

Napi::Value SetLayoutMode(const Napi::CallbackInfo& info) {
  sz::setLayoutMode(static_cast<int>(i64(info[0])));
  return info.Env().Undefined();
}

Napi::Value SetWinograd(const Napi::CallbackInfo& info) {
  sz::setWinograd(info[0].ToBoolean());
  return info.Env().Undefined();
}

Napi::Value Winograd(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), sz::winograd());
}

Napi::Value ClearCache(const Napi::CallbackInfo& info) {
  sz::clearCache();
  return info.Env().Undefined();
}

Napi::Value CacheSize(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(sz::cacheSize()));
}

Napi::Value LastError(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), sz::lastError());
}

Napi::Value LastImpl(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), sz::lastImpl());
}

// tuneMalloc(mmapThresholdBytes, trimThresholdBytes) -> [ok1, ok2]
Napi::Value TuneMalloc(const Napi::CallbackInfo& info) {
  const int a = mallopt(M_MMAP_THRESHOLD, static_cast<int>(i64(info[0])));
  const int b = mallopt(M_TRIM_THRESHOLD, static_cast<int>(i64(info[1])));
  auto arr = Napi::Array::New(info.Env(), 2);
  arr.Set(0u, Napi::Boolean::New(info.Env(), a == 1));
  arr.Set(1u, Napi::Boolean::New(info.Env(), b == 1));
  return arr;
}

// measureGhz(seconds = 0.2) -> the clock rate of this core in GHz (scripts/bench/kernels.ts)
Napi::Value MeasureGhz(const Napi::CallbackInfo& info) {
  const double seconds = info.Length() > 0 ? info[0].As<Napi::Number>().DoubleValue() : 0.2;
  return Napi::Number::New(info.Env(), sz::measureGhz(seconds));
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("tuneMalloc", Napi::Function::New(env, TuneMalloc));
  exports.Set("measureGhz", Napi::Function::New(env, MeasureGhz));
  exports.Set("matmul", Napi::Function::New(env, Matmul));
  exports.Set("conv2d", Napi::Function::New(env, Conv2d));
  exports.Set("conv2dBackpropInput", Napi::Function::New(env, Conv2dBackpropInput));
  exports.Set("conv2dBackpropFilter", Napi::Function::New(env, Conv2dBackpropFilter));
  exports.Set("setNumThreads", Napi::Function::New(env, SetNumThreads));
  exports.Set("numThreads", Napi::Function::New(env, NumThreads));
  exports.Set("setLayoutMode", Napi::Function::New(env, SetLayoutMode));
  exports.Set("setWinograd", Napi::Function::New(env, SetWinograd));
  exports.Set("winograd", Napi::Function::New(env, Winograd));
  exports.Set("clearCache", Napi::Function::New(env, ClearCache));
  exports.Set("cacheSize", Napi::Function::New(env, CacheSize));
  exports.Set("lastError", Napi::Function::New(env, LastError));
  exports.Set("lastImpl", Napi::Function::New(env, LastImpl));
  exports.Set("dnnlVersion", Napi::String::New(env, sz::dnnlVersion()));
  exports.Set("cpuIsa", Napi::String::New(env, sz::cpuIsa()));
  sz::registerCpuOps(env, exports);
  return exports;
}

}  // namespace

NODE_API_MODULE(ssl_zoo_dnnl, Init)
