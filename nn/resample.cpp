// Padding modes, adaptive average pooling and interpolation (dtr/nn.hpp): compositions of
// table ops on x's node. Positions and weights are computed there too, as small int64 /
// float tensors (arange-like cumsums), so nothing passes through the master; the formulas
// follow torch's CPU kernels (aten/src/ATen/native/UpSample.h, AdaptivePooling.h) so that
// the same positions are read.
#include <fmt/format.h>

#include "dtr/nn.hpp"

namespace dtr::nn::functional {
namespace {

// 0, 1, ..., n - 1 (int64) where x lives.
template <typename T>
T positions(const T& x, int64_t n) {
  return x.new_ones({n}, DType::Int64).cumsum(0) - 1;
}

// The shape that puts a vector of m values along dim d of a tensor of `dims` dims.
Shape along_dim(int64_t dims, int64_t d, int64_t m) {
  Shape s(static_cast<size_t>(dims), 1);
  s[static_cast<size_t>(d)] = m;
  return s;
}

const char* mode_name(PadMode mode) {
  switch (mode) {
    case PadMode::Constant:
      return "constant";
    case PadMode::Reflect:
      return "reflect";
    case PadMode::Replicate:
      return "replicate";
    case PadMode::Circular:
      return "circular";
  }
  return "?";
}

// The positions of x's dim (size n) that padded position 0 .. n + before + after - 1 reads.
template <typename T>
T pad_positions(const T& x, PadMode mode, int64_t n, int64_t before, int64_t after, int64_t d) {
  const auto refuse = [&](const char* why) {
    throw ShapeError(fmt::format("pad: mode '{}' with padding ({}, {}) for dim {} of shape {}: {}",
                                 mode_name(mode), before, after, d, dtr::to_string(x.shape()),
                                 why));
  };
  if (n == 0) refuse("the dim is empty (there is nothing to repeat)");
  if (mode == PadMode::Reflect && (before >= n || after >= n))
    refuse("reflect padding must be less than the dim's size");
  if (mode == PadMode::Circular && (before > n || after > n))
    refuse("circular padding must be at most the dim's size (it wraps around once)");
  const int64_t m = n + before + after;
  if (m < 0) refuse("the padded size would be negative");
  const T idx = positions(x, m) - before;
  switch (mode) {
    case PadMode::Reflect:
      return (n - 1) - ((n - 1) - idx.abs()).abs();
    case PadMode::Replicate:
      return idx.clamp(0, n - 1);
    default:
      return idx.remainder(n);
  }
}

// Each row of y's dim d replaced by p (rows_out, n) times it: y.transpose(d, -1) @ p^T.
template <typename T>
T times_along(const T& y, int64_t d, const T& p) {
  const int64_t last = y.dim() - 1;
  const T t = d == last ? y : y.transpose(d, last);
  Shape s = t.shape();
  const int64_t n = s.back();
  s[s.size() - 1] = p.size(0);
  const T r = t.reshape({-1, n}).matmul(p.t()).view(s);
  return d == last ? r : r.transpose(d, last);
}

// The (m, n) weights of adaptive average pooling from n to m: row i is 1 / (bin size) on
// [floor(i n / m), ceil((i + 1) n / m)), 0 elsewhere.
template <typename T>
T bin_matrix(const T& x, int64_t n, int64_t m) {
  const T i = positions(x, m);
  const T start = (i * n).floor_divide(m).view({m, 1});
  const T end = ((i + 1) * n + (m - 1)).floor_divide(m).view({m, 1});
  const T j = positions(x, n).view({1, n});
  return j.ge(start).logical_and(j.lt(end)).to(x.dtype()) / (end - start).to(x.dtype());
}

template <typename T>
void check_resized_dims(const char* fn, const T& x, size_t k, int64_t lead_min, int64_t lead_max) {
  if (k < 1 || k > 3)
    throw InvalidArgument(fmt::format("{}: resizes 1 to 3 dims, got {} output sizes", fn, k));
  const int64_t dims = x.dim(), kk = static_cast<int64_t>(k);
  if (dims < kk + lead_min || dims > kk + lead_max)
    throw ShapeError(
        fmt::format("{}: {} output sizes need an input of {} dims, got shape {}", fn, k,
                    lead_min == lead_max ? std::to_string(kk + lead_min)
                                         : fmt::format("{} or {}", kk + lead_min, kk + lead_max),
                    dtr::to_string(x.shape())));
  if (!is_floating(x.dtype()) && std::string(fn) != "interpolate")
    throw DTypeError(fmt::format("{}: defined for floating-point tensors only, got {}", fn,
                                 dtype_name(x.dtype())));
  for (int64_t d = dims - kk; d < dims; ++d)
    if (x.size(d) == 0)
      throw ShapeError(fmt::format("{}: dim {} of the input (shape {}) is empty", fn, d,
                                   dtr::to_string(x.shape())));
}

// The source position of each of m outputs along a dim of n for nearest (torch's
// nearest_idx, in float) and nearest-exact (nearest_neighbor_exact_compute_source_index).
// scale_factor: the user's, or <= 0 when none was given (then n / m).
template <typename T>
T nearest_positions(const T& x, int64_t n, int64_t m, double scale_factor, bool exact) {
  const T i = positions(x, m);
  if (!exact && m == 2 * n) return i.floor_divide(2);
  const float scale =
      scale_factor > 0 ? static_cast<float>(1.0 / scale_factor) : static_cast<float>(n) / m;
  // floorf(i * scale) with i * scale in float; floorf((i + 0.5) * scale), the product in
  // double rounded to float.
  const T src = exact
                    ? ((i.to(DType::Float64) + 0.5) * static_cast<double>(scale)).to(DType::Float32)
                    : i.to(DType::Float32) * static_cast<double>(scale);
  return src.floor().to(DType::Int64).clamp(0, n - 1);
}

// y resized along dim d from n to m by linear interpolation, as torch's
// compute_source_index_and_lambda: the positions and weights in float (double for a double
// y), the two neighbours weighted.
template <typename T>
T linear_along(const T& y, int64_t d, int64_t n, int64_t m, bool align_corners,
               double scale_factor) {
  const bool wide = y.dtype() == DType::Float64;
  const DType opmath = wide ? DType::Float64 : DType::Float32;
  const auto as_opmath = [wide](double v) {
    return wide ? v : static_cast<double>(static_cast<float>(v));
  };
  double scale;
  if (align_corners)
    scale =
        m > 1 ? (wide ? static_cast<double>(n - 1) / static_cast<double>(m - 1)
                      : static_cast<double>(static_cast<float>(n - 1) / static_cast<float>(m - 1)))
              : 0.0;
  else if (scale_factor > 0)
    scale = as_opmath(1.0 / scale_factor);
  else
    scale = wide ? static_cast<double>(n) / static_cast<double>(m)
                 : static_cast<double>(static_cast<float>(n) / static_cast<float>(m));
  const T i = positions(y, m).to(opmath);
  const T src = align_corners ? i * scale : ((i + 0.5) * scale - 0.5).clamp(0);
  const T i0 = src.floor().to(DType::Int64).clamp(0, n - 1);
  const T i1 = (i0 + 1).clamp(0, n - 1);
  const T l1 = (src - i0.to(opmath)).clamp(0, 1);
  const T l0 = 1 - l1;
  const Shape b = along_dim(y.dim(), d, m);
  return y.index_select(d, i0) * l0.to(y.dtype()).view(b) +
         y.index_select(d, i1) * l1.to(y.dtype()).view(b);
}

}  // namespace

PadMode pad_mode(const std::string& name) {
  for (PadMode m : {PadMode::Constant, PadMode::Reflect, PadMode::Replicate, PadMode::Circular})
    if (name == mode_name(m)) return m;
  throw InvalidArgument(fmt::format(
      "pad: mode '{}' is not one of 'constant', 'reflect', 'replicate', 'circular'", name));
}

template <typename T>
T pad(const T& x, const std::vector<int64_t>& pad, PadMode mode, Scalar value) {
  if (mode == PadMode::Constant) return x.constant_pad_nd(Dims(pad.begin(), pad.end()), value);
  const size_t k = pad.size() / 2;
  if (pad.size() % 2 != 0 || k < 1 || k > 3 || x.dim() < static_cast<int64_t>(k) + 1 ||
      x.dim() > static_cast<int64_t>(k) + 2)
    throw InvalidArgument(fmt::format(
        "pad: mode '{}' pads the last 1 to 3 dims of a tensor of 1 or 2 more dims, by (before, "
        "after) pairs; got {} padding values for a tensor of shape {}",
        mode_name(mode), pad.size(), dtr::to_string(x.shape())));
  T y = x;
  for (size_t j = 0; j < k; ++j) {
    const int64_t d = x.dim() - 1 - static_cast<int64_t>(j);
    y = y.index_select(d, pad_positions(x, mode, x.size(d), pad[2 * j], pad[2 * j + 1], d));
  }
  return y;
}

template <typename T>
T adaptive_avg_pool(const T& x, const std::vector<int64_t>& output_size) {
  const size_t k = output_size.size();
  check_resized_dims("adaptive_avg_pool", x, k, 1, 2);
  T y = x;
  bool changed = false;
  for (size_t j = 0; j < k; ++j) {
    const int64_t d = x.dim() - static_cast<int64_t>(k - j), n = x.size(d), m = output_size[j];
    if (m < 0)
      throw ShapeError(
          fmt::format("adaptive_avg_pool: output size {} for dim {} is negative", m, d));
    if (m == n) continue;
    changed = true;
    if (m > 0 && n % m == 0) {  // equal bins: a mean over each
      Shape s = y.shape();
      s[static_cast<size_t>(d)] = m;
      s.insert(static_cast<size_t>(d) + 1, n / m);
      y = y.reshape(s).mean(d + 1);
    } else {
      y = times_along(y, d, bin_matrix(x, n, m));
    }
  }
  return changed ? y : x.clone();
}

template <typename T>
T adaptive_avg_pool_backward(const T& grad, const T& x) {
  if (grad.dim() != x.dim())
    throw ShapeError(
        fmt::format("adaptive_avg_pool_backward: grad of shape {} for an input of "
                    "shape {}",
                    dtr::to_string(grad.shape()), dtr::to_string(x.shape())));
  T g = grad;
  bool changed = false;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const int64_t n = x.size(d), m = grad.size(d);
    if (m == n) continue;  // not pooled (or pooled to its own size)
    changed = true;
    if (m > 0 && n % m == 0) {  // each bin's gradient / its size, to each of its inputs
      Shape wide = g.shape();
      wide.insert(static_cast<size_t>(d) + 1, n / m);
      Shape out = g.shape();
      out[static_cast<size_t>(d)] = n;
      g = g.unsqueeze(d + 1).expand(wide).reshape(out) / static_cast<double>(n / m);
    } else {
      g = times_along(g, d, bin_matrix(x, n, m).t());
    }
  }
  return changed ? g : grad.clone();
}

