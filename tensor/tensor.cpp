// dtr::local::Tensor and the execute() engine that runs op-table ops on CPU tensors, and
// on CUDA tensors through the CUDA backend (tensor/cuda/cuda.hpp).
#include "dtr/tensor.hpp"

#include <array>
#include <limits>
#include <ostream>

#include "kernels.hpp"
#include "op_rules.hpp"
#include "tensor/cuda/cuda.hpp"

namespace dtr::local {

using detail::fail;

namespace {

// Inputs kept inline (calls of more inputs use the heap).
constexpr size_t kInlineInputs = 2;

void check_defined(const Tensor& t, std::string_view op) {
  if (!t.defined()) fail<InvalidArgument>(op, "called on an undefined tensor");
}

bool overlaps(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() && !(a.meta() == b.meta());
}

std::string device_name(int device) {
  return device < 0 ? std::string("cpu") : fmt::format("cuda:{}", device);
}

// The device every tensor input of `op` lives on (`fallback` without inputs); throws
// DeviceError naming the op and both devices when they differ.
int common_device(std::string_view op, std::span<const Tensor> inputs, int fallback) {
  if (inputs.empty()) return fallback;
  int device = inputs[0].device();
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i].device() != device)
      fail<DeviceError>(op, "tensors on different devices ({} and {}); move one with to_device",
                        device_name(device), device_name(inputs[i].device()));
  }
  return device;
}

// Elementwise copy with broadcast and conversion; both on the host or both on one device.
void copy_elements(const Tensor& dst, const Tensor& src) {
  if (dst.device() != src.device())
    fail<DeviceError>("copy_", "destination on {}, source on {}", device_name(dst.device()),
                      device_name(src.device()));
  if (dst.device() >= 0)
    cuda::copy_into(dst, src);
  else
    detail::copy_into(dst, src);
}

}  // namespace

Tensor::Tensor(std::shared_ptr<Storage> storage, const TensorMeta& meta)
    : storage_(std::move(storage)), meta_(meta) {
  if (!storage_) throw InvalidArgument("Tensor: null storage");
  int64_t extent = meta_.storage_extent();
  for (int64_t s : meta_.strides)
    if (s < 0) throw InvalidArgument(fmt::format("Tensor: negative stride in {}", meta_.strides));
  auto elem = static_cast<int64_t>(element_size(meta_.dtype));
  if (meta_.offset < 0 || extent > std::numeric_limits<int64_t>::max() / elem ||
      static_cast<uint64_t>(extent * elem) > storage_->nbytes())
    throw InvalidArgument(fmt::format(
        "Tensor: {} with strides {} and offset {} reaches outside its storage of {} bytes",
        describe(meta_), meta_.strides, meta_.offset, storage_->nbytes()));
}

void Tensor::undefined(const char* what) {
  fail<InvalidArgument>(what, "called on an undefined tensor");
}

void Tensor::check_dtype(DType expected, const char* what) const {
  if (meta_.dtype != expected)
    fail<DTypeError>(what, "tensor has dtype {}, asked for {}", meta_.dtype, expected);
}

Tensor Tensor::to_device(int device) const {
  check_defined(*this, "to_device");
  if (device < -1) fail<DeviceError>("to_device", "invalid device {}", device);
  if (device == this->device()) return *this;
  Tensor out = empty(shape(), dtype(), device);
  cuda::copy_between(out, *this);
  if (autograd_) [[unlikely]]
    autograd_->record_move(*this, out);
  return out;
}

