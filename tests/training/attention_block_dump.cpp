// attention_block_dump OUT_FILE: a one-layer causal transformer block run on a remote
// dtr-worker (issue 42) and written, as one dtr state file, for
// tests/training/attention_block_torch.py to recompute in torch. The program starts its own
// worker on 127.0.0.1 (tests/support/worker_process.hpp: bounded waits, killed with the
// program), drives it as master, and builds every tensor there, in float64:
//   token ids (B=2, T=8, vocab 11) -> token embedding (11, 16) + learned positions (8, 16)
//   -> layer_norm -> 2-head causal self-attention (q, k, v and output projections; scores /
//   sqrt(dh), future positions masked with -inf via tril + masked_fill, softmax) + residual
//   -> layer_norm -> MLP (16 -> 64, exact (erf) GELU, 64 -> 16) + residual -> vocabulary
//   logits -> cross entropy (log_softmax + nll_loss, mean) against the next tokens.
// Forward and backward run with dtr autograd on the worker. The file holds the config, every
// parameter ("param.NAME"), the ids and targets (as float64: state files hold floats), the
// logits, the loss and every parameter's gradient ("grad.NAME").
#include <dtr/autograd.hpp>
#include <dtr/distributed.hpp>
#include <dtr/nn.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <iostream>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "support/worker_process.hpp"

namespace {

using dtr::DistributedTensor;
using dtr::DType;
using dtr::Shape;
namespace F = dtr::nn::functional;

constexpr int64_t kBatch = 2, kSeq = 8, kVocab = 11, kModel = 16, kHeads = 2;
constexpr int64_t kHeadDim = kModel / kHeads, kHidden = 4 * kModel;
constexpr uint64_t kParamSeed = 1234;  // the parameters' generator
constexpr uint32_t kTokenSeed = 42;    // the token sequences' (std::mt19937)

// One dtr-worker on 127.0.0.1 (no CUDA devices) and a master session over it; the session
// ends before the worker is stopped (SIGTERM, a bounded wait, then SIGKILL).
class RemoteWorker {
 public:
  RemoteWorker() : worker_({"--devices", "none"}) {
    dtr::MasterOptions o;
    o.workers = {worker_.endpoint()};
    o.connect_timeout = std::chrono::seconds(10);
    o.sync_timeout = std::chrono::seconds(60);
    dtr::init_master_worker(o);
  }
  ~RemoteWorker() {
    try {
      dtr::shutdown_master_worker();
    } catch (const std::exception& e) {
      std::cerr << "attention_block_dump: shutdown: " << e.what() << "\n";
    }
  }
  RemoteWorker(const RemoteWorker&) = delete;
  RemoteWorker& operator=(const RemoteWorker&) = delete;

 private:
  dtr::test::WorkerProcess worker_;
};

// The block's parameters, leaves on the worker, in a fixed order.
class Params {
 public:
  // mean + scale * N(0, 1), drawn from gen on the current node.
  void add(const std::string& name, const Shape& shape, dtr::Generator& gen, double scale,
           double mean = 0.0) {
    DistributedTensor t = dtr::randn(shape, gen, DType::Float64) * scale;
    if (mean != 0.0) t = t + mean;
    t.requires_grad_();
    list_.emplace_back(name, t);
  }
  const DistributedTensor& operator[](const std::string& name) const {
    for (const auto& [n, t] : list_)
      if (n == name) return t;
    throw std::logic_error("no parameter " + name);
  }
  const std::vector<std::pair<std::string, DistributedTensor>>& all() const { return list_; }

