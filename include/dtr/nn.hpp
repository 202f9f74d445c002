// Neural-network modules and functions (library dtr::nn; docs/training.md), as torch.nn
// and torch.nn.functional, for local::Tensor and DistributedTensor alike: a module
// template is written once and instantiated for either (nn::Linear<DistributedTensor> keeps
// its parameters on a node and runs there).
//
//   struct Net : dtr::nn::Module<T> {
//     dtr::nn::Linear<T> fc1{784, 50}, fc2{50, 10};
//     Net() { this->register_module("fc1", fc1); this->register_module("fc2", fc2); }
//     T forward(const T& x) { return fc2(F::relu(fc1(x))); }
//   };
//
// Parameters are made on the current node and device (DistributedTensor) and drawn from
// the default generator (dtr::manual_seed), with torch's default initialization
// (uniform within 1/sqrt(fan_in)). A module holds its parameters and submodules by
// address: modules are neither copied nor moved. State files (save/load) hold named
// float tensors in a versioned, checksummed format (nn/state_file.cpp); a file that is
// not one, is cut short, fails its checksum or does not match the module throws
// InvalidArgument saying which and where.
//
// Thread safety: a module is used by one thread at a time (its parameters are leaves of
// the graphs its forward records; dtr/autograd.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "dtr/autograd.hpp"
#include "dtr/distributed.hpp"
#include "dtr/generator.hpp"
#include "dtr/tensor.hpp"

namespace dtr::nn {

// ---- state files ----
using NamedTensors = std::vector<std::pair<std::string, local::Tensor>>;
// Writes the tensors (float32 or float64) to `path`: magic "DTRSTATE", format version,
// entries (name, dtype, shape, bytes), an FNV-1a 64 checksum. Throws InvalidArgument when
// the file cannot be written.
void save_state(const std::string& path, const NamedTensors& tensors);
// Reads a file written by save_state; throws InvalidArgument naming the file and what is
// wrong (magic, version, an entry cut short, a checksum mismatch, trailing bytes).
NamedTensors load_state(const std::string& path);

// ---- modules ----
template <typename T>
class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter of this module and its submodules, in registration order.
  std::vector<T> parameters() const;
  // The same with dotted names ("fc1.weight").
  std::vector<std::pair<std::string, T>> named_parameters() const;
  // Training mode (dropout active) or evaluation mode, for this module and its submodules.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Clears every parameter's gradient (set_to_none) or zeroes it in place.
  void zero_grad(bool set_to_none = true);
  // Moves every parameter to CUDA device `device` of its node (-1: the CPU), keeping
  // requires_grad; gradients are dropped. Make optimizers after moving.
  void to_device(int device);
  // DistributedTensor: moves every parameter to `node` (worker to worker).
  void to(int node) requires std::is_same_v<T, DistributedTensor>;
  // The parameters as local tensors (a sync point for DistributedTensor).
  NamedTensors state_dict() const;
  // Copies the values of `state` into the parameters (in place, under no_grad). Every
  // parameter must be there with its shape; no other entry may be.
  void load_state_dict(const NamedTensors& state);
  void save(const std::string& path) const { save_state(path, state_dict()); }
  void load(const std::string& path) { load_state_dict(load_state(path)); }

 protected:
  // Registers a parameter member (marked requires_grad) or a submodule member under `name`.
  void register_parameter(std::string name, T& parameter);
  void register_module(std::string name, Module& child);

 private:
  std::vector<std::pair<std::string, T*>> parameters_;
  std::vector<std::pair<std::string, Module*>> children_;
  bool training_ = true;
};

// y = x W^T + b; x (..., in), W (out, in), b (out).
template <typename T>
class Linear : public Module<T> {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  T forward(const T& x) const;
  T operator()(const T& x) const { return forward(x); }
  T weight, bias;  // bias undefined without one
};

// 2-D convolution over (N, C_in, H, W) with a (C_out, C_in, kH, kW) weight (torch.nn.Conv2d;
// groups 1).
template <typename T>
class Conv2d : public Module<T> {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
         int64_t padding = 0, int64_t dilation = 1, bool bias = true);
  T forward(const T& x) const;
  T operator()(const T& x) const { return forward(x); }
  T weight, bias;

 private:
  int64_t stride_, padding_, dilation_;
};

// Zeroes each element with probability p while training (scaling the others by 1/(1-p));
// the identity in eval mode. Draws from `generator` (the default one when null).
template <typename T>
class Dropout : public Module<T> {
 public:
  explicit Dropout(double p = 0.5, Generator* generator = nullptr) : p_(p), generator_(generator) {}
  T forward(const T& x) const;
  T operator()(const T& x) const { return forward(x); }

