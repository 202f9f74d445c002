// torch-namespace functions composed of table ops (dtr/composite.hpp).
#include "dtr/composite.hpp"

#include <fmt/format.h>

namespace dtr {
namespace {

// dims wrapped and checked; none: every dim of x.
template <typename T>
Dims reduced_dims(const char* fn, const T& x, const Dims& dims) {
  Dims out;
  if (dims.size() == 0) {
    for (int64_t d = 0; d < x.dim(); ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(fn, d, x.dim());
    for (int64_t seen : out)
      if (seen == w)
        throw InvalidArgument(fmt::format("{}: dim {} appears more than once in the dims", fn, w));
    out.push_back(w);
  }
  return out;
}

// x's shape without the dims.
Shape without(const Shape& shape, const Dims& dims) {
  Shape s;
  for (size_t i = 0; i < shape.size(); ++i) {
    bool reduced = false;
    for (int64_t d : dims) reduced = reduced || d == static_cast<int64_t>(i);
    if (!reduced) s.push_back(shape[i]);
  }
  return s;
}

template <typename T>
T extreme(const char* fn, const T& x, const Dims& dims, bool keepdim, bool largest) {
  const Dims d = reduced_dims(fn, x, dims);
  if (x.dim() == 0) return x.clone();
  return largest ? x.max(d, keepdim) : x.min(d, keepdim);
}

template <typename T>
T make_eye(const T& rows, int64_t n, int64_t m, DType dtype) {
  const T cols = rows.new_ones({m}, DType::Int64).cumsum(0) - 1;
  return (rows.new_ones({n}, DType::Int64).cumsum(0) - 1)
      .view({n, 1})
      .eq(cols.view({1, m}))
      .to(dtype);
}

void check_eye(int64_t n, int64_t m) {
  if (n < 0 || m < 0)
    throw InvalidArgument(fmt::format("eye: n and m must be non-negative, got {} and {}", n, m));
}

void check_randint(int64_t low, int64_t high, DType dtype) {
  if (low >= high)
    throw InvalidArgument(fmt::format("randint: low ({}) must be less than high ({})", low, high));
  if (dtype == DType::Bool) throw DTypeError("randint: bool is not an integer dtype to draw into");
}

template <typename T>
T scaled_draws(const T& u, int64_t low, int64_t high, DType dtype) {
  const T r = (u * static_cast<double>(high - low)).floor().to(DType::Int64) + low;
  return dtype == DType::Int64 ? r : r.to(dtype);
}

// The mask's checks of x[mask]: bool, over x's first dims, of their sizes.
template <typename T>
void check_mask(const char* fn, const T& x, const T& mask) {
  if (mask.dtype() != DType::Bool)
    throw DTypeError(
        fmt::format("{}: the mask must be bool, got {}", fn, dtype_name(mask.dtype())));
  bool fits = mask.dim() <= x.dim();
  for (int64_t d = 0; fits && d < mask.dim(); ++d) fits = mask.size(d) == x.size(d);
  if (!fits)
    throw IndexError(
        fmt::format("{}: the shape of the mask {} does not match the shape of the "
                    "indexed tensor {}",
                    fn, dtr::to_string(mask.shape()), dtr::to_string(x.shape())));
}

// The mask viewed with x's other dims as 1 and expanded to x's shape.
template <typename T>
T mask_over(const T& x, const T& mask) {
  Shape s = mask.shape();
  while (static_cast<int64_t>(s.size()) < x.dim()) s.push_back(1);
  return mask.view(s).expand(x.shape());
}

local::Tensor nonzero_of(const local::Tensor& x) {
  return local::nonzero(x);
}
DistributedTensor nonzero_of(const DistributedTensor& x) {
  return nonzero(x);
}

}  // namespace

DistributedTensor nonzero(const DistributedTensor& x) {
  const local::Tensor positions =
      local::nonzero((x.dtype() == DType::Bool ? x : x.ne(0)).to_local());
  node_guard on_node(x.get_node());
  device_guard on_device(x.get_device());
  return dist_send(positions, x.get_node());
}

namespace local {
Tensor nonzero(const Tensor& x) {
  const std::vector<bool> set = (x.dtype() == DType::Bool ? x : x.ne(0)).to_vector<bool>();
  int64_t count = 0;
  for (bool b : set) count += b ? 1 : 0;
  const int64_t dims = x.dim();
  Tensor out = dtr::local::full(Shape{count, dims}, 0, DType::Int64);
  int64_t* p = out.data<int64_t>();
  for (size_t i = 0; i < set.size(); ++i) {
    if (!set[i]) continue;
    auto rest = static_cast<int64_t>(i);
    for (int64_t d = dims - 1; d >= 0; --d) {
      p[d] = rest % x.size(d);
      rest /= x.size(d);
    }
    p += dims;
  }
  return out;
}
}  // namespace local

template <TensorHandle T>
T mask_index(const T& x, const T& mask) {
  check_mask("index", x, mask);
  int64_t lead = 1;
  Shape rows{0};
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < mask.dim())
      lead *= x.size(d);
    else
      rows.push_back(x.size(d));
  }
  rows[0] = lead;
  const T pos = nonzero_of(mask.reshape({lead})).reshape({-1});
  return x.reshape(rows).index_select(0, pos);
}

