// 2-D max and average pooling over NHWC data and their gradients, with the semantics of
// tfjs-backend-cpu's JS kernels (the first maximum of a window wins, NaN never does; the
// average-pool gradient divides by the full window size).
#pragma once

#include <cstdint>

namespace sz::cpu {

/** Input [N, H, W, C], output [N, OH, OW, C], window KH x KW, strides sh, sw, paddings top pt and left pl. */
struct PoolParams {
  int64_t N, H, W, C, OH, OW, KH, KW, sh, sw, pt, pl;
};

void maxPool(const PoolParams& p, const float* x, float* y);
/** Average over the valid positions of each window (NaN for a window with none). */
void avgPool(const PoolParams& p, const float* x, float* y);
/** dx = 0, then dy of each window goes to its first maximum in x. */
void maxPoolGrad(const PoolParams& p, const float* dy, const float* x, float* dx);
/** dx = 0, then dy / (KH * KW) of each window goes to each of its valid positions. */
void avgPoolGrad(const PoolParams& p, const float* dy, float* dx);

}  // namespace sz::cpu
