// Generator: a seeded, counter-based random stream (Philox4x32-10). Element i of a draw
// depends only on (seed, offset + i), so the same seed gives the same values on every
// node, whatever the threading, and a master can hand (seed, offset) to any worker.
//
// Thread safety: a Generator is not synchronized; use one per thread, or guard it.
// default_generator() is process-wide and guarded internally.
#pragma once

#include <cstdint>

namespace dtr {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  // Reserves n counter positions and returns the first.
  uint64_t advance(uint64_t n) {
    uint64_t first = offset_;
    offset_ += n;
    return first;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The generator used when none is given; thread-safe reservation of positions.
struct RandomDraw {
  uint64_t seed;
  uint64_t offset;
};
RandomDraw default_generator_advance(uint64_t n);
void manual_seed(uint64_t seed);

}  // namespace dtr
