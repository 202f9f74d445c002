// The engine (engine.hpp).
#include "autograd/engine.hpp"

#include <fmt/format.h>

#include <queue>
#include <unordered_map>

#include "autograd/accumulate_grad.hpp"
#include "autograd/tensor_traits.hpp"
#include "dtr/autograd.hpp"

namespace dtr::autograd {

namespace {

// The node the root gradients come from.
template <typename T>
class GraphRoot final : public Node<T> {
 public:
  GraphRoot(std::vector<Edge<T>> roots, std::vector<T> grads)
      : Node<T>(0), grads_(std::move(grads)) {
    this->next_edges = std::move(roots);
    for (const T& g : grads_) this->next_metas.push_back(g.meta());
  }
  std::string name() const override { return "GraphRoot"; }
  std::vector<T> apply(std::vector<T>&) override { return std::move(grads_); }

 private:
  std::vector<T> grads_;
};

// Sums `g` to the shape of the forward input and casts it to its dtype; throws for a shape
// that does not broadcast to the input's.
template <typename T>
T conform(const Node<T>& node, size_t i, T g) {
  const TensorMeta& m = node.next_metas[i];
  if (!(g.shape() == m.shape)) {
    if (!expandable_to(m.shape, g.shape()))
      throw ShapeError(
          fmt::format("backward: {} gave input {} a gradient of shape {}; the input has shape {}",
                      node.name(), i, to_string(g.shape()), to_string(m.shape)));
    g = sum_to(g, m.shape);
  }
  if (g.dtype() != m.dtype) g = g.to(m.dtype);
  return g;
}

template <typename T>
struct LaterFirst {
  bool operator()(const Node<T>* a, const Node<T>* b) const {
    return a->sequence_nr() < b->sequence_nr();
  }
};

// How many edges lead to each node reachable from `root`.
template <typename T>
std::unordered_map<Node<T>*, int> count_dependencies(Node<T>* root) {
  std::unordered_map<Node<T>*, int> deps;
  std::vector<Node<T>*> stack{root};
  deps[root] = 0;
  while (!stack.empty()) {
    Node<T>* n = stack.back();
    stack.pop_back();
    for (const Edge<T>& e : n->next_edges) {
      if (!e.fn) continue;
      auto [it, fresh] = deps.try_emplace(e.fn.get(), 0);
      ++it->second;
      if (fresh) stack.push_back(e.fn.get());
    }
  }
  return deps;
}

}  // namespace

template <typename T>
std::vector<T> run_backward(EngineTask<T> task) {
  no_grad off;
  auto root = std::make_shared<GraphRoot<T>>(std::move(task.roots), std::move(task.root_grads));
  std::unordered_map<Node<T>*, int> deps = count_dependencies<T>(root.get());
  const bool capturing = !task.captures.empty();
  std::vector<T> captured(task.captures.size());
  std::unordered_map<Node<T>*, std::vector<T>> buffers;
  std::priority_queue<Node<T>*, std::vector<Node<T>*>, LaterFirst<T>> ready;
  ready.push(root.get());
  while (!ready.empty()) {
    Node<T>* node = ready.top();
    ready.pop();
    std::vector<T> in;
    if (auto it = buffers.find(node); it != buffers.end()) {
      in = std::move(it->second);
      buffers.erase(it);
    }
    in.resize(node->num_inputs());
    for (size_t k = 0; k < task.captures.size(); ++k)
      if (task.captures[k].fn.get() == node) captured[k] = in[task.captures[k].input_nr];
    const bool skip = capturing && dynamic_cast<AccumulateGrad<T>*>(node) != nullptr;
    std::vector<T> out;
    if (!skip) {
      out = node->apply(in);
      if (!task.retain_graph) node->release();
      if (out.size() != node->next_edges.size())
        throw InvalidArgument(fmt::format("backward: {} returned {} gradients for {} inputs",
                                          node->name(), out.size(), node->next_edges.size()));
    }
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge<T>& e = node->next_edges[i];
      if (!e.fn) continue;
      if (!skip && out[i].defined()) {
        T g = conform(*node, i, std::move(out[i]));
        std::vector<T>& buf = buffers[e.fn.get()];
        buf.resize(e.fn->num_inputs());
        T& slot = buf[e.input_nr];
        slot = slot.defined() ? slot + g : std::move(g);
      }
      if (--deps[e.fn.get()] == 0) ready.push(e.fn.get());
    }
  }
  return captured;
}

template std::vector<local::Tensor> run_backward(EngineTask<local::Tensor>);
template std::vector<DistributedTensor> run_backward(EngineTask<DistributedTensor>);

}  // namespace dtr::autograd
