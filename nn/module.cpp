// Module<T> (dtr/nn.hpp): parameters, modes, moves and state of a tree of modules.
#include <fmt/format.h>

#include <map>

#include "dtr/nn.hpp"
#include "nn/tensor_factory.hpp"

namespace dtr::nn {

template <typename T>
void Module<T>::register_parameter(std::string name, T& parameter) {
  if (!parameter.defined())
    throw InvalidArgument(fmt::format("register_parameter: '{}' is undefined", name));
  parameter.requires_grad_();
  parameters_.emplace_back(std::move(name), &parameter);
}

template <typename T>
void Module<T>::register_module(std::string name, Module& child) {
  children_.emplace_back(std::move(name), &child);
}

template <typename T>
std::vector<std::pair<std::string, T>> Module<T>::named_parameters() const {
  std::vector<std::pair<std::string, T>> out;
  for (const auto& [name, p] : parameters_) out.emplace_back(name, *p);
  for (const auto& [prefix, child] : children_)
    for (auto& [name, p] : child->named_parameters()) out.emplace_back(prefix + "." + name, p);
  return out;
}

template <typename T>
std::vector<T> Module<T>::parameters() const {
  std::vector<T> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

template <typename T>
void Module<T>::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

template <typename T>
void Module<T>::zero_grad(bool set_to_none) {
  autograd::no_grad off;
  for (T& p : parameters()) {
    if (set_to_none || !p.grad().defined())
      p.set_grad(T());
    else
      p.grad().zero_();
  }
}

template <typename T>
void Module<T>::to_device(int device) {
  for (auto& [name, p] : parameters_) {
    const bool rg = p->requires_grad();
    *p = p->detach().to_device(device);
    if (rg) p->requires_grad_();
  }
  for (auto& [name, child] : children_) child->to_device(device);
}

template <typename T>
void Module<T>::to(int node) requires std::is_same_v<T, DistributedTensor> {
  // if constexpr: clang 14 instantiates this member in `template class Module<local::Tensor>`
  // below although its constraint is not satisfied there.
  if constexpr (std::is_same_v<T, DistributedTensor>) {
    for (auto& [name, p] : parameters_) {
      const bool rg = p->requires_grad();
      *p = p->detach().to(node);
      if (rg) p->requires_grad_();
    }
    for (auto& [name, child] : children_) child->to(node);
  }
}

template <typename T>
NamedTensors Module<T>::state_dict() const {
  NamedTensors out;
  for (auto& [name, p] : named_parameters()) out.emplace_back(name, detail::Factory<T>::to_host(p));
  return out;
}

template <typename T>
void Module<T>::load_state_dict(const NamedTensors& state) {
  std::map<std::string, const local::Tensor*> given;
  for (const auto& [name, t] : state) given[name] = &t;
  std::vector<std::pair<std::string, T>> mine = named_parameters();
  std::string names;
  for (const auto& [name, p] : mine) names += (names.empty() ? "" : ", ") + name;
  for (const auto& entry : state) {
    const std::string& name =
        entry.first;  // a lambda may not capture a structured binding (clang 14)
    if (std::none_of(mine.begin(), mine.end(), [&](const auto& e) { return e.first == name; }))
      throw InvalidArgument(fmt::format(
          "load_state_dict: entry '{}' names no parameter of this module (its parameters: {})",
          name, names));
  }
  autograd::no_grad off;
  for (auto& [name, p] : mine) {
    auto it = given.find(name);
    if (it == given.end())
      throw InvalidArgument(fmt::format("load_state_dict: the state has no entry '{}' ({})", name,
                                        describe(p.meta())));
    const local::Tensor& src = *it->second;
    if (!(src.shape() == p.shape()))
      throw ShapeError(
          fmt::format("load_state_dict: '{}' has shape {} in the state, {} in the "
                      "module",
                      name, to_string(src.shape()), to_string(p.shape())));
    p.copy_(detail::Factory<T>::place_like(src.contiguous(), p));
  }
}

template class Module<local::Tensor>;
template class Module<DistributedTensor>;

}  // namespace dtr::nn
