// Non-oneDNN kernels (element-wise, reductions, pooling) written as plain OpenMP loops.
#pragma once
#include <napi.h>

namespace sz {
/** Adds the cpu_ops functions to the addon's exports. */
void registerCpuOps(Napi::Env env, Napi::Object exports);
}  // namespace sz
