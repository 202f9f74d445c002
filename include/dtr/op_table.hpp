// The op table: every tensor op is declared exactly once, in the lists below, with its
// kind (which fixes its inputs, attributes and shape rule), its dtype rule, its signature
// (the parameters a call binds) and its help text. The op ids, the table of OpDefs, the
// handle methods (tensor_ops.hpp), the CPU and CUDA kernels' dispatch (both switch on
// OpId), the wire opcode, the REPL's names and argument binding and the tests' op list all
// derive from these lists. Adding an op: one line here with the next unused code, its case
// in the CPU kernels (tensor/) and in the CUDA kernels (tensor/cuda/), and its test entries
// (docs/architecture.md, "Adding an op").
//
// The shape rules (`infer`) run without touching data, so the master calls them to know a
// result's metadata before it sends the command, and a mistake throws at the caller's line.
//
// Device code: the CUDA kernels include this header and switch on OpId in __device__
// functions (OpId's values are plain integer constants); nothing else here is used on the
// device.
//
// Thread safety: the table is immutable after static initialization; every function here
// is pure and safe from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <iterator>
#include <span>
#include <string_view>

#include "dtr/dims.hpp"
#include "dtr/dtype.hpp"
#include "dtr/scalar.hpp"
#include "dtr/tensor_meta.hpp"

