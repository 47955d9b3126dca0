// Call-free float32 approximations that let element-wise loops vectorise.
#pragma once

#include <cstdint>

namespace sz::cpu {

// exp(v) for v <= 0 in float32 (Cephes' expf: v = n ln2 + r, |r| <= ln2 / 2, a degree-5 polynomial
// in r, scaled by 2^n through the exponent bits), within ~2 ulp of std::exp and free of calls so
// that loops vectorise; 0 below -87 (where std::exp is denormal or 0).
inline float fastExpNonPositive(float v) {
  const float x = v < -87.f ? -87.f : v;
  const float shifter = 12582912.f;  // 1.5 * 2^23: adding it rounds to the nearest integer
  const float n = (x * 1.44269504088896341f + shifter) - shifter;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  __builtin_memcpy(&scale, &bits, sizeof scale);
  const float e = p * scale;
  return v < -87.f ? 0.f : e;
}

}  // namespace sz::cpu
