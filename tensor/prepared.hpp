// Internal: prepared CPU kernels. An elementwise op on given tensors resolved once (its
// element loop, operand pointers, element count and scalar), to be run again and again at
// the cost of the loop. A captured graph's replay runs its small ops this way (worker/
// graph.hpp): a call then costs no shape rule, no kernel dispatch and no handle copies.
//
// A call is prepared when it runs on the CPU, is a Unary op among neg, abs and relu or a
// Binary op among add, sub, mul and div (div of floats) with a scalar operand (either side)
// or a tensor operand, its output and tensor operands are contiguous with the output's
// shape and all of one dtype among float32, float64, int32 and int64, that dtype is the
// op's result dtype, and no operand overlaps the output other than exactly (x.add_(x)).
// It then computes what run_kernel() computes, bit for bit: the same element functions
// (tensor/arith.hpp) over the same flat loop. Any other call prepares to an empty kernel,
// to be run through execute() / run_kernel().
//
// Thread safety: a PreparedKernel holds raw pointers into the tensors' storages and no
// reference to them: whoever runs it keeps the tensors alive and may write `out` then.
#pragma once

#include <cstdint>
#include <span>

#include "dtr/tensor.hpp"

namespace dtr::local {

struct PreparedKernel {
  using Fn = void (*)(const PreparedKernel&);
  Fn fn = nullptr;
  void* out = nullptr;
  const void* a = nullptr;  // the first operand
  const void* b = nullptr;  // the tensor operand of a binary op, or null
  int64_t n = 0;
  alignas(8) unsigned char scalar[8] = {};  // a binary op's scalar, in the compute dtype

  explicit operator bool() const { return fn != nullptr; }
  void operator()() const { fn(*this); }
};

// `op` on `inputs` (as execute() takes them) into `out`: out is inputs[0] for an in-place
// call, else a tensor of the result's metadata. Empty when the call is not covered.
PreparedKernel prepare_kernel(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs,
                              const Tensor& out);

}  // namespace dtr::local
