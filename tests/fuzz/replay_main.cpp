// Replay driver for the libFuzzer targets in builds without libFuzzer (the normal g++ build
// and the ASan build): runs LLVMFuzzerTestOneInput on every file of the given corpus
// directories, then on deterministic pseudo-random mutations of them (a fixed seed, so a
// failure reproduces), which makes a short fuzz smoke run part of ctest.
//
// Usage: <target>_replay [--mutations N] [--seed S] [--max-seconds T] DIR_OR_FILE...
//   --mutations N    mutated inputs after the corpus (default 2000)
//   --seed S         seed of the mutations (default 1)
//   --max-seconds T  stop the mutations after T seconds (default 0: no limit)
// A failing input is whatever was running when it crashed; with DTR_FUZZ_SAVE=path set,
// each input is written there before it runs, so the last one is the culprit.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

constexpr size_t kMaxInput = size_t{64} << 10;

Bytes read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

const char* g_save = nullptr;

void run_one(const Bytes& b) {
  if (g_save) {
    std::ofstream out(g_save, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  // A copy in a buffer of exactly its size, so that ASan sees reads past the end.
  auto* copy = static_cast<uint8_t*>(std::malloc(b.size() ? b.size() : 1));
  std::copy(b.begin(), b.end(), copy);
  LLVMFuzzerTestOneInput(copy, b.size());
  std::free(copy);
}

// libFuzzer-like mutations: bit flips, random and "interesting" values of 1 to 8 bytes,
// inserts, erases, truncation, and splices from another corpus file.
class Mutator {
 public:
  Mutator(uint64_t seed, const std::vector<Bytes>& corpus) : rng_(seed), corpus_(corpus) {}

  Bytes next() {
    Bytes b = corpus_.empty() ? Bytes{} : corpus_[below(corpus_.size())];
    int steps = 1 + static_cast<int>(below(4));
    for (int i = 0; i < steps; ++i) mutate(b);
    if (b.size() > kMaxInput) b.resize(kMaxInput);
    return b;
  }

 private:
  std::mt19937_64 rng_;
  const std::vector<Bytes>& corpus_;

  size_t below(size_t n) { return n ? static_cast<size_t>(rng_() % n) : 0; }

  void mutate(Bytes& b) {
    switch (below(8)) {
      case 0:  // flip a bit
        if (!b.empty()) b[below(b.size())] ^= static_cast<uint8_t>(1u << below(8));
        return;
      case 1:  // a random byte
        if (!b.empty()) b[below(b.size())] = static_cast<uint8_t>(rng_());
        return;
      case 2: {  // an interesting value, 1, 2, 4 or 8 bytes little endian
        static const uint64_t kValues[] = {
            0,          1,          2,          3,          7,          8,
            0x7F,       0x80,       0xFF,       0x100,      0x7FFF,     0xFFFF,
            0x10000,    0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1ull << 32, 1ull << 40,
            1ull << 62, ~0ull >> 1, 1ull << 63, ~0ull};
        size_t width = size_t{1} << below(4);
        if (b.size() < width) return;
        uint64_t v = kValues[below(std::size(kValues))];
        if (below(4) == 0) v = ~v + 1;  // negated
        size_t at = below(b.size() - width + 1);
        for (size_t i = 0; i < width; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
        return;
      }
      case 3: {  // insert random bytes
        size_t n = 1 + below(8);
        size_t at = below(b.size() + 1);
        Bytes ins(n);
        for (auto& x : ins) x = static_cast<uint8_t>(rng_());
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), ins.begin(), ins.end());
        return;
      }
      case 4: {  // erase a range
        if (b.empty()) return;
        size_t at = below(b.size());
        size_t n = 1 + below(std::min<size_t>(16, b.size() - at));
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at),
                b.begin() + static_cast<std::ptrdiff_t>(at + n));
        return;
      }
      case 5:  // truncate
        b.resize(below(b.size() + 1));
        return;
      case 6: {  // overwrite with a chunk of another input
        if (corpus_.empty() || b.empty()) return;
        const Bytes& o = corpus_[below(corpus_.size())];
        if (o.empty()) return;
        size_t from = below(o.size());
        size_t n = 1 + below(std::min<size_t>(32, o.size() - from));
        size_t at = below(b.size());
        n = std::min(n, b.size() - at);
        std::copy_n(o.begin() + static_cast<std::ptrdiff_t>(from), n,
                    b.begin() + static_cast<std::ptrdiff_t>(at));
        return;
      }
      default: {  // duplicate a chunk of itself
        if (b.empty()) return;
        size_t from = below(b.size());
        size_t n = 1 + below(std::min<size_t>(64, b.size() - from));
        Bytes chunk(b.begin() + static_cast<std::ptrdiff_t>(from),
                    b.begin() + static_cast<std::ptrdiff_t>(from + n));
        size_t at = below(b.size() + 1);
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), chunk.begin(), chunk.end());
        return;
      }
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  long mutations = 2000;
  uint64_t seed = 1;
  double max_seconds = 0;
  std::vector<fs::path> paths;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mutations" && i + 1 < argc) {
      mutations = std::strtol(argv[++i], nullptr, 10);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--max-seconds" && i + 1 < argc) {
      max_seconds = std::strtod(argv[++i], nullptr);
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: %s [--mutations N] [--seed S] [--max-seconds T] DIR_OR_FILE...\n",
                  argv[0]);
      return 0;
    } else {
      paths.emplace_back(a);
    }
  }
  g_save = std::getenv("DTR_FUZZ_SAVE");

  std::vector<fs::path> files;
  for (const fs::path& p : paths) {
    if (fs::is_directory(p)) {
      for (const auto& e : fs::directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (fs::is_regular_file(p)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "%s: no such file or directory\n", p.c_str());
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "no corpus files given\n");
    return 2;
  }

  auto start = std::chrono::steady_clock::now();
  std::vector<Bytes> corpus;
  for (const fs::path& f : files) {
    corpus.push_back(read_file(f));
    run_one(corpus.back());
  }
  run_one(Bytes{});

  Mutator m(seed, corpus);
  long done = 0;
  for (; done < mutations; ++done) {
    if (max_seconds > 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
            max_seconds)
      break;
    run_one(m.next());
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("replayed %zu corpus files and %ld mutations (seed %llu) in %.2f s\n", files.size(),
              done, static_cast<unsigned long long>(seed), secs);
  return 0;
}
