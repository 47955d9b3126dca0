// Node-API bindings of the non-oneDNN kernels (element-wise, reductions, tile/transpose,
// normalisation, pooling), which are plain OpenMP loops in elementwise.cc, reduce.cc,
// tile_transpose.cc, norm.cc and pool.cc.
#pragma once
#include <napi.h>

namespace sz {
/** Adds the cpu_ops functions to the addon's exports. */
void registerCpuOps(Napi::Env env, Napi::Object exports);
}  // namespace sz
