// TensorOps<Derived>: the user-facing methods and operators of a tensor handle, written
// once from the op table and shared by local tensors (dtr::local::Tensor) and remote
// handles. Derived provides:
//   Derived apply(OpId, const OpAttrs&, const Derived* other) const;  // new result
//   void apply_inplace(OpId, const OpAttrs&, const Derived* other);   // writes *this
//   // a new result of any number of inputs (up to kMaxOpInputs: cat, conv2d with bias)
//   static Derived apply_inputs(OpId, const OpAttrs&, std::span<const Derived>);
//   const TensorMeta& meta() const;
//   // a new tensor of shape filled with value where this one lives (node and device)
//   Derived full_here(const Shape&, Scalar value, DType) const;
// The functions of several tensors (cat, stack, where) are free functions below the class.
// TensorOps also holds the handle's autograd slot (dtr/autograd_meta.hpp): Derived's apply,
// apply_inplace and apply_inputs report ops on tensors that have one. The autograd methods
// below are defined in the dtr::autograd library (dtr/autograd.hpp); a program that calls
// them links it (dtr::nn links it too).
//
// Thread safety: as Derived's; autograd state as dtr/autograd.hpp says.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dtr/autograd_meta.hpp"
#include "dtr/error.hpp"
#include "dtr/generator.hpp"
#include "dtr/op_table.hpp"

namespace dtr {

template <typename Derived>
class TensorOps {
 public:
  // --- metadata ---
  DType dtype() const { return self().meta().dtype; }
  const Shape& shape() const { return self().meta().shape; }
  const Strides& strides() const { return self().meta().strides; }
  int64_t dim() const { return self().meta().dim(); }
  int64_t numel() const { return self().meta().numel(); }
  int64_t size(int64_t d) const { return shape()[wrap_dim("size", d, dim())]; }
  bool is_contiguous() const { return self().meta().is_contiguous(); }

  // --- autograd (dtr/autograd.hpp; defined in the dtr::autograd library) ---
  // Whether gradients flow to this tensor: a leaf marked with requires_grad_(), or the
  // result of a recorded op.
  bool requires_grad() const;
  // Marks a leaf (a tensor no recorded op made) as needing its gradient, or not. Throws
  // InvalidArgument for a non-leaf, or for a non-floating tensor when `on`.
  Derived& requires_grad_(bool on = true);
  // True for tensors no recorded op made (every tensor that does not require grad, too).
  bool is_leaf() const;
  // The gradient backward() accumulated into this leaf; undefined when there is none.
  Derived grad() const;
  // Replaces the leaf's gradient (an undefined tensor clears it); the shape must match.
  void set_grad(const Derived& grad);
  // Computes the gradient of this scalar (one element) with respect to every leaf that
  // requires grad and adds it to their grad(). The graph is freed unless retain_graph.
  void backward(bool retain_graph = false) const;
  // The same for a tensor of any shape, `gradient` being d(something)/d(this).
  void backward(const Derived& gradient, bool retain_graph = false) const;
  // The name of the recorded op that made this tensor ("MulBackward"), "" for a leaf.
  std::string grad_fn_name() const;
  // The same tensor (shared storage) outside the graph: no grad, not recorded.
  Derived detach() const {
    Derived d = self();
    d.autograd_.reset();
    return d;
  }
  // The autograd slot (internal: dtr/autograd_meta.hpp).
  const std::shared_ptr<autograd::MetaBase<Derived>>& autograd_meta() const { return autograd_; }
  void set_autograd_meta(std::shared_ptr<autograd::MetaBase<Derived>> m) {
    autograd_ = std::move(m);
  }

  // --- elementwise unary: name() and in-place name_() ---
#define DTR_UNARY_METHOD(name, code, kind, rule, sig, doc) \
  Derived name() const {                                   \
    return self().apply(OpId::name, {}, nullptr);          \
  }                                                        \
  Derived& name##_() {                                     \
    mut().apply_inplace(OpId::name, {}, nullptr);          \
    return mut();                                          \
  }
  DTR_UNARY_OPS(DTR_UNARY_METHOD)
#undef DTR_UNARY_METHOD

  // --- elementwise binary: tensor and scalar forms, in-place forms ---
#define DTR_BINARY_METHOD(name, code, kind, rule, sig, doc)               \
  Derived name(const Derived& other) const {                              \
    return self().apply(OpId::name, {}, &other);                          \
  }                                                                       \
  Derived name(Scalar other) const {                                      \
    return self().apply(OpId::name, scalar_attrs(other, false), nullptr); \
  }                                                                       \
  Derived& name##_(const Derived& other) {                                \
    mut().apply_inplace(OpId::name, {}, &other);                          \
    return mut();                                                         \
  }                                                                       \
  Derived& name##_(Scalar other) {                                        \
    mut().apply_inplace(OpId::name, scalar_attrs(other, false), nullptr); \
    return mut();                                                         \
  }
  DTR_BINARY_OPS(DTR_BINARY_METHOD)
#undef DTR_BINARY_METHOD

  // --- reductions: over everything, or over one dim ---
#define DTR_REDUCE_METHOD(name, code, kind, rule, sig, doc)             \
  Derived name() const {                                                \
    return self().apply(OpId::name, {}, nullptr);                       \
  }                                                                     \
  Derived name(int64_t d, bool keepdim = false) const {                 \
    return self().apply(OpId::name, reduce_attrs(d, keepdim), nullptr); \
  }                                                                     \
  Derived name(const Dims& dims, bool keepdim = false) const {          \
    OpAttrs a = ints_attrs(dims);                                       \
    a.keepdim = keepdim;                                                \
    return self().apply(OpId::name, a, nullptr);                        \
  }
  DTR_REDUCE_OPS(DTR_REDUCE_METHOD)
