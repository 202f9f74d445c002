// master_sgd: the synchronous SGD of pg_sgd.cpp driven from one master program. Every
// worker holds a replica of the model and its partition of the data; each step the master
// queues the forward and backward pass on every node, then one all_reduce of the gradient
// bucket among the workers (worker to worker: the master never carries those bytes), then
// the update. It only waits to print the loss once per epoch.
//
//   dtr-exec --workers 3 ./master_sgd [--epochs N] [--fractions 0.5,0.3,0.2] [--capture]
//
// --capture records the step once as a graph (dtr::capture) and replays it each step, after
// copying the step's batch into the graph's input buffers: the same parameters, bit for bit.
//
// Same data, partition, model, initial parameters (pg_sgd's rank 0's) and arithmetic as
// pg_sgd, so with the same number of workers as ranks both end with the same parameters,
// bit for bit. Printed: each node's mean loss per epoch (it falls) and each node's hash of
// its replica's parameters (the same on every node).
#include <dtr/dtr.hpp>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "master_sgd_step.hpp"

namespace {

using dtr::DistributedTensor;
using dtr::local::Tensor;
using namespace sgd;

// Removes `--capture` from the command line; whether it was there.
bool take_capture_flag(int& argc, char** argv) {
  bool found = false;
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--capture")
      found = true;
    else
      argv[out++] = argv[i];
  }
  argc = out;
  return found;
}

}  // namespace

int main(int argc, char** argv) {
  const bool capture = take_capture_flag(argc, argv);
  Args args;
  if (!parse_args(argc, argv, "master_sgd", args)) return 2;
  const int epochs = args.epochs;
  try {
    dtr::init_master_worker();  // DTR_WORKERS (dtr-exec --workers N sets it)
    const int n = dtr::node_count();
    Plan plan = make_plan(args.fractions, n, "worker");
    const int64_t steps = plan.steps;

    // The master makes the data set and the initial parameters once and sends each node
    // its part; from here on the tensors stay on the workers.
    std::vector<Replica> replicas = make_replicas(n, plan);
    for (int k = 0; k < n; ++k)
      std::cout << "node " << k << ": " << replicas[static_cast<std::size_t>(k)].x.shape()[0]
                << " samples, batch " << replicas[static_cast<std::size_t>(k)].batch << ", "
                << steps << " steps per epoch\n";

    // --capture: the step is recorded once and replayed (one command per node per step);
    // each step first copies its batch into the graph's input buffers, on the workers.
    dtr::Graph step_graph;
    if (capture) {
      step_graph = dtr::capture([&] { train_step(replicas, true, 0); });
      std::cout << "captured the step: " << step_graph.commands(0) << " commands on node 0\n";
    }
    for (int epoch = 0; epoch < epochs; ++epoch) {
      for (Replica& r : replicas) r.loss.fill_(0);
      for (int64_t step = 0; step < steps; ++step) {
        if (capture) {
          load_batch(replicas, step);
          step_graph.replay();
        } else {
          train_step(replicas, false, step);
        }
      }
      for (int k = 0; k < n; ++k) {
        float loss = replicas[static_cast<std::size_t>(k)].loss.item<float>();  // sync point
        std::cout << "node " << k << " epoch " << epoch << " loss " << std::fixed
                  << std::setprecision(6) << loss / static_cast<float>(steps) << std::endl;
      }
    }

    for (int k = 0; k < n; ++k) {
      std::vector<Tensor> params = parameters(replicas[static_cast<std::size_t>(k)]);
      std::vector<Tensor*> ptrs;
      for (Tensor& t : params) ptrs.push_back(&t);
      std::ostringstream hash;
      hash << std::hex << std::setw(16) << std::setfill('0') << fnv1a(ptrs);
      std::cout << "node " << k << " parameters fnv1a64 " << hash.str() << "\n";
    }
    dtr::synchronize();
    dtr::shutdown_master_worker();
  } catch (const std::exception& e) {
    std::cerr << "master_sgd: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
