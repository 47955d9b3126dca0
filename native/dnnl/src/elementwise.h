// Element-wise kernels: binary ops with broadcasting and unary ops, reproducing the NaN
// handling of tfjs-backend-cpu's JS kernels. The op numbers are those the TypeScript side
// passes (src/core/kernels/cpu-ops.ts, relu-grad.ts).
#pragma once

#include <cstdint>
#include <vector>

namespace sz::cpu {

enum BinaryOp { kAdd, kSub, kMul, kDiv, kSquaredDiff, kMaximum, kMinimum, kReluGrad, kGeluGrad };

enum UnaryOp { kRelu, kRelu6, kStep, kSquare, kNeg, kSqrt, kRsqrt, kExp, kLog, kAbs, kSigmoid, kTanh, kReciprocal, kErf, kGelu };

/**
 * out[i] = op(a[...], b[...]) over `shape` (the output's), with per-dim element strides of
 * a and b (0 on broadcast dims).
 */
void binary(BinaryOp op, const float* a, const float* b, float* out, const std::vector<int64_t>& shape,
            const std::vector<int64_t>& aStrides, const std::vector<int64_t>& bStrides);

/** y[i] = op(x[i]) for i < n; `alpha` is Step's value for x <= 0. */
void unary(UnaryOp op, const float* x, float* y, int64_t n, float alpha);

}  // namespace sz::cpu
