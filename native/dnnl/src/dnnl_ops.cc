// oneDNN-backed matmul and convolution kernels with a primitive cache keyed by shape.
#include <omp.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "ops.h"

namespace sz {

using dnnl::algorithm;
using dnnl::memory;
using dt = memory::data_type;
using tag = memory::format_tag;

namespace {

dnnl::engine& eng() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& strm() {
  static dnnl::stream s(eng());
  return s;
}

int g_layout = 0;
bool g_winograd = false;

/**
 * Whether this problem may use Winograd (when enabled): 3x3, stride 1, no dilation, and
 * enough channels (measured on Zen 4: with fewer, oneDNN still picks Winograd but the direct
 * kernels are faster; the weights gradient only gains from 64 channels on).
 */
bool winogradCandidate(const ConvParams& p, int kind) {
  const int64_t minChannels = kind == 2 ? 64 : 32;
  return g_winograd && p.KH == 3 && p.KW == 3 && p.sh == 1 && p.sw == 1 && p.dh == 1 && p.dw == 1 &&
         p.C >= minChannels && p.OC >= minChannels;
}
std::string g_lastImpl;

using Key = std::vector<int64_t>;

template <typename Entry>
using Cache = std::map<Key, std::unique_ptr<Entry>>;

void* ptr(const float* p) { return const_cast<float*>(p); }

dnnl::primitive_attr activationAttr(int act, float alpha) {
  dnnl::primitive_attr attr;
  dnnl::post_ops po;
  switch (act) {
    case kLinear: break;
    case kRelu: po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f); break;
    case kRelu6: po.append_eltwise(1.f, algorithm::eltwise_clip, 0.f, 6.f); break;
    case kLeakyRelu: po.append_eltwise(1.f, algorithm::eltwise_relu, alpha, 0.f); break;
    case kElu: po.append_eltwise(1.f, algorithm::eltwise_elu, 1.f, 0.f); break;
    case kSigmoid: po.append_eltwise(1.f, algorithm::eltwise_logistic, 0.f, 0.f); break;
    default: throw std::runtime_error("unsupported activation");
  }
  attr.set_post_ops(po);
  return attr;
}

/** A user (plain) buffer and, when the primitive wants another layout, its internal twin. */
struct Operand {
  memory user;
  memory inner;
  dnnl::reorder toInner, toUser;
  bool reordered = false;