#undef DTR_REDUCE_METHOD

  Derived norm(double p = 2.0) const {
    OpAttrs a;
    a.scalars[0] = p;
    return self().apply(OpId::norm, a, nullptr);
  }
  Derived norm(double p, int64_t d, bool keepdim = false) const {
    OpAttrs a = reduce_attrs(d, keepdim);
    a.scalars[0] = p;
    return self().apply(OpId::norm, a, nullptr);
  }
  // Variance / standard deviation; correction 1 is the unbiased estimate, 0 the population.
  Derived var(std::optional<int64_t> d = std::nullopt, bool keepdim = false,
              int64_t correction = 1) const {
    return self().apply(OpId::var, moment_attrs(d, keepdim, correction), nullptr);
  }
  Derived std(std::optional<int64_t> d = std::nullopt, bool keepdim = false,
              int64_t correction = 1) const {
    return self().apply(OpId::std, moment_attrs(d, keepdim, correction), nullptr);
  }
  // Over several dims (empty: all of them).
  Derived var(const Dims& dims, bool keepdim = false, int64_t correction = 1) const {
    return self().apply(OpId::var, moment_attrs(dims, keepdim, correction), nullptr);
  }
  Derived std(const Dims& dims, bool keepdim = false, int64_t correction = 1) const {
    return self().apply(OpId::std, moment_attrs(dims, keepdim, correction), nullptr);
  }
  // Whether some (any) or every (all) element is nonzero, as bool (NaN counts as nonzero),
  // over everything, one dim or several, as torch's any and all: the number of nonzero
  // (zero) elements compared with 0, on the tensor's node.
  Derived any() const {
    return self().ne(0).sum().gt(0);
  }
  Derived any(int64_t d, bool keepdim = false) const {
    return self().ne(0).sum(d, keepdim).gt(0);
  }
  Derived any(const Dims& dims, bool keepdim = false) const {
    return self().ne(0).sum(dims, keepdim).gt(0);
  }
  Derived all() const {
    return self().eq(0).sum().eq(0);
  }
  Derived all(int64_t d, bool keepdim = false) const {
    return self().eq(0).sum(d, keepdim).eq(0);
  }
  Derived all(const Dims& dims, bool keepdim = false) const {
    return self().eq(0).sum(dims, keepdim).eq(0);
  }

  // clamp(min, max); pass Scalar() for an open bound.
  Derived clamp(Scalar lo, Scalar hi = Scalar()) const {
    return self().apply(OpId::clamp, clamp_attrs(lo, hi), nullptr);
  }
  Derived& clamp_(Scalar lo, Scalar hi = Scalar()) {
    mut().apply_inplace(OpId::clamp, clamp_attrs(lo, hi), nullptr);
    return mut();
  }
  // clamp with tensor bounds (torch's clamp.Tensor, clamp_min, clamp_max), broadcasting:
  // maximum with the lower bound, then minimum with the upper, one op each on the tensors'
  // node. A NaN in x or in a bound gives NaN and a lower bound above the upper gives the
  // upper, as in torch; the dtype promotes x's with the bounds'. At an exact tie the
  // gradient is shared half and half between x and the bound (maximum's rule), where torch
  // gives it all to x.
  Derived clamp(const Derived& lo, const Derived& hi) const {
    return self().maximum(lo).minimum(hi);
  }
  Derived clamp_min(const Derived& lo) const {
    return self().maximum(lo);
  }
  Derived clamp_max(const Derived& hi) const {
    return self().minimum(hi);
  }

  // The optimizers' steps, as torch computes them, each a composition of elementwise ops on
  // the tensors' node: addcmul x + value * t1 * t2, addcdiv x + value * t1 / t2 (in that
  // order of rounding), lerp x + weight * (end - x), as end - (end - x) * (1 - weight) where
  // weight >= 0.5 (torch's form, exact at weight 1).
  Derived addcmul(const Derived& t1, const Derived& t2, Scalar value = Scalar(1)) const {
    return self() + (is_one(value) ? t1 : t1 * value) * t2;
  }
  Derived addcdiv(const Derived& t1, const Derived& t2, Scalar value = Scalar(1)) const {
    return self() + (is_one(value) ? t1 : t1 * value) / t2;
  }
  Derived lerp(const Derived& end, Scalar weight) const {
    const Derived diff = end - self();
    const double w = weight.to<double>();
    if (w < 0.5) return self() + diff * weight;
    return end - diff * Scalar(1.0 - w);
  }
  Derived lerp(const Derived& end, const Derived& weight) const {
    const Derived diff = end - self();
    return where3(weight.lt(0.5), self() + weight * diff, end - diff * (1.0 - weight));
  }

  // The activations torch.nn.functional has beyond the table's, for floating tensors, each
  // a composition on the tensor's node whose gradient follows from its ops' (and equals
  // torch's): leaky_relu x > 0 ? x : slope * x; hardtanh clamp(x, min, max), whose gradient
  // passes strictly inside (min, max) only, as torch's; elu x > 0 ? scale * x : scale *
  // alpha * (exp(input_scale * x) - 1), the exponential taken of min(x, 0) so that a large
  // x (whose branch `where` drops) cannot make inf * 0 = NaN in the gradient.
  Derived leaky_relu(double negative_slope = 0.01) const {
    require_floating("leaky_relu");
    return where3(self().gt(0), self(), self() * negative_slope);
  }
  Derived hardtanh(double min_val = -1.0, double max_val = 1.0) const {
    require_floating("hardtanh");
    if (min_val > max_val)
      throw InvalidArgument("hardtanh: min_val (" + std::to_string(min_val) +
                            ") must not be above max_val (" + std::to_string(max_val) + ")");
    const Derived inside = self().gt(min_val).logical_and(self().lt(max_val));
    return where3(inside, self(), self().clamp(min_val, max_val).detach());
  }
  Derived elu(double alpha = 1.0, double scale = 1.0, double input_scale = 1.0) const {
    require_floating("elu");
    const Derived neg = (self().clamp(Scalar(), 0) * input_scale).expm1() * (alpha * scale);
    return where3(self().gt(0), scale == 1.0 ? self() : self() * scale, neg);
  }

  // --- linear algebra ---
  // beta * x + alpha * (m1 @ m2) for matrices m1 (n, k), m2 (k, m) and x broadcasting to
  // (n, m), as torch.addmm: with beta 0, x is not read (its NaNs do not pass).
  Derived addmm(const Derived& m1, const Derived& m2, Scalar beta = Scalar(1),
                Scalar alpha = Scalar(1)) const {
    if (m1.dim() != 2 || m2.dim() != 2)
      throw ShapeError("addmm: mat1 and mat2 must be matrices, got shapes " +
                       dtr::to_string(m1.shape()) + " and " + dtr::to_string(m2.shape()));
    Derived prod = m1.matmul(m2);
    if (!is_one(alpha)) prod = prod * alpha;
    if (broadcast_shapes("addmm", shape(), prod.shape()) != prod.shape())
      throw ShapeError("addmm: input of shape " + dtr::to_string(shape()) +
                       " does not broadcast to the product's " + dtr::to_string(prod.shape()));
    if (!beta.is_none() && beta.to<double>() == 0.0) return prod;
    return (is_one(beta) ? self() : self() * beta) + prod;
  }
  Derived matmul(const Derived& other) const {
    return self().apply(OpId::matmul, {}, &other);
  }
  Derived dot(const Derived& other) const {
    return self().apply(OpId::dot, {}, &other);
  }
  Derived mv(const Derived& vec) const {
    return self().apply(OpId::mv, {}, &vec);
  }

  // --- views (share storage) ---
  Derived view(const Shape& shape) const {
    return self().apply(OpId::view, ints_attrs(shape), nullptr);
  }
  Derived reshape(const Shape& shape) const {
    return self().apply(OpId::reshape, ints_attrs(shape), nullptr);
  }
  // Dims start_dim..end_dim merged into one: a view when the strides allow, else a copy.
  Derived flatten(int64_t start_dim = 0, int64_t end_dim = -1) const {
    return self().apply(OpId::flatten, ints_attrs({start_dim, end_dim}), nullptr);
  }
  Derived transpose(int64_t d0, int64_t d1) const {
    return self().apply(OpId::transpose, ints_attrs({d0, d1}), nullptr);
  }
  Derived t() const {
    return transpose(0, 1);
  }
  Derived permute(const Dims& dims) const {
    return self().apply(OpId::permute, ints_attrs(dims), nullptr);
  }
  Derived narrow(int64_t d, int64_t start, int64_t length) const {
    return self().apply(OpId::narrow, ints_attrs({d, start, length}), nullptr);
  }
  // Views of consecutive pieces along dim d (narrow views, no copy), as torch's split,
  // split_with_sizes and chunk: pieces of split_size (the last one shorter), of the given
  // sizes (which must add up to the dim's size), or `chunks` pieces of ceil(size / chunks)
  // (fewer when the size runs out first, as torch's).
  std::vector<Derived> split(int64_t split_size, int64_t d = 0) const {
    const int64_t size = this->size(d);
    if (split_size <= 0 && !(split_size == 0 && size == 0))
      throw InvalidArgument("split: split_size must be positive, got " +
                            std::to_string(split_size));
    std::vector<Derived> pieces;
    if (size == 0) return {narrow(d, 0, 0)};
    for (int64_t at = 0; at < size; at += split_size)
      pieces.push_back(narrow(d, at, std::min(split_size, size - at)));
    return pieces;
  }
  std::vector<Derived> split_with_sizes(const std::vector<int64_t>& sizes, int64_t d = 0) const {
    const int64_t size = this->size(d);
    int64_t total = 0;
    for (int64_t s : sizes) {
      if (s < 0 || s > size - total)
        throw InvalidArgument("split_with_sizes: the sizes must be >= 0 and add up to " +
                              std::to_string(size) + " (the size of dim " + std::to_string(d) +
                              "), got " + list_text(sizes));
      total += s;
    }
    if (total != size)
      throw InvalidArgument("split_with_sizes: the sizes add up to " + std::to_string(total) +
                            ", not to " + std::to_string(size) + " (the size of dim " +
                            std::to_string(d) + "): " + list_text(sizes));
    std::vector<Derived> pieces;
    int64_t at = 0;
    for (int64_t s : sizes) {
      pieces.push_back(narrow(d, at, s));
      at += s;
    }
    return pieces;
  }
  std::vector<Derived> chunk(int64_t chunks, int64_t d = 0) const {
    if (chunks <= 0)
      throw InvalidArgument("chunk: chunks must be positive, got " + std::to_string(chunks));
    const int64_t size = this->size(d);
    return split(size / chunks + (size % chunks != 0 ? 1 : 0), d);  // ceil, without overflow
  }
  // The tensor tiled repeats[i] times along dim i (torch's repeat; more repeats than dims
  // add leading dims): one copy on the tensor's node. A view of x with a size-1 dim before
  // each dim of size s > 1 repeated r > 1 times, expanded (r, s), then reshaped to r * s.
  Derived repeat(const std::vector<int64_t>& repeats) const {
    const Shape& shape = this->shape();
    if (repeats.size() < shape.size())
      throw InvalidArgument("repeat: " + std::to_string(repeats.size()) +
                            " repeats for a tensor of " + std::to_string(shape.size()) +
                            " dims (one per dim at least)");
    const size_t lead = repeats.size() - shape.size();
    size_t dims = 0;
    for (size_t i = 0; i < repeats.size(); ++i) {
      if (repeats[i] < 0)
        throw InvalidArgument("repeat: repeats must be >= 0, got " + list_text(repeats));
      const int64_t s = i < lead ? 1 : shape[i - lead];
      if (repeats[i] != 0 && s > std::numeric_limits<int64_t>::max() / repeats[i])
        throw InvalidArgument("repeat: " + list_text(repeats) + " on shape " +
                              dtr::to_string(shape) + ": a size past int64");
      dims += repeats[i] != 1 && s != 1 ? 2 : 1;
    }
    if (dims > static_cast<size_t>(kMaxDims))
      throw InvalidArgument("repeat: " + list_text(repeats) + " on shape " + dtr::to_string(shape) +
                            " needs " + std::to_string(dims) + " dims on the way, more than " +
                            std::to_string(kMaxDims));
    Shape split_shape, expanded, result;
    for (size_t i = 0; i < repeats.size(); ++i) {
      const int64_t s = i < lead ? 1 : shape[i - lead], r = repeats[i];
      if (r != 1 && s != 1) {
        split_shape.push_back(1);
        expanded.push_back(r);
      }
      split_shape.push_back(s);
      expanded.push_back(r != 1 && s != 1 ? s : r * s);
      result.push_back(r * s);
    }
    Derived tiled = reshape(split_shape).expand(expanded).reshape(result);
    // With a dim split, the last reshape copied; otherwise tiled may be x or a view of it.
    return dims > repeats.size() ? tiled : tiled.apply(OpId::clone, {}, nullptr);
  }
  // Python slice semantics: negative start/end count from the end, both are clamped.
  Derived slice(int64_t d, int64_t start, int64_t end = std::numeric_limits<int64_t>::max(),
                int64_t step = 1) const {
    return self().apply(OpId::slice, ints_attrs({d, start, end, step}), nullptr);
  }
  Derived select(int64_t d, int64_t index) const {
    return self().apply(OpId::select, ints_attrs({d, index}), nullptr);
  }
  // The diagonal of dims dim1 and dim2 (offset > 0: above it) as a new last dim; a view.
  Derived diagonal(int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1) const {
    return self().apply(OpId::diagonal, ints_attrs({offset, dim1, dim2}), nullptr);
  }
  Derived operator[](int64_t index) const {
    return select(0, index);
  }
  Derived expand(const Shape& shape) const {
    return self().apply(OpId::expand, ints_attrs(shape), nullptr);
  }
  Derived squeeze() const {
    return self().apply(OpId::squeeze, {}, nullptr);
  }
  Derived squeeze(int64_t d) const {
    return self().apply(OpId::squeeze, ints_attrs({d}), nullptr);
  }
  Derived unsqueeze(int64_t d) const {
    return self().apply(OpId::unsqueeze, ints_attrs({d}), nullptr);
  }

  // --- new tensors where this one lives (its node and device), as torch's new_full,
  // new_zeros and new_ones; the dtype is this tensor's unless given ---
  Derived new_full(const Shape& shape, Scalar value, std::optional<DType> dt = std::nullopt) const {
    return self().full_here(shape, value, dt.value_or(dtype()));
  }
  Derived new_zeros(const Shape& shape, std::optional<DType> dt = std::nullopt) const {
    return new_full(shape, 0, dt);
  }
  Derived new_ones(const Shape& shape, std::optional<DType> dt = std::nullopt) const {
    return new_full(shape, 1, dt);
  }

  // --- conversions and fills ---
  Derived contiguous() const {
    return self().apply(OpId::contiguous, {}, nullptr);
  }
  // A packed copy in new storage, always (torch's clone; the local Tensor's own clone()
  // hides this one and copies without an op).
  Derived clone() const {
    return self().apply(OpId::clone, {}, nullptr);
  }
  Derived to(DType t) const {
    OpAttrs a;
    a.dtype = t;
    return self().apply(OpId::to, a, nullptr);
  }
  Derived& copy_(const Derived& src) {
    mut().apply_inplace(OpId::copy_, {}, &src);
    return mut();
  }
  Derived& fill_(Scalar value) {
    OpAttrs a;
    a.scalars[0] = value;
    mut().apply_inplace(OpId::fill_, a, nullptr);
    return mut();
  }
  Derived& zero_() {
    return fill_(0);
  }
  Derived& uniform_(double from, double to, Generator& gen) {
    return random_fill(OpId::uniform_, from, to, {gen.seed(), gen.advance(draws())});
  }
  Derived& uniform_(double from = 0.0, double to = 1.0) {
    return random_fill(OpId::uniform_, from, to, default_generator_advance(draws()));
  }
  Derived& normal_(double mean, double stddev, Generator& gen) {
    return random_fill(OpId::normal_, mean, stddev, {gen.seed(), gen.advance(draws())});
  }
  Derived& normal_(double mean = 0.0, double stddev = 1.0) {
    return random_fill(OpId::normal_, mean, stddev, default_generator_advance(draws()));
  }

  // --- indexing ---
  Derived masked_fill(const Derived& mask, Scalar value) const {
    OpAttrs a;
    a.scalars[0] = value;
    return with(OpId::masked_fill, a, mask);
  }
  Derived index_select(int64_t dim, const Derived& index) const {
    return with(OpId::index_select, ints_attrs({dim}), index);
  }
  Derived gather(int64_t dim, const Derived& index) const {
    return with(OpId::gather, ints_attrs({dim}), index);
  }
  Derived scatter_add(int64_t dim, const Derived& index, const Derived& src) const {
    return with(OpId::scatter_add, ints_attrs({dim}), index, &src);
  }
  // x with src (or value) written at index along dim: out[index[i][j]][j] = src[i][j] for
  // dim 0 (torch's scatter; of duplicate positions one write wins).
  Derived scatter(int64_t dim, const Derived& index, const Derived& src) const {
    return with(OpId::scatter, ints_attrs({dim}), index, &src);
  }
  Derived scatter(int64_t dim, const Derived& index, Scalar value) const {
    return scatter(dim, index, self().new_full(index.shape(), value));
  }
  // torch's scatter_reduce: src combined into x at index along dim by reduce ("sum",
  // "prod", "mean", "amax", "amin"; mean of integers rounds down); include_self: x's value
  // takes part, else a written position holds only what src brings.
  Derived scatter_reduce(int64_t dim, const Derived& index, const Derived& src,
                         std::string_view reduce, bool include_self = true) const {
    return with(OpId::scatter_reduce,
                ints_attrs({dim, scatter_reduce_code(reduce), include_self ? 1 : 0}), index, &src);
  }
  // The values along dim in order and their positions (torch.sort; stable: equal values
  // keep their order; NaN sorts last, first when descending), and the positions alone
  // (argsort). The values are gathered at the positions.
  std::pair<Derived, Derived> sort(int64_t dim = -1, bool descending = false) const {
    Derived idx = argsort(dim, descending);
    return {gather(dim, idx), idx};
  }
  Derived argsort(int64_t dim = -1, bool descending = false) const {
    return self().apply(OpId::sort_indices, ints_attrs({dim, descending ? 1 : 0}), nullptr);
  }
  // Advanced indexing, torch's index.Tensor (x[i0, i1] with integer tensors): indices[d]
  // indexes dim d (undefined or left out: the whole dim); the index tensors broadcast to a
  // shape B, and the result has B in place of the indexed dims when they are adjacent, else
  // B first, as torch's. Negative indices count from the end; one out of range raises
  // IndexError on the node. One index_select of the indexed dims flattened, on the node.
  // Bool (mask) indices are refused: the result's size would depend on the values.
  Derived index(const std::vector<Derived>& indices) const {
    AdvancedIndex ai = advanced_index(indices);
    if (ai.dims.empty()) return self();
    Shape flat_shape{ai.count};
    for (int64_t s : ai.rest) flat_shape.push_back(s);
    Derived rows = ai.permuted.reshape(flat_shape).index_select(0, ai.flat.reshape({-1}));
    Shape out = ai.broadcast;
    for (int64_t s : ai.rest) out.push_back(s);
    return ai.to_torch_layout(rows.view(out));
  }
  // torch's index_put (out of place): x with values (broadcast to x.index(indices)'s shape)
  // written at the indexed positions, or added there (accumulate, duplicates summed).
  // Without accumulate, of duplicate positions one write wins.
  Derived index_put(const std::vector<Derived>& indices, const Derived& values,
                    bool accumulate = false) const {
    AdvancedIndex ai = advanced_index(indices);
    if (ai.dims.empty())
      return accumulate ? self() + values : values.to(dtype()).expand(shape()).clone();
    const int64_t nb = numel_of(ai.broadcast);
    Shape torch_shape = ai.torch_shape(), flat_shape{nb}, rows_shape{ai.count};
    for (int64_t s : ai.rest) {
      flat_shape.push_back(s);
      rows_shape.push_back(s);
    }
    const Derived v = ai.from_torch_layout(
        (values.dtype() == dtype() ? values : values.to(dtype())).expand(torch_shape));
    Shape idx_shape(static_cast<size_t>(flat_shape.size()), 1);
    idx_shape[0] = nb;
    const Derived idx = ai.flat.reshape(idx_shape).expand(flat_shape);
    const Derived base = ai.permuted.reshape(rows_shape);
    const Derived vf = v.reshape(flat_shape);
    const Derived put = accumulate ? base.scatter_add(0, idx, vf) : base.scatter(0, idx, vf);
    return put.view(ai.permuted.shape()).permute(ai.inverse);
  }
  // torch's masked_scatter: x with the elements of source, in order, written where mask
  // (bool, broadcast to x) is true. The running count of the mask gives each true position
  // its source element (cumsum, then index_select of the flattened source on the node, which
  // raises IndexError there when source has too few elements; an empty source raises even
  // for a mask without a true element, where torch returns x).
  Derived masked_scatter(const Derived& mask, const Derived& source) const {
    if (mask.dtype() != DType::Bool)
      throw DTypeError("masked_scatter: mask must be bool, got " +
                       std::string(dtype_name(mask.dtype())));
    if (!(broadcast_shapes("masked_scatter", shape(), mask.shape()) == shape()))
      throw ShapeError("masked_scatter: mask of shape " + dtr::to_string(mask.shape()) +
                       " does not broadcast to x's shape " + dtr::to_string(shape()));
    const Derived m = mask.expand(shape());
    const Derived flat = m.reshape({-1});
    const Derived pos = flat.to(DType::Int64).cumsum(0) - 1;
    const Derived at = where3(flat, pos, pos.new_zeros({}));
    const Derived src = source.dtype() == dtype() ? source : source.to(dtype());
    return where3(m, src.reshape({-1}).index_select(0, at).view(shape()), self());
  }
  Derived cumsum(int64_t dim) const {
    return self().apply(OpId::cumsum, ints_attrs({dim}), nullptr);
  }
  // The matrices of the last two dims with the entries above (tril) or below (triu) the
  // diagonal zeroed: tril keeps column - row <= diagonal, triu column - row >= diagonal.
  Derived tril(int64_t diagonal = 0) const {
    return self().apply(OpId::tril, ints_attrs({diagonal}), nullptr);
  }
  Derived triu(int64_t diagonal = 0) const {
    return self().apply(OpId::triu, ints_attrs({diagonal}), nullptr);
  }
  // A copy with the elements reversed along each of dims (torch.flip).
  Derived flip(const Dims& dims) const {
    return self().apply(OpId::flip, ints_attrs(dims), nullptr);
  }
  // x padded with `value` (torch's constant_pad_nd, F.pad's constant mode): pad[2i] and
  // pad[2i+1] elements before and after the i-th dim from the end; negative pads crop.
  Derived constant_pad_nd(const Dims& pad, Scalar value = Scalar(0)) const {
    OpAttrs a = ints_attrs(pad);
    a.scalars[0] = value;
    return self().apply(OpId::constant_pad_nd, a, nullptr);
  }
  // int64 rows of num_classes with a 1 at each value (an int64 tensor's).
  Derived one_hot(int64_t num_classes) const {
    return self().apply(OpId::one_hot, ints_attrs({num_classes}), nullptr);
  }
  // The k largest (smallest) values along dim and their positions, as torch.topk: in
  // order, ties by the lower position (always sorted). The values are gathered at the
  // positions (one selection: topk_indices, then gather).
  std::pair<Derived, Derived> topk(int64_t k, int64_t dim = -1, bool largest = true,
                                   bool sorted = true) const {
    Derived indices = topk_indices(k, dim, largest, sorted);
    return {gather(dim, indices), indices};
  }
  Derived topk_indices(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const {
    return self().apply(OpId::topk_indices, topk_attrs(k, dim, largest, sorted), nullptr);
  }

  // --- neural-network layers (include/dtr/op_table.hpp, DTR_NN_OPS) and their gradients ---
  Derived linear(const Derived& weight, const std::optional<Derived>& bias = std::nullopt) const {
    return with(OpId::linear, {}, weight, bias ? &*bias : nullptr);
  }
  Derived conv2d(const Derived& weight, const std::optional<Derived>& bias = std::nullopt,
                 Int2 stride = 1, Int2 padding = 0, Int2 dilation = 1, int64_t groups = 1) const {
    return with(OpId::conv2d, conv_attrs(std::nullopt, stride, padding, dilation, groups), weight,
                bias ? &*bias : nullptr);
  }
  // On conv2d's output gradient: the gradient of its input (of spatial size input_size).
  Derived conv2d_input_grad(const Derived& weight, Int2 input_size, Int2 stride = 1,
                            Int2 padding = 0, Int2 dilation = 1, int64_t groups = 1) const {
    return with(OpId::conv2d_input_grad, conv_attrs(input_size, stride, padding, dilation, groups),
                weight);
  }
  // On conv2d's output gradient: the gradient of its weight (kernel_size: kh, kw).
  Derived conv2d_weight_grad(const Derived& x, Int2 kernel_size, Int2 stride = 1, Int2 padding = 0,
                             Int2 dilation = 1, int64_t groups = 1) const {
    return with(OpId::conv2d_weight_grad,
                conv_attrs(kernel_size, stride, padding, dilation, groups), x);
  }
  // stride: the kernel size when left out.
  Derived max_pool2d(Int2 kernel_size, std::optional<Int2> stride = std::nullopt, Int2 padding = 0,
                     Int2 dilation = 1, bool ceil_mode = false) const {
    return self().apply(OpId::max_pool2d,
                        max_pool_attrs(kernel_size, stride, padding, dilation, ceil_mode), nullptr);
  }
  Derived max_pool2d_indices(Int2 kernel_size, std::optional<Int2> stride = std::nullopt,
                             Int2 padding = 0, Int2 dilation = 1, bool ceil_mode = false) const {
    return self().apply(OpId::max_pool2d_indices,
                        max_pool_attrs(kernel_size, stride, padding, dilation, ceil_mode), nullptr);
  }
  // On max_pool2d's output gradient, with its indices: the input gradient.
  Derived max_pool2d_backward(const Derived& indices, Int2 input_size) const {
    return with(OpId::max_pool2d_backward, ints_attrs({input_size.h, input_size.w}), indices);
  }
  Derived avg_pool2d(Int2 kernel_size, std::optional<Int2> stride = std::nullopt, Int2 padding = 0,
                     bool ceil_mode = false, bool count_include_pad = true,
                     std::optional<double> divisor_override = std::nullopt) const {
    return self().apply(OpId::avg_pool2d,
                        avg_pool_attrs(std::nullopt, kernel_size, stride, padding, ceil_mode,
                                       count_include_pad, divisor_override),
                        nullptr);
  }
  // 1-D average pooling over the last dim of (N, C, L) or (C, L), as torch's avg_pool1d:
  // avg_pool2d over a size-1 height (stride: the kernel size when left out).
  Derived avg_pool1d(int64_t kernel_size, std::optional<int64_t> stride = std::nullopt,
                     int64_t padding = 0, bool ceil_mode = false,
                     bool count_include_pad = true) const {
    if (dim() != 2 && dim() != 3)
      throw ShapeError("avg_pool1d: expected x of 2 dims (C, L) or 3 (N, C, L), got shape " +
                       dtr::to_string(shape()));
    return unsqueeze(-2)
        .avg_pool2d(Int2(1, kernel_size), Int2(1, stride.value_or(kernel_size)), Int2(0, padding),
                    ceil_mode, count_include_pad)
        .squeeze(-2);
  }
  // On avg_pool2d's output gradient: the gradient of its input (of spatial size input_size).
  Derived avg_pool2d_backward(Int2 input_size, Int2 kernel_size,
                              std::optional<Int2> stride = std::nullopt, Int2 padding = 0,
                              bool ceil_mode = false, bool count_include_pad = true,
                              std::optional<double> divisor_override = std::nullopt) const {
    return self().apply(OpId::avg_pool2d_backward,
                        avg_pool_attrs(input_size, kernel_size, stride, padding, ceil_mode,
                                       count_include_pad, divisor_override),
                        nullptr);
  }
  Derived softmax(int64_t dim) const {
    return self().apply(OpId::softmax, ints_attrs({dim}), nullptr);
  }
  Derived log_softmax(int64_t dim) const {
    return self().apply(OpId::log_softmax, ints_attrs({dim}), nullptr);
  }
  // torch.nn.functional.layer_norm over the last dims, which must be normalized_shape:
  // (x - mean) / sqrt(var + eps) * weight + bias, weight and bias of normalized_shape or
  // left out (ones and zeros, made where x lives).
  Derived layer_norm(const Shape& normalized_shape,
                     const std::optional<Derived>& weight = std::nullopt,
                     const std::optional<Derived>& bias = std::nullopt, double eps = 1e-5) const {
    const Derived w = weight ? *weight : self().new_ones(normalized_shape);
    const Derived b = bias ? *bias : self().new_zeros(normalized_shape);
    if (!(w.shape() == normalized_shape))
      throw ShapeError("layer_norm: weight of shape " + dtr::to_string(w.shape()) +
                       " is not normalized_shape " + dtr::to_string(normalized_shape));
    OpAttrs a;
    a.scalars[0] = eps;
    return with(OpId::layer_norm, a, w, &b);
  }
  // On the output gradient, with the op's output.
  Derived softmax_backward(const Derived& output, int64_t dim) const {
    return with(OpId::softmax_backward, ints_attrs({dim}), output);
  }
  Derived log_softmax_backward(const Derived& output, int64_t dim) const {
    return with(OpId::log_softmax_backward, ints_attrs({dim}), output);
  }
  // On log-probabilities (N, C) or (C), with int64 targets (N) or ().
  Derived nll_loss(const Derived& target, const std::optional<Derived>& weight = std::nullopt,
                   Reduction reduction = Reduction::Mean, int64_t ignore_index = -100) const {
    return with(OpId::nll_loss, ints_attrs({static_cast<int64_t>(reduction), ignore_index}), target,
                weight ? &*weight : nullptr);
  }
  // On the loss's gradient: the gradient of the log-probabilities x.
  Derived nll_loss_backward(const Derived& x, const Derived& target,
                            const std::optional<Derived>& weight = std::nullopt,
                            Reduction reduction = Reduction::Mean,
                            int64_t ignore_index = -100) const {
    std::array<Derived, 4> in{self(), x, target, weight ? *weight : Derived()};
    return Derived::apply_inputs(OpId::nll_loss_backward,
                                 ints_attrs({static_cast<int64_t>(reduction), ignore_index}),
                                 std::span<const Derived>(in.data(), weight ? 4 : 3));
  }
  // Draws numel() positions of the generator (dropout2d uses one per channel of them).
  Derived dropout(double p, bool training, Generator& gen) const {
    return drop(OpId::dropout, p, training, {gen.seed(), gen.advance(draws())});
  }
  Derived dropout(double p = 0.5, bool training = true) const {
    return drop(OpId::dropout, p, training, default_generator_advance(draws()));
  }
  Derived dropout2d(double p, bool training, Generator& gen) const {
    return drop(OpId::dropout2d, p, training, {gen.seed(), gen.advance(draws())});
  }
  Derived dropout2d(double p = 0.5, bool training = true) const {
    return drop(OpId::dropout2d, p, training, default_generator_advance(draws()));
  }
  // On the output gradient of relu (threshold 0) or threshold: grad where x > threshold.
  Derived threshold_backward(const Derived& x, Scalar threshold = 0) const {
    OpAttrs a;
    a.scalars[0] = threshold;
    return with(OpId::threshold_backward, a, x);
  }

  // --- operators (torch semantics: elementwise, broadcasting, comparisons give bool) ---
  friend Derived operator+(const Derived& a, const Derived& b) {
    return a.add(b);
  }
  friend Derived operator-(const Derived& a, const Derived& b) {
    return a.sub(b);
  }
  friend Derived operator*(const Derived& a, const Derived& b) {
    return a.mul(b);
  }
  friend Derived operator/(const Derived& a, const Derived& b) {
    return a.div(b);
  }
  friend Derived operator+(const Derived& a, Scalar b) {
    return a.add(b);
  }
  friend Derived operator-(const Derived& a, Scalar b) {
    return a.sub(b);
  }
  friend Derived operator*(const Derived& a, Scalar b) {
    return a.mul(b);
  }
  friend Derived operator/(const Derived& a, Scalar b) {
    return a.div(b);
  }
  friend Derived operator+(Scalar a, const Derived& b) {
    return b.rscalar(OpId::add, a);
  }
  friend Derived operator-(Scalar a, const Derived& b) {
    return b.rscalar(OpId::sub, a);
  }
  friend Derived operator*(Scalar a, const Derived& b) {
    return b.rscalar(OpId::mul, a);
  }
  friend Derived operator/(Scalar a, const Derived& b) {
    return b.rscalar(OpId::div, a);
  }
  friend Derived operator-(const Derived& a) {
    return a.neg();
  }
  friend Derived& operator+=(Derived& a, const Derived& b) {
    return a.add_(b);
  }
  friend Derived& operator-=(Derived& a, const Derived& b) {
    return a.sub_(b);
  }
  friend Derived& operator*=(Derived& a, const Derived& b) {
    return a.mul_(b);
  }
  friend Derived& operator/=(Derived& a, const Derived& b) {
    return a.div_(b);
  }
  friend Derived& operator+=(Derived& a, Scalar b) {
    return a.add_(b);
  }
  friend Derived& operator-=(Derived& a, Scalar b) {
    return a.sub_(b);
  }
  friend Derived& operator*=(Derived& a, Scalar b) {
    return a.mul_(b);
  }
  friend Derived& operator/=(Derived& a, Scalar b) {
    return a.div_(b);
  }
  friend Derived operator==(const Derived& a, const Derived& b) {
    return a.eq(b);
  }
  friend Derived operator!=(const Derived& a, const Derived& b) {
    return a.ne(b);
  }
  friend Derived operator<(const Derived& a, const Derived& b) {
    return a.lt(b);
  }
  friend Derived operator<=(const Derived& a, const Derived& b) {
    return a.le(b);
  }
  friend Derived operator>(const Derived& a, const Derived& b) {
    return a.gt(b);
  }
  friend Derived operator>=(const Derived& a, const Derived& b) {
    return a.ge(b);
  }
  friend Derived operator==(const Derived& a, Scalar b) {
    return a.eq(b);
  }
  friend Derived operator!=(const Derived& a, Scalar b) {
    return a.ne(b);
  }
  friend Derived operator<(const Derived& a, Scalar b) {
    return a.lt(b);
  }
  friend Derived operator<=(const Derived& a, Scalar b) {
    return a.le(b);
  }
  friend Derived operator>(const Derived& a, Scalar b) {
    return a.gt(b);
  }
  friend Derived operator>=(const Derived& a, Scalar b) {
    return a.ge(b);
  }

  // Scalar on the left: `s op self`.
  Derived rscalar(OpId op, Scalar s) const {
    return self().apply(op, scalar_attrs(s, true), nullptr);
  }

 protected:
  // Null unless autograd gave this tensor a slot.
  std::shared_ptr<autograd::MetaBase<Derived>> autograd_;

 private:
  const Derived& self() const {
    return static_cast<const Derived&>(*this);
  }
  Derived& mut() {
    return static_cast<Derived&>(*this);
  }
  uint64_t draws() const {
    return static_cast<uint64_t>(numel());
  }

  Derived& random_fill(OpId op, double a, double b, RandomDraw draw) {
    OpAttrs attrs;
    attrs.scalars[0] = a;
    attrs.scalars[1] = b;
    attrs.seed = draw.seed;
    attrs.offset = draw.offset;
    mut().apply_inplace(op, attrs, nullptr);
    return mut();
  }
  static OpAttrs scalar_attrs(Scalar s, bool scalar_first) {
    OpAttrs a;
    a.scalars[0] = s;
    a.scalar_first = scalar_first;
    return a;
  }
  static OpAttrs ints_attrs(const Dims& ints) {
    OpAttrs a;
    a.ints = ints;
    return a;
  }
  static OpAttrs reduce_attrs(int64_t d, bool keepdim) {
    OpAttrs a;
    a.ints = {d};
    a.keepdim = keepdim;
    return a;
  }
  // What index and index_put share: x with the indexed dims permuted first, the flat
  // positions in those dims (checked, of the broadcast shape), and the layouts.
  struct AdvancedIndex {
    Dims dims;          // the indexed dims, in order
    Shape broadcast;    // B
    Shape rest;         // the sizes of the other dims, in order
    int64_t count = 1;  // the number of positions of the indexed dims
    bool adjacent = true;
    Dims perm, inverse;  // indexed dims first, and back
    Derived permuted, flat;
    // torch's layout of the result: B in place of the indexed dims when adjacent.
    Shape torch_shape() const {
      Shape s;
      const size_t lead = adjacent ? static_cast<size_t>(dims[0]) : 0;
      for (size_t i = 0; i < lead; ++i) s.push_back(rest[i]);
      for (int64_t b : broadcast) s.push_back(b);
      for (size_t i = lead; i < rest.size(); ++i) s.push_back(rest[i]);
      return s;
    }
    // The permutation from B + rest to torch's layout (identity unless adjacent, not first).
    Dims layout_perm(bool to_torch) const {
      const int64_t nb = static_cast<int64_t>(broadcast.size());
      const int64_t lead = adjacent ? dims[0] : 0, n = nb + static_cast<int64_t>(rest.size());
      Dims p;  // p[j] = the dim of B + rest that torch's dim j is
      for (int64_t i = 0; i < lead; ++i) p.push_back(nb + i);
      for (int64_t i = 0; i < nb; ++i) p.push_back(i);
      for (int64_t i = nb + lead; i < n; ++i) p.push_back(i);
      if (to_torch) return p;
      Dims q(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) q[static_cast<size_t>(p[static_cast<size_t>(j)])] = j;
      return q;
    }
    Derived to_torch_layout(const Derived& t) const {
      return adjacent && dims[0] > 0 ? t.permute(layout_perm(true)) : t;
    }
    Derived from_torch_layout(const Derived& t) const {
      return adjacent && dims[0] > 0 ? t.permute(layout_perm(false)) : t;
    }
  };
  AdvancedIndex advanced_index(const std::vector<Derived>& indices) const {
    if (static_cast<int64_t>(indices.size()) > dim())
      throw IndexError("index: " + std::to_string(indices.size()) +
                       " indices for a tensor of dimension " + std::to_string(dim()));
    AdvancedIndex ai;
    for (size_t d = 0; d < indices.size(); ++d) {
      if (!indices[d].defined()) continue;
      const DType t = indices[d].dtype();
      if (t == DType::Bool)
        throw IndexError(
            "index: a bool (mask) index is not supported: the result's size would depend on "
            "the values (a sync point); use masked_fill or where");
      if (t != DType::Int64 && t != DType::Int32)
        throw IndexError("index: tensors used as indices must be int64 or int32, got " +
                         std::string(dtype_name(t)) + " for dim " + std::to_string(d));
      if (!ai.dims.empty() && ai.dims.back() != static_cast<int64_t>(d) - 1) ai.adjacent = false;
      ai.broadcast = ai.dims.empty() ? indices[d].shape()
                                     : broadcast_shapes("index", ai.broadcast, indices[d].shape());
      ai.dims.push_back(static_cast<int64_t>(d));
    }
    if (ai.dims.empty()) return ai;
    for (int64_t d : ai.dims) ai.perm.push_back(d);
    for (int64_t d = 0; d < dim(); ++d) {
      bool indexed = false;
      for (int64_t k : ai.dims) indexed = indexed || k == d;
      if (!indexed) {
        ai.perm.push_back(d);
        ai.rest.push_back(size(d));
      }
    }
    ai.inverse = Dims(static_cast<size_t>(dim()));
    for (size_t j = 0; j < ai.perm.size(); ++j)
      ai.inverse[static_cast<size_t>(ai.perm[j])] = static_cast<int64_t>(j);
    ai.permuted = self().permute(ai.perm);
    // Each index wrapped and checked (index_select of 0..size-1 is the identity on the
    // valid ones and raises IndexError on the others), then combined row-major.
    for (int64_t d : ai.dims) {
      const int64_t s = size(d);
      Derived i = indices[static_cast<size_t>(d)];
      if (i.dtype() != DType::Int64) i = i.to(DType::Int64);
      i = where3(i.lt(0), i + s, i);
      const Derived all = self().new_ones({s}, DType::Int64).cumsum(0) - 1;
      i = all.index_select(0, i.reshape({-1})).view(i.shape());
      ai.flat = ai.flat.defined() ? ai.flat * s + i : i;
      ai.count *= s;
    }
    if (!(ai.flat.shape() == ai.broadcast)) ai.flat = ai.flat.expand(ai.broadcast);
    return ai;
  }
  static OpAttrs moment_attrs(std::optional<int64_t> d, bool keepdim, int64_t correction) {
    return moment_attrs(d ? Dims{*d} : Dims{}, keepdim, correction);
  }
  static OpAttrs moment_attrs(const Dims& dims, bool keepdim, int64_t correction) {
    OpAttrs a = ints_attrs(dims);
    a.keepdim = keepdim;
    a.scalars[0] = correction;
    return a;
  }
  // Throws DTypeError unless the tensor is floating point (the activations torch defines
  // for floating tensors only).
  void require_floating(const char* op) const {
    if (!is_floating(dtype()))
      throw DTypeError(std::string(op) + ": defined for floating-point tensors only, got " +
                       std::string(dtype_name(dtype())));
  }
  static Derived where3(const Derived& cond, const Derived& a, const Derived& b) {
    std::array<Derived, 3> in{cond, a, b};
    return Derived::apply_inputs(OpId::where, OpAttrs{}, std::span<const Derived>(in));
  }
  static std::string list_text(const std::vector<int64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  }
  // value is exactly 1 (multiplying by it would change nothing).
  static bool is_one(const Scalar& value) {
    return !value.is_none() && value.to<double>() == 1.0;
  }
  static OpAttrs clamp_attrs(Scalar lo, Scalar hi) {
    OpAttrs a;
    a.scalars[0] = lo;
    a.scalars[1] = hi;
    return a;
  }
  // *this, then `b` (and `c` when given) as inputs.
  Derived with(OpId op, const OpAttrs& a, const Derived& b, const Derived* c = nullptr) const {
    std::array<Derived, 3> in{self(), b, c ? *c : Derived()};
    return Derived::apply_inputs(op, a, std::span<const Derived>(in.data(), c ? 3 : 2));
  }
  static OpAttrs topk_attrs(int64_t k, int64_t dim, bool largest, bool sorted) {
    return ints_attrs({k, dim, largest ? 1 : 0, sorted ? 1 : 0});
  }
  static void append(OpAttrs& a, Int2 v) {
    a.ints.push_back(v.h);
    a.ints.push_back(v.w);
  }
  static OpAttrs conv_attrs(std::optional<Int2> size, Int2 stride, Int2 padding, Int2 dilation,
                            int64_t groups) {
    OpAttrs a;
    if (size) append(a, *size);
    append(a, stride);
    append(a, padding);
    append(a, dilation);
    a.ints.push_back(groups);
    return a;
  }
  static OpAttrs max_pool_attrs(Int2 kernel, std::optional<Int2> stride, Int2 padding,
                                Int2 dilation, bool ceil_mode) {
    OpAttrs a;
    append(a, kernel);
    append(a, stride ? *stride : Int2(0));
    append(a, padding);
    append(a, dilation);
    a.ints.push_back(ceil_mode ? 1 : 0);
    return a;
  }
  static OpAttrs avg_pool_attrs(std::optional<Int2> size, Int2 kernel, std::optional<Int2> stride,
                                Int2 padding, bool ceil_mode, bool count_include_pad,
                                std::optional<double> divisor) {
    OpAttrs a;
    if (size) append(a, *size);
    append(a, kernel);
    append(a, stride ? *stride : Int2(0));
    append(a, padding);
    a.ints.push_back(ceil_mode ? 1 : 0);
    a.ints.push_back(count_include_pad ? 1 : 0);
    if (divisor) a.scalars[0] = *divisor;
    return a;
  }
  Derived drop(OpId op, double p, bool training, RandomDraw draw) const {
    OpAttrs a = ints_attrs({training ? 1 : 0});
    a.scalars[0] = p;
    a.seed = draw.seed;
    a.offset = draw.offset;
    return self().apply(op, a, nullptr);
  }
};