template <TensorHandle T>
std::tuple<T, T, T> unique(const T& x) {
  const int64_t n = x.numel();
  const T flat = x.reshape({n});
  if (n == 0)
    return {flat.clone(), x.new_zeros(x.shape(), DType::Int64), x.new_zeros({0}, DType::Int64)};
  const T perm = flat.argsort(0);
  const T sorted = flat.index_select(0, perm);
  // first[i]: sorted[i] starts a run of equal values.
  const std::vector<T> parts{x.new_ones({1}, DType::Bool),
                             sorted.narrow(0, 1, n - 1).ne(sorted.narrow(0, 0, n - 1))};
  const T first = cat(parts, 0);
  const T starts = nonzero_of(first).reshape({-1});  // the sync point
  const int64_t m = starts.size(0);
  const T values = sorted.index_select(0, starts);
  const T run_of_sorted = first.to(DType::Int64).cumsum(0) - 1;
  const T inverse = x.new_zeros({n}, DType::Int64).scatter(0, perm, run_of_sorted).view(x.shape());
  const std::vector<T> ends{starts.narrow(0, 1, m - 1), x.new_full({1}, n, DType::Int64)};
  return {values, inverse, cat(ends, 0) - starts};
}

template <TensorHandle T>
T masked_select(const T& x, const T& mask) {
  if (mask.dtype() != DType::Bool)
    throw DTypeError(
        fmt::format("masked_select: the mask must be bool, got {}", dtype_name(mask.dtype())));
  const Shape s = broadcast_shapes("masked_select", x.shape(), mask.shape());
  const T xb = x.shape() == s ? x : x.expand(s);
  return mask_index(xb, mask.shape() == s ? mask : mask.expand(s));
}

template <TensorHandle T>
void mask_assign(T& x, const T& mask, const T& value) {
  check_mask("index_put", x, mask);
  const T v = value.dtype() == x.dtype() ? value : value.to(x.dtype());
  const T m = mask_over(x, mask);
  if (v.dim() <= x.dim() - mask.dim()) {  // one row, broadcast: no sync point
    x.copy_(where(m, v, x));
    return;
  }
  const int64_t count = mask.sum().template item<int64_t>();
  Shape want{count};
  for (int64_t d = mask.dim(); d < x.dim(); ++d) want.push_back(x.size(d));
  if (!(v.shape() == want))
    throw ShapeError(
        fmt::format("index_put: a value of shape {} for {} selected positions (expected "
                    "{}, or one row that broadcasts)",
                    dtr::to_string(v.shape()), count, dtr::to_string(want)));
  if (count > 0) x.copy_(x.masked_scatter(m, v));
}

template <TensorHandle T>
void mask_assign(T& x, const T& mask, Scalar value) {
  check_mask("index_put", x, mask);
  x.copy_(x.masked_fill(mask_over(x, mask), value));
}

template <TensorHandle T>
T logsumexp(const T& x, const Dims& dims, bool keepdim) {
  const Dims d = reduced_dims("logsumexp", x, dims);
  const T xf = is_floating(x.dtype()) ? x : x.to(DType::Float32);
  if (x.dim() == 0) return xf.clone();
  // The shift only steadies exp; detached, so the gradient is exp(x - lse) alone.
  T m = xf.detach().max(d, true);
  m = m.masked_fill(m.isinf(), 0);
  const T lse = (xf - m).exp().sum(d, true).log() + m;
  return keepdim ? lse : lse.view(without(x.shape(), d));
}

template <TensorHandle T>
std::pair<T, T> var_mean(const T& x, const Dims& dims, int64_t correction, bool keepdim) {
  const Dims d = reduced_dims("var_mean", x, dims);
  return {x.var(d, keepdim, correction), x.mean(d, keepdim)};
}

