// The methods and module functions of both tensor classes that are compositions of table
// ops, as torch spells them: from include/dtr/tensor_ops.hpp any/all, addmm, new_full /
// new_zeros / new_ones, sort, advanced indexing, storage_offset, the activations and the
// functions embedding, embedding_dense_backward, slice_scatter and select_scatter; from
// dtr/composite.hpp logsumexp, var_mean, amax/amin, index_add, bernoulli and the sync points
// nonzero, unique, masked_select; from dtr/nn.hpp (dtr::nn::functional) pad, adaptive
// pooling, interpolate, group and batch norm, scaled dot-product attention, nll_loss_nd and
// cross_entropy. Each runs as ops on the tensors' node (the sync points say where not).
//
// Thread safety: as the bound type's; called with the GIL held.
#pragma once

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "dtr/composite.hpp"
#include "dtr/nn.hpp"
#include "tensor_methods.hpp"

namespace dtr::python {

// Generator as the stubs of the module holding class `cls` name it.
inline std::string generator_type(const std::string& cls) {
  return cls.find('.') == std::string::npos ? "Generator" : "dtr._dtr.Generator";
}

// The reductions, indexing and draws of dtr/composite.hpp as methods, and the sync points
// (nonzero, unique, masked_select).
template <typename T>
void bind_composite_reduction_methods(nb::class_<T>& c) {
  using nb::arg;
  c.def(
      "nonzero",
      [](const T& t, bool as_tuple) -> nb::object {
        T pos;
        if constexpr (std::is_same_v<T, DistributedTensor>)
          pos = nonzero(t);
        else
          pos = local::nonzero(t);
        if (!as_tuple) return nb::cast(pos);
        nb::list cols;
        for (int64_t d = 0; d < pos.size(1); ++d) cols.append(pos.select(1, d));
        return nb::tuple(cols);
      },
      nb::kw_only(), arg("as_tuple") = false,
      "sync point: the positions of the nonzero elements, (count, dim) int64 (as_tuple: one "
      "1-D tensor per dim)");
  c.def(
      "unique",
      [](const T& t, bool sorted, bool return_inverse, bool return_counts,
         nb::handle dim) -> nb::object {
        (void)sorted;  // always sorted: a sorted result is a valid unsorted one
        if (!dim.is_none())
          throw InvalidArgument("unique: dim is not supported on dtr tensors (dim=None only)");
        auto [values, inverse, counts] = unique(t);
        if (!return_inverse && !return_counts) return nb::cast(values);
        if (return_inverse && return_counts) return nb::make_tuple(values, inverse, counts);
        return nb::make_tuple(values, return_inverse ? inverse : counts);
      },
      arg("sorted") = true, arg("return_inverse") = false, arg("return_counts") = false,
      arg("dim") = nb::none(),
      "sync point: the distinct values in ascending order (and, asked, each element's "
      "position among them and their counts)");
  c.def(
      "masked_select", [](const T& t, const T& mask) { return masked_select(t, mask); },
      arg("mask"), "sync point: the elements where mask (bool) is true, 1-D");
  c.def(
      "logsumexp",
      [](const T& t, nb::handle dim, bool keepdim) { return logsumexp(t, dims_arg(dim), keepdim); },
      arg("dim"), arg("keepdim") = false, "log(sum(exp(x))) over dim (an int or several), stably");
  c.def(
      "amax",
      [](const T& t, nb::handle dim, bool keepdim) {
        return amax(t, dim.is_none() ? Dims{} : dims_arg(dim), keepdim);
      },
      arg("dim") = nb::tuple(), arg("keepdim") = false,
      "the largest value over dim (an int or several; () or None: every dim)");
  c.def(
      "amin",
      [](const T& t, nb::handle dim, bool keepdim) {
        return amin(t, dim.is_none() ? Dims{} : dims_arg(dim), keepdim);
      },
      arg("dim") = nb::tuple(), arg("keepdim") = false,
      "the smallest value over dim (an int or several; () or None: every dim)");
  c.def(
      "index_add",
      [](const T& t, int64_t dim, const T& index, const T& source, nb::handle alpha) {
        return index_add(t, dim, index, source, scalar_arg(alpha, "index_add"));
      },
      arg("dim"), arg("index"), arg("source"), nb::kw_only(), arg("alpha") = 1,
      "a copy with alpha * source added at the positions index (1-D) of dim");
  c.def(
      "bernoulli", [](const T& t, Generator* gen) { return bernoulli(t, gen); }, nb::kw_only(),
      arg("generator") = nb::none(),
      "1 with probability x (per element), else 0, drawn where x lives");
}

// Sorting and advanced indexing as methods: sort, argsort, index, index_put, diagonal,
// masked_scatter.
template <typename T>
void bind_composite_index_methods(nb::class_<T>& c, const std::string& cls) {
  using nb::arg;
  c.def(
      "sort",
      [](const T& t, int64_t dim, bool descending, bool stable) {
        (void)stable;  // always stable: a stable order is a valid unstable one
        return t.sort(dim, descending);
      },
      arg("dim") = -1, arg("descending") = false, nb::kw_only(), arg("stable") = false,
      nb::sig(stub_sig("def sort(self, dim: int = -1, descending: bool = False, *, stable: bool = "
                       "False) -> tuple[" +
                       cls + ", " + cls + "]")),
      "(values, indices) along dim in order; stable; NaN last (first when descending)");
  c.def(
      "argsort",
      [](const T& t, int64_t dim, bool descending, bool stable) {
        (void)stable;
        return t.argsort(dim, descending);
      },
      arg("dim") = -1, arg("descending") = false, nb::kw_only(), arg("stable") = false,
      "the positions along dim that sort the tensor (stable)");
  auto index_list = [](nb::handle indices) {
    std::vector<T> out;
    for (nb::handle h : indices) out.push_back(h.is_none() ? T() : nb::cast<T>(h));
    return out;
  };
  c.def(
      "index",
      [index_list](const T& t, nb::handle indices) { return t.index(index_list(indices)); },
      arg("indices"),
      nb::sig(stub_sig("def index(self, indices: Sequence[" + cls + " | None]) -> " + cls)),
      "advanced indexing (torch's index.Tensor): integer tensors per dim, None: the whole dim");
  c.def(
      "index_put",
      [index_list](const T& t, nb::handle indices, const T& values, bool accumulate) {
        return t.index_put(index_list(indices), values, accumulate);
      },
      arg("indices"), arg("values"), arg("accumulate") = false,
      nb::sig(stub_sig("def index_put(self, indices: Sequence[" + cls + " | None], values: " + cls +
                       ", accumulate: bool = False) -> " + cls)),
      "a copy with values written (or added: accumulate) at the advanced index");
  c.def(
      "diagonal",
      [](const T& t, int64_t offset, int64_t dim1, int64_t dim2) {
        return t.diagonal(offset, dim1, dim2);
      },
      arg("offset") = 0, arg("dim1") = 0, arg("dim2") = 1,
      "the diagonal of dims dim1 and dim2 as a new last dim (a view)");
  c.def(
      "masked_scatter",
      [](const T& t, const T& mask, const T& source) { return t.masked_scatter(mask, source); },
      arg("mask"), arg("source"), "x with source's elements, in order, where mask is true");
}

template <typename T>
void bind_composite_methods(nb::class_<T>& c, const std::string& cls) {
  using nb::arg;
  const std::string dims_sig = ", dim: int | Sequence[int] | None = None, keepdim: bool = False";
  c.def(
      "any",
      [](const T& t, nb::handle dim, bool keepdim) {
        return dim.is_none() ? t.any() : t.any(dims_arg(dim), keepdim);
      },
      arg("dim") = nb::none(), arg("keepdim") = false, self_sig(cls, "any", dims_sig),
      "whether some element is nonzero (over everything, a dim or several), as bool");
  c.def(
      "all",
      [](const T& t, nb::handle dim, bool keepdim) {
        return dim.is_none() ? t.all() : t.all(dims_arg(dim), keepdim);
      },
      arg("dim") = nb::none(), arg("keepdim") = false, self_sig(cls, "all", dims_sig),
      "whether every element is nonzero (over everything, a dim or several), as bool");
  c.def(
      "addmm",
      [](const T& t, const T& m1, const T& m2, nb::handle beta, nb::handle alpha) {
        return t.addmm(m1, m2, scalar_arg(beta, "addmm"), scalar_arg(alpha, "addmm"));
      },
      arg("mat1"), arg("mat2"), nb::kw_only(), arg("beta") = 1, arg("alpha") = 1,
      "beta * self + alpha * (mat1 @ mat2)");
  auto new_full = [](const T& t, nb::handle size, Scalar value, nb::handle dtype) {
    if (size.is_none()) throw nb::type_error("new_full: size must be an int or a sequence of ints");
    std::optional<DType> dt;
    if (!dtype.is_none()) dt = dtype_arg(dtype);
    return t.new_full(dims_arg(size), value, dt);
  };
  c.def(
      "new_full",
      [new_full](const T& t, nb::handle size, nb::handle value, nb::handle dtype) {
        return new_full(t, size, scalar_arg(value, "new_full"), dtype);
      },
      arg("size"), arg("fill_value"), nb::kw_only(), arg("dtype") = nb::none(),
      "a tensor of size filled with fill_value where this one lives (its dtype unless given)");
  c.def(
      "new_zeros",
      [new_full](const T& t, nb::handle size, nb::handle dtype) {
        return new_full(t, size, 0, dtype);
      },
      arg("size"), nb::kw_only(), arg("dtype") = nb::none(),
      "a tensor of zeros where this one lives (its dtype unless given)");
  c.def(
      "new_ones",
      [new_full](const T& t, nb::handle size, nb::handle dtype) {
        return new_full(t, size, 1, dtype);
      },
      arg("size"), nb::kw_only(), arg("dtype") = nb::none(),
      "a tensor of ones where this one lives (its dtype unless given)");
  c.def(
      "div",
      [](const T& t, nb::handle other, std::optional<std::string> rounding_mode) {
        if (!rounding_mode) return binary_method<T>(OpId::div, t, other);
        if (*rounding_mode == "floor") return binary_method<T>(OpId::floor_divide, t, other);
        if (*rounding_mode == "trunc") return binary_method<T>(OpId::trunc_divide, t, other);
        throw InvalidArgument("div: rounding_mode must be None, 'trunc' or 'floor', got '" +
                              *rounding_mode + "'");
      },
      arg("other"), nb::kw_only(), arg("rounding_mode").none(),
      "a / b; rounding_mode 'floor' or 'trunc' rounds the quotient (torch's div)");
  c.def(
      "storage_offset", [](const T& t) { return t.meta().offset; },
      "the offset of element 0 in the storage, in elements");
  c.def(
      "leaky_relu", [](const T& t, double slope) { return t.leaky_relu(slope); },
      arg("negative_slope") = 0.01, "x > 0 ? x : negative_slope * x");
  c.def(
      "hardtanh", [](const T& t, double lo, double hi) { return t.hardtanh(lo, hi); },
      arg("min_val") = -1.0, arg("max_val") = 1.0, "x clamped to [min_val, max_val]");
  c.def(
      "elu",
      [](const T& t, double alpha, double scale, double input_scale) {
        return t.elu(alpha, scale, input_scale);
      },
      arg("alpha") = 1.0, arg("scale") = 1.0, arg("input_scale") = 1.0,
      "x > 0 ? scale * x : scale * alpha * (exp(input_scale * x) - 1)");
  bind_composite_index_methods(c, cls);
  bind_composite_reduction_methods(c);
}

// scaled_dot_product_attention, nll_loss_nd and cross_entropy of dtr::nn::functional.
template <typename T>
void bind_nn_loss_functions(nb::module_& m, const std::string& cls) {
  namespace F = dtr::nn::functional;
  using nb::arg;
  const std::string opt = cls + " | None";
  m.def(
      "scaled_dot_product_attention",
      [](const T& q, const T& k, const T& v, std::optional<T> mask, double dropout_p,
         bool is_causal, std::optional<double> scale, Generator* gen) {
        return F::scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal, scale, gen);
      },
      arg("query"), arg("key"), arg("value"), arg("attn_mask") = nb::none(), arg("dropout_p") = 0.0,
      arg("is_causal") = false, nb::kw_only(), arg("scale") = nb::none(),
      arg("generator") = nb::none(),
      nb::sig(stub_sig("def scaled_dot_product_attention(query: " + cls + ", key: " + cls +
                       ", value: " + cls + ", attn_mask: " + opt +
                       " = None, dropout_p: float = 0.0, is_causal: bool = False, *, scale: "
                       "float | None = None, generator: " +
                       generator_type(cls) + " | None = None) -> " + cls)),
      "softmax(q k^T * scale + mask) v, the math form (is_causal: j <= i)");
  const auto reduction_of = [](const std::string& r) {
    if (r == "none") return Reduction::None;
    if (r == "mean") return Reduction::Mean;
    if (r == "sum") return Reduction::Sum;
    throw InvalidArgument("reduction must be 'none', 'mean' or 'sum', got '" + r + "'");
  };
  m.def(
      "nll_loss_nd",
      [reduction_of](const T& x, const T& target, std::optional<T> w, int64_t ignore_index,
                     const std::string& reduction) {
        return F::nll_loss_nd(x, target, w, reduction_of(reduction), ignore_index);
      },
      arg("input"), arg("target"), arg("weight") = nb::none(), arg("ignore_index") = -100,
      arg("reduction") = "mean",
      nb::sig(stub_sig("def nll_loss_nd(input: " + cls + ", target: " + cls + ", weight: " + opt +
                       " = None, ignore_index: int = -100, reduction: str = 'mean') -> " + cls)),
      "nll_loss of (N, C), (C) or (N, C, d1, ...) log-probabilities");
  m.def(
      "cross_entropy",
      [reduction_of](const T& x, const T& target, std::optional<T> w, int64_t ignore_index,
                     const std::string& reduction, double label_smoothing) {
        return F::cross_entropy(x, target, w, ignore_index, reduction_of(reduction),
                                label_smoothing);
      },
      arg("input"), arg("target"), arg("weight") = nb::none(), arg("ignore_index") = -100,
      arg("reduction") = "mean", arg("label_smoothing") = 0.0,
      nb::sig(stub_sig("def cross_entropy(input: " + cls + ", target: " + cls + ", weight: " + opt +
                       " = None, ignore_index: int = -100, reduction: str = 'mean', "
                       "label_smoothing: float = 0.0) -> " +
                       cls)),
      "log_softmax over the class dim, then the loss against class indices or probabilities");
}

