// Normalisation kernels over channels-last data: batch norm (inference, and training with
// its gradient) and group norm (training forward and gradient; layer norm is a special case).
// Statistics are summed in double precision; `scale` and `offset` may be null (1 and 0).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sz::cpu {

/** A per-channel parameter of 1 value (used for every channel) or C values; null data: absent. */
struct ChannelParam {
  const float* data = nullptr;
  size_t length = 0;
};

/** y = (x - mean) / sqrt(variance + eps) * scale + offset over [rows, C]; mean and variance present. */
void batchNorm(const float* x, float* y, int64_t rows, int64_t C, ChannelParam mean, ChannelParam variance,
               ChannelParam scale, ChannelParam offset, double eps);

/**
 * Training batch norm over [rows, C]: the batch statistics over all rows (biased variance)
 * into meanOut[C] and varOut[C], and y = (x - mean) / sqrt(var + eps) * scale + offset.
 */
void bnTrain(const float* x, float* y, int64_t rows, int64_t C, const float* scale, const float* offset,
             double eps, float* meanOut, float* varOut);

/**
 * Gradient of bnTrain's outputs (y, mean, variance: dy, dmean, dvariance; the last two may
 * be null) with respect to x, scale and offset.
 */
void bnTrainGrad(const float* dy, const float* x, int64_t rows, int64_t C, const float* scale, const float* mean,
                 const float* variance, const float* dmean, const float* dvariance, double eps, float* dx,
                 float* dscale, float* doffset);

// x viewed as [B, S, C] with C = G * Cg (S spatial positions, 1 for [B, C] data): statistics
// per (sample b, group g) over its S * Cg values, as torch.nn.GroupNorm; LayerNorm over the
// last axis is the case S = 1, G = 1 with every position a sample.
struct GroupShape {
  int64_t B, S, C, G, Cg;
};

/**
 * Group norm: meanOut[B * G], rstdOut[B * G] and y = (x - mean) * rstd * scale + offset,
 * with the biased variance inside rstd = 1 / sqrt(var + eps).
 */
void gnTrain(const GroupShape& sh, const float* x, float* y, const float* scale, const float* offset, double eps,
             float* meanOut, float* rstdOut);

/** Gradient of gnTrain's y with respect to x, scale and offset (mean and rstd are not differentiable outputs). */
void gnTrainGrad(const GroupShape& sh, const float* dy, const float* x, const float* scale, const float* mean,
                 const float* rstd, float* dx, float* dscale, float* doffset);

}  // namespace sz::cpu