  void init(const memory::desc& userMd, const memory::desc& want, bool input) {
    user = memory(userMd, eng(), DNNL_MEMORY_NONE);
    if (want != userMd) {
      reordered = true;
      inner = memory(want, eng());
      if (input) toInner = dnnl::reorder(user, inner);
      else toUser = dnnl::reorder(inner, user);
    }
  }
  /** Binds the user buffer; for inputs, reorders it into the primitive's layout. */
  memory& in(const float* p) {
    user.set_data_handle(ptr(p));
    if (!reordered) return user;
    toInner.execute(strm(), user, inner);
    return inner;
  }
  memory& out(float* p) {
    user.set_data_handle(p);
    return reordered ? inner : user;
  }
  void finish() {
    if (reordered) toUser.execute(strm(), inner, user);
  }
};

// ---------------------------------------------------------------------------------- matmul

struct MatmulEntry {
  dnnl::matmul prim;
  memory a, b, bias, c;
};

Cache<MatmulEntry> g_matmul;

std::unique_ptr<MatmulEntry> makeMatmul(const MatmulParams& p) {
  const int64_t M = p.M, N = p.N, K = p.K;
  const int64_t B = std::max(p.batchA, p.batchB);
  memory::desc aMd, bMd, cMd, biasMd;
  if (B == 1) {
    aMd = memory::desc({M, K}, dt::f32, p.transA ? memory::dims{1, M} : memory::dims{K, 1});
    bMd = memory::desc({K, N}, dt::f32, p.transB ? memory::dims{1, K} : memory::dims{N, 1});
    cMd = memory::desc({M, N}, dt::f32, tag::ab);
    if (p.bias) biasMd = memory::desc({1, N}, dt::f32, tag::ab);
  } else {
    aMd = memory::desc({p.batchA, M, K}, dt::f32,
                       p.transA ? memory::dims{M * K, 1, M} : memory::dims{M * K, K, 1});
    bMd = memory::desc({p.batchB, K, N}, dt::f32,
                       p.transB ? memory::dims{K * N, 1, K} : memory::dims{K * N, N, 1});
    cMd = memory::desc({B, M, N}, dt::f32, tag::abc);
    if (p.bias) biasMd = memory::desc({1, 1, N}, dt::f32, tag::abc);
  }
  auto desc = p.bias ? dnnl::matmul::desc(aMd, bMd, biasMd, cMd) : dnnl::matmul::desc(aMd, bMd, cMd);
  dnnl::matmul::primitive_desc pd(desc, activationAttr(p.act, p.alpha), eng());
  g_lastImpl = std::string("matmul:") + pd.impl_info_str();
  auto e = std::make_unique<MatmulEntry>();
  e->prim = dnnl::matmul(pd);
  e->a = memory(aMd, eng(), DNNL_MEMORY_NONE);
  e->b = memory(bMd, eng(), DNNL_MEMORY_NONE);
  e->c = memory(cMd, eng(), DNNL_MEMORY_NONE);
  if (p.bias) e->bias = memory(biasMd, eng(), DNNL_MEMORY_NONE);
  return e;
}

// ----------------------------------------------------------------------------- convolution

Key convKey(int kind, const ConvParams& p) {
  return {kind, g_layout, winogradCandidate(p, kind) ? 1 : 0, p.N, p.H, p.W, p.C, p.OH, p.OW, p.OC, p.KH, p.KW, p.sh, p.sw, p.dh, p.dw,
          p.pt, p.pl, p.pb, p.pr, p.bias ? 1 : 0, p.act, static_cast<int64_t>(p.alpha * 1e6f)};
}

struct ConvDescs {
  memory::desc srcUser, wUser, dstUser, bias;  // plain user layouts
  memory::desc src, w, dst;                    // what primitives are asked for
  memory::dims strides, dilates, padL, padR;
  algorithm algo = algorithm::convolution_direct;
};

ConvDescs convDescs(const ConvParams& p, int kind, bool allowWino) {
  ConvDescs d;
  d.srcUser = memory::desc({p.N, p.C, p.H, p.W}, dt::f32, tag::nhwc);
  d.wUser = memory::desc({p.OC, p.C, p.KH, p.KW}, dt::f32, tag::hwio);
  d.dstUser = memory::desc({p.N, p.OC, p.OH, p.OW}, dt::f32, tag::nhwc);
  d.bias = memory::desc({p.OC}, dt::f32, tag::x);
  // Winograd needs oneDNN's blocked layouts; convolution_auto lets oneDNN choose it or not.
  const bool wino = allowWino && winogradCandidate(p, kind);
  if (wino) d.algo = algorithm::convolution_auto;
  const bool any = wino || ((g_layout >> kind) & 1);
  d.src = any ? memory::desc({p.N, p.C, p.H, p.W}, dt::f32, tag::any) : d.srcUser;
  d.dst = any ? memory::desc({p.N, p.OC, p.OH, p.OW}, dt::f32, tag::any) : d.dstUser;
  d.w = memory::desc({p.OC, p.C, p.KH, p.KW}, dt::f32, tag::any);
  d.strides = {p.sh, p.sw};
  d.dilates = {p.dh - 1, p.dw - 1};
  d.padL = {p.pt, p.pl};
  d.padR = {p.pb, p.pr};
  return d;
}

dnnl::convolution_forward::primitive_desc convFwdPd(const ConvParams& p, const ConvDescs& d,
                                                    const dnnl::primitive_attr& attr) {
  auto desc = p.bias ? dnnl::convolution_forward::desc(
                           dnnl::prop_kind::forward_training, d.algo, d.src,
                           d.w, d.bias, d.dst, d.strides, d.dilates, d.padL, d.padR)
                     : dnnl::convolution_forward::desc(
                           dnnl::prop_kind::forward_training, d.algo, d.src,
                           d.w, d.dst, d.strides, d.dilates, d.padL, d.padR);
  return dnnl::convolution_forward::primitive_desc(desc, attr, eng());
}

struct ConvFwdEntry {
  dnnl::convolution_forward prim;
  Operand src, w, dst;
  memory bias;
};

struct ConvBwdDataEntry {
  dnnl::convolution_backward_data prim;
  Operand dy, w, dx;
};

struct ConvBwdWeightsEntry {
  dnnl::convolution_backward_weights prim;
  Operand x, dy, dw;
};

Cache<ConvFwdEntry> g_convFwd;
Cache<ConvBwdDataEntry> g_convBwdData;
Cache<ConvBwdWeightsEntry> g_convBwdWeights;

bool isWinograd(const dnnl::primitive_desc_base& pd) {
  return std::string(pd.impl_info_str()).find("wino") != std::string::npos;
}

std::unique_ptr<ConvFwdEntry> makeConvFwd(const ConvParams& p, bool allowWino = true) {
  const ConvDescs d = convDescs(p, 0, allowWino);
  auto pd = convFwdPd(p, d, activationAttr(p.act, p.alpha));
  // Winograd was allowed but oneDNN chose a direct kernel: use the plain-layout direct one.
  if (d.algo == algorithm::convolution_auto && !isWinograd(pd)) return makeConvFwd(p, false);
  g_lastImpl = std::string("conv_fwd:") + pd.impl_info_str();
  auto e = std::make_unique<ConvFwdEntry>();
  e->prim = dnnl::convolution_forward(pd);
  e->src.init(d.srcUser, pd.src_desc(), true);
  e->w.init(d.wUser, pd.weights_desc(), true);
  e->dst.init(d.dstUser, pd.dst_desc(), false);
  if (p.bias) e->bias = memory(d.bias, eng(), DNNL_MEMORY_NONE);
  return e;
}

std::unique_ptr<ConvBwdDataEntry> makeConvBwdData(const ConvParams& p, bool allowWino = true) {
  ConvParams fp = p;
  fp.bias = false;
  fp.act = kLinear;
  const ConvDescs d = convDescs(fp, 1, allowWino);
  auto hint = convFwdPd(fp, d, dnnl::primitive_attr());
  dnnl::convolution_backward_data::desc desc(d.algo, d.src, d.w, d.dst,
                                             d.strides, d.dilates, d.padL, d.padR);
  dnnl::convolution_backward_data::primitive_desc pd(desc, eng(), hint);
  if (d.algo == algorithm::convolution_auto && !isWinograd(pd)) return makeConvBwdData(p, false);
  g_lastImpl = std::string("conv_bwd_data:") + pd.impl_info_str();
  auto e = std::make_unique<ConvBwdDataEntry>();
  e->prim = dnnl::convolution_backward_data(pd);
  e->dy.init(d.dstUser, pd.diff_dst_desc(), true);
  e->w.init(d.wUser, pd.weights_desc(), true);
  e->dx.init(d.srcUser, pd.diff_src_desc(), false);
  return e;
}

std::unique_ptr<ConvBwdWeightsEntry> makeConvBwdWeights(const ConvParams& p, bool allowWino = true) {
  ConvParams fp = p;
  fp.bias = false;
  fp.act = kLinear;
  const ConvDescs d = convDescs(fp, 2, allowWino);
  auto hint = convFwdPd(fp, d, dnnl::primitive_attr());
  dnnl::convolution_backward_weights::desc desc(d.algo, d.src, d.w, d.dst,
                                                d.strides, d.dilates, d.padL, d.padR);
  dnnl::convolution_backward_weights::primitive_desc pd(desc, eng(), hint);
  if (d.algo == algorithm::convolution_auto && !isWinograd(pd)) return makeConvBwdWeights(p, false);
  g_lastImpl = std::string("conv_bwd_weights:") + pd.impl_info_str();
  auto e = std::make_unique<ConvBwdWeightsEntry>();
  e->prim = dnnl::convolution_backward_weights(pd);
  e->x.init(d.srcUser, pd.src_desc(), true);
  e->dy.init(d.dstUser, pd.diff_dst_desc(), true);
  e->dw.init(d.wUser, pd.diff_weights_desc(), false);
  return e;
}

template <typename Entry, typename Make>
Entry* lookup(Cache<Entry>& cache, const Key& key, Make make) {
  auto it = cache.find(key);
  if (it != cache.end()) return it->second.get();
  auto e = make();
  Entry* raw = e.get();
  cache.emplace(key, std::move(e));
  return raw;
}

// The primitive caches are shared by every thread that loads the addon (e.g. Node worker
// threads): calls into oneDNN are serialised.
std::mutex g_mutex;

template <typename Fn>
bool guarded(Fn fn) {
  std::lock_guard<std::mutex> lock(g_mutex);
  try {
    fn();
    return true;
  } catch (const dnnl::error& e) {
    lastError() = std::string("oneDNN: ") + e.what() + " (status " + std::to_string(e.status) + ")";
  } catch (const std::exception& e) {
    lastError() = e.what();
  }
  return false;
}

}  // namespace