// --- functions of several tensors, for any handle type (local::Tensor, DistributedTensor) ---

template <typename T>
concept TensorHandle = std::is_base_of_v<TensorOps<T>, T>;

// torch.cat: the tensors joined along an existing dim (1-D empty tensors are skipped);
// their dtypes promote. 1 to kMaxOpInputs tensors, all on one node and device.
template <TensorHandle T>
T cat(std::span<const T> tensors, int64_t dim = 0) {
  OpAttrs a;
  a.ints = {dim};
  return T::apply_inputs(OpId::cat, a, tensors);
}
template <TensorHandle T>
T cat(const std::vector<T>& tensors, int64_t dim = 0) {
  return cat(std::span<const T>(tensors), dim);
}
// torch.stack: same-shaped tensors joined along a new dim.
template <TensorHandle T>
T stack(std::span<const T> tensors, int64_t dim = 0) {
  OpAttrs a;
  a.ints = {dim};
  return T::apply_inputs(OpId::stack, a, tensors);
}
template <TensorHandle T>
T stack(const std::vector<T>& tensors, int64_t dim = 0) {
  return stack(std::span<const T>(tensors), dim);
}
// torch.where: a where condition (a bool tensor) holds, else b; all three broadcast.
template <TensorHandle T>
T where(const T& condition, const T& a, const T& b) {
  std::array<T, 3> in{condition, a, b};
  return T::apply_inputs(OpId::where, OpAttrs{}, std::span<const T>(in));
}

