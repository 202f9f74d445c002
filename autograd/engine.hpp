// The engine: runs backward over a graph (torch's engine.cpp, on one thread). From the root
// edges it counts, for every node it reaches, how many edges lead to it (its dependencies);
// a node is ready once every one of them has delivered its gradient (summed in the node's
// input buffer), and ready nodes run latest-recorded first (by sequence number). A node's
// gradients are checked against its forward inputs' metadata: a broadcast gradient is summed
// to the input's shape, another dtype is cast to the input's; any other shape throws. The
// graph runs under no_grad (no gradients of gradients).
//
// Thread safety: runs on the calling thread; one graph is run by one thread at a time.
#pragma once

#include <vector>

#include "autograd/node.hpp"

namespace dtr::autograd {

template <typename T>
struct EngineTask {
  std::vector<Edge<T>> roots;  // where the root gradients enter
  std::vector<T> root_grads;   // one per root
  bool retain_graph = false;   // keep saved tensors for another backward
  // torch.autograd.grad: the gradients arriving at these edges are returned (one each) and
  // leaves' grad() are left alone. Empty: gradients accumulate into the leaves.
  std::vector<Edge<T>> captures;
};

// Runs the task; returns the captured gradients (undefined where none arrived).
template <typename T>
std::vector<T> run_backward(EngineTask<T> task);

}  // namespace dtr::autograd