namespace dtr {

// Each list entry is X(name, code, Kind, DTypeRule, "signature", "help text"); `code` is
// the op's stable id (OpId below). The help users see is "name(params): help text", the
// parameters rendered from the signature (OpDef::help).
// Kinds (what inputs and attributes mean), with the signature an empty "signature" stands
// for (kind_signature() in tensor/op_table.cpp):
//   Unary     one tensor; in-place form name_ (the ToBool ones, predicates, write 0 or 1 in
//             place).                                                x
//   Binary    two tensors broadcast together, or a tensor and scalars[0]
//             (scalar_first: the scalar is the left operand); in-place form name_.
//                                                                    a, b
//   Reduce    one tensor; ints = dims to reduce (empty: all), keepdim.
//                                                                    x, dim?, keepdim=false
//   Clamp     one tensor; scalars[0] = min, scalars[1] = max (None: open).
//                                                                    x, min?, max?
//   Norm      as Reduce, scalars[0] = p.                    x, p=2, dim?, keepdim=false
//   Moment    as Reduce, scalars[0] = correction (1: unbiased).
//                                                     x, dim?, keepdim=false, correction=1
//   Linalg    two tensors.                                           a, b
//   View      one tensor; result shares its storage; ints as the signature lists them.
//   Convert   one tensor; result is new storage, or input 0 itself when it already is in
//             the asked form (contiguous() of a contiguous tensor, to() of the same dtype).
//                                                                    x
//   Mutate    in place only: input 0 is written (copy_, fill_, random fills).
//   Create    no tensor input; ints = shape unless the signature says otherwise.
//   Join      a list of 1 to kMaxOpInputs tensors joined along a dim (cat, stack).
//   Indexing  selection and rearrangement by index or mask (where, gather, topk, ...).
//   NN        neural-network layers and their gradients (conv2d, pooling, softmax, ...).
// View, Mutate, Create, Join, Indexing and NN ops always write their signature; another op
// writes one only where its kind's does not fit (mv's parameter names, to's dtype). Join,
// Indexing and NN ops take as many tensor inputs as their signature has tensor parameters
// (a `tensors` parameter: a list of them), in signature order; their shape rules are per op.
//
// A signature lists "name: type", each optionally "name?: type" (may be left out) or
// "name: type = default", separated by ", ". Types (ParamType; what the value fills):
//   tensor     a tensor input: the first parameters, as many as the kind has inputs; in
//              Join, Indexing and NN ops anywhere (gather(x, dim, index)), and one of them,
//              after the required ones, may be optional ("bias?: tensor")
//   operand    Binary: a tensor input, or a number (then scalars[0]; first: scalar_first)
//   number     the next of attrs.scalars (one left out keeps its slot None: clamp's min)
//   dims       attrs.ints = the dims to reduce: an int or a tuple (None: all)
//   ints       appended to attrs.ints: a shape or a list of dims (may be given as several
//              ints: randn(2, 3))
//   int        one int appended to attrs.ints
//   start      as int; None means 0 (a range's start)
//   end        as int; None means the end of the dim (a slice's end)
//   bool       attrs.keepdim
//   dtype      attrs.dtype; left out of an optional one: int64 when every number is an
//              integer, else float32 (arange, as torch)
//   generator  the call draws from a generator (attrs.seed, attrs.offset); not a value
//   tensors    a list of 1 to kMaxOpInputs tensor inputs (the op's only tensor parameter)
//   pair       two ints appended to attrs.ints: an int (both) or two; an optional one left
//              out or None appends 0, 0 (pooling's stride: then the kernel size)
//   flag       a bool appended to attrs.ints as 0 or 1
//   reduction  "none", "mean" or "sum" appended to attrs.ints as 0, 1 or 2
// Attributes of the ops with `pair`, `flag` and `reduction` parameters are the ints in
// signature order: conv2d's attrs.ints are {stride_h, stride_w, pad_h, pad_w, dilation_h,
// dilation_w, groups}.
// A parameter with a default before a required one (arange's start) is bound positionally
// only when the arguments reach the required ones after it: arange(5) is arange(0, 5).
#define DTR_UNARY_OPS(X)                                                                        \
  X(neg, 0, Unary, Same, "", "-x elementwise")                                                  \
  X(abs, 1, Unary, Same, "", "|x| elementwise")                                                 \
  X(exp, 2, Unary, ToFloat, "", "e^x elementwise")                                              \
  X(log, 3, Unary, ToFloat, "", "natural logarithm elementwise")                                \
  X(sqrt, 4, Unary, ToFloat, "", "square root elementwise")                                     \
  X(rsqrt, 5, Unary, ToFloat, "", "1/sqrt(x) elementwise")                                      \
  X(sin, 6, Unary, ToFloat, "", "sine elementwise")                                             \
  X(cos, 7, Unary, ToFloat, "", "cosine elementwise")                                           \
  X(tanh, 8, Unary, ToFloat, "", "hyperbolic tangent elementwise")                              \
  X(sigmoid, 9, Unary, ToFloat, "", "1/(1+e^-x) elementwise")                                   \
  X(relu, 10, Unary, Same, "", "max(x, 0) elementwise")                                         \
  X(floor, 60, Unary, Same, "", "largest integer <= x elementwise")                             \
  X(ceil, 61, Unary, Same, "", "smallest integer >= x elementwise")                             \
  X(round, 62, Unary, Same, "", "nearest integer (ties to even) elementwise")                   \
  X(sign, 63, Unary, Same, "", "-1, 0 or 1 by the sign of x elementwise (NaN gives 0)")         \
  X(trunc, 94, Unary, Same, "", "integer part (rounded toward zero) elementwise")               \
  X(reciprocal, 95, Unary, ToFloat, "", "1/x elementwise")                                      \
  X(tan, 96, Unary, ToFloat, "", "tangent elementwise")                                         \
  X(asin, 97, Unary, ToFloat, "", "arcsine elementwise")                                        \
  X(acos, 98, Unary, ToFloat, "", "arccosine elementwise")                                      \
  X(atan, 99, Unary, ToFloat, "", "arctangent elementwise")                                     \
  X(sinh, 100, Unary, ToFloat, "", "hyperbolic sine elementwise")                               \
  X(cosh, 101, Unary, ToFloat, "", "hyperbolic cosine elementwise")                             \
  X(asinh, 102, Unary, ToFloat, "", "inverse hyperbolic sine elementwise")                      \
  X(acosh, 103, Unary, ToFloat, "", "inverse hyperbolic cosine elementwise")                    \
  X(atanh, 104, Unary, ToFloat, "", "inverse hyperbolic tangent elementwise")                   \
  X(erf, 105, Unary, ToFloat, "", "error function elementwise")                                 \
  X(expm1, 106, Unary, ToFloat, "", "e^x - 1 elementwise, exact near 0")                        \
  X(log1p, 107, Unary, ToFloat, "", "log(1 + x) elementwise, exact near 0")                     \
  X(log2, 108, Unary, ToFloat, "", "base-2 logarithm elementwise")                              \
  X(log10, 109, Unary, ToFloat, "", "base-10 logarithm elementwise")                            \
  X(silu, 110, Unary, ToFloat, "", "x * sigmoid(x) elementwise (swish)")                        \
  X(gelu, 111, Unary, ToFloat, "", "x * Phi(x) elementwise (torch's gelu, approximate='none')") \
  X(gelu_tanh, 112, Unary, ToFloat, "",                                                         \
    "gelu's tanh approximation (torch's gelu, approximate='tanh')")                             \
  X(isnan, 113, Unary, ToBool, "", "x is NaN, as bool")                                         \
  X(isinf, 114, Unary, ToBool, "", "x is infinite, as bool")                                    \
  X(isfinite, 115, Unary, ToBool, "", "x is neither infinite nor NaN, as bool")                 \
  X(logical_not, 116, Unary, ToBool, "", "x == 0, as bool (NaN is true, so gives false)")       \
  X(bitwise_not, 126, Unary, Same, "", "~x elementwise (integers; not x for bool)")

#define DTR_BINARY_OPS(X)                                                                          \
  X(add, 11, Binary, Promote, "", "a + b, broadcasting")                                           \
  X(sub, 12, Binary, Promote, "", "a - b, broadcasting")                                           \
  X(mul, 13, Binary, Promote, "", "a * b, broadcasting")                                           \
  X(div, 14, Binary, PromoteFloat, "", "a / b (true division), broadcasting")                      \
  X(pow, 15, Binary, Promote, "", "a ^ b, broadcasting")                                           \
  X(maximum, 16, Binary, Promote, "", "larger of a and b, broadcasting")                           \
  X(minimum, 17, Binary, Promote, "", "smaller of a and b, broadcasting")                          \
  X(eq, 18, Binary, ToBool, "", "a == b as bool, broadcasting")                                    \
  X(ne, 19, Binary, ToBool, "", "a != b as bool, broadcasting")                                    \
  X(lt, 20, Binary, ToBool, "", "a < b as bool, broadcasting")                                     \
  X(le, 21, Binary, ToBool, "", "a <= b as bool, broadcasting")                                    \
  X(gt, 22, Binary, ToBool, "", "a > b as bool, broadcasting")                                     \
  X(ge, 23, Binary, ToBool, "", "a >= b as bool, broadcasting")                                    \
  X(remainder, 117, Binary, Promote, "",                                                           \
    "a - floor(a / b) * b (Python's %: the sign of b), broadcasting")                              \
  X(fmod, 118, Binary, Promote, "",                                                                \
    "a - trunc(a / b) * b (C's fmod: the sign of a), broadcasting")                                \
  X(atan2, 119, Binary, PromoteFloat, "", "the angle of the point (b, a), broadcasting")           \
  X(bitwise_and, 120, Binary, Promote, "", "a & b (integers and bool), broadcasting")              \
  X(bitwise_or, 121, Binary, Promote, "", "a | b (integers and bool), broadcasting")               \
  X(bitwise_xor, 122, Binary, Promote, "", "a ^ b (integers and bool), broadcasting")              \
  X(logical_and, 123, Binary, ToBool, "", "a != 0 and b != 0, as bool, broadcasting")              \
  X(logical_or, 124, Binary, ToBool, "", "a != 0 or b != 0, as bool, broadcasting")                \
  X(logical_xor, 125, Binary, ToBool, "", "exactly one of a and b nonzero, as bool, broadcasting") \
  X(floor_divide, 137, Binary, Promote, "",                                                        \
    "floor(a / b) (torch's div with rounding_mode='floor'; Python's //), broadcasting")            \
  X(trunc_divide, 138, Binary, Promote, "",                                                        \
    "trunc(a / b) (torch's div with rounding_mode='trunc'), broadcasting")

#define DTR_REDUCE_OPS(X)                                      \
  X(sum, 24, Reduce, SumLike, "", "sum (bool/int give int64)") \
  X(prod, 25, Reduce, SumLike, "", "product")                  \
  X(mean, 26, Reduce, FloatOnly, "", "arithmetic mean")        \
  X(max, 27, Reduce, Same, "", "largest value (NaN wins)")     \
  X(min, 28, Reduce, Same, "", "smallest value (NaN wins)")    \
  X(argmax, 29, Reduce, Index, "", "index of the first max")   \
  X(argmin, 30, Reduce, Index, "", "index of the first min")

#define DTR_OTHER_OPS(X)                                                                           \
  X(clamp, 31, Clamp, Same, "", "limit values to [min, max]")                                      \
  X(norm, 32, Norm, FloatOnly, "", "p-norm (p may be inf)")                                        \
  X(var, 33, Moment, FloatOnly, "", "variance")                                                    \
  X(std, 34, Moment, FloatOnly, "", "standard deviation")                                          \
  X(matmul, 35, Linalg, Matmul, "", "matrix product; 1-D, 2-D and batched, broadcast")             \
  X(dot, 36, Linalg, Matmul, "", "inner product of two 1-D tensors")                               \
  X(mv, 37, Linalg, Matmul, "m: tensor, v: tensor", "matrix (n, m) times vector (m)")              \
  X(view, 38, View, Same, "x: tensor, shape: ints",                                                \
    "same data with a new shape (-1 infers one size)")                                             \
  X(reshape, 39, View, Same, "x: tensor, shape: ints", "view when the strides allow, else a copy") \
  X(transpose, 40, View, Same, "x: tensor, d0: int, d1: int", "swap two dims")                     \
  X(permute, 41, View, Same, "x: tensor, dims: ints", "reorder all dims")                          \
  X(narrow, 42, View, Same, "x: tensor, dim: int, start: start, length: int",                      \
    "a range of one dim")                                                                          \
  X(slice, 43, View, Same, "x: tensor, dim: int, start: start, end: end, step: int = 1",           \
    "python-style slice of one dim")                                                               \
  X(select, 44, View, Same, "x: tensor, dim: int, index: int",                                     \
    "one index of a dim, dropping the dim")                                                        \
  X(diagonal, 139, View, Same, "x: tensor, offset: int = 0, dim1: int = 0, dim2: int = 1",         \
    "the diagonal of dims dim1 and dim2 (offset above it) as a new last dim")                      \
  X(expand, 45, View, Same, "x: tensor, shape: ints",                                              \
    "broadcast size-1 dims without copying (-1 keeps)")                                            \
  X(squeeze, 46, View, Same, "x: tensor, dims?: ints",                                             \
    "drop size-1 dims (all of them when none given)")                                              \
  X(unsqueeze, 47, View, Same, "x: tensor, dim: int", "insert a size-1 dim")                       \
  X(flatten, 64, View, Same, "x: tensor, start_dim: int = 0, end_dim: int = -1",                   \
    "merge dims start_dim..end_dim into one (a view when the strides allow, else a copy)")         \
  X(contiguous, 48, Convert, Same, "", "x itself if contiguous, else a packed copy")               \
  X(to, 49, Convert, Attr, "x: tensor, dtype: dtype", "convert to another dtype")                  \
  X(clone, 129, Convert, Same, "", "a packed copy in new storage, always")                         \
  X(copy_, 50, Mutate, Same, "dst: tensor, src: tensor",                                           \
    "copy src (broadcast, any dtype) into dst")                                                    \
  X(fill_, 51, Mutate, Same, "x: tensor, value: number", "set every element to value")             \
  X(uniform_, 52, Mutate, FloatOnly,                                                               \
    "x: tensor, from: number = 0, to: number = 1, generator: generator", "uniform draws")          \
  X(normal_, 53, Mutate, FloatOnly,                                                                \
    "x: tensor, mean: number = 0, std: number = 1, generator: generator", "normal draws")          \
  X(empty, 54, Create, Attr, "shape: ints, dtype: dtype = float32", "uninitialized tensor")        \
  X(full, 55, Create, Attr, "shape: ints, value: number, dtype: dtype = float32",                  \
    "tensor filled with value")                                                                    \
  X(arange, 56, Create, Attr, "start: number = 0, end: number, step: number = 1, dtype?: dtype",   \
    "values start, start+step, ...")                                                               \
  X(linspace, 57, Create, Attr, "start: number, end: number, steps: int, dtype: dtype = float32",  \
    "evenly spaced")                                                                               \
  X(rand, 58, Create, Attr, "shape: ints, generator: generator, dtype: dtype = float32",           \
    "uniform on [0, 1)")                                                                           \
  X(randn, 59, Create, Attr, "shape: ints, generator: generator, dtype: dtype = float32",          \
    "standard normal")

// Tensor ops training code reaches for. Data-dependent errors (an index out of range) are
// the kernels' (IndexError naming the op, the index and the range).
#define DTR_INDEX_OPS(X)                                                                       \
  X(cat, 65, Join, Promote, "tensors: tensors, dim: int = 0",                                  \
    "join tensors along an existing dim (dtypes promote)")                                     \
  X(stack, 66, Join, Promote, "tensors: tensors, dim: int = 0",                                \
    "join same-shaped tensors along a new dim (dtypes promote)")                               \
  X(where, 67, Indexing, Promote, "condition: tensor, a: tensor, b: tensor",                   \
    "a where condition (bool) is true, else b; broadcasting")                                  \
  X(masked_fill, 68, Indexing, Same, "x: tensor, mask: tensor, value: number",                 \
    "x with value where mask (bool, broadcast to x) is true")                                  \
  X(index_select, 69, Indexing, Same, "x: tensor, dim: int, index: tensor",                    \
    "the entries of dim at the positions of a 1-D integer index")                              \
  X(gather, 70, Indexing, Same, "x: tensor, dim: int, index: tensor",                          \
    "out[i][j] = x[index[i][j]][j] (dim 0); index as many dims as x")                          \
  X(scatter_add, 71, Indexing, Same, "x: tensor, dim: int, index: tensor, src: tensor",        \
    "x with src added at index along dim (out[index[i][j]][j] += src[i][j], dim 0)")           \
  X(cumsum, 72, Indexing, SumLike, "x: tensor, dim: int", "running sum along dim")             \
  X(one_hot, 73, Indexing, Index, "x: tensor, num_classes: int",                               \
    "int64 one-hot rows (a new last dim of num_classes) of an integer tensor")                 \
  X(topk, 74, Indexing, Same,                                                                  \
    "x: tensor, k: int, dim: int = -1, largest: flag = true, sorted: flag = true",             \
    "the k largest (smallest) values along dim, in order; ties: lower index first")            \
  X(topk_indices, 75, Indexing, Index,                                                         \
    "x: tensor, k: int, dim: int = -1, largest: flag = true, sorted: flag = true",             \
    "the positions along dim of topk's values")                                                \
  X(tril, 127, Indexing, Same, "x: tensor, diagonal: int = 0",                                 \
    "the matrices of the last two dims with the entries above the diagonal zeroed")            \
  X(triu, 128, Indexing, Same, "x: tensor, diagonal: int = 0",                                 \
    "the matrices of the last two dims with the entries below the diagonal zeroed")            \
  X(flip, 133, Indexing, Same, "x: tensor, dims: ints",                                        \
    "a copy with the elements in reverse order along each of dims")                            \
  X(constant_pad_nd, 134, Indexing, Same, "x: tensor, pad: ints, value: number = 0",           \
    "x with pad[2i] and pad[2i+1] elements of value before and after its i-th last dim "       \
    "(torch's pad; negative pads crop)")                                                       \
  X(sort_indices, 135, Indexing, Index, "x: tensor, dim: int = -1, descending: flag = false",  \
    "the positions along dim that sort x, stably (NaN last; first when descending)")           \
  X(scatter, 136, Indexing, Same, "x: tensor, dim: int, index: tensor, src: tensor",           \
    "x with src written at index along dim (out[index[i][j]][j] = src[i][j], dim 0; "          \
    "of duplicate positions one write wins)")                                                  \
  X(scatter_reduce, 140, Indexing, Same,                                                       \
    "x: tensor, dim: int, index: tensor, src: tensor, reduce: int, include_self: flag = true", \
    "x with src combined at index along dim by reduce (0 sum, 1 prod, 2 mean, 3 amax, "        \
    "4 amin); include_self: x's values take part (else the positions written start empty)")

// Neural-network layers on (N, C, H, W) tensors (conv2d and the pools also take an unbatched
// (C, H, W)), and the gradients their backward passes run as ops. dropout's gradient is
// dropout of the output gradient with the same p and generator draw (seed, offset): the
// mask is recomputed, not stored. A relu's gradient is threshold_backward(grad, x, 0).
#define DTR_NN_OPS(X)                                                                           \
  X(linear, 76, NN, FloatOnly, "x: tensor, weight: tensor, bias?: tensor",                      \
    "x @ weight.t() + bias; weight (out, in), x (..., in)")                                     \
  X(conv2d, 77, NN, FloatOnly,                                                                  \
    "x: tensor, weight: tensor, bias?: tensor, stride: pair = 1, padding: pair = 0, "           \
    "dilation: pair = 1, groups: int = 1",                                                      \
    "2-D convolution (cross-correlation); weight (out, in/groups, kh, kw)")                     \
  X(conv2d_input_grad, 78, NN, FloatOnly,                                                       \
    "grad: tensor, weight: tensor, input_size: pair, stride: pair = 1, padding: pair = 0, "     \
    "dilation: pair = 1, groups: int = 1",                                                      \
    "conv2d's gradient for its input of spatial size input_size")                               \
  X(conv2d_weight_grad, 79, NN, FloatOnly,                                                      \
    "grad: tensor, x: tensor, kernel_size: pair, stride: pair = 1, padding: pair = 0, "         \
    "dilation: pair = 1, groups: int = 1",                                                      \
    "conv2d's gradient for its weight (its bias's: grad.sum over dims 0, 2, 3)")                \
  X(max_pool2d, 80, NN, FloatOnly,                                                              \
    "x: tensor, kernel_size: pair, stride?: pair, padding: pair = 0, dilation: pair = 1, "      \
    "ceil_mode: flag = false",                                                                  \
    "2-D max pooling (NaN wins; stride: kernel_size when left out)")                            \
  X(max_pool2d_indices, 81, NN, Index,                                                          \
    "x: tensor, kernel_size: pair, stride?: pair, padding: pair = 0, dilation: pair = 1, "      \
    "ceil_mode: flag = false",                                                                  \
    "positions h * W + w in x's plane of max_pool2d's values")                                  \
  X(max_pool2d_backward, 82, NN, FloatOnly, "grad: tensor, indices: tensor, input_size: pair",  \
    "max_pool2d's input gradient: grad summed at max_pool2d_indices")                           \
  X(avg_pool2d, 83, NN, FloatOnly,                                                              \
    "x: tensor, kernel_size: pair, stride?: pair, padding: pair = 0, ceil_mode: flag = false, " \
    "count_include_pad: flag = true, divisor_override?: number",                                \
    "2-D average pooling")                                                                      \
  X(avg_pool2d_backward, 84, NN, FloatOnly,                                                     \
    "grad: tensor, input_size: pair, kernel_size: pair, stride?: pair, padding: pair = 0, "     \
    "ceil_mode: flag = false, count_include_pad: flag = true, divisor_override?: number",       \
    "avg_pool2d's input gradient")                                                              \
  X(softmax, 85, NN, FloatOnly, "x: tensor, dim: int", "exp(x) / sum(exp(x)) along dim")        \
  X(log_softmax, 86, NN, FloatOnly, "x: tensor, dim: int", "log(softmax(x)) along dim")         \
  X(softmax_backward, 87, NN, FloatOnly, "grad: tensor, output: tensor, dim: int",              \
    "softmax's input gradient from its output: output * (grad - sum(grad * output))")           \
  X(log_softmax_backward, 88, NN, FloatOnly, "grad: tensor, output: tensor, dim: int",          \
    "log_softmax's input gradient from its output: grad - exp(output) * sum(grad)")             \
  X(nll_loss, 89, NN, FloatOnly,                                                                \
    "x: tensor, target: tensor, weight?: tensor, reduction: reduction = mean, "                 \
    "ignore_index: int = -100",                                                                 \
    "negative log likelihood of log-probabilities x (N, C) or (C) at int64 targets")            \
  X(nll_loss_backward, 90, NN, FloatOnly,                                                       \
    "grad: tensor, x: tensor, target: tensor, weight?: tensor, reduction: reduction = mean, "   \
    "ignore_index: int = -100",                                                                 \
    "nll_loss's gradient for x")                                                                \
  X(dropout, 91, NN, FloatOnly,                                                                 \
    "x: tensor, p: number = 0.5, training: flag = true, generator: generator",                  \
    "zero each element with probability p, scale the rest by 1/(1-p)")                          \
  X(dropout2d, 92, NN, FloatOnly,                                                               \
    "x: tensor, p: number = 0.5, training: flag = true, generator: generator",                  \
    "zero each channel (all but the last two dims) with probability p, scale by 1/(1-p)")       \
  X(threshold_backward, 93, NN, Same, "grad: tensor, x: tensor, threshold: number = 0",         \
    "grad where x > threshold, else 0 (relu's gradient at threshold 0)")                        \
  X(layer_norm, 130, NN, FloatOnly,                                                             \
    "x: tensor, weight: tensor, bias: tensor, eps: number = 1e-05",                             \
    "(x - mean) / sqrt(var + eps) * weight + bias over x's last weight.dim() dims")             \
  X(layer_norm_backward, 131, NN, FloatOnly,                                                    \
    "grad: tensor, x: tensor, weight: tensor, eps: number = 1e-05",                             \
    "layer_norm's input gradient (the statistics recomputed from x)")                           \
  X(layer_norm_weight_grad, 132, NN, FloatOnly,                                                 \
    "grad: tensor, x: tensor, weight: tensor, "                                                 \
    "eps: number = 1e-05",                                                                      \
    "layer_norm's weight gradient: grad * (x - mean) / sqrt(var + eps) summed over the rows")

#define DTR_OPS(X)  \
  DTR_UNARY_OPS(X)  \
  DTR_BINARY_OPS(X) \
  DTR_REDUCE_OPS(X) \
  DTR_OTHER_OPS(X)  \
  DTR_INDEX_OPS(X)  \
  DTR_NN_OPS(X)

// Wire-stable: each op's id is the code written in its list entry, and it is the op's
// code on the wire. Codes are never reused or changed (tests/tensor/op_table_test.cpp
// freezes every code given so far); a new op takes the next unused code, wherever its line
// goes, and needs no protocol version bump.
enum class OpId : uint16_t {
#define DTR_OP_ENUM(name, code, kind, rule, sig, doc) name = code,
  DTR_OPS(DTR_OP_ENUM)
#undef DTR_OP_ENUM
};

namespace detail {
// The codes in list order (all_ops() order).
inline constexpr uint16_t kOpCodes[] = {
#define DTR_OP_CODE(name, code, kind, rule, sig, doc) code,
    DTR_OPS(DTR_OP_CODE)
#undef DTR_OP_CODE
};
}  // namespace detail

inline constexpr int kNumOps = static_cast<int>(std::size(detail::kOpCodes));
inline constexpr uint16_t kMaxOpCode = [] {
  uint16_t m = 0;
  for (uint16_t c : detail::kOpCodes) m = c > m ? c : m;
  return m;
}();

namespace detail {
// Position in all_ops() of each code, -1 for a code no op has.
inline constexpr auto kOpIndexOfCode = [] {
  std::array<int16_t, kMaxOpCode + 1> index{};
  for (auto& i : index) i = -1;
  for (int i = 0; i < kNumOps; ++i) index[kOpCodes[i]] = static_cast<int16_t>(i);
  return index;
}();
static_assert(
    [] {
      int named = 0;
      for (int16_t i : kOpIndexOfCode) named += i >= 0;
      return named == kNumOps;
    }(),
    "two ops of the op table share a code");
}  // namespace detail

enum class OpKind : uint8_t {
  Unary,
  Binary,
  Reduce,
  Clamp,
  Norm,
  Moment,
  Linalg,
  View,
  Convert,
  Mutate,
  Create,
  Join,
  Indexing,
  NN
};

// The most tensor inputs one op call takes (a cat of many tensors); calls of up to two
// inputs keep them inline everywhere (the wire command, the worker's task).
inline constexpr int kMaxOpInputs = 64;

// How an op's result dtype follows from its inputs.
enum class DTypeRule : uint8_t {
  Same,          // dtype of input 0
  Promote,       // promote_types of the operands
  PromoteFloat,  // as Promote, then integral/bool -> float32
  ToFloat,       // integral/bool -> float32, floats kept
  ToBool,        // comparisons: bool
  SumLike,       // integral/bool -> int64, floats kept
  FloatOnly,     // floats kept; anything else is a DTypeError
  Index,         // int64 positions
  Matmul,        // both operands the same non-bool dtype
  Attr,          // attrs.dtype
};

namespace detail {
// Each op's kind and dtype rule in list order (all_ops() order), for the constexpr
// properties below.
inline constexpr OpKind kOpKinds[] = {
#define DTR_OP_KIND(name, code, kind, rule, sig, doc) OpKind::kind,
    DTR_OPS(DTR_OP_KIND)
#undef DTR_OP_KIND
};
inline constexpr DTypeRule kOpRules[] = {
#define DTR_OP_RULE(name, code, kind, rule, sig, doc) DTypeRule::rule,
    DTR_OPS(DTR_OP_RULE)
#undef DTR_OP_RULE
};
}  // namespace detail

// True for the reductions that keep their input's dtype while they reduce: those that
// select one of the input's elements (max, min, argmax, argmin; the Reduce ops whose dtype
// rule is Same or Index). They compare the elements as they are, where the others first
// convert the input to the result's dtype (sum of int32 in int64, mean of float16 in
// float32), and they have no value over zero elements. False for any other value.
constexpr bool op_keeps_dtype(OpId id) {
  const auto code = static_cast<uint16_t>(id);
  if (code > kMaxOpCode || detail::kOpIndexOfCode[code] < 0) return false;
  const int i = detail::kOpIndexOfCode[code];
  return detail::kOpKinds[i] == OpKind::Reduce &&
         (detail::kOpRules[i] == DTypeRule::Same || detail::kOpRules[i] == DTypeRule::Index);
}

// What a parameter of an op's signature takes and which input or attribute it fills (the
// types of the signature strings, explained above the lists, in this order).
enum class ParamType : uint8_t {
  Tensor,
  Operand,
  Number,
  Dims,
  Ints,
  Int,
  Start,
  End,
  Bool,
  Dtype,
  Generator,
  Tensors,
  Pair,
  Flag,
  Reduction
};

// One parameter of a signature.
struct OpParam {
  std::string_view name;
  ParamType type = ParamType::Tensor;
  bool optional = false;   // "name?": may be left out
  std::string_view deflt;  // "name: type = default": the default's text, empty when none
  // Must be given: neither optional nor defaulted, and a value (not a generator).
  constexpr bool required() const {
    return !optional && deflt.empty() && type != ParamType::Generator;
  }
};

// The declared parameters of an op, in call order; the tensor inputs (tensor / operand)
// come first.
struct OpSignature {
  static constexpr int kMaxParams = 8;
  std::array<OpParam, kMaxParams> param{};
  int count = 0;
  constexpr std::span<const OpParam> params() const {
    return std::span<const OpParam>(param.data(), static_cast<size_t>(count));
  }
};

// The name a signature uses for a parameter type ("tensor", "dims", ...).
std::string_view param_type_name(ParamType t);

// Attributes of one op call: a flat record so that every op travels in one wire format.
// Which fields an op reads is said in its kind's comment above and in its signature.
struct OpAttrs {
  Dims ints;
  std::array<Scalar, 3> scalars{};
  DType dtype = DType::Float32;
  bool keepdim = false;
  bool scalar_first = false;
  uint64_t seed = 0;    // random ops: generator seed
  uint64_t offset = 0;  // random ops: position in the generator's stream
  friend bool operator==(const OpAttrs&, const OpAttrs&) = default;
};

struct OpDef {
  OpId id;
  std::string_view name;  // as users type it; Mutate ops end in '_'
  OpKind kind;
  DTypeRule dtype_rule;
  std::string_view help;   // "name(params): what it does", the params from `signature`
  int min_inputs;          // tensors
  int max_inputs;          // at most kMaxOpInputs
  bool has_inplace_form;   // Unary, Binary and Clamp: name_ writes into input 0
  OpSignature signature;   // as declared in the list, or its kind's
  std::string_view usage;  // "name(params)": how help opens
};

// The whole table, in the order of the lists (not of the codes).
std::span<const OpDef> all_ops();
namespace detail {
// all_ops().data(), for op_def() (inline: the dispatch paths look ops up per command).
extern const OpDef* const kOpTable;
[[noreturn]] void throw_unknown_op(uint16_t code);
}  // namespace detail
// The op of a valid id (is_valid_op); throws InvalidArgument for another value.
inline const OpDef& op_def(OpId id) {
  const auto code = static_cast<uint16_t>(id);
  if (code > kMaxOpCode || detail::kOpIndexOfCode[code] < 0) [[unlikely]]
    detail::throw_unknown_op(code);
  return detail::kOpTable[detail::kOpIndexOfCode[code]];
}
// Looks an op up by its user-facing name; nullptr when unknown.
const OpDef* find_op(std::string_view name);
// True for raw values that name an op (validation of wire bytes).
constexpr bool is_valid_op(uint16_t raw) {
  return raw <= kMaxOpCode && detail::kOpIndexOfCode[raw] >= 0;
}

struct InferResult {
  TensorMeta meta;
  // The result is a view of input 0's storage (views, contiguous() of a contiguous
  // tensor, to() of the same dtype, reshape when no copy is needed, every in-place call).
  bool aliases_input = false;
  // The dtype the op computes; differs from meta.dtype only for an in-place call whose
  // result is converted into input 0 (an int32 tensor's add_ of an int64 tensor).
  DType computed_dtype = DType::Float32;
};

// A pair of ints for the window ops' parameters (`pair` in a signature): one int for both
// dims, or {h, w}.
struct Int2 {
  int64_t h = 0, w = 0;
  constexpr Int2(int64_t both) : h(both), w(both) {}
  constexpr Int2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
};

// nll_loss's reduction (`reduction` in a signature; its value in attrs.ints).
enum class Reduction : int64_t { None = 0, Mean = 1, Sum = 2 };

// The shape and dtype rule: the result's metadata for `op` on `inputs` with `attrs`,
// computed without touching data. With `inplace`, the result must fit input 0 (same shape,
// castable dtype) and is input 0. Throws ShapeError, DTypeError, IndexError or
// InvalidArgument with a message that names the op and the shapes or dtypes involved.
InferResult infer(OpId op, std::span<const TensorMeta> inputs, const OpAttrs& attrs,
                  bool inplace = false);
// The checks infer() makes for an in-place call, without building its result (which is
// input 0): returns the dtype the op computes in (InferResult::computed_dtype).
DType infer_inplace(OpId op, std::span<const TensorMeta> inputs, const OpAttrs& attrs);

// The dtype the operands of a Binary op compute in: the two tensors' promoted dtype, or
// for a scalar operand torch's scalar rule (a float scalar makes an integral or bool tensor
// float32; an integer scalar makes a bool tensor int64). Comparisons compute in it.
DType binary_operand_dtype(std::span<const TensorMeta> inputs, const OpAttrs& attrs);

class Generator;

// Attributes of the creation ops, shared by every tensor type's creation functions.
namespace creation {
OpAttrs shape(const Shape& shape, DType dtype);
OpAttrs full(const Shape& shape, Scalar value, DType dtype);
// dtype: int64 when start, end and step are all integers, else float32 (as torch).
OpAttrs arange(Scalar start, Scalar end, Scalar step);
OpAttrs linspace(double start, double end, int64_t steps, DType dtype);
OpAttrs random(const Shape& shape, DType dtype, uint64_t seed, uint64_t offset);
// rand and randn: reserves numel(shape) positions of gen's stream, or of the default
// generator's when gen is null, for the draw.
OpAttrs random(const Shape& shape, DType dtype, Generator* gen);
}  // namespace creation

// True when arange's start, end and step are all integers (or bools): it then counts in
// int64, exactly.
bool arange_is_integral(const OpAttrs& attrs);

// torch/NumPy broadcasting of two shapes; throws ShapeError naming `op` and both shapes.
Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b);
// scatter_reduce's reduce attribute for a name ("sum", "prod", "mean", "amax", "amin");
// throws InvalidArgument naming the names for any other.
int64_t scatter_reduce_code(std::string_view reduce);
// Wraps a possibly negative dim into [0, ndim); throws IndexError naming `op`.
int64_t wrap_dim(std::string_view op, int64_t dim, int64_t ndim);

}  // namespace dtr