bool matmul(const MatmulParams& p, const float* a, const float* b, const float* bias, float* c) {
  return guarded([&] {
    Key key{p.batchA, p.batchB, p.M, p.N, p.K, p.transA, p.transB, p.bias, p.act,
            static_cast<int64_t>(p.alpha * 1e6f)};
    MatmulEntry* e = lookup(g_matmul, key, [&] { return makeMatmul(p); });
    e->a.set_data_handle(ptr(a));
    e->b.set_data_handle(ptr(b));
    e->c.set_data_handle(c);
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b}, {DNNL_ARG_DST, e->c}};
    if (p.bias) {
      e->bias.set_data_handle(ptr(bias));
      args.emplace(DNNL_ARG_BIAS, e->bias);
    }
    e->prim.execute(strm(), args);
    strm().wait();
  });
}

bool conv2d(const ConvParams& p, const float* x, const float* w, const float* bias, float* y) {
  return guarded([&] {
    ConvFwdEntry* e = lookup(g_convFwd, convKey(0, p), [&] { return makeConvFwd(p); });
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e->src.in(x)},
                                         {DNNL_ARG_WEIGHTS, e->w.in(w)},
                                         {DNNL_ARG_DST, e->dst.out(y)}};
    if (p.bias) {
      e->bias.set_data_handle(ptr(bias));
      args.emplace(DNNL_ARG_BIAS, e->bias);
    }
    e->prim.execute(strm(), args);
    e->dst.finish();
    strm().wait();
  });
}

