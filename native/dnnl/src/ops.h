// Kernels of the ssl-zoo oneDNN addon. Every buffer is a dense float32 array in the layout
// tfjs uses: row-major, activations NHWC, conv filters HWIO ([KH, KW, IC, OC]).
// Functions return true on success and false when oneDNN rejects the problem (the caller
// then falls back to the pure-JS kernel); lastError() says why.
#pragma once

#include <cstdint>
#include <string>

namespace sz {

/** Activation fused after a matmul / convolution (tfjs `activation` attribute). */
enum Activation : int {
  kLinear = 0,
  kRelu = 1,
  kRelu6 = 2,
  kLeakyRelu = 3,  // alpha = negative slope
  kElu = 4,
  kSigmoid = 5,
};

struct MatmulParams {
  int64_t batchA, batchB;  // collapsed outer (batch) dims of a and b; equal, or one is 1
  int64_t M, N, K;         // c[M, N] = op(a)[M, K] x op(b)[K, N]
  bool transA, transB;     // a stored [K, M] / b stored [N, K]
  bool bias;               // bias of N values added to every row
  int act;
  float alpha;
};

struct ConvParams {
  int64_t N, H, W, C;     // input NHWC
  int64_t OH, OW, OC;     // output NHWC
  int64_t KH, KW;         // filter HWIO = [KH, KW, C, OC]
  int64_t sh, sw;         // strides
  int64_t dh, dw;         // dilations (1 = none)
  int64_t pt, pl, pb, pr; // paddings top, left, bottom, right
  bool bias;              // forward only: OC values
  int act;                // forward only
  float alpha;
};

bool matmul(const MatmulParams& p, const float* a, const float* b, const float* bias, float* c);
bool conv2d(const ConvParams& p, const float* x, const float* w, const float* bias, float* y);
bool conv2dBackpropInput(const ConvParams& p, const float* dy, const float* w, float* dx);
bool conv2dBackpropFilter(const ConvParams& p, const float* x, const float* dy, float* dw);

/** Bit mask over (forward, backward data, backward weights): a set bit lets oneDNN pick a (blocked) activation layout and reorders to/from NHWC around the primitive; 0 (default) keeps plain NHWC. */
void setLayoutMode(int mode);
int layoutMode();
/**
 * Lets oneDNN use Winograd (convolution_auto, blocked layouts) for 3x3 stride-1 convolutions.
 * Faster on AVX-512 machines, but less accurate than direct convolution. Off by default.
 */
void setWinograd(bool on);
bool winograd();
void clearCache();
size_t cacheSize();
/** The implementation oneDNN chose for the last primitive created since the previous call (diagnostics); empty if none. */
std::string lastImpl();

void setNumThreads(int n);
int numThreads();

std::string& lastError();
const char* dnnlVersion();
/** The instruction set oneDNN's kernels use here: the CPU's best, capped by ONEDNN_MAX_CPU_ISA ("avx2", "avx512_core", "avx512_core_amx", ...). */
const char* cpuIsa();

}  // namespace sz
