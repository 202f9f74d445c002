// Size caps of the fuzz targets that run sessions (fuzz_worker_batch.cpp,
// fuzz_graph_upload.cpp; docs/fuzzing.md, "Size caps"): before running an input, follow
// every tensor it could make, through the worker's own shape rules, and skip the input when
// they would exceed what libFuzzer's process may hold or do in a reasonable time. A graph's
// program is followed at each replay of it.
//
// Thread safety: a Budget belongs to one thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "dtr/error.hpp"
#include "dtr/op_table.hpp"
#include "protocol/messages.hpp"
#include "worker/session.hpp"

namespace dtr::fuzz {

using namespace dtr::protocol;

inline constexpr int64_t kMaxTotalBytes = int64_t{64} << 20;
inline constexpr int64_t kMaxWork = int64_t{1} << 26;
inline constexpr size_t kMaxCandidates = 4;
inline constexpr int kMaxBudgetReplays = 64;

// numel, or -1 when the shape is invalid or the count overflows.
inline int64_t safe_numel(const TensorMeta& m) {
  for (int64_t s : m.shape)
    if (s < 0) return -1;
  for (int64_t s : m.shape)
    if (s == 0) return 0;
  int64_t n = 1;
  for (int64_t s : m.shape) {
    if (n > INT64_MAX / s) return -1;
    n *= s;
  }
  return n;
}

// The tensors a batch could make, and what they cost; see the file comment.
class Budget {
 public:
  // False when the input must be skipped.
  bool follow(const Batch& b, std::span<const worker::PayloadFrame> payloads) {
    for (const Command& c : b.commands)
      if (!follow(c, payloads)) return false;
    return true;
  }
  // Tensor `id` exists already with metadata `m` (made before the input runs).
  bool declare(TensorId id, const TensorMeta& m) { return add(id, m); }
  // A replay of graph `graph`: its program's commands as if they ran (once per replay, an
  // over-approximation: a replay writes its ops' temporaries in place).
  bool follow_replay(uint64_t graph) {
    auto it = programs_.find(graph);
    if (it == programs_.end() || !it->second) return true;  // the replay fails
    if (++replays_ > kMaxBudgetReplays) return false;
    for (const Command& c : it->second->commands)
      if (!follow(c, {})) return false;
    return true;
  }

 private:
  using Metas = std::vector<TensorMeta>;
  std::unordered_map<TensorId, Metas> metas_;
  std::unordered_map<uint64_t, protocol::GraphProgram> programs_;  // uploads, by graph id
  int replays_ = 0;
  int64_t bytes_ = 0;
  int64_t work_ = 0;

  bool charge_work(int64_t n) {
    if (n < 0 || n > kMaxWork - work_) return false;
    work_ += n;
    return true;
  }
  // Charges a tensor's bytes (and as many elements of work); false when over a cap.
  bool charge(const TensorMeta& m) {
    int64_t n = safe_numel(m);
    if (n < 0 || n > kMaxTotalBytes) return false;
    int64_t bytes = n * static_cast<int64_t>(element_size(m.dtype));
    if (bytes > kMaxTotalBytes - bytes_) return false;
    bytes_ += bytes;
    return charge_work(n);
  }
  bool add(TensorId id, const TensorMeta& m) {
    if (id == kNoTensor) return true;
    Metas& v = metas_[id];
    if (std::find(v.begin(), v.end(), m) != v.end()) return true;
    if (v.size() >= kMaxCandidates) return false;
    v.push_back(m);
    return true;
  }
  int64_t max_numel(TensorId id) const {
    auto it = metas_.find(id);
    int64_t n = 0;
    if (it != metas_.end())
      for (const TensorMeta& m : it->second) n = std::max(n, safe_numel(m));
    return n;
  }

