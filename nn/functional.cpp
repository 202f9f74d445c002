// torch.nn.functional's functions (dtr/nn.hpp): the op table's ops, which autograd
// differentiates through the derivative table.
#include <fmt/format.h>

#include "dtr/nn.hpp"
#include "nn/tensor_factory.hpp"

namespace dtr::nn::functional {

template <typename T>
T relu(const T& x) {
  return x.relu();
}

template <typename T>
T linear(const T& x, const T& weight, const T& bias) {
  return bias.defined() ? x.linear(weight, bias) : x.linear(weight);
}

// In eval mode (or p = 0) the identity, drawing nothing (the generator is left where it is).
template <typename T>
T dropout(const T& x, double p, bool training, Generator* generator) {
  if (!training || p == 0) return x;
  return generator ? x.dropout(p, training, *generator) : x.dropout(p, training);
}

template <typename T>
T dropout2d(const T& x, double p, bool training, Generator* generator) {
  if (!training || p == 0) return x;
  return generator ? x.dropout2d(p, training, *generator) : x.dropout2d(p, training);
}

template <typename T>
T log_softmax(const T& x, int64_t dim) {
  return x.log_softmax(dim);
}

template <typename T>
T softmax(const T& x, int64_t dim) {
  return x.softmax(dim);
}

template <typename T>
T nll_loss(const T& input, const T& target) {
  return input.nll_loss(target);
}

template <typename T>
T cross_entropy(const T& input, const T& target) {
  return nll_loss(log_softmax(input, 1), target);
}

#define DTR_INSTANTIATE(T)                                  \
  template T relu(const T&);                                \
  template T linear(const T&, const T&, const T&);          \
  template T dropout(const T&, double, bool, Generator*);   \
  template T dropout2d(const T&, double, bool, Generator*); \
  template T log_softmax(const T&, int64_t);                \
  template T softmax(const T&, int64_t);                    \
  template T nll_loss(const T&, const T&);                  \
  template T cross_entropy(const T&, const T&);
DTR_INSTANTIATE(local::Tensor)
DTR_INSTANTIATE(DistributedTensor)
#undef DTR_INSTANTIATE

}  // namespace dtr::nn::functional
