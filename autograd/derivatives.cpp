// The derivative table (derivatives.hpp): one entry per op of the op table, keyed by its
// OpId, with what its node saves and its formula. In a formula `g` is the gradient of the
// op's result and `c` the context (c.in(i): saved input i, c.output: the saved result,
// c.meta(i): input i's metadata, c.attrs: the call's attributes, c.needs(i): whether input
// i wants a gradient). A formula may return a gradient of the broadcast shape or another
// floating dtype: the engine sums it to the input's shape and casts it to its dtype.
#include "autograd/derivatives.hpp"

#include <array>
#include <cmath>
#include <limits>

#include "autograd/grad_formulas.hpp"
#include "autograd/nn_formulas.hpp"

namespace dtr::autograd {

Dims reduced_dims(const OpAttrs& attrs, int64_t ndim, std::string_view op) {
  Dims dims;
  if (attrs.ints.empty()) {
    for (int64_t d = 0; d < ndim; ++d) dims.push_back(d);
    return dims;
  }
  for (int64_t d : attrs.ints) dims.push_back(wrap_dim(op, d, ndim));
  // Insertion sort: at most kMaxDims entries (GCC 14 warns, wrongly, about std::sort's heap
  // path on Dims' inline array).
  for (size_t i = 1; i < dims.size(); ++i)
    for (size_t j = i; j > 0 && dims[j - 1] > dims[j]; --j) std::swap(dims[j - 1], dims[j]);
  return dims;
}

bool expandable_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[lead + i]) return false;
  return true;
}

