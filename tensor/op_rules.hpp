// Internal: the shape and dtype rules of the Join, Indexing and NN kinds, whose rules are
// per op (tensor/op_rules.cpp); infer() (tensor/op_table.cpp) routes these kinds here after
// checking the number of inputs. Each throws ShapeError, DTypeError, IndexError or
// InvalidArgument with a message that names the op and the shapes or dtypes involved.
//
// Thread safety: pure functions.
#pragma once

#include <span>

#include "dtr/op_table.hpp"

namespace dtr::detail {

InferResult infer_join(const OpDef& d, std::span<const TensorMeta> in, const OpAttrs& a);
InferResult infer_indexing(const OpDef& d, std::span<const TensorMeta> in, const OpAttrs& a);
InferResult infer_nn(const OpDef& d, std::span<const TensorMeta> in, const OpAttrs& a);

// cat skips 1-D empty inputs (shape [0]) whatever the others' shapes, as torch does.
inline bool cat_skips(const TensorMeta& m) {
  return m.shape.size() == 1 && m.shape[0] == 0;
}

}  // namespace dtr::detail
