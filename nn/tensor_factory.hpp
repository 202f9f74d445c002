// What the nn library makes, for each tensor type: tensors on the current node and device
// (parameters), zeros where another tensor lives (padding), and host copies (state files).
//
// Thread safety: plain functions; the distributed ones scope the calling thread's current
// node and device for the call only.
#pragma once

#include "dtr/distributed.hpp"
#include "dtr/tensor.hpp"

namespace dtr::nn::detail {

template <typename T>
struct Factory;

template <>
struct Factory<local::Tensor> {
  static local::Tensor empty(const Shape& shape) { return local::empty(shape); }
  static local::Tensor zeros_like(const Shape& shape, const local::Tensor& x) {
    return local::empty(shape, x.dtype(), x.device()).fill_(0);
  }
  static local::Tensor to_host(const local::Tensor& t) { return t.detach().cpu(); }
  // `src` (a host tensor) placed where `like` lives.
  static local::Tensor place_like(const local::Tensor& src, const local::Tensor& like) {
    return src.to_device(like.device());
  }
};

template <>
struct Factory<DistributedTensor> {
  static DistributedTensor empty(const Shape& shape) { return dtr::empty(shape); }
  static DistributedTensor zeros_like(const Shape& shape, const DistributedTensor& x) {
    node_guard on(x.get_node());
    device_guard dev(x.get_device());
    return dtr::zeros(shape, x.dtype());
  }
  static local::Tensor to_host(const DistributedTensor& t) { return t.to_local(); }
  static DistributedTensor place_like(const local::Tensor& src, const DistributedTensor& like) {
    device_guard dev(like.get_device());
    return dtr::dist_send(src, like.get_node());
  }
};

}  // namespace dtr::nn::detail