namespace {

// A formula: `g` the result's gradient, `c` the context.
#define DTR_GRAD(...)                                                                           \
  []([[maybe_unused]] const GradContext<T>& c, [[maybe_unused]] const T& g) -> std::vector<T> { \
    __VA_ARGS__                                                                                 \
  }
#define DTR_DERIVATIVE(op, saves, ...)         \
  Derivative<T> {                              \
    OpId::op, saves, DTR_GRAD(__VA_ARGS__), "" \
  }
#define DTR_NO_GRAD(op, why)             \
  Derivative<T> {                        \
    OpId::op, kSaveNothing, nullptr, why \
  }

template <typename T>
constexpr Derivative<T> kTable[] = {
    // ---- unary ----
    DTR_DERIVATIVE(neg, kSaveNothing, return {-g};),
    DTR_DERIVATIVE(abs, kSaveInput0, return {g * sign_of(c.in(0))};),
    DTR_DERIVATIVE(exp, kSaveOutput, return {g * c.output};),
    DTR_DERIVATIVE(log, kSaveInput0, return {g / c.in(0)};),
    DTR_DERIVATIVE(sqrt, kSaveOutput, return {g / (c.output * 2.0)};),
    DTR_DERIVATIVE(rsqrt, kSaveOutput, return {g * (c.output * c.output * c.output) * -0.5};),
    DTR_DERIVATIVE(sin, kSaveInput0, return {g * c.in(0).cos()};),
    DTR_DERIVATIVE(cos, kSaveInput0, return {-(g * c.in(0).sin())};),
    DTR_DERIVATIVE(tanh, kSaveOutput, return {g * (1.0 - c.output * c.output)};),
    DTR_DERIVATIVE(sigmoid, kSaveOutput, return {g * (1.0 - c.output) * c.output};),
    DTR_DERIVATIVE(relu, kSaveOutput, return {relu_grad(c, g)};),
    DTR_DERIVATIVE(floor, kSaveNothing, return {zeros_of_input(c, 0, g)};),
    DTR_DERIVATIVE(ceil, kSaveNothing, return {zeros_of_input(c, 0, g)};),
    DTR_DERIVATIVE(round, kSaveNothing, return {zeros_of_input(c, 0, g)};),
    DTR_DERIVATIVE(sign, kSaveNothing, return {zeros_of_input(c, 0, g)};),
    DTR_DERIVATIVE(trunc, kSaveNothing, return {zeros_of_input(c, 0, g)};),
    DTR_DERIVATIVE(reciprocal, kSaveOutput, return {-(g * c.output * c.output)};),
    DTR_DERIVATIVE(tan, kSaveOutput, return {g * (c.output * c.output + 1.0)};),
    DTR_DERIVATIVE(asin, kSaveInput0, return {g * (1.0 - c.in(0) * c.in(0)).rsqrt()};),
    DTR_DERIVATIVE(acos, kSaveInput0, return {-(g * (1.0 - c.in(0) * c.in(0)).rsqrt())};),
    DTR_DERIVATIVE(atan, kSaveInput0, return {g / (c.in(0) * c.in(0) + 1.0)};),
    DTR_DERIVATIVE(sinh, kSaveInput0, return {g * c.in(0).cosh()};),
    DTR_DERIVATIVE(cosh, kSaveInput0, return {g * c.in(0).sinh()};),
    DTR_DERIVATIVE(asinh, kSaveInput0, return {g * (c.in(0) * c.in(0) + 1.0).rsqrt()};),
    DTR_DERIVATIVE(acosh, kSaveInput0, return {g * (c.in(0) * c.in(0) - 1.0).rsqrt()};),
    DTR_DERIVATIVE(atanh, kSaveInput0, return {g / (1.0 - c.in(0) * c.in(0))};),
    DTR_DERIVATIVE(erf, kSaveInput0, return {g * (c.in(0) * c.in(0)).neg().exp() * M_2_SQRTPI};),
    DTR_DERIVATIVE(expm1, kSaveOutput, return {g * (c.output + 1.0)};),
    DTR_DERIVATIVE(log1p, kSaveInput0, return {g / (c.in(0) + 1.0)};),
    DTR_DERIVATIVE(log2, kSaveInput0, return {g / (c.in(0) * M_LN2)};),
    DTR_DERIVATIVE(log10, kSaveInput0, return {g / (c.in(0) * M_LN10)};),
    DTR_DERIVATIVE(silu, kSaveInput0, return {silu_grad(c, g)};),
    DTR_DERIVATIVE(gelu, kSaveInput0, return {gelu_grad(c, g)};),
    DTR_DERIVATIVE(gelu_tanh, kSaveInput0, return {gelu_tanh_grad(c, g)};),
    DTR_NO_GRAD(isnan, "its result is bool"),
    DTR_NO_GRAD(isinf, "its result is bool"),
    DTR_NO_GRAD(isfinite, "its result is bool"),
    DTR_NO_GRAD(logical_not, "its result is bool"),
    DTR_NO_GRAD(bitwise_not, "it is defined for integer and bool tensors only"),
    // ---- binary: a tensor operand (two gradients) or a scalar one (one) ----
    DTR_DERIVATIVE(add, kSaveNothing, if (c.tensor_operand()) return {g, g}; return {g};),
    DTR_DERIVATIVE(sub, kSaveNothing, if (c.tensor_operand()) return {g, -g};
                   return {c.attrs.scalar_first ? -g : g};),
    DTR_DERIVATIVE(mul, kSaveInputs, return mul_grad(c, g);),
    DTR_DERIVATIVE(div, kSaveInputs, return div_grad(c, g);),
    DTR_DERIVATIVE(pow, kSaveInputs | kSaveOutput, return pow_grad(c, g);),
    DTR_DERIVATIVE(maximum, kSaveInputs, return extremum_grad(c, g, true);),
    DTR_DERIVATIVE(minimum, kSaveInputs, return extremum_grad(c, g, false);),
    DTR_NO_GRAD(eq, "its result is bool"),
    DTR_NO_GRAD(ne, "its result is bool"),
    DTR_NO_GRAD(lt, "its result is bool"),
    DTR_NO_GRAD(le, "its result is bool"),
    DTR_NO_GRAD(gt, "its result is bool"),
    DTR_NO_GRAD(ge, "its result is bool"),
    DTR_DERIVATIVE(remainder, kSaveInputs, return modulo_grad(c, g, true);),
    DTR_DERIVATIVE(fmod, kSaveInputs, return modulo_grad(c, g, false);),
    DTR_DERIVATIVE(atan2, kSaveInputs, return atan2_grad(c, g);),
    DTR_DERIVATIVE(floor_divide, kSaveNothing, return rounded_division_grad(c, g);),
    DTR_DERIVATIVE(trunc_divide, kSaveNothing, return rounded_division_grad(c, g);),
    DTR_NO_GRAD(bitwise_and, "it is defined for integer and bool tensors only"),
    DTR_NO_GRAD(bitwise_or, "it is defined for integer and bool tensors only"),
    DTR_NO_GRAD(bitwise_xor, "it is defined for integer and bool tensors only"),
    DTR_NO_GRAD(logical_and, "its result is bool"),
    DTR_NO_GRAD(logical_or, "its result is bool"),
    DTR_NO_GRAD(logical_xor, "its result is bool"),
    // ---- reductions ----
    DTR_DERIVATIVE(sum, kSaveNothing, return {expand_back(g, c)};),
    DTR_DERIVATIVE(prod, kSaveInput0, return prod_grad(c, g);),
    DTR_DERIVATIVE(mean, kSaveNothing, return {expand_back(g, c) / reduced_count(c)};),
    DTR_DERIVATIVE(max, kSaveInput0 | kSaveOutput, return select_reduce_grad(c, g);),
    DTR_DERIVATIVE(min, kSaveInput0 | kSaveOutput, return select_reduce_grad(c, g);),
    DTR_NO_GRAD(argmax, "its result is int64"),
    DTR_NO_GRAD(argmin, "its result is int64"),
    // ---- other ----
    DTR_DERIVATIVE(clamp, kSaveInput0, return clamp_grad(c, g);),
    DTR_DERIVATIVE(norm, kSaveInput0 | kSaveOutput, return norm_grad(c, g);),
    DTR_DERIVATIVE(var, kSaveInput0, return moment_grad(c, g);),
    DTR_DERIVATIVE(std, kSaveInput0 | kSaveOutput, return moment_grad(c, g);),
    DTR_DERIVATIVE(matmul, kSaveInputs, return matmul_grad(c, g);),
    DTR_DERIVATIVE(dot, kSaveInputs,
                   return {c.needs(0) ? g * c.in(1) : T(), c.needs(1) ? g* c.in(0) : T()};),
    DTR_DERIVATIVE(mv, kSaveInputs,  // m (n, k), v (k)
                   return {c.needs(0) ? g.unsqueeze(1) * c.in(1).unsqueeze(0) : T(),
                           c.needs(1) ? c.in(0).t().mv(g) : T()};),
    // ---- views ----
    DTR_DERIVATIVE(view, kSaveNothing, return {g.reshape(c.meta(0).shape)};),
    DTR_DERIVATIVE(reshape, kSaveNothing, return {g.reshape(c.meta(0).shape)};),
    DTR_DERIVATIVE(transpose, kSaveNothing,
                   return {g.transpose(c.attrs.ints[0], c.attrs.ints[1])};),
    DTR_DERIVATIVE(permute, kSaveNothing, return permute_grad(c, g);),
    DTR_DERIVATIVE(narrow, kSaveNothing, return view_into_zeros(c, g);),
    DTR_DERIVATIVE(slice, kSaveNothing, return view_into_zeros(c, g);),
    DTR_DERIVATIVE(select, kSaveNothing, return view_into_zeros(c, g);),
    DTR_DERIVATIVE(diagonal, kSaveNothing, return view_into_zeros(c, g);),
    DTR_DERIVATIVE(expand, kSaveNothing, return {sum_to(g, c.meta(0).shape)};),
    DTR_DERIVATIVE(squeeze, kSaveNothing, return {g.reshape(c.meta(0).shape)};),
    DTR_DERIVATIVE(unsqueeze, kSaveNothing, return {g.reshape(c.meta(0).shape)};),
    DTR_DERIVATIVE(flatten, kSaveNothing, return {g.reshape(c.meta(0).shape)};),
    DTR_DERIVATIVE(contiguous, kSaveNothing, return {g};),
    DTR_DERIVATIVE(clone, kSaveNothing, return {g};),
    DTR_DERIVATIVE(to, kSaveNothing, return {g.to(c.meta(0).dtype)};),
    // ---- join and indexing ----
    DTR_DERIVATIVE(cat, kSaveNothing, return cat_grad(c, g);),
    DTR_DERIVATIVE(stack, kSaveNothing, return stack_grad(c, g);),
    DTR_DERIVATIVE(where, kSaveInput0, const T m = mask(c.in(0), g.dtype());
                   return {T(), g* m, g*(1.0 - m)};),
    DTR_DERIVATIVE(masked_fill, kSaveInput1, return {g * (1.0 - mask(c.in(1), g.dtype())), T()};),
    DTR_DERIVATIVE(index_select, kSaveInput1, return index_select_grad(c, g);),
    DTR_DERIVATIVE(gather, kSaveInput1, return gather_grad(c, g);),
    DTR_DERIVATIVE(scatter_add, kSaveInput1, return scatter_add_grad(c, g);),
    DTR_DERIVATIVE(cumsum, kSaveNothing, return cumsum_grad(c, g);),
    DTR_DERIVATIVE(tril, kSaveNothing, return {g.apply(OpId::tril, c.attrs, nullptr)};),
    DTR_DERIVATIVE(triu, kSaveNothing, return {g.apply(OpId::triu, c.attrs, nullptr)};),
    DTR_NO_GRAD(one_hot, "its result is int64"),
    DTR_DERIVATIVE(topk, kSaveInput0, return topk_grad(c, g);),
    DTR_NO_GRAD(topk_indices, "its result is int64"),
    // ---- neural-network layers; their gradient ops have none (no gradients of gradients) ----
    DTR_DERIVATIVE(linear, kSaveInputs, return linear_grad(c, g);),
    DTR_DERIVATIVE(conv2d, kSaveInputs, return conv2d_grad(c, g);),
    DTR_NO_GRAD(conv2d_input_grad, "it is a gradient op (no gradients of gradients)"),
    DTR_NO_GRAD(conv2d_weight_grad, "it is a gradient op (no gradients of gradients)"),
    DTR_DERIVATIVE(max_pool2d, kSaveInput0, return max_pool2d_grad(c, g);),
    DTR_NO_GRAD(max_pool2d_indices, "its result is int64"),
    DTR_NO_GRAD(max_pool2d_backward, "it is a gradient op (no gradients of gradients)"),
    DTR_DERIVATIVE(avg_pool2d, kSaveNothing, return avg_pool2d_grad(c, g);),
    DTR_NO_GRAD(avg_pool2d_backward, "it is a gradient op (no gradients of gradients)"),
    DTR_DERIVATIVE(softmax, kSaveOutput,
                   return {call<T>(OpId::softmax_backward, c.attrs, g, c.output)};),
    DTR_DERIVATIVE(log_softmax, kSaveOutput,
                   return {call<T>(OpId::log_softmax_backward, c.attrs, g, c.output)};),
    DTR_NO_GRAD(softmax_backward, "it is a gradient op (no gradients of gradients)"),
    DTR_NO_GRAD(log_softmax_backward, "it is a gradient op (no gradients of gradients)"),
    DTR_DERIVATIVE(nll_loss, kSaveInputs | kSaveInput2, return nll_loss_grad(c, g);),
    DTR_NO_GRAD(nll_loss_backward, "it is a gradient op (no gradients of gradients)"),
    // dropout's gradient: the same draw (seed, offset) applied to the gradient.
    DTR_DERIVATIVE(dropout, kSaveNothing, return {g.apply(OpId::dropout, c.attrs, nullptr)};),
    DTR_DERIVATIVE(dropout2d, kSaveNothing, return {g.apply(OpId::dropout2d, c.attrs, nullptr)};),
    DTR_NO_GRAD(threshold_backward, "it is a gradient op (no gradients of gradients)"),
    DTR_DERIVATIVE(layer_norm, kSaveInputs, return layer_norm_grad(c, g);),
    DTR_NO_GRAD(sort_indices, "its result is int64 (sort's values take gather's gradient)"),
    DTR_DERIVATIVE(scatter, kSaveInput1, return scatter_grad(c, g);),
    DTR_DERIVATIVE(scatter_reduce, kSaveInputs | kSaveInput2 | kSaveOutput,
                   return scatter_reduce_grad(c, g);),
    DTR_DERIVATIVE(flip, kSaveNothing, return {g.apply(OpId::flip, c.attrs, nullptr)};),
    DTR_DERIVATIVE(constant_pad_nd, kSaveNothing, return {constant_pad_grad(c, g)};),
    DTR_NO_GRAD(layer_norm_backward, "it is a gradient op (no gradients of gradients)"),
    DTR_NO_GRAD(layer_norm_weight_grad, "it is a gradient op (no gradients of gradients)"),
    // ---- in place only, and creation ----
    DTR_NO_GRAD(copy_, "it is in place only (not recorded while grad mode is on)"),
    DTR_NO_GRAD(fill_, "it is in place only (not recorded while grad mode is on)"),
    DTR_NO_GRAD(uniform_, "it is in place only (not recorded while grad mode is on)"),
    DTR_NO_GRAD(normal_, "it is in place only (not recorded while grad mode is on)"),
    DTR_NO_GRAD(empty, "it has no tensor input"),
    DTR_NO_GRAD(full, "it has no tensor input"),
    DTR_NO_GRAD(arange, "it has no tensor input"),
    DTR_NO_GRAD(linspace, "it has no tensor input"),
    DTR_NO_GRAD(rand, "it has no tensor input"),
    DTR_NO_GRAD(randn, "it has no tensor input"),
};

#undef DTR_GRAD
#undef DTR_NO_GRAD
#undef DTR_DERIVATIVE

// Position in kTable of each op code, -1 where the table has no entry.
template <typename T>
const std::array<int16_t, kMaxOpCode + 1> kIndex = [] {
  std::array<int16_t, kMaxOpCode + 1> index{};
  index.fill(-1);
  for (size_t i = 0; i < std::size(kTable<T>); ++i)
    index[static_cast<uint16_t>(kTable<T>[i].op)] = static_cast<int16_t>(i);
  return index;
}();

}  // namespace

template <typename T>
const Derivative<T>* find_derivative(OpId op) {
  const auto code = static_cast<uint16_t>(op);
  if (code > kMaxOpCode || kIndex<T>[code] < 0) return nullptr;
  return &kTable<T>[kIndex<T>[code]];
}

template <typename T>
std::span<const Derivative<T>> all_derivatives() {
  return kTable<T>;
}

template const Derivative<local::Tensor>* find_derivative(OpId);
template const Derivative<DistributedTensor>* find_derivative(OpId);
template std::span<const Derivative<local::Tensor>> all_derivatives();
template std::span<const Derivative<DistributedTensor>> all_derivatives();

}  // namespace dtr::autograd
