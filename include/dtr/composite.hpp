// Functions of torch's namespace that dtr runs as compositions of op-table ops (library
// dtr::nn, nn/composite.cpp), for local::Tensor and DistributedTensor alike: each runs
// where its tensors live (a worker, for a DistributedTensor), differentiated through the
// ops it is made of. The creation functions make their tensors on the current node and
// device (DistributedTensor, as dtr::arange) or here (local::).
//
//   auto lse = dtr::logsumexp(scores, {-1});             // log(sum(exp)) along the last dim
//   auto [var, mean] = dtr::var_mean(x, {0, 2});
//   auto y = dtr::index_add(x, 0, rows, updates);        // x with updates added at rows
//
// Arguments are checked as torch checks them, raising ShapeError / IndexError / DTypeError /
// InvalidArgument naming the function and the value.
//
// Thread safety: as the tensors' own (a handle is used by one thread at a time).
#pragma once

#include <cstdint>
#include <optional>
#include <tuple>
#include <utility>

#include "dtr/distributed.hpp"
#include "dtr/generator.hpp"
#include "dtr/tensor.hpp"

namespace dtr {

// log(sum(exp(x))) over dims (none: every dim), computed stably: the max over the dims
// (infinities replaced by 0) is subtracted before exp and added back. Integer x is
// computed in float32.
template <TensorHandle T>
T logsumexp(const T& x, const Dims& dims, bool keepdim = false);

// (var, mean) over dims (none: every dim); var with `correction` (1: unbiased).
template <TensorHandle T>
std::pair<T, T> var_mean(const T& x, const Dims& dims = {}, int64_t correction = 1,
                         bool keepdim = false);

// The largest / smallest value over dims (none: every dim), keeping them when asked.
template <TensorHandle T>
T amax(const T& x, const Dims& dims = {}, bool keepdim = false);
template <TensorHandle T>
T amin(const T& x, const Dims& dims = {}, bool keepdim = false);

// x with alpha * source added at the positions `index` (1-D, int64 or int32) of dim:
// result.select(dim, index[i]) += alpha * source.select(dim, i), repeated indices adding
// up. source has x's shape except along dim (index.numel() there) and x's dtype.
template <TensorHandle T>
T index_add(const T& x, int64_t dim, const T& index, const T& source, Scalar alpha = Scalar(1));

// 1 with probability p (a floating tensor of probabilities, drawn per element from the
// generator, or the default one when null), else 0, of p's dtype. p is not checked for
// [0, 1] (a check would be a sync point): below 0 always gives 0, above 1 always 1.
template <TensorHandle T>
T bernoulli(const T& p, Generator* generator = nullptr);

// The n x m identity (m = n when not given), of dtype.
DistributedTensor eye(int64_t n, std::optional<int64_t> m = std::nullopt,
                      DType dtype = DType::Float32);
// Integers drawn uniformly from [low, high), of shape and dtype: floor of a float64 uniform
// draw scaled to high - low (its bias below 2^-53 * (high - low)).
DistributedTensor randint(int64_t low, int64_t high, const Shape& shape,
                          Generator* generator = nullptr, DType dtype = DType::Int64);

// ---- sync points (as in torch: the size of the result depends on the values) ----

// torch.nonzero: the positions of x's nonzero elements, (count, x.dim()) int64 in row-major
// order. A DistributedTensor's elements (as bool) are fetched to the master, the positions
// found here and sent back to x's node and device.
DistributedTensor nonzero(const DistributedTensor& x);
// torch.masked_select: the elements of x where mask (bool; the two broadcast) is true, 1-D
// in row-major order.
template <TensorHandle T>
T masked_select(const T& x, const T& mask);
// x[mask], torch's boolean indexing: mask (bool) over x's first mask.dim() dims, of their
// sizes; the result (count, the other dims...).
template <TensorHandle T>
T mask_index(const T& x, const T& mask);
// x[mask] = value, in place. A value that broadcasts over one selected row (value.dim() <=
// the dims mask leaves) is written without a sync point (a where); one row per selected
// position (shape (count, rest...)) is a sync point, the count checked first.
template <TensorHandle T>
void mask_assign(T& x, const T& mask, const T& value);
template <TensorHandle T>
void mask_assign(T& x, const T& mask, Scalar value);

// torch.unique (dim None): the distinct values of x in ascending order (1-D), for each
// element of x the position of its value among them (inverse, x's shape, int64), and how
// often each occurs (counts, int64). Sorted and compared on x's node; only the bool
// "differs from the previous" mask of the sorted values comes to the master (the count).
template <TensorHandle T>
std::tuple<T, T, T> unique(const T& x);

namespace local {
Tensor nonzero(const Tensor& x);
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, DType dtype = DType::Float32);
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator* generator = nullptr,
               DType dtype = DType::Int64);
}  // namespace local

}  // namespace dtr
