// Prepared CPU kernels (tensor/prepared.hpp). The element functions are those of
// kernels_elementwise.cpp (tensor/arith.hpp for the wrapping integer arithmetic), over the
// flat loop that kernel takes for contiguous operands of the output's shape.
#include "tensor/prepared.hpp"

#include <cmath>
#include <cstring>

#include "arith.hpp"

namespace dtr::local {

namespace {

using dtr::detail::wrap_add;
using dtr::detail::wrap_mul;
using dtr::detail::wrap_sub;

struct Add {
  template <typename T>
  T operator()(T u, T v) const {
    return wrap_add(u, v);
  }
};
struct Sub {
  template <typename T>
  T operator()(T u, T v) const {
    return wrap_sub(u, v);
  }
};
struct Mul {
  template <typename T>
  T operator()(T u, T v) const {
    return wrap_mul(u, v);
  }
};
struct Div {
  template <typename T>
  T operator()(T u, T v) const {
    return u / v;
  }
};
struct Neg {
  template <typename T>
  T operator()(T v) const {
    return wrap_sub(T(0), v);
  }
};
struct Abs {
  template <typename T>
  T operator()(T v) const {
    if constexpr (std::is_floating_point_v<T>)
      return std::abs(v);
    else
      return v < T(0) ? wrap_sub(T(0), v) : v;
  }
};
struct Relu {
  template <typename T>
  T operator()(T v) const {
    return v > T(0) ? v : T(0);
  }
};

template <typename T, typename F>
void unary(const PreparedKernel& k) {
  T* o = static_cast<T*>(k.out);
  const T* x = static_cast<const T*>(k.a);
  for (int64_t i = 0; i < k.n; ++i) o[i] = F{}(x[i]);
}
template <typename T, typename F>
void with_tensor(const PreparedKernel& k) {
  T* o = static_cast<T*>(k.out);
  const T* x = static_cast<const T*>(k.a);
  const T* y = static_cast<const T*>(k.b);
  for (int64_t i = 0; i < k.n; ++i) o[i] = F{}(x[i], y[i]);
}
template <typename T, typename F>
void with_scalar(const PreparedKernel& k) {
  T* o = static_cast<T*>(k.out);
  const T* x = static_cast<const T*>(k.a);
  T s;
  std::memcpy(&s, k.scalar, sizeof(T));
  for (int64_t i = 0; i < k.n; ++i) o[i] = F{}(x[i], s);
}
template <typename T, typename F>
void scalar_first(const PreparedKernel& k) {
  T* o = static_cast<T*>(k.out);
  const T* x = static_cast<const T*>(k.a);
  T s;
  std::memcpy(&s, k.scalar, sizeof(T));
  for (int64_t i = 0; i < k.n; ++i) o[i] = F{}(s, x[i]);
}

// The loop of functor F in dtype T for this call's form.
template <typename T, typename F>
PreparedKernel::Fn binary_form(bool tensor_operand, bool first) {
  if (tensor_operand) return &with_tensor<T, F>;
  return first ? &scalar_first<T, F> : &with_scalar<T, F>;
}

template <typename T>
PreparedKernel::Fn loop_for(OpId op, bool tensor_operand, bool first) {
  switch (op) {
    case OpId::add:
      return binary_form<T, Add>(tensor_operand, first);
    case OpId::sub:
      return binary_form<T, Sub>(tensor_operand, first);
    case OpId::mul:
      return binary_form<T, Mul>(tensor_operand, first);
    case OpId::div:
      if constexpr (std::is_floating_point_v<T>) return binary_form<T, Div>(tensor_operand, first);
      return nullptr;
    case OpId::neg:
      return &unary<T, Neg>;
    case OpId::abs:
      return &unary<T, Abs>;
    case OpId::relu:
      return &unary<T, Relu>;
    default:
      return nullptr;
  }
}

// The operand may be read while `out` is written: another storage, or exactly `out`.
bool safe_operand(const Tensor& t, const Tensor& out) {
  return t.storage() != out.storage() || t.meta() == out.meta();
}

}  // namespace

PreparedKernel prepare_kernel(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs,
                              const Tensor& out) {
  PreparedKernel k;
  const OpDef& d = op_def(op);
  const bool unary_op = d.kind == OpKind::Unary && inputs.size() == 1;
  const bool binary_op = d.kind == OpKind::Binary && (inputs.size() == 1 || inputs.size() == 2);
  if ((!unary_op && !binary_op) || !out.defined() || out.device() >= 0 ||
      !out.meta().is_contiguous())
    return k;
  const DType dtype = out.dtype();
  if (dtype != DType::Float32 && dtype != DType::Float64 && dtype != DType::Int32 &&
      dtype != DType::Int64)
    return k;
  for (const Tensor& t : inputs) {
    if (!t.defined() || t.device() >= 0 || t.dtype() != dtype || !(t.shape() == out.shape()) ||
        !t.meta().is_contiguous() || !safe_operand(t, out))
      return k;
  }
  // The op's result dtype must be the dtype everything holds (no conversion anywhere).
  try {
    std::array<TensorMeta, 2> metas{inputs[0].meta(),
                                    inputs.size() == 2 ? inputs[1].meta() : TensorMeta{}};
    if (infer(op, std::span<const TensorMeta>(metas.data(), inputs.size()), attrs, false)
            .meta.dtype != dtype)
      return k;
  } catch (const Error&) {
    return k;
  }
  const bool tensor_operand = binary_op && inputs.size() == 2;
  const bool first = binary_op && !tensor_operand && attrs.scalar_first;
  auto resolve = [&]<typename T>() {
    k.fn = loop_for<T>(op, tensor_operand, first);
    if (binary_op && !tensor_operand) {
      const T s = attrs.scalars[0].to<T>();
      std::memcpy(k.scalar, &s, sizeof(T));
    }
  };
  switch (dtype) {
    case DType::Float32:
      resolve.template operator()<float>();
      break;
    case DType::Float64:
      resolve.template operator()<double>();
      break;
    case DType::Int32:
      resolve.template operator()<int32_t>();
      break;
    default:
      resolve.template operator()<int64_t>();
      break;
  }
  if (!k.fn) return k;
  k.out = out.raw_data();
  k.a = inputs[0].raw_data();
  k.b = tensor_operand ? inputs[1].raw_data() : nullptr;
  k.n = out.numel();
  return k;
}

}  // namespace dtr::local
