// master_sgd: the synchronous SGD of pg_sgd.cpp driven from one master program. Every
// worker holds a replica of the model and its partition of the data; each step the master
// queues the forward and backward pass on every node, then one all_reduce of the gradient
// bucket among the workers (worker to worker: the master never carries those bytes), then
// the update. It only waits to print the loss once per epoch.
//
//   dtr-exec --workers 3 ./master_sgd [--epochs N] [--fractions 0.5,0.3,0.2]
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

#include "sgd_common.hpp"

namespace {

using dtr::DistributedTensor;
using dtr::local::Tensor;
using namespace sgd;

// One node's replica: its data and its copy of the parameters.
struct Replica {
  DistributedTensor x, y;
  DistributedTensor w1, b1, w2, b2;
  DistributedTensor bucket;  // the flat gradient, all_reduced each step
  DistributedTensor loss;    // the epoch's summed loss
  int64_t batch = 0;
  float weight = 0;
  std::vector<DistributedTensor*> params() { return {&w1, &b1, &w2, &b2}; }
};

// Queues one step's forward and backward pass on the replica's node and packs the
// weighted gradients into its bucket (pg_sgd's forward_backward, on remote tensors).
void forward_backward(Replica& r, int64_t step) {
  DistributedTensor x = r.x.slice(0, step * r.batch, (step + 1) * r.batch);
  DistributedTensor y = r.y.slice(0, step * r.batch, (step + 1) * r.batch);
  const auto batch = static_cast<float>(r.batch);
  DistributedTensor h = (x.matmul(r.w1) + r.b1).tanh();
  DistributedTensor p = h.matmul(r.w2) + r.b2;
  DistributedTensor err = p - y;
  r.loss.add_((err * err).mean());
  DistributedTensor dp = err * (2.0f / batch);
  DistributedTensor gw2 = h.t().matmul(dp);
  DistributedTensor gb2 = dp.sum(0);
  DistributedTensor dz = dp.matmul(r.w2.t()) * (1.0f - h * h);
  DistributedTensor gw1 = x.t().matmul(dz);
  DistributedTensor gb1 = dz.sum(0);
  int64_t off = 0;
  for (DistributedTensor* g : {&gw1, &gb1, &gw2, &gb2}) {
    r.bucket.slice(0, off, off + g->numel()).view(g->shape()).copy_(*g * r.weight);
    off += g->numel();
  }
}

void update(Replica& r) {
  int64_t off = 0;
  for (DistributedTensor* p : r.params()) {
    DistributedTensor avg = r.bucket.slice(0, off, off + p->numel()).view(p->shape());
    p->sub_(avg * kLearningRate);
    off += p->numel();
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parse_args(argc, argv, "master_sgd", args)) return 2;
  const int epochs = args.epochs;
  try {
    dtr::init_master_worker();  // DTR_WORKERS (dtr-exec --workers N sets it)
    const int n = dtr::node_count();
    Plan plan = make_plan(args.fractions, n, "worker");
    const std::vector<double>& fractions = plan.fractions;
    const int64_t steps = plan.steps, batch_total = plan.batch_total;
    const std::vector<int64_t>& batch = plan.batch;

    // The master makes the data set and the initial parameters once and sends each node
    // its part; from here on the tensors stay on the workers.
    Dataset all = make_dataset();
    DataPartitioner partitioner(kSamples, fractions, kShuffleSeed);
    Model init = init_model(100);
    std::vector<Replica> replicas(static_cast<std::size_t>(n));
    int64_t bucket_size = 0;
    for (Tensor* p : init.params()) bucket_size += p->numel();
    for (int k = 0; k < n; ++k) {
      Replica& r = replicas[static_cast<std::size_t>(k)];
      Dataset mine = partitioner.use(static_cast<std::size_t>(k), all);
      r.x = dtr::dist_send(mine.x, k);
      r.y = dtr::dist_send(mine.y, k);
      std::vector<Tensor*> src = init.params();
      std::vector<DistributedTensor*> dst = r.params();
      for (std::size_t i = 0; i < src.size(); ++i) *dst[i] = dtr::dist_send(*src[i], k);
      dtr::node_guard on(k);
      r.bucket = dtr::zeros({bucket_size});
      r.batch = batch[static_cast<std::size_t>(k)];
      r.weight = static_cast<float>(r.batch) / static_cast<float>(batch_total);
      std::cout << "node " << k << ": " << mine.x.shape()[0] << " samples, batch " << r.batch
                << ", " << steps << " steps per epoch\n";
    }

    for (int epoch = 0; epoch < epochs; ++epoch) {
      for (int k = 0; k < n; ++k) {
        dtr::node_guard on(k);
        replicas[static_cast<std::size_t>(k)].loss = dtr::zeros({});
      }
      for (int64_t step = 0; step < steps; ++step) {
        std::vector<DistributedTensor> buckets;
        for (int k = 0; k < n; ++k) {
          forward_backward(replicas[static_cast<std::size_t>(k)], step);
          buckets.push_back(replicas[static_cast<std::size_t>(k)].bucket);
        }
        dtr::all_reduce(buckets, dtr::ReduceOp::Sum);  // among the workers
        for (Replica& r : replicas) update(r);
      }
      for (int k = 0; k < n; ++k) {
        float loss = replicas[static_cast<std::size_t>(k)].loss.item<float>();  // sync point
        std::cout << "node " << k << " epoch " << epoch << " loss " << std::fixed
                  << std::setprecision(6) << loss / static_cast<float>(steps) << std::endl;
      }
    }

    for (int k = 0; k < n; ++k) {
      std::vector<Tensor> params;
      for (DistributedTensor* p : replicas[static_cast<std::size_t>(k)].params())
        params.push_back(p->to_local());
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
