// parallel_memcpy (tensor/host_copy.hpp): every byte lands, at sizes around the parallel
// threshold and at unaligned offsets, and concurrent callers do not mix their parts.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tensor/host_copy.hpp"

using dtr::detail::kParallelCopyMin;
using dtr::detail::parallel_memcpy;

namespace {

std::vector<unsigned char> pattern(size_t n, uint32_t seed) {
  std::vector<unsigned char> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<unsigned char>(x);
  }
  return v;
}

// Copies n bytes from offset `from_off` of a source to offset `to_off` of a destination
// and checks the copy and the guard bytes around it; "" or what was wrong.
std::string copy_and_check(size_t n, size_t from_off, size_t to_off, uint32_t seed) {
  auto src = pattern(n + from_off, seed);
  std::vector<unsigned char> dst(n + to_off + 16, 0xAB);
  parallel_memcpy(dst.data() + to_off, src.data() + from_off, n);
  if (n > 0 && std::memcmp(dst.data() + to_off, src.data() + from_off, n) != 0)
    return "bytes differ for n = " + std::to_string(n);
  for (size_t i = 0; i < to_off; ++i)
    if (dst[i] != 0xAB) return "wrote before the destination for n = " + std::to_string(n);
  for (size_t i = n + to_off; i < dst.size(); ++i)
    if (dst[i] != 0xAB) return "wrote past the destination for n = " + std::to_string(n);
  return "";
}

}  // namespace

TEST_CASE("parallel_memcpy copies every byte at any size and alignment") {
  CHECK(dtr::detail::parallel_copy_threads() >= 1);
  const size_t sizes[] = {0,
                          1,
                          4095,
                          kParallelCopyMin - 1,
                          kParallelCopyMin,
                          kParallelCopyMin + 3,
                          5 * kParallelCopyMin + 12345};
  uint32_t seed = 1;
  for (size_t n : sizes)
    for (size_t from_off : {size_t{0}, size_t{3}})
      for (size_t to_off : {size_t{0}, size_t{5}}) {
        CAPTURE(n);
        std::string why = copy_and_check(n, from_off, to_off, seed++);
        CHECK_MESSAGE(why.empty(), why);
      }
}

TEST_CASE("parallel_memcpy from several threads at once keeps each call's bytes") {
  constexpr int kThreads = 4;
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t, &errors] {
      for (int rep = 0; rep < 3 && errors[static_cast<size_t>(t)].empty(); ++rep)
        errors[static_cast<size_t>(t)] =
            copy_and_check(3 * kParallelCopyMin + static_cast<size_t>(t) * 4097, 1, 7,
                           static_cast<uint32_t>(100 + t * 10 + rep));
    });
  for (auto& th : threads) th.join();
  for (const auto& e : errors) CHECK_MESSAGE(e.empty(), e);
}
