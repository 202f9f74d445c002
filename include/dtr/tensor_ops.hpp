// TensorOps<Derived>: the user-facing methods and operators of a tensor handle, written
// once from the op table and shared by local tensors (dtr::local::Tensor) and remote
// handles. Derived provides:
//   Derived apply(OpId, const OpAttrs&, const Derived* other) const;  // new result
//   void apply_inplace(OpId, const OpAttrs&, const Derived* other);   // writes *this
//   const TensorMeta& meta() const;
// TensorOps also holds the handle's autograd slot (dtr/autograd_meta.hpp): Derived's apply
// and apply_inplace report ops on tensors that have one. The autograd methods below are
// defined in the dtr::autograd library (dtr/autograd.hpp); a program that calls them links
// it (dtr::nn links it too).
//
// Thread safety: as Derived's; autograd state as dtr/autograd.hpp says.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "dtr/autograd_meta.hpp"
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

  // clamp(min, max); pass Scalar() for an open bound.
  Derived clamp(Scalar lo, Scalar hi = Scalar()) const {
    return self().apply(OpId::clamp, clamp_attrs(lo, hi), nullptr);
  }
  Derived& clamp_(Scalar lo, Scalar hi = Scalar()) {
    mut().apply_inplace(OpId::clamp, clamp_attrs(lo, hi), nullptr);
    return mut();
  }

  // --- linear algebra ---
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
  Derived flatten() const {
    return reshape({-1});
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
  // Python slice semantics: negative start/end count from the end, both are clamped.
  Derived slice(int64_t d, int64_t start, int64_t end = std::numeric_limits<int64_t>::max(),
                int64_t step = 1) const {
    return self().apply(OpId::slice, ints_attrs({d, start, end, step}), nullptr);
  }
  Derived select(int64_t d, int64_t index) const {
    return self().apply(OpId::select, ints_attrs({d, index}), nullptr);
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

  // --- conversions and fills ---
  Derived contiguous() const {
    return self().apply(OpId::contiguous, {}, nullptr);
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
  static OpAttrs moment_attrs(std::optional<int64_t> d, bool keepdim, int64_t correction) {
    OpAttrs a;
    if (d) a.ints = {*d};
    a.keepdim = keepdim;
    a.scalars[0] = correction;
    return a;
  }
  static OpAttrs clamp_attrs(Scalar lo, Scalar hi) {
    OpAttrs a;
    a.scalars[0] = lo;
    a.scalars[1] = hi;
    return a;
  }
};

}  // namespace dtr
