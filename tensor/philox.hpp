// Internal: the Philox4x32-10 counter-based generator (Salmon et al., SC'11) behind every
// random op. Element at stream position `pos` uses counter `pos`, so draws do not depend
// on how the work is split. CUDA kernels include this header too (host/device functions).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "arith.hpp"  // DTR_HOST_DEVICE
#include "dtr/half.hpp"

namespace dtr::detail {

struct Philox4 {
  uint32_t v[4];
};

DTR_HOST_DEVICE inline Philox4 philox4x32(uint64_t seed, uint64_t counter) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += kW0;
    k1 += kW1;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Uniform on [0, 1): 24 random bits for float, 11 for float16 and 8 for bfloat16 (as torch:
// each value exact in T, so rounding never reaches 1), 53 for every other T (in double).
template <typename T>
DTR_HOST_DEVICE inline auto philox_uniform(uint64_t seed, uint64_t pos) {
  Philox4 r = philox4x32(seed, pos);
  if constexpr (std::is_same_v<T, float>) {
    return static_cast<float>(r.v[0] >> 8) * (1.0f / 16777216.0f);
  } else if constexpr (std::is_same_v<T, float16>) {  // 11 bits, exact in float16 (torch)
    return static_cast<float>(r.v[0] >> 21) * (1.0f / 2048.0f);
  } else if constexpr (std::is_same_v<T, bfloat16>) {  // 8 bits, exact in bfloat16
    return static_cast<float>(r.v[0] >> 24) * (1.0f / 256.0f);
  } else {
    uint64_t bits =
        ((static_cast<uint64_t>(r.v[0]) << 21) ^ (r.v[1] >> 11)) & ((uint64_t{1} << 53) - 1);
    return static_cast<double>(bits) * (1.0 / 9007199254740992.0);
  }
}

// Standard normal by Box-Muller over two 53-bit uniforms of the same block.
DTR_HOST_DEVICE inline double philox_normal(uint64_t seed, uint64_t pos) {
  Philox4 r = philox4x32(seed, pos);
  uint64_t b1 =
      ((static_cast<uint64_t>(r.v[0]) << 21) ^ (r.v[1] >> 11)) & ((uint64_t{1} << 53) - 1);
  uint64_t b2 =
      ((static_cast<uint64_t>(r.v[2]) << 21) ^ (r.v[3] >> 11)) & ((uint64_t{1} << 53) - 1);
  double u1 = (static_cast<double>(b1) + 1.0) * (1.0 / 9007199254740992.0);  // (0, 1]
  double u2 = static_cast<double>(b2) * (1.0 / 9007199254740992.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace dtr::detail