Scalar Tensor::item() const {
  check_defined(*this, "item");
  if (numel() != 1)
    fail<ShapeError>("item", "needs a tensor with one element, got shape {}", shape());
  if (device() >= 0) return cpu().item();
  return detail::dispatch(dtype(), [&]<typename T>() -> Scalar {
    // The one element may sit behind any strides; its address is element 0's.
    return Scalar(*static_cast<const T*>(raw_data()));
  });
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  check_defined(*this, "to_vector");
  if (device() >= 0) return cpu().to_vector<T>();
  Tensor packed = dtype() == dtype_of_v<T> ? contiguous() : to(dtype_of_v<T>);
  const T* p = static_cast<const T*>(packed.raw_data());
  return std::vector<T>(p, p + packed.numel());
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<bool> Tensor::to_vector<bool>() const;
template std::vector<float16> Tensor::to_vector<float16>() const;
template std::vector<bfloat16> Tensor::to_vector<bfloat16>() const;

Tensor Tensor::clone() const {
  check_defined(*this, "clone");
  // A tensor autograd tracks clones through the op, so that the gradient passes (the copy
  // below would cut the graph: x.clone().sum().backward() left x.grad empty).
  if (autograd_) return apply(OpId::clone, OpAttrs{}, nullptr);
  Tensor out = empty(shape(), dtype(), device());
  copy_elements(out, *this);
  return out;
}

Tensor Tensor::apply_inputs(OpId op, const OpAttrs& attrs, std::span<const Tensor> inputs) {
  Tensor out = execute(op, inputs, attrs, false);
  autograd::record_inputs<Tensor>(op, attrs, inputs, out);
  return out;
}

Tensor Tensor::apply(OpId op, const OpAttrs& attrs, const Tensor* other) const {
  Tensor out;
  if (other) {
    std::array<Tensor, 2> in{*this, *other};
    out = execute(op, in, attrs, false);
  } else {
    out = execute(op, std::span<const Tensor>(this, 1), attrs, false);
  }
  if (autograd_ || (other && other->autograd_)) [[unlikely]] {
    const Tensor* in[2] = {this, other};
    autograd::record_op<Tensor>(op, attrs, std::span<const Tensor* const>(in, other ? 2 : 1), out);
  }
  return out;
}

Tensor Tensor::full_here(const Shape& shape, Scalar value, DType dtype) const {
  if (device() < 0) return full(shape, value, dtype);
  return empty(shape, dtype, device()).fill_(value);
}

void Tensor::apply_inplace(OpId op, const OpAttrs& attrs, const Tensor* other) {
  if (autograd_ || (other && other->autograd_)) [[unlikely]] {
    const Tensor* in[2] = {this, other};
    autograd::check_inplace<Tensor>(op, std::span<const Tensor* const>(in, other ? 2 : 1));
  }
  if (other) {
    std::array<Tensor, 2> in{*this, *other};
    execute(op, in, attrs, true);
  } else {
    execute(op, std::span<const Tensor>(this, 1), attrs, true);
  }
}

namespace {

bool is_half(DType t) {
  return t == DType::Float16 || t == DType::BFloat16;
}

// The CPU kernels of the computing kinds (elementwise, reductions, linalg) over float16 or
// bfloat16 operands: as torch's CPU kernels do, compute in float32 and round on store. The
// 16-bit inputs are converted to float32 (exactly), the kernel writes a float32 result,
// which is rounded (to nearest even) into `out`. Creation and copy kernels handle the
// 16-bit types themselves.
bool computes_through_float32(const OpDef& d, std::span<const Tensor> inputs, const Tensor& out) {
  switch (d.kind) {
    case OpKind::Unary:
    case OpKind::Clamp:
    case OpKind::Binary:
    case OpKind::Reduce:
    case OpKind::Norm:
    case OpKind::Moment:
    case OpKind::Linalg:
    case OpKind::NN:
      break;
    case OpKind::Indexing:
      if (d.id == OpId::cumsum) break;
      return false;
    default:
      return false;
  }
  if (is_half(out.dtype())) return true;
  for (const Tensor& t : inputs)
    if (is_half(t.dtype())) return true;
  return false;
}

void run_cpu_kernel(const OpDef& d, std::span<const Tensor> inputs, const OpAttrs& attrs,
                    const Tensor& out);

void run_through_float32(const OpDef& d, std::span<const Tensor> inputs, const OpAttrs& attrs,
                         const Tensor& out) {
  std::vector<Tensor> wide(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    wide[i] = is_half(inputs[i].dtype()) ? inputs[i].to(DType::Float32) : inputs[i];
  std::span<const Tensor> wide_in(wide.data(), wide.size());
  if (!is_half(out.dtype())) {  // comparisons (bool), argmax/argmin (int64)
    run_cpu_kernel(d, wide_in, attrs, out);
    return;
  }
  Tensor result = empty(out.shape(), DType::Float32);
  run_cpu_kernel(d, wide_in, attrs, result);
  detail::copy_into(out, result);
}

// cat and stack on any device: each input copied (converted) into its part of out.
void join_into(const OpDef& d, std::span<const Tensor> inputs, const OpAttrs& a,
               const Tensor& out) {
  if (d.id == OpId::stack) {
    const int64_t dim = wrap_dim(d.name, a.ints[0], out.dim());
    for (size_t i = 0; i < inputs.size(); ++i)
      copy_elements(out.select(dim, static_cast<int64_t>(i)), inputs[i]);
    return;
  }
  int64_t offset = 0, dim = -1;
  for (const Tensor& t : inputs) {
    if (dtr::detail::cat_skips(t.meta())) continue;
    if (dim < 0) dim = wrap_dim(d.name, a.ints[0], out.dim());
    const int64_t n = t.shape()[dim];
    copy_elements(out.narrow(dim, offset, n), t);
    offset += n;
  }
}

// run_kernel once the devices are known to agree (execute() has checked them).
void run_checked(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs, const Tensor& out) {
  const OpDef& d = op_def(op);
  if (d.kind == OpKind::Join) {
    join_into(d, inputs, attrs, out);
    return;
  }
  if (out.device() >= 0) {
    cuda::run_kernel(op, inputs, attrs, out);
    return;
  }
  if (computes_through_float32(d, inputs, out)) {
    run_through_float32(d, inputs, attrs, out);
    return;
  }
  run_cpu_kernel(d, inputs, attrs, out);
}

void run_cpu_kernel(const OpDef& d, std::span<const Tensor> inputs, const OpAttrs& attrs,
                    const Tensor& out) {
  switch (d.kind) {
    case OpKind::Unary:
      detail::unary_kernel(d, inputs, attrs, out);
      break;
    case OpKind::Clamp:
      detail::clamp_kernel(d, inputs, attrs, out);
      break;
    case OpKind::Binary:
      detail::binary_kernel(d, inputs, attrs, out);
      break;
    case OpKind::Reduce:
    case OpKind::Norm:
    case OpKind::Moment:
      detail::reduce_kernel(d, inputs, attrs, out);
      break;
    case OpKind::Linalg:
      detail::linalg_kernel(d, inputs, attrs, out);
      break;
    case OpKind::View:
    case OpKind::Convert: {
      // A materialized view (reshape that needs a copy), contiguous() or to(): the input's
      // elements in logical order into the packed output.
      TensorMeta as_input = TensorMeta::contiguous(out.dtype(), inputs[0].shape());
      detail::copy_into(Tensor(out.storage(), as_input), inputs[0]);
      break;
    }
    case OpKind::Create:
      detail::create_kernel(d, inputs, attrs, out);
      break;
    case OpKind::Mutate:
      detail::mutate_kernel(d, inputs, attrs, out);
      break;
    case OpKind::Indexing:
      detail::index_kernel(d, inputs, attrs, out);
      break;
    case OpKind::NN:
      if (d.id == OpId::linear || d.id == OpId::conv2d || d.id == OpId::conv2d_input_grad ||
          d.id == OpId::conv2d_weight_grad)
        detail::conv_kernel(d, inputs, attrs, out);
      else
        detail::nn_kernel(d, inputs, attrs, out);
      break;
    case OpKind::Join:
      join_into(d, inputs, attrs, out);
      break;
  }
}

}  // namespace

void run_kernel(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs, const Tensor& out) {
  const OpDef& d = op_def(op);
  if (common_device(d.name, inputs, out.device()) != out.device())
    fail<DeviceError>(d.name, "inputs on {}, output on {}", device_name(inputs[0].device()),
                      device_name(out.device()));
  run_checked(op, inputs, attrs, out);
}

Tensor execute(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs, bool inplace) {
  return execute(op, inputs, attrs, inplace, -1);
}

namespace {
// The inputs' metadata as infer() takes it: a single input's is not copied.
template <typename F>
auto with_metas(std::span<const Tensor> inputs, F&& f) {
  if (inputs.size() == 1) return f(std::span<const TensorMeta>(&inputs[0].meta(), 1));
  if (inputs.size() > kInlineInputs) {
    std::vector<TensorMeta> metas;
    metas.reserve(inputs.size());
    for (const Tensor& t : inputs) metas.push_back(t.meta());
    return f(std::span<const TensorMeta>(metas.data(), metas.size()));
  }
  std::array<TensorMeta, kInlineInputs> metas;
  for (size_t i = 0; i < inputs.size(); ++i) metas[i] = inputs[i].meta();
  return f(std::span<const TensorMeta>(metas.data(), inputs.size()));
}

void check_inputs(const OpDef& d, std::span<const Tensor> inputs) {
  if (inputs.size() > static_cast<size_t>(kMaxOpInputs))
    fail<InvalidArgument>(d.name, "takes at most {} tensor inputs, got {}", kMaxOpInputs,
                          inputs.size());
  for (const Tensor& t : inputs) check_defined(t, d.name);
}
}  // namespace

Tensor execute(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs, bool inplace,
               int device) {
  if (inplace) {
    execute_inplace(op, inputs, attrs);
    return inputs[0];
  }
  const OpDef& d = op_def(op);
  check_inputs(d, inputs);
  InferResult r =
      with_metas(inputs, [&](std::span<const TensorMeta> m) { return infer(op, m, attrs, false); });
  device = common_device(d.name, inputs, device);
  if (r.aliases_input) return Tensor(inputs[0].storage(), r.meta);
  Tensor out = empty(r.meta.shape, r.meta.dtype, device);
  run_checked(op, inputs, attrs, out);
  return out;
}

void execute_inplace(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs) {
  const OpDef& d = op_def(op);
  check_inputs(d, inputs);
  const DType computed = with_metas(
      inputs, [&](std::span<const TensorMeta> m) { return infer_inplace(op, m, attrs); });
  common_device(d.name, inputs, -1);
  const Tensor& self = inputs[0];
  // An operand that overlaps the destination with another layout (x.add_(x.t())) would
  // be read after it is overwritten: read it from a copy.
  // (On the heap: a std::optional of it costs a zeroing on every call, here and with g++ 12.)
  std::unique_ptr<std::array<Tensor, kInlineInputs>> safe;
  std::span<const Tensor> operands = inputs;
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (!overlaps(inputs[i], self)) continue;
    safe = std::make_unique<std::array<Tensor, kInlineInputs>>();
    for (size_t j = 0; j < inputs.size(); ++j)
      (*safe)[j] = j > 0 && overlaps(inputs[j], self) ? inputs[j].clone() : inputs[j];
    operands = std::span<const Tensor>(safe->data(), inputs.size());
    break;
  }
  // The kernel computes in the out-of-place result dtype; when self holds another dtype
  // (int32 tensor add_ int64 tensor, eq_), compute aside and convert into self.
  if (d.kind != OpKind::Mutate && computed != self.dtype()) {
    Tensor tmp = execute(op, operands, attrs, false);
    copy_elements(self, tmp);
    return;
  }
  run_checked(op, operands, attrs, self);
}

// ---- creation ----

namespace {
Tensor create(OpId op, const OpAttrs& attrs) {
  return execute(op, {}, attrs, false);
}
}  // namespace

Tensor empty(const Shape& shape, DType dtype) {
  return empty(shape, dtype, -1);
}
Tensor empty(const Shape& shape, DType dtype, int device) {
  TensorMeta m = infer(OpId::empty, {}, creation::shape(shape, dtype)).meta;
  int64_t n = m.numel();
  auto elem = static_cast<int64_t>(element_size(dtype));
  if (n > std::numeric_limits<int64_t>::max() / elem)
    throw OutOfMemory(fmt::format("empty: {} needs more bytes than int64 can count", describe(m)));
  const auto nbytes = static_cast<size_t>(n * elem);
  if (device >= 0) return Tensor(cuda::allocate(device, nbytes), m);
  if (device != -1) throw DeviceError(fmt::format("empty: invalid device {}", device));
  return Tensor(Storage::allocate(nbytes), m);
}
Tensor zeros(const Shape& shape, DType dtype) {
  return full(shape, 0, dtype);
}
Tensor ones(const Shape& shape, DType dtype) {
  return full(shape, 1, dtype);
}
Tensor full(const Shape& shape, Scalar value, DType dtype) {
  return create(OpId::full, creation::full(shape, value, dtype));
}
Tensor arange(Scalar end) {
  return arange(0, end, 1);
}
Tensor arange(Scalar start, Scalar end, Scalar step) {
  return create(OpId::arange, creation::arange(start, end, step));
}
Tensor arange(Scalar start, Scalar end, Scalar step, DType dtype) {
  OpAttrs a = creation::arange(start, end, step);
  a.dtype = dtype;
  return create(OpId::arange, a);
}
Tensor linspace(double start, double end, int64_t steps, DType dtype) {
  return create(OpId::linspace, creation::linspace(start, end, steps, dtype));
}
Tensor rand(const Shape& shape, Generator& gen, DType dtype) {
  return create(OpId::rand, creation::random(shape, dtype, &gen));
}
Tensor randn(const Shape& shape, Generator& gen, DType dtype) {
  return create(OpId::randn, creation::random(shape, dtype, &gen));
}
Tensor rand(const Shape& shape, DType dtype) {
  return create(OpId::rand, creation::random(shape, dtype, nullptr));
}
Tensor randn(const Shape& shape, DType dtype) {
  return create(OpId::randn, creation::random(shape, dtype, nullptr));
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
  if (numel_of(shape) != static_cast<int64_t>(values.size()))
    fail<ShapeError>("from_vector", "{} values do not fill shape {}", values.size(), shape);
  Tensor out = empty(shape, dtype_of_v<T>);
  T* p = out.data<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return out;
}
template Tensor from_vector<float>(const std::vector<float>&, const Shape&);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Shape&);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&);
template Tensor from_vector<bool>(const std::vector<bool>&, const Shape&);
template Tensor from_vector<float16>(const std::vector<float16>&, const Shape&);
template Tensor from_vector<bfloat16>(const std::vector<bfloat16>&, const Shape&);

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  return os << t.to_string();
}

}  // namespace dtr::local