namespace detail {
// padding_idx wrapped into [0, num_embeddings) (negative counts from the end, as torch).
inline int64_t embedding_padding(std::optional<int64_t> padding_idx, int64_t num_embeddings) {
  const int64_t p = *padding_idx;
  if (p < -num_embeddings || p >= num_embeddings)
    throw IndexError("embedding: padding_idx " + std::to_string(p) + " is outside the " +
                     std::to_string(num_embeddings) + " embeddings");
  return p < 0 ? p + num_embeddings : p;
}
}  // namespace detail

// torch.nn.functional.embedding: the rows of weight (num_embeddings, embedding_dim) at the
// integer indices, of shape indices.shape + (embedding_dim,) (index_select of the flattened
// indices, on weight's node; an index out of range raises IndexError there). padding_idx:
// that row's value is returned but gets no gradient (its positions take the value from a
// detached copy). The gradient of weight is embedding_dense_backward's (index_select's).
template <TensorHandle T>
T embedding(const T& weight, const T& indices, std::optional<int64_t> padding_idx = std::nullopt) {
  if (weight.dim() != 2)
    throw ShapeError("embedding: weight must be 2-D (num_embeddings, embedding_dim), got shape " +
                     dtr::to_string(weight.shape()));
  Shape out = indices.shape();
  out.push_back(weight.size(1));
  const T flat = indices.reshape({-1});
  T rows = weight.index_select(0, flat);
  if (padding_idx) {
    const int64_t p = detail::embedding_padding(padding_idx, weight.size(0));
    rows = where(flat.eq(p).unsqueeze(1), rows.detach(), rows);
  }
  return rows.view(out);
}