 private:
  std::vector<std::pair<std::string, DistributedTensor>> list_;
};

Params make_params() {
  dtr::Generator gen(kParamSeed);
  Params p;
  const double in_model = 1.0 / std::sqrt(double(kModel));
  p.add("tok_emb", {kVocab, kModel}, gen, 0.5);
  p.add("pos_emb", {kSeq, kModel}, gen, 0.5);
  for (const char* ln : {"ln1", "ln2"}) {
    p.add(std::string(ln) + ".weight", {kModel}, gen, 0.1, 1.0);
    p.add(std::string(ln) + ".bias", {kModel}, gen, 0.1);
  }
  for (const char* proj : {"attn.q", "attn.k", "attn.v", "attn.out"}) {
    p.add(std::string(proj) + ".weight", {kModel, kModel}, gen, in_model);
    p.add(std::string(proj) + ".bias", {kModel}, gen, 0.1);
  }
  p.add("mlp.fc1.weight", {kHidden, kModel}, gen, in_model);
  p.add("mlp.fc1.bias", {kHidden}, gen, 0.1);
  p.add("mlp.fc2.weight", {kModel, kHidden}, gen, 1.0 / std::sqrt(double(kHidden)));
  p.add("mlp.fc2.bias", {kModel}, gen, 0.1);
  p.add("head.weight", {kVocab, kModel}, gen, in_model);
  p.add("head.bias", {kVocab}, gen, 0.1);
  return p;
}

// Token sequences of kSeq + 1 per batch row: the inputs are the first kSeq, the targets the
// last kSeq (the next token at each position). Both int64 on the master.
std::pair<dtr::local::Tensor, dtr::local::Tensor> make_tokens() {
  std::mt19937 rng(kTokenSeed);
  std::vector<int64_t> ids, targets;
  for (int64_t b = 0; b < kBatch; ++b) {
    std::vector<int64_t> seq;
    for (int64_t t = 0; t <= kSeq; ++t) seq.push_back(static_cast<int64_t>(rng() % kVocab));
    ids.insert(ids.end(), seq.begin(), seq.end() - 1);
    targets.insert(targets.end(), seq.begin() + 1, seq.end());
  }
  return {dtr::local::from_vector(ids, {kBatch, kSeq}),
          dtr::local::from_vector(targets, {kBatch, kSeq})};
}

// (B, T, D) -> (B, H, T, dh).
DistributedTensor split_heads(const DistributedTensor& x) {
  return x.view({kBatch, kSeq, kHeads, kHeadDim}).transpose(1, 2);
}

DistributedTensor project(const DistributedTensor& x, const Params& p, const std::string& name) {
  return F::linear(x, p[name + ".weight"], p[name + ".bias"]);
}

// Causal multi-head self-attention of h (B, T, D), before the residual.
DistributedTensor attention(const DistributedTensor& h, const Params& p) {
  const DistributedTensor q = split_heads(project(h, p, "attn.q"));
  const DistributedTensor k = split_heads(project(h, p, "attn.k"));
  const DistributedTensor v = split_heads(project(h, p, "attn.v"));
  const DistributedTensor scores = q.matmul(k.transpose(-2, -1)) / std::sqrt(double(kHeadDim));
  const DistributedTensor future = h.new_ones({kSeq, kSeq}).tril().eq(0);  // key after query
  const DistributedTensor weights =
      scores.masked_fill(future, -std::numeric_limits<double>::infinity()).softmax(-1);
  const DistributedTensor mixed = weights.matmul(v).transpose(1, 2).reshape({kBatch, kSeq, kModel});
  return project(mixed, p, "attn.out");
}

// The vocabulary logits (B, T, V) of the token ids (B, T).
DistributedTensor forward(const DistributedTensor& ids, const Params& p) {
  DistributedTensor x = dtr::embedding(p["tok_emb"], ids) + p["pos_emb"];
  const DistributedTensor h1 = x.layer_norm({kModel}, p["ln1.weight"], p["ln1.bias"]);
  x = x + attention(h1, p);
  const DistributedTensor h2 = x.layer_norm({kModel}, p["ln2.weight"], p["ln2.bias"]);
  x = x + project(project(h2, p, "mlp.fc1").gelu(), p, "mlp.fc2");
  return project(x, p, "head");
}

dtr::local::Tensor scalar_entry(double v) {
  return dtr::local::from_vector(std::vector<double>{v});
}

// Builds the block on the worker, runs forward and backward there, returns what to save.
dtr::nn::NamedTensors run_block() {
  const Params p = make_params();
  const auto [ids, targets] = make_tokens();
  const DistributedTensor remote_ids = dtr::dist_send(ids, 0);
  const DistributedTensor remote_targets = dtr::dist_send(targets, 0);
  const DistributedTensor logits = forward(remote_ids, p);
  const DistributedTensor loss =
      logits.reshape({kBatch * kSeq, kVocab}).log_softmax(1).nll_loss(remote_targets.reshape({-1}));
  loss.backward();

  dtr::nn::NamedTensors out;
  out.emplace_back("config.heads", scalar_entry(double(kHeads)));
  for (const auto& [name, t] : p.all()) out.emplace_back("param." + name, t.detach().to_local());
  out.emplace_back("input.ids", ids.to(DType::Float64));
  out.emplace_back("input.targets", targets.to(DType::Float64));
  out.emplace_back("out.logits", logits.detach().to_local());
  out.emplace_back("out.loss", loss.detach().to_local().view({1}));
  for (const auto& [name, t] : p.all()) {
    if (!t.grad().defined()) throw std::runtime_error("no gradient reached " + name);
    out.emplace_back("grad." + name, t.grad().to_local());
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: attention_block_dump OUT_FILE\n";
    return 2;
  }
  try {
    RemoteWorker worker;
    std::cout << "attention_block_dump: running on worker " << dtr::node_info(0).worker << "\n";
    dtr::nn::save_state(argv[1], run_block());
  } catch (const std::exception& e) {
    std::cerr << "attention_block_dump: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