bool conv2dBackpropInput(const ConvParams& p, const float* dy, const float* w, float* dx) {
  return guarded([&] {
    ConvBwdDataEntry* e =
        lookup(g_convBwdData, convKey(1, p), [&] { return makeConvBwdData(p); });
    e->prim.execute(strm(), {{DNNL_ARG_DIFF_DST, e->dy.in(dy)},
                             {DNNL_ARG_WEIGHTS, e->w.in(w)},
                             {DNNL_ARG_DIFF_SRC, e->dx.out(dx)}});
    e->dx.finish();
    strm().wait();
  });
}

bool conv2dBackpropFilter(const ConvParams& p, const float* x, const float* dy, float* dw) {
  return guarded([&] {
    ConvBwdWeightsEntry* e =
        lookup(g_convBwdWeights, convKey(2, p), [&] { return makeConvBwdWeights(p); });
    e->prim.execute(strm(), {{DNNL_ARG_SRC, e->x.in(x)},
                             {DNNL_ARG_DIFF_DST, e->dy.in(dy)},
                             {DNNL_ARG_DIFF_WEIGHTS, e->dw.out(dw)}});
    e->dw.finish();
    strm().wait();
  });
}

void setLayoutMode(int mode) { g_layout = mode & 7; }
int layoutMode() { return g_layout; }
void setWinograd(bool on) { g_winograd = on; }
bool winograd() { return g_winograd; }

void clearCache() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_matmul.clear();
  g_convFwd.clear();
  g_convBwdData.clear();
  g_convBwdWeights.clear();
}

size_t cacheSize() {
  return g_matmul.size() + g_convFwd.size() + g_convBwdData.size() + g_convBwdWeights.size();
}

std::string lastImpl() {
  std::string s;
  s.swap(g_lastImpl);
  return s;
}

void setNumThreads(int n) { omp_set_num_threads(n < 1 ? 1 : n); }
int numThreads() { return omp_get_max_threads(); }

std::string& lastError() {
  static std::string s;
  return s;
}

const char* dnnlVersion() {
  static char buf[64];
  const dnnl_version_t* v = dnnl::version();
  std::snprintf(buf, sizeof buf, "%d.%d.%d", v->major, v->minor, v->patch);
  return buf;
}

const char* cpuIsa() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "unknown";
  }
}

}  // namespace sz