std::string interpolate_mode_name(InterpolateMode mode, size_t dims) {
  switch (mode) {
    case InterpolateMode::Nearest:
      return "nearest";
    case InterpolateMode::NearestExact:
      return "nearest-exact";
    case InterpolateMode::Area:
      return "area";
    case InterpolateMode::Linear:
      return dims == 2 ? "bilinear" : dims == 3 ? "trilinear" : "linear";
  }
  return "?";
}

template <typename T>
T interpolate(const T& x, const std::vector<int64_t>& size, InterpolateMode mode,
              bool align_corners, const std::vector<double>& scales) {
  const size_t k = size.size();
  const std::string name = interpolate_mode_name(mode, k);
  check_resized_dims("interpolate", x, k, 2, 2);
  if (!scales.empty() && scales.size() != k)
    throw InvalidArgument(
        fmt::format("interpolate: {} scale factors for {} output sizes", scales.size(), k));
  if (align_corners && mode != InterpolateMode::Linear)
    throw InvalidArgument(
        fmt::format("interpolate: align_corners is for the linear modes "
                    "(linear, bilinear, trilinear), not '{}'",
                    name));
  if (mode == InterpolateMode::Linear && !is_floating(x.dtype()))
    throw DTypeError(
        fmt::format("interpolate: mode '{}' is defined for floating-point tensors "
                    "only, got {}",
                    name, dtype_name(x.dtype())));
  for (size_t j = 0; j < k; ++j)
    if (size[j] <= 0)
      throw ShapeError(fmt::format("interpolate: output size {} for dim {} must be positive",
                                   size[j], x.dim() - static_cast<int64_t>(k - j)));
  if (mode == InterpolateMode::Area) return adaptive_avg_pool(x, size);
  T y = x;
  bool changed = false;
  for (size_t j = k; j-- > 0;) {  // the last dim first, as torch nests the weights
    const int64_t d = 2 + static_cast<int64_t>(j), n = x.size(d), m = size[j];
    const double sf = scales.empty() ? 0.0 : scales[j];  // <= 0: none
    const bool exact = mode == InterpolateMode::NearestExact;
    if (m == n && !exact) continue;  // torch's identity shortcut
    changed = true;
    y = mode == InterpolateMode::Linear ? linear_along(y, d, n, m, align_corners, sf)
                                        : y.index_select(d, nearest_positions(x, n, m, sf, exact));
  }
  return changed ? y : x.clone();
}

#define DTR_INSTANTIATE(T)                                                             \
  template T pad(const T&, const std::vector<int64_t>&, PadMode, Scalar);              \
  template T adaptive_avg_pool(const T&, const std::vector<int64_t>&);                 \
  template T adaptive_avg_pool_backward(const T&, const T&);                           \
  template T interpolate(const T&, const std::vector<int64_t>&, InterpolateMode, bool, \
                         const std::vector<double>&);
DTR_INSTANTIATE(local::Tensor)
DTR_INSTANTIATE(DistributedTensor)
#undef DTR_INSTANTIATE

}  // namespace dtr::nn::functional
