// Reductions (sum, max, min) over the middle axis of a [outer, reduced, inner] view, with
// the semantics of tfjs-backend-cpu's JS kernels: sums in double precision, NaN wins in
// max and min. The op numbers are those src/core/kernels/cpu-ops.ts passes.
#pragma once

#include <cstdint>

namespace sz::cpu {

enum ReduceOp { kSum, kRMax, kRMin };

/** x viewed as [O, R, I]: out[o, i] = reduce_r x[o, r, i] (times `scale` for sums). */
void reduce(ReduceOp op, const float* x, float* out, int64_t O, int64_t R, int64_t I, double scale);

}  // namespace sz::cpu