template <TensorHandle T>
T amax(const T& x, const Dims& dims, bool keepdim) {
  return extreme("amax", x, dims, keepdim, true);
}

template <TensorHandle T>
T amin(const T& x, const Dims& dims, bool keepdim) {
  return extreme("amin", x, dims, keepdim, false);
}

template <TensorHandle T>
T index_add(const T& x, int64_t dim, const T& index, const T& source, Scalar alpha) {
  dim = wrap_dim("index_add", dim, std::max<int64_t>(x.dim(), 1));
  if (index.dim() > 1 || (index.dtype() != DType::Int64 && index.dtype() != DType::Int32))
    throw IndexError(
        fmt::format("index_add: index must be a 1-D int64 or int32 tensor, got {} of "
                    "shape {}",
                    dtype_name(index.dtype()), dtr::to_string(index.shape())));
  if (source.dtype() != x.dtype())
    throw DTypeError(fmt::format("index_add: source ({}) and self ({}) must have the same dtype",
                                 dtype_name(source.dtype()), dtype_name(x.dtype())));
  Shape want = x.shape();
  if (x.dim() > 0) want[static_cast<size_t>(dim)] = index.numel();
  if (!(source.shape() == want))
    throw ShapeError(
        fmt::format("index_add: source of shape {} for self of shape {} and {} "
                    "indices along dim {} (expected {})",
                    dtr::to_string(source.shape()), dtr::to_string(x.shape()), index.numel(), dim,
                    dtr::to_string(want)));
  if (x.dim() == 0) return x + (alpha.to<double>() == 1 ? source : source * alpha);
  Shape along(static_cast<size_t>(x.dim()), 1);
  along[static_cast<size_t>(dim)] = index.numel();
  const T idx = (index.dtype() == DType::Int64 ? index : index.to(DType::Int64))
                    .reshape({index.numel()})
                    .view(along)
                    .expand(source.shape());
  return x.scatter_add(dim, idx, alpha.to<double>() == 1 ? source : source * alpha);
}

template <TensorHandle T>
T bernoulli(const T& p, Generator* generator) {
  if (!is_floating(p.dtype()))
    throw DTypeError(fmt::format("bernoulli: the probabilities must be floating point, got {}",
                                 dtype_name(p.dtype())));
  T u = p.new_zeros(p.shape());
  if (generator)
    u.uniform_(0.0, 1.0, *generator);
  else
    u.uniform_(0.0, 1.0);
  return u.lt(p.detach()).to(p.dtype());
}

DistributedTensor eye(int64_t n, std::optional<int64_t> m, DType dtype) {
  check_eye(n, m.value_or(n));
  return make_eye(dtr::arange(0), n, m.value_or(n), dtype);
}

DistributedTensor randint(int64_t low, int64_t high, const Shape& shape, Generator* generator,
                          DType dtype) {
  check_randint(low, high, dtype);
  return scaled_draws(
      generator ? rand(shape, *generator, DType::Float64) : rand(shape, DType::Float64), low, high,
      dtype);
}

namespace local {
Tensor eye(int64_t n, std::optional<int64_t> m, DType dtype) {
  check_eye(n, m.value_or(n));
  return make_eye(dtr::local::arange(0), n, m.value_or(n), dtype);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator* generator, DType dtype) {
  check_randint(low, high, dtype);
  return scaled_draws(generator ? dtr::local::rand(shape, *generator, DType::Float64)
                                : dtr::local::rand(shape, DType::Float64),
                      low, high, dtype);
}
}  // namespace local

#define DTR_INSTANTIATE(T)                                                 \
  template T logsumexp(const T&, const Dims&, bool);                       \
  template std::pair<T, T> var_mean(const T&, const Dims&, int64_t, bool); \
  template T amax(const T&, const Dims&, bool);                            \
  template T amin(const T&, const Dims&, bool);                            \
  template T index_add(const T&, int64_t, const T&, const T&, Scalar);     \
  template T bernoulli(const T&, Generator*);                              \
  template T mask_index(const T&, const T&);                               \
  template T masked_select(const T&, const T&);                            \
  template std::tuple<T, T, T> unique(const T&);                           \
  template void mask_assign(T&, const T&, const T&);                       \
  template void mask_assign(T&, const T&, Scalar);
DTR_INSTANTIATE(local::Tensor)
DTR_INSTANTIATE(DistributedTensor)
#undef DTR_INSTANTIATE

}  // namespace dtr
