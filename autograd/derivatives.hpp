// The derivative table: for each op of the op table (dtr/op_table.hpp), keyed by its OpId,
// what its backward saves and its formula, written once for every tensor type (as torch's
// derivatives.yaml). The entries live in derivatives.cpp, one per op; an op with no formula
// names why (a bool or int64 result, in place only, no tensor input). An op missing from the
// table is recorded all the same, and backward throws when it reaches it, naming the op.
//
// Thread safety: the table is immutable; formulas run on the thread that runs backward.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "dtr/op_table.hpp"

namespace dtr::autograd {

// What a node keeps of the forward call for its formula (bits: bit i keeps tensor input i,
// for the first kMaxSavedInputs inputs).
inline constexpr size_t kMaxSavedInputs = 7;
enum Saves : uint8_t {
  kSaveNothing = 0,
  kSaveInput0 = 1,
  kSaveInput1 = 2,
  kSaveInputs = 3,  // inputs 0 and 1
  kSaveInput2 = 4,
  kSaveOutput = 0x80,
};

// What a formula sees: the forward call (attributes, the inputs' and the output's metadata,
// the saved tensors) and which inputs need a gradient.
template <typename T>
struct GradContext {
  OpId op;
  const OpAttrs& attrs;
  std::span<const T> inputs;          // saved inputs (undefined where not saved)
  const T& output;                    // saved output (undefined unless saved)
  std::span<const TensorMeta> metas;  // every tensor input's metadata
  const TensorMeta& out_meta;
  std::span<const uint8_t> needs_grad;  // 1 where input i needs a gradient

  const T& in(size_t i) const { return inputs[i]; }
  bool needs(size_t i) const { return i < needs_grad.size() && needs_grad[i] != 0; }
  const TensorMeta& meta(size_t i) const { return metas[i]; }
  // Binary ops: whether the second operand is a tensor (else attrs.scalars[0]).
  bool tensor_operand() const { return metas.size() >= 2; }
};

template <typename T>
using Formula = std::vector<T> (*)(const GradContext<T>& c, const T& grad);

template <typename T>
struct Derivative {
  OpId op;
  uint8_t saves = kSaveNothing;
  Formula<T> formula = nullptr;  // null: not differentiable, for the reason below
  std::string_view no_formula_reason;
};

// The entry of `op`, nullptr when the table has none.
template <typename T>
const Derivative<T>* find_derivative(OpId op);
// Every entry, in table order (tests check that each op of the op table has one).
template <typename T>
std::span<const Derivative<T>> all_derivatives();

}  // namespace dtr::autograd