// The gradient of embedding's weight (torch's embedding_dense_backward): the rows of grad
// (indices.shape + (embedding_dim,)) added up per index into (num_weights, embedding_dim),
// one scatter_add on grad's node. padding_idx: that row's gradient stays 0.
// scale_grad_by_freq: each row of grad divided by how often its index occurs in indices.
template <TensorHandle T>
T embedding_dense_backward(const T& grad, const T& indices, int64_t num_weights,
                           std::optional<int64_t> padding_idx = std::nullopt,
                           bool scale_grad_by_freq = false) {
  const int64_t n = indices.numel();
  const int64_t dim = grad.dim() > 0 ? grad.shape().back() : 0;
  if (grad.dim() != indices.dim() + 1 || grad.numel() != n * dim)
    throw ShapeError("embedding_dense_backward: grad of shape " + dtr::to_string(grad.shape()) +
                     " does not match indices of shape " + dtr::to_string(indices.shape()) +
                     " (expected indices.shape + (embedding_dim,))");
  if (num_weights < 0)
    throw InvalidArgument("embedding_dense_backward: num_weights must be >= 0, got " +
                          std::to_string(num_weights));
  const T idx = indices.reshape({n});
  T g = grad.reshape({n, dim});
  if (padding_idx)
    g = g.masked_fill(idx.eq(detail::embedding_padding(padding_idx, num_weights)).unsqueeze(1), 0);
  if (scale_grad_by_freq) {
    const T counts =
        g.new_zeros({num_weights}, DType::Int64).scatter_add(0, idx, g.new_ones({n}, DType::Int64));
    g = g / counts.index_select(0, idx).unsqueeze(1);
  }
  return g.new_zeros({num_weights, dim}).scatter_add(0, idx.unsqueeze(1).expand({n, dim}), g);
}

