// Custom differentiable functions (dtr/autograd.hpp, record_function): a node whose
// backward is a user's function.
#include <fmt/format.h>

#include "autograd/meta.hpp"
#include "dtr/autograd.hpp"

namespace dtr::autograd {

namespace {

template <typename T>
class FunctionNode final : public Node<T> {
 public:
  FunctionNode(std::string name, uint32_t num_outputs, BackwardFunction<T> fn)
      : Node<T>(num_outputs), name_(std::move(name)), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  std::vector<T> apply(std::vector<T>& grads) override {
    if (!fn_)
      throw InvalidArgument(
          fmt::format("backward: {} ran before and was freed; pass retain_graph=true to the first "
                      "backward() to run backward through a graph twice",
                      name_));
    bool any = false;
    for (const T& g : grads) any = any || g.defined();
    if (!any) return std::vector<T>(this->next_edges.size());
    std::vector<T> r = fn_(grads);
    if (r.size() != this->next_edges.size())
      throw InvalidArgument(fmt::format("backward: {} returned {} gradients for {} inputs", name_,
                                        r.size(), this->next_edges.size()));
    return r;
  }
  void release() override { fn_ = nullptr; }

 private:
  std::string name_;
  BackwardFunction<T> fn_;
};

}  // namespace

template <typename T>
std::vector<T> record_function(const std::string& name, const std::vector<T>& inputs,
                               std::vector<T> outputs, BackwardFunction<T> backward) {
  if (!is_grad_enabled()) return outputs;
  auto node = std::make_shared<FunctionNode<T>>(name, static_cast<uint32_t>(outputs.size()),
                                                std::move(backward));
  std::vector<const T*> in;
  for (const T& t : inputs) in.push_back(&t);
  if (!connect_inputs<T>(*node, in)) return outputs;
  for (size_t i = 0; i < outputs.size(); ++i) {
    T& out = outputs[i];
    if (!out.defined() || !is_floating(out.dtype()) || !out.is_leaf())
      throw InvalidArgument(fmt::format(
          "record_function({}): output {} must be a defined floating tensor outside any graph",
          name, i));
    set_history<T>(out, node, static_cast<uint32_t>(i));
  }
  return outputs;
}

template std::vector<local::Tensor> record_function(const std::string&,
                                                    const std::vector<local::Tensor>&,
                                                    std::vector<local::Tensor>,
                                                    BackwardFunction<local::Tensor>);
template std::vector<DistributedTensor> record_function(const std::string&,
                                                        const std::vector<DistributedTensor>&,
                                                        std::vector<DistributedTensor>,
                                                        BackwardFunction<DistributedTensor>);

}  // namespace dtr::autograd