  bool follow(const Command& command, std::span<const worker::PayloadFrame> payloads) {
    namespace cmd = protocol::cmd;
    if (const auto* c = std::get_if<cmd::Put>(&command)) {
      if (c->payload < 1 || c->payload > payloads.size()) return true;  // fails
      TensorMeta m = TensorMeta::contiguous(c->meta.dtype, c->meta.shape);
      int64_t n = safe_numel(m);
      if (n < 0 || static_cast<uint64_t>(n) > payloads[c->payload - 1].size) return true;
      if (static_cast<size_t>(n) * element_size(m.dtype) != payloads[c->payload - 1].size)
        return true;  // fails: the size does not match
      return charge(m) && add(c->out, m);
    }
    if (const auto* c = std::get_if<cmd::RecvPeer>(&command)) {
      TensorMeta m = TensorMeta::contiguous(c->meta.dtype, c->meta.shape);
      return charge(m) && add(c->out, m);
    }
    if (const auto* c = std::get_if<cmd::Free>(&command)) {
      metas_.erase(c->input);
      return true;
    }
    if (const auto* c = std::get_if<cmd::Get>(&command)) return charge_work(max_numel(c->input));
    if (const auto* c = std::get_if<cmd::SendPeer>(&command))
      return charge_work(max_numel(c->input));
    // Always fails here: setup() gets no process-group endpoints, so the session has no
    // group and the output slot is failed without allocating.
    if (const auto* c = std::get_if<cmd::Collective>(&command))
      return charge_work(max_numel(c->input));
    if (const auto* c = std::get_if<cmd::RunOp>(&command)) return follow_op(*c);
    if (const auto* c = std::get_if<cmd::ToDevice>(&command))
      return charge_work(max_numel(c->input));
    if (const auto* c = std::get_if<cmd::GraphUpload>(&command)) {
      programs_.emplace(c->graph, c->program);  // a second upload of an id is refused
      return true;
    }
    if (const auto* c = std::get_if<cmd::GraphReplay>(&command)) return follow_replay(c->graph);
    return true;
  }

  // Work per output element of an op beyond reading its inputs: a matmul's inner size, a
  // convolution's taps (a weight gradient: the whole output gradient), a pooling window.
  static int64_t product_terms(OpId op, std::span<const TensorMeta> args, const OpAttrs& a) {
    const OpDef& d = op_def(op);
    int64_t k = 0;
    if ((op == OpId::max_pool2d || op == OpId::max_pool2d_indices || op == OpId::avg_pool2d) &&
        a.ints.size() >= 2)
      k = a.ints[0] * a.ints[1];
    if (op == OpId::avg_pool2d_backward && a.ints.size() >= 4) k = a.ints[2] * a.ints[3];
    if (d.kind == OpKind::Linalg && !args.empty())
      k = args[0].shape.size() ? args[0].shape[args[0].shape.size() - 1] : 1;
    if (op == OpId::linear) k = args[1].shape.size() == 2 ? args[1].shape[1] : 1;
    if ((op == OpId::conv2d || op == OpId::conv2d_input_grad) && args[1].shape.size() == 4)
      k = args[1].shape[0] * args[1].shape[2] * args[1].shape[3];
    if (op == OpId::conv2d_weight_grad && args[0].shape.size() >= 3)
      k = safe_numel(args[0]);  // each weight tap sums over the whole gradient
    return k;
  }

  bool follow_op(const protocol::cmd::RunOp& c) {
    const size_t n = c.inputs.n;
    std::vector<const Metas*> in(n);
    size_t combinations = 1;
    for (size_t i = 0; i < n; ++i) {
      auto it = metas_.find(c.inputs[i]);
      if (it == metas_.end() || it->second.empty()) return true;  // the op fails
      in[i] = &it->second;
      combinations *= in[i]->size();
      if (combinations > 256) return false;  // too many possibilities to follow: skip
    }
    Metas results;
    std::vector<TensorMeta> args(n);
    for (size_t combo = 0; combo < combinations; ++combo) {
      size_t rest = combo;
      for (size_t i = 0; i < n; ++i) {
        args[i] = (*in[i])[rest % in[i]->size()];
        rest /= in[i]->size();
      }
      InferResult r;
      try {
        r = infer(c.op, args, c.attrs, c.inplace);
      } catch (const Error&) {
        continue;  // the worker's execution fails the same way
      }
      int64_t work = 0;
      for (const TensorMeta& m : args) work += std::max<int64_t>(safe_numel(m), 0);
      if (!charge_work(work) || !charge(r.meta)) return false;
      const int64_t k = product_terms(c.op, args, c.attrs), out = safe_numel(r.meta);
      if (k > 0 && out > 0 && (out > kMaxWork / k || !charge_work(out * k))) return false;
      results.push_back(r.meta);
    }
    if (!c.inplace)
      for (const TensorMeta& m : results)
        if (!add(c.out, m)) return false;
    return true;
  }
};

}  // namespace dtr::fuzz
