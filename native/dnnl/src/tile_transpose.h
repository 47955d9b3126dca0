// Data movement kernels: tile (repeat along every axis) and transpose (permute axes) of a
// dense row-major tensor.
#pragma once

#include <cstdint>
#include <vector>

namespace sz::cpu {

/** out = x repeated along each axis: outShape[d] = xShape[d] * reps[d] (the caller checks the shapes). */
void tile(const float* x, float* out, const std::vector<int64_t>& xShape, const std::vector<int64_t>& outShape);

/** out = x with its axes permuted: out's axis d is x's axis perm[d]. */
void transpose(const float* x, float* out, const std::vector<int64_t>& xShape, const std::vector<int64_t>& perm);

}  // namespace sz::cpu
