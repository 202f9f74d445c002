// The synchronous SGD examples' shared parts: the data set (made in the program, the same
// everywhere), the tutorial's DataPartitioner, the model's parameters and a hash of them.
// pg_sgd.cpp (SPMD ranks) and master_sgd.cpp (one master, replicas on workers) use it.
//
// Thread safety: plain functions and values.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <dtr/error.hpp>
#include <dtr/generator.hpp>
#include <dtr/tensor.hpp>

namespace sgd {

using dtr::local::Tensor;

constexpr int64_t kSamples = 4096;
constexpr int64_t kInputs = 8;
constexpr int64_t kHidden = 32;
constexpr int64_t kTeacherHidden = 16;
constexpr int64_t kGlobalBatch = 64;
constexpr float kLearningRate = 0.1f;
constexpr uint64_t kDataSeed = 1234;
constexpr uint64_t kShuffleSeed = 1234;

struct Dataset {
  Tensor x;  // (n, kInputs)
  Tensor y;  // (n, 1)
};

// The full data set, identical on every rank.
inline Dataset make_dataset() {
  dtr::Generator gen(kDataSeed);
  Tensor a = dtr::local::randn({kInputs, kTeacherHidden}, gen) * 0.5f;
  Tensor b = dtr::local::randn({kTeacherHidden, 1}, gen);
  Tensor x = dtr::local::randn({kSamples, kInputs}, gen);
  Tensor noise = dtr::local::randn({kSamples, 1}, gen) * 0.05f;
  Tensor y = x.matmul(a).tanh().matmul(b) + noise;
  return {x, y.contiguous()};
}

// The tutorial's DataPartitioner: a seeded shuffle of the indices, cut into pieces of the
// given fractions of the data.
class DataPartitioner {
 public:
  DataPartitioner(int64_t n, const std::vector<double>& fractions, uint64_t seed) {
    std::vector<int64_t> indices(static_cast<std::size_t>(n));
    std::iota(indices.begin(), indices.end(), 0);
    // Fisher-Yates with std::mt19937_64, whose output the standard fixes (unlike
    // std::shuffle's), so every rank and every platform gets the same permutation.
    std::mt19937_64 rng(seed);
    for (int64_t i = n - 1; i > 0; --i)
      std::swap(indices[static_cast<std::size_t>(i)],
                indices[static_cast<std::size_t>(rng() % static_cast<uint64_t>(i + 1))]);
    std::size_t start = 0;
    for (double f : fractions) {
      auto len = static_cast<std::size_t>(f * static_cast<double>(n));
      len = std::min(len, indices.size() - start);
      partitions_.emplace_back(indices.begin() + static_cast<std::ptrdiff_t>(start),
                               indices.begin() + static_cast<std::ptrdiff_t>(start + len));
      start += len;
    }
  }
  // The rows of `data` in partition `i`, copied into new tensors.
  Dataset use(std::size_t i, const Dataset& data) const {
    const auto& idx = partitions_.at(i);
    auto rows = static_cast<int64_t>(idx.size());
    Tensor x = dtr::local::empty({rows, kInputs});
    Tensor y = dtr::local::empty({rows, 1});
    const float* sx = data.x.data<float>();
    const float* sy = data.y.data<float>();
    float* dx = x.data<float>();
    float* dy = y.data<float>();
    for (std::size_t r = 0; r < idx.size(); ++r) {
      std::memcpy(dx + r * kInputs, sx + idx[r] * kInputs, kInputs * sizeof(float));
      dy[r] = sy[idx[r]];
    }
    return {x, y};
  }

 private:
  std::vector<std::vector<int64_t>> partitions_;
};

struct Model {
  Tensor w1, b1, w2, b2;
  std::vector<Tensor*> params() { return {&w1, &b1, &w2, &b2}; }
};

// Parameters drawn from `seed` (scaled like torch's default init, 1/sqrt(fan_in)).
inline Model init_model(uint64_t seed) {
  dtr::Generator gen(seed);
  Model m;
  float s1 = 1.0f / std::sqrt(static_cast<float>(kInputs));
  float s2 = 1.0f / std::sqrt(static_cast<float>(kHidden));
  m.w1 = dtr::local::rand({kInputs, kHidden}, gen) * (2 * s1) - s1;
  m.b1 = dtr::local::rand({kHidden}, gen) * (2 * s1) - s1;
  m.w2 = dtr::local::rand({kHidden, 1}, gen) * (2 * s2) - s2;
  m.b2 = dtr::local::rand({1}, gen) * (2 * s2) - s2;
  return m;
}

inline uint64_t fnv1a(const std::vector<Tensor*>& tensors) {
  uint64_t h = 1469598103934665603ull;
  for (const Tensor* t : tensors) {
    Tensor c = t->contiguous();
    const auto* bytes = static_cast<const unsigned char*>(c.raw_data());
    std::size_t n = static_cast<std::size_t>(c.numel()) * sizeof(float);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return h;
}

inline std::vector<double> parse_fractions(const std::string& s) {
  std::vector<double> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stod(item));
  return out;
}

// The command line of both examples: [--epochs N] [--fractions F0,F1,...]. Returns false
// (after printing the usage) on anything else.
struct Args {
  int epochs = 10;
  std::string fractions;
};
inline bool parse_args(int argc, char** argv, const char* program, Args& args) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--epochs" && i + 1 < argc) {
      args.epochs = std::stoi(argv[++i]);
    } else if (a == "--fractions" && i + 1 < argc) {
      args.fractions = argv[++i];
    } else {
      std::cerr << "usage: " << program << " [--epochs N] [--fractions F0,F1,...]\n";
      return false;
    }
  }
  return true;
}

// How `parts` replicas split the data: the fractions (default: equal), each part's local
// batch (its fraction of kGlobalBatch, at least 1), the number of steps every part takes
// (the same for all) and the sum of the local batches. Throws InvalidArgument when the
// fractions do not give one per part.
struct Plan {
  std::vector<double> fractions;
  std::vector<int64_t> batch;
  int64_t steps = 0;
  int64_t batch_total = 0;
};
inline Plan make_plan(const std::string& fractions_arg, int parts, const char* part_name) {
  Plan p;
  p.fractions = fractions_arg.empty()
                    ? std::vector<double>(static_cast<std::size_t>(parts), 1.0 / parts)
                    : parse_fractions(fractions_arg);
  if (static_cast<int>(p.fractions.size()) != parts)
    throw dtr::InvalidArgument(std::string("--fractions needs one fraction per ") + part_name);
  p.batch.resize(p.fractions.size());
  p.steps = INT64_MAX;
  for (std::size_t k = 0; k < p.fractions.size(); ++k) {
    p.batch[k] = std::max<int64_t>(1, std::llround(p.fractions[k] * kGlobalBatch));
    auto rows = static_cast<int64_t>(p.fractions[k] * kSamples);
    p.steps = std::min(p.steps, rows / p.batch[k]);
    p.batch_total += p.batch[k];
  }
  return p;
}

}  // namespace sgd
