// The process-wide default generator.
#include <mutex>

#include "dtr/generator.hpp"

namespace dtr {

namespace {
std::mutex g_default_mutex;
Generator& default_gen() {
  static Generator gen;
  return gen;
}
}  // namespace

RandomDraw default_generator_advance(uint64_t n) {
  std::lock_guard lock(g_default_mutex);
  Generator& gen = default_gen();
  uint64_t first = gen.advance(n);
  return RandomDraw{gen.seed(), first};
}

void manual_seed(uint64_t seed) {
  std::lock_guard lock(g_default_mutex);
  default_gen().manual_seed(seed);
}

}  // namespace dtr
