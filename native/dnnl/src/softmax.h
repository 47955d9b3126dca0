// Softmax over the last axis of a [rows, n] array, forward and backward, in one pass per row.
#pragma once

#include <cstdint>

namespace sz::cpu {

/** y = exp(x - max) / Σ exp(x - max) per row of n elements ([rows, n] -> [rows, n]). */
void softmaxRows(const float* x, float* y, int64_t rows, int64_t n);

/** dx = y (dy - Σ dy y) per row, from the forward output y ([rows, n] each). */
void softmaxGradRows(const float* y, const float* dy, float* dx, int64_t rows, int64_t n);

}  // namespace sz::cpu
