// What the generic autograd code needs beyond the op table, for each tensor type: tensors
// made where another one lives (on its node and device for DistributedTensor), copies, and
// where a tensor lives for messages. Also sum_to, the reduction of a broadcast gradient.
//
// Thread safety: plain functions; the distributed ones scope the calling thread's current
// node and device for the call only.
#pragma once

#include <string>

#include "dtr/distributed.hpp"
#include "dtr/tensor.hpp"

namespace dtr::autograd {

// Where a tensor lives: its node (DistributedTensor; 0 for local tensors) and device (-1:
// the CPU).
struct Place {
  int node = 0;
  int device = -1;
};
std::string describe_place(Place p, bool distributed);

template <typename T>
struct TensorTraits;

template <>
struct TensorTraits<local::Tensor> {
  static local::Tensor full(const TensorMeta& m, Scalar value, const local::Tensor& like) {
    return local::empty(m.shape, m.dtype, like.device()).fill_(value);
  }
  static local::Tensor clone(const local::Tensor& t) { return t.clone(); }
  static Place place_of(const local::Tensor& t) { return {0, t.device()}; }
  // `g` moved to `p` (the backward of a move).
  static local::Tensor move_to(const local::Tensor& g, Place p) { return g.to_device(p.device); }
  static constexpr bool kDistributed = false;
};

template <>
struct TensorTraits<DistributedTensor> {
  static DistributedTensor full(const TensorMeta& m, Scalar value, const DistributedTensor& like) {
    node_guard on(like.get_node());
    device_guard dev(like.get_device());
    return dtr::full(m.shape, value, m.dtype);
  }
  static DistributedTensor clone(const DistributedTensor& t) {
    DistributedTensor out = full(TensorMeta::contiguous(t.dtype(), t.shape()), 0, t);
    out.copy_(t);
    return out;
  }
  static Place place_of(const DistributedTensor& t) { return {t.get_node(), t.get_device()}; }
  static DistributedTensor move_to(const DistributedTensor& g, Place p) {
    DistributedTensor h = g.get_node() == p.node ? g : g.to(p.node);
    return h.to_device(p.device);
  }
  static constexpr bool kDistributed = true;
};

// A tensor of `m` filled with `value` at place `p` (the current node and device are
// scoped for DistributedTensor).
inline DistributedTensor full_at(const TensorMeta& m, Scalar value, Place p) {
  node_guard on(p.node);
  device_guard dev(p.device);
  return dtr::full(m.shape, value, m.dtype);
}

template <typename T>
T zeros_like(const TensorMeta& m, const T& like) {
  return TensorTraits<T>::full(m, 0, like);
}

// True when `from` broadcasts to `to` (the gradient of a broadcast input can be summed).
bool expandable_to(const Shape& from, const Shape& to);

// `g` summed over the dims that broadcasting added or stretched, so that it has `shape`
// (which must broadcast to g's shape).
template <typename T>
T sum_to(const T& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const size_t lead = g.shape().size() - shape.size();
  OpAttrs a;
  a.keepdim = true;
  for (size_t i = 0; i < g.shape().size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1))
      a.ints.push_back(static_cast<int64_t>(i));
  if (a.ints.empty()) return g.reshape(shape);
  return g.apply(OpId::sum, a, nullptr).view(shape);
}

}  // namespace dtr::autograd