// The resampling and normalization functions of dtr/nn.hpp (dtr::nn::functional), which
// dtr.nn.functional's pad, adaptive_avg_pool*d, interpolate, group_norm and batch_norm call.
template <typename T>
void bind_nn_functions(nb::module_& m, const std::string& cls) {
  namespace F = dtr::nn::functional;
  using nb::arg;
  const std::string opt = cls + " | None";
  m.def(
      "pad",
      [](const T& x, std::vector<int64_t> pad, const std::string& mode, nb::handle value) {
        return F::pad(x, pad, F::pad_mode(mode), scalar_arg(value, "pad"));
      },
      arg("input"), arg("pad"), arg("mode") = "constant", arg("value") = 0,
      nb::sig(stub_sig("def pad(input: " + cls +
                       ", pad: Sequence[int], mode: str = 'constant', "
                       "value: float | int = 0) -> " +
                       cls)),
      "input padded by (before, after) pairs for the last dims, the last dim's first; mode "
      "'constant', 'reflect', 'replicate' or 'circular'");
  m.def(
      "adaptive_avg_pool",
      [](const T& x, std::vector<int64_t> size) { return F::adaptive_avg_pool(x, size); },
      arg("input"), arg("output_size"),
      nb::sig(stub_sig("def adaptive_avg_pool(input: " + cls + ", output_size: Sequence[int]) -> " +
                       cls)),
      "adaptive average pooling of the last len(output_size) (1 to 3) dims");
  m.def(
      "adaptive_avg_pool_backward",
      [](const T& grad, const T& x) { return F::adaptive_avg_pool_backward(grad, x); },
      arg("grad_output"), arg("input"),
      nb::sig(stub_sig("def adaptive_avg_pool_backward(grad_output: " + cls + ", input: " + cls +
                       ") -> " + cls)),
      "the gradient of adaptive_avg_pool: each bin's gradient spread over its inputs");
  m.def(
      "interpolate",
      [](const T& x, std::vector<int64_t> size, const std::string& mode, bool align_corners,
         std::vector<double> scales) {
        for (auto md : {F::InterpolateMode::Nearest, F::InterpolateMode::NearestExact,
                        F::InterpolateMode::Linear, F::InterpolateMode::Area})
          if (mode == F::interpolate_mode_name(md, 1))
            return F::interpolate(x, size, md, align_corners, scales);
        throw InvalidArgument("interpolate: mode '" + mode +
                              "' is not nearest, nearest-exact, linear or area");
      },
      arg("input"), arg("size"), arg("mode"), arg("align_corners") = false,
      arg("scales") = std::vector<double>{},
      nb::sig(stub_sig("def interpolate(input: " + cls +
                       ", size: Sequence[int], mode: str, "
                       "align_corners: bool = False, scales: Sequence[float] = []) -> " +
                       cls)),
      "input resized over its last len(size) dims (mode nearest, nearest-exact, linear, area)");
  m.def(
      "group_norm",
      [](const T& x, int64_t groups, std::optional<T> w, std::optional<T> b, double eps) {
        return F::group_norm(x, groups, w, b, eps);
      },
      arg("input"), arg("num_groups"), arg("weight") = nb::none(), arg("bias") = nb::none(),
      arg("eps") = 1e-5,
      nb::sig(stub_sig("def group_norm(input: " + cls + ", num_groups: int, weight: " + opt +
                       " = None, bias: " + opt + " = None, eps: float = 1e-05) -> " + cls)),
      "each group of channels of each sample normalized, then * weight + bias per channel");
  m.def(
      "group_norm_backward",
      [](const T& grad, const T& x, int64_t groups, std::optional<T> w, double eps) {
        return F::group_norm_backward(grad, x, groups, w, eps);
      },
      arg("grad_output"), arg("input"), arg("num_groups"), arg("weight") = nb::none(),
      arg("eps") = 1e-5,
      nb::sig(stub_sig("def group_norm_backward(grad_output: " + cls + ", input: " + cls +
                       ", num_groups: int, weight: " + opt +
                       " = None, eps: float = 1e-05) -> "
                       "tuple[" +
                       cls + ", " + cls + ", " + cls + "]")),
      "(grad_input, grad_weight, grad_bias) of group_norm, the statistics recomputed");
  m.def(
      "batch_norm",
      [](const T& x, std::optional<T> rm, std::optional<T> rv, std::optional<T> w,
         std::optional<T> b, bool training, double momentum,
         double eps) { return F::batch_norm(x, rm, rv, w, b, training, momentum, eps); },
      arg("input"), arg("running_mean").none(), arg("running_var").none(),
      arg("weight") = nb::none(), arg("bias") = nb::none(), arg("training") = false,
      arg("momentum") = 0.1, arg("eps") = 1e-5,
      nb::sig(stub_sig("def batch_norm(input: " + cls + ", running_mean: " + opt +
                       ", running_var: " + opt + ", weight: " + opt + " = None, bias: " + opt +
                       " = None, training: bool = False, momentum: float = 0.1, eps: float = "
                       "1e-05) -> " +
                       cls)),
      "per-channel normalization by the batch's statistics (training; the running ones "
      "updated in place) or by the running ones");
}