 private:
  double p_;
  Generator* generator_;
};

// As Dropout, whole channels at once (dim 1 of (N, C, ...)).
template <typename T>
class Dropout2d : public Module<T> {
 public:
  explicit Dropout2d(double p = 0.5, Generator* generator = nullptr)
      : p_(p), generator_(generator) {}
  T forward(const T& x) const;
  T operator()(const T& x) const { return forward(x); }

 private:
  double p_;
  Generator* generator_;
};

// ---- functions (torch.nn.functional) ----
namespace functional {

template <typename T>
T relu(const T& x);
// x W^T + b (b may be undefined).
template <typename T>
T linear(const T& x, const T& weight, const T& bias);
// Cross-correlation of x (N, C, H, W) with weight (O, C, kH, kW), plus bias (O) when
// defined, as torch.nn.functional.conv2d with groups 1.
template <typename T>
T conv2d(const T& x, const T& weight, const T& bias, int64_t stride = 1, int64_t padding = 0,
         int64_t dilation = 1);
// The largest / the mean value of each kernel x kernel window (stride: the kernel when 0),
// over the last two dims of x (N, C, H, W); windows that do not fit are dropped (floor).
template <typename T>
T max_pool2d(const T& x, int64_t kernel, int64_t stride = 0);
template <typename T>
T avg_pool2d(const T& x, int64_t kernel, int64_t stride = 0);
// x with zeros added around its last two dims (`padding` on each side).
template <typename T>
T pad2d(const T& x, int64_t padding);
// See Dropout; `generator` null: the default generator.
template <typename T>
T dropout(const T& x, double p = 0.5, bool training = true, Generator* generator = nullptr);
template <typename T>
T dropout2d(const T& x, double p = 0.5, bool training = true, Generator* generator = nullptr);
// log(softmax(x)) along `dim`, computed stably.
template <typename T>
T log_softmax(const T& x, int64_t dim);
template <typename T>
T softmax(const T& x, int64_t dim);
// The mean over the batch of -input[i, target[i]]; input (N, C) log-probabilities, target
// (N) int64 class indices in [0, C).
template <typename T>
T nll_loss(const T& input, const T& target);
// nll_loss(log_softmax(input, 1), target).
template <typename T>
T cross_entropy(const T& input, const T& target);

// torch.nn.functional.nll_loss for each input layout torch takes: (N, C) with target (N),
// (C) with a 0-d target, or (N, C, d1, ...) with target (N, d1, ...) (the class dim moved
// last and the samples flattened for the nll_loss op). Reduction::None gives target's shape;
// Mean divides by the summed weights of the targets not ignored, as torch.
template <typename T>
T nll_loss_nd(const T& input, const T& target, const std::optional<T>& weight = std::nullopt,
              Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);
// torch.nn.functional.cross_entropy in full: log_softmax over the class dim (1; 0 for a (C)
// input), then for int64 class-index targets nll_loss_nd, for floating class-probability
// targets (input's shape) -sum(target * weight * log p) over the classes (Mean: divided by
// the number of samples). label_smoothing eps in [0, 1] mixes in the uniform distribution as
// torch does: (1 - eps) * loss + eps / C * (-sum of weighted log p, ignored targets 0).
template <typename T>
T cross_entropy(const T& input, const T& target, const std::optional<T>& weight,
                int64_t ignore_index = -100, Reduction reduction = Reduction::Mean,
                double label_smoothing = 0.0);

// --- resampling and normalization: compositions of table ops, run where x lives (the
// worker for a DistributedTensor; nn/resample.cpp, nn/normalization.cpp), differentiated
// through their ops. Each checks its arguments as torch does and throws ShapeError /
// InvalidArgument / DTypeError naming the function and the value.

// torch.nn.functional.pad's modes.
enum class PadMode { Constant, Reflect, Replicate, Circular };
// "constant", "reflect", "replicate" or "circular"; anything else throws InvalidArgument.
PadMode pad_mode(const std::string& name);
// x padded by `pad`: (before, after) pairs for the last dims, the last dim's first, as
// torch.nn.functional.pad. Constant: constant_pad_nd (value; negative pads crop). Reflect,
// replicate, circular: the last 1 to 3 dims of a tensor of 1 or 2 more dims, each padded
// dim an index_select of positions computed on the worker (reflect: pads < the dim's size;
// circular: pads <= it). The gradient adds up into the positions read.
template <typename T>
T pad(const T& x, const std::vector<int64_t>& pad, PadMode mode = PadMode::Constant,
      Scalar value = Scalar(0));

// torch's adaptive_avg_pool{1,2,3}d over the last output_size.size() (1 to 3) dims of a
// floating x with 1 or 2 leading dims: bin i of a dim of size n pooled to m covers
// [floor(i n / m), ceil((i + 1) n / m)). A dim with m dividing n is a mean over a reshape;
// any other is a product with the (m, n) matrix of bin weights (1 / bin size).
template <typename T>
T adaptive_avg_pool(const T& x, const std::vector<int64_t>& output_size);
// Its gradient (torch's _adaptive_avg_pool2d_backward, any of 1 to 3 dims): grad spread
// back over x's shape, each bin's gradient divided among its inputs.
template <typename T>
T adaptive_avg_pool_backward(const T& grad, const T& x);

// torch.nn.functional.interpolate's modes: nearest, nearest-exact, linear (linear,
// bilinear and trilinear by the number of dims) and area (adaptive_avg_pool).
enum class InterpolateMode { Nearest, NearestExact, Linear, Area };
// torch's name of the mode for a number of resized dims ("bilinear" for Linear and 2).
std::string interpolate_mode_name(InterpolateMode mode, size_t dims);
// x (N, C, d1[, d2[, d3]]) resized to `size` over its last size.size() dims, computing the
// source positions as torch's upsample kernels do (in float, or double for a double x;
// `scales`: the user's scale factors, one per dim or none, which torch uses in place of
// size ratios). Nearest: an index_select per dim; linear: two index_selects per dim,
// weighted (the last dim first, as torch nests them); area: adaptive_avg_pool.
// align_corners applies to Linear only (torch refuses it for the others).
template <typename T>
T interpolate(const T& x, const std::vector<int64_t>& size, InterpolateMode mode,
              bool align_corners = false, const std::vector<double>& scales = {});

// torch.nn.functional.group_norm: x (N, C, *) in num_groups groups of C / num_groups
// channels, each group of each sample normalized (layer_norm over its rows), then
// * weight + bias per channel (C each, or left out).
template <typename T>
T group_norm(const T& x, int64_t num_groups, const std::optional<T>& weight = std::nullopt,
             const std::optional<T>& bias = std::nullopt, double eps = 1e-5);
// Its gradients (torch's native_group_norm_backward, the statistics recomputed from x as
// layer_norm_backward does): grad_input, grad_weight and grad_bias (the last two of
// shape (C); grad_weight is what a weight would get, also when weight is left out).
template <typename T>
std::tuple<T, T, T> group_norm_backward(const T& grad, const T& x, int64_t num_groups,
                                        const std::optional<T>& weight = std::nullopt,
                                        double eps = 1e-5);

// torch.nn.functional.scaled_dot_product_attention, the math form (torch's
// _scaled_dot_product_attention_math): softmax(q k^T * scale + mask) v with q (..., L, E),
// k (..., S, E), v (..., S, Ev), the leading dims broadcast; q and k each scaled by
// sqrt(scale) (default 1 / sqrt(E)) before the product. is_causal: position i attends to
// j <= i (then attn_mask must be left out); attn_mask: bool (true = attend) or of q's dtype
// (added to the scores), broadcasting to (..., L, S). dropout_p: dropout on the weights.
template <typename T>
T scaled_dot_product_attention(const T& q, const T& k, const T& v,
                               const std::optional<T>& attn_mask = std::nullopt,
                               double dropout_p = 0.0, bool is_causal = false,
                               std::optional<double> scale = std::nullopt,
                               Generator* generator = nullptr);

// torch.nn.functional.batch_norm over x (N, C, *), per channel. Training: each channel
// normalized by the mean and biased variance of its N * (*) values (a layer_norm over the
// channel's row); running_mean / running_var, when given, updated in place to
// momentum * batch + (1 - momentum) * running (the unbiased variance), as torch does.
// Not training: x * invstd * weight + (bias - running_mean * invstd * weight), with
// invstd = 1 / sqrt(running_var + eps) (the running statistics are then required).
template <typename T>
T batch_norm(const T& x, const std::optional<T>& running_mean, const std::optional<T>& running_var,
             const std::optional<T>& weight = std::nullopt,
             const std::optional<T>& bias = std::nullopt, bool training = false,
             double momentum = 0.1, double eps = 1e-5);

}  // namespace functional

}  // namespace dtr::nn