// torch.select_scatter: x with src (of x.select(dim, index)'s shape) written at index of
// dim; torch.slice_scatter: x with src written at start, start + step, ... (before end) of
// dim. New tensors of x's dtype (src is converted), made on x's node: the pieces joined by
// cat for a step of 1, else src placed by a scatter_add into zeros and chosen by a mask.
// Gradients pass to x outside the written positions and to src at them.
template <TensorHandle T>
T slice_scatter(const T& x, const T& src, int64_t dim = 0,
                std::optional<int64_t> start = std::nullopt,
                std::optional<int64_t> end = std::nullopt, int64_t step = 1) {
  dim = wrap_dim("slice_scatter", dim, x.dim());
  if (step <= 0)
    throw InvalidArgument("slice_scatter: step must be positive, got " + std::to_string(step));
  const int64_t size = x.size(dim);
  const T view = x.slice(dim, start.value_or(0), end.value_or(size), step);
  if (src.shape() != view.shape())
    throw ShapeError("slice_scatter: src of shape " + dtr::to_string(src.shape()) +
                     " does not match the slice's shape " + dtr::to_string(view.shape()));
  const T s = src.dtype() == x.dtype() ? src : src.to(x.dtype());
  const int64_t m = view.size(dim);
  if (m == 0) return x.clone();
  // The first position the slice takes: start clamped as Python's (and slice()) does.
  int64_t at = start.value_or(0);
  if (at < 0) at = std::max<int64_t>(at + size, 0);
  if (step == 1) {
    std::vector<T> pieces{x.narrow(dim, 0, at), s, x.narrow(dim, at + m, size - at - m)};
    return cat(pieces, dim);
  }
  Shape along(static_cast<size_t>(x.dim()), 1);
  along[dim] = m;
  const T pos = (x.new_ones({m}, DType::Int64).cumsum(0) - 1) * step + at;  // the positions
  const T placed = x.new_zeros(x.shape()).scatter_add(dim, pos.view(along).expand(s.shape()), s);
  Shape mask_shape(static_cast<size_t>(x.dim()), 1);
  mask_shape[dim] = size;
  const T mask = x.new_zeros({size}, DType::Int64)
                     .scatter_add(0, pos, x.new_ones({m}, DType::Int64))
                     .gt(0)
                     .view(mask_shape);
  return where(mask, placed, x);
}

template <TensorHandle T>
T select_scatter(const T& x, const T& src, int64_t dim, int64_t index) {
  dim = wrap_dim("select_scatter", dim, x.dim());
  const int64_t size = x.size(dim);
  if (index < -size || index >= size)
    throw IndexError("select_scatter: index " + std::to_string(index) +
                     " is out of range for dim " + std::to_string(dim) + " of size " +
                     std::to_string(size));
  if (index < 0) index += size;
  return slice_scatter(x, src.unsqueeze(dim), dim, index, index + 1, 1);
}
}  // namespace dtr