// The functions of dtr/composite.hpp on tensors of class T: masked_select (a sync point),
// logsumexp, var_mean, amax, amin, index_add, bernoulli.
template <typename T>
void bind_composite_reduction_functions(nb::module_& m, const std::string& cls) {
  using nb::arg;
  m.def(
      "masked_select", [](const T& x, const T& mask) { return masked_select(x, mask); },
      arg("input"), arg("mask"),
      nb::sig(stub_sig("def masked_select(input: " + cls + ", mask: " + cls + ") -> " + cls)),
      "sync point: the elements of input where mask (bool) is true, 1-D");
  m.def(
      "logsumexp",
      [](const T& x, nb::handle dim, bool keepdim) { return logsumexp(x, dims_arg(dim), keepdim); },
      arg("input"), arg("dim"), arg("keepdim") = false,
      nb::sig(stub_sig("def logsumexp(input: " + cls +
                       ", dim: int | Sequence[int], keepdim: bool = False) -> " + cls)),
      "log(sum(exp(input))) over dim, stably");
  m.def(
      "var_mean",
      [](const T& x, nb::handle dim, int64_t correction, bool keepdim) {
        return var_mean(x, dim.is_none() ? Dims{} : dims_arg(dim), correction, keepdim);
      },
      arg("input"), arg("dim") = nb::none(), nb::kw_only(), arg("correction") = 1,
      arg("keepdim") = false,
      nb::sig(stub_sig("def var_mean(input: " + cls +
                       ", dim: int | Sequence[int] | None = None, *, correction: int = 1, "
                       "keepdim: bool = False) -> tuple[" +
                       cls + ", " + cls + "]")),
      "(variance, mean) over dim (None: every dim)");
  for (bool largest : {true, false})
    m.def(
        largest ? "amax" : "amin",
        [largest](const T& x, nb::handle dim, bool keepdim) {
          const Dims d = dim.is_none() ? Dims{} : dims_arg(dim);
          return largest ? amax(x, d, keepdim) : amin(x, d, keepdim);
        },
        arg("input"), arg("dim") = nb::tuple(), arg("keepdim") = false,
        nb::sig(stub_sig(std::string("def ") + (largest ? "amax" : "amin") + "(input: " + cls +
                         ", dim: int | Sequence[int] = (), keepdim: bool = False) -> " + cls)),
        largest ? "the largest value over dim" : "the smallest value over dim");
  m.def(
      "index_add",
      [](const T& x, int64_t dim, const T& index, const T& source, nb::handle alpha) {
        return index_add(x, dim, index, source, scalar_arg(alpha, "index_add"));
      },
      arg("input"), arg("dim"), arg("index"), arg("source"), nb::kw_only(), arg("alpha") = 1,
      nb::sig(stub_sig("def index_add(input: " + cls + ", dim: int, index: " + cls +
                       ", source: " + cls + ", *, alpha: float | int = 1) -> " + cls)),
      "input with alpha * source added at the positions index of dim");
  m.def(
      "bernoulli", [](const T& p, Generator* gen) { return bernoulli(p, gen); }, arg("input"),
      nb::kw_only(), arg("generator") = nb::none(),
      nb::sig(stub_sig("def bernoulli(input: " + cls + ", *, generator: " + generator_type(cls) +
                       " | None = None) -> " + cls)),
      "1 with probability input (per element), else 0");
}

