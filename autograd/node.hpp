// A node of the autograd graph (torch's Node): the backward of one recorded function. It
// takes the gradients of the function's outputs (its inputs here, in torch's words) and
// returns the gradients of the function's inputs, which flow along `next_edges` to the
// nodes that made those inputs (or to a leaf's AccumulateGrad).
//
// Thread safety: a graph is used by one thread at a time (dtr/autograd.hpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtr/tensor_meta.hpp"

namespace dtr::autograd {

template <typename T>
class Node;

// Where a gradient goes: input `input_nr` of `fn` (the output_nr of the forward tensor).
// A null fn: that input needs no gradient.
template <typename T>
struct Edge {
  std::shared_ptr<Node<T>> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

template <typename T>
class Node {
 public:
  explicit Node(uint32_t num_inputs) : num_inputs_(num_inputs), sequence_nr_(next_sequence_nr()) {}
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // "MulBackward", for messages and grad_fn_name().
  virtual std::string name() const = 0;
  // grads: one per input of this node (forward output), undefined where none arrived.
  // Returns one gradient per next edge, undefined where there is none; the engine reduces
  // each to its forward input's shape and casts it to its dtype.
  virtual std::vector<T> apply(std::vector<T>& grads) = 0;
  // Frees what the node saved for backward (after backward without retain_graph).
  virtual void release() {}

  uint32_t num_inputs() const { return num_inputs_; }
  // Nodes made later run earlier in backward (the engine's ready queue is ordered by it).
  uint64_t sequence_nr() const { return sequence_nr_; }

  // One per input of the forward function, in order; `next_metas[i]` is that input's
  // metadata (the shape and dtype its gradient must have).
  std::vector<Edge<T>> next_edges;
  std::vector<TensorMeta> next_metas;

 private:
  static uint64_t next_sequence_nr() {
    static std::atomic<uint64_t> counter{0};
    return counter.fetch_add(1, std::memory_order_relaxed);
  }
  uint32_t num_inputs_;
  uint64_t sequence_nr_;
};

}  // namespace dtr::autograd