// Module functions of class T (`cls`: its name in the stubs).
template <typename T>
void bind_composite_functions(nb::module_& m, const std::string& cls) {
  using nb::arg;
  m.def(
      "embedding",
      [](const T& indices, const T& weight, std::optional<int64_t> padding_idx) {
        return embedding(weight, indices, padding_idx);
      },
      arg("input"), arg("weight"), arg("padding_idx") = nb::none(),
      nb::sig(stub_sig("def embedding(input: " + cls + ", weight: " + cls +
                       ", padding_idx: int | None = None) -> " + cls)),
      "the rows of weight at the integer indices input (torch.nn.functional.embedding)");
  m.def(
      "embedding_dense_backward",
      [](const T& grad, const T& indices, int64_t num_weights, std::optional<int64_t> padding_idx,
         bool scale_grad_by_freq) {
        return embedding_dense_backward(grad, indices, num_weights, padding_idx,
                                        scale_grad_by_freq);
      },
      arg("grad_output"), arg("indices"), arg("num_weights"), arg("padding_idx") = nb::none(),
      arg("scale_grad_by_freq") = false,
      nb::sig(stub_sig("def embedding_dense_backward(grad_output: " + cls + ", indices: " + cls +
                       ", num_weights: int, padding_idx: int | None = None, "
                       "scale_grad_by_freq: bool = False) -> " +
                       cls)),
      "the gradient of embedding's weight: grad rows added up per index");
  m.def(
      "slice_scatter",
      [](const T& x, const T& src, int64_t dim, std::optional<int64_t> start,
         std::optional<int64_t> end,
         int64_t step) { return slice_scatter(x, src, dim, start, end, step); },
      arg("input"), arg("src"), arg("dim") = 0, arg("start") = nb::none(), arg("end") = nb::none(),
      arg("step") = 1,
      nb::sig(stub_sig("def slice_scatter(input: " + cls + ", src: " + cls +
                       ", dim: int = 0, start: int | None = None, end: int | None = None, "
                       "step: int = 1) -> " +
                       cls)),
      "input with src written at the slice start:end:step of dim (a new tensor)");
  m.def(
      "select_scatter",
      [](const T& x, const T& src, int64_t dim, int64_t index) {
        return select_scatter(x, src, dim, index);
      },
      arg("input"), arg("src"), arg("dim"), arg("index"),
      nb::sig(stub_sig("def select_scatter(input: " + cls + ", src: " + cls +
                       ", dim: int, index: int) -> " + cls)),
      "input with src written at index of dim (a new tensor)");
  m.def(
      "addmm",
      [](const T& x, const T& m1, const T& m2, nb::handle beta, nb::handle alpha) {
        return x.addmm(m1, m2, scalar_arg(beta, "addmm"), scalar_arg(alpha, "addmm"));
      },
      arg("input"), arg("mat1"), arg("mat2"), nb::kw_only(), arg("beta") = 1, arg("alpha") = 1,
      nb::sig(stub_sig("def addmm(input: " + cls + ", mat1: " + cls + ", mat2: " + cls +
                       ", *, beta: float | int = 1, alpha: float | int = 1) -> " + cls)),
      "beta * input + alpha * (mat1 @ mat2)");
  bind_composite_reduction_functions<T>(m, cls);
  bind_nn_loss_functions<T>(m, cls);
  bind_nn_functions<T>(m, cls);
}

}  // namespace dtr::python
