// pg_sgd: distributed synchronous SGD, as in the torch.distributed tutorial, on dtr's local
// tensors with a hand-written backward pass.
//
//   dtr-exec -n 4 ./pg_sgd [--epochs N] [--fractions 0.4,0.3,0.2,0.1]
//
// The data: a regression problem made in the program. Every rank draws the same 4096
// samples from a seeded generator: x ~ N(0, 1)^8 and y = tanh(x A) B + noise, with a fixed
// random "teacher" (A, B).
//
// The partition (the tutorial's DataPartitioner): the sample indices are shuffled with a
// seeded Fisher-Yates shuffle (the same permutation on every rank) and cut into pieces of
// the given fractions of the data set (default: 1/world size each); rank r trains on
// piece r only.
//
// The model: a two-layer MLP, 8 -> 32 (tanh) -> 1, trained on the mean squared error.
// Each rank starts from its own random parameters; a broadcast from rank 0 makes them equal
// before training. Each step every rank takes its next local batch (its fraction of the
// global batch of 64), computes the loss and the gradients by hand, packs the gradients
// into one flat buffer (a "bucket"), weights them by its share of the global batch and
// all_reduces the bucket (SUM): every rank gets the same global-batch gradient, bit for
// bit, applies the same update, and so the ranks' parameters never diverge.
//
// Printed: each rank's mean loss per epoch (it falls), and at the end an FNV-1a hash of the
// parameters' bytes, which is the same on every rank.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <dtr/generator.hpp>
#include <dtr/process_group.hpp>
#include <dtr/tensor.hpp>

#include "sgd_common.hpp"

namespace {

using dtr::local::Tensor;
using namespace sgd;

struct Gradients {
  Tensor w1, b1, w2, b2;
  float loss = 0;
};

// Forward and backward of the MSE loss on one batch.
Gradients forward_backward(const Model& m, const Tensor& x, const Tensor& y) {
  const auto batch = static_cast<float>(x.shape()[0]);
  Tensor h = (x.matmul(m.w1) + m.b1).tanh();  // (B, hidden)
  Tensor p = h.matmul(m.w2) + m.b2;           // (B, 1)
  Tensor err = p - y;
  Gradients g;
  g.loss = (err * err).mean().item<float>();
  Tensor dp = err * (2.0f / batch);                  // dL/dp
  g.w2 = h.t().matmul(dp);                           // (hidden, 1)
  g.b2 = dp.sum(0);                                  // (1)
  Tensor dz = dp.matmul(m.w2.t()) * (1.0f - h * h);  // through tanh
  g.w1 = x.t().matmul(dz);                           // (in, hidden)
  g.b1 = dz.sum(0);                                  // (hidden)
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parse_args(argc, argv, "pg_sgd", args)) return 2;
  const int epochs = args.epochs;

  try {
    dtr::init_process_group();  // env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    const int rank = dtr::get_rank();
    const int size = dtr::get_world_size();
    // Local batch sizes follow the fractions; all ranks take the same number of steps.
    Plan plan = make_plan(args.fractions, size, "rank");
    const std::vector<double>& fractions = plan.fractions;
    const int64_t steps = plan.steps, batch_total = plan.batch_total;
    const std::vector<int64_t>& batch = plan.batch;
    const int64_t my_batch = batch[static_cast<std::size_t>(rank)];
    const float weight = static_cast<float>(my_batch) / static_cast<float>(batch_total);

    Dataset all = make_dataset();
    Dataset mine =
        DataPartitioner(kSamples, fractions, kShuffleSeed).use(static_cast<std::size_t>(rank), all);
    std::cout << "rank " << rank << ": " << mine.x.shape()[0] << " samples, batch " << my_batch
              << ", " << steps << " steps per epoch\n";

    // Different starting points on purpose; rank 0's parameters win.
    Model model = init_model(100 + static_cast<uint64_t>(rank));
    for (Tensor* p : model.params()) dtr::broadcast(*p, 0);

    // The bucket: every gradient in one flat buffer, reduced with one all_reduce.
    int64_t bucket_size = 0;
    for (Tensor* p : model.params()) bucket_size += p->numel();
    Tensor bucket = dtr::local::empty({bucket_size});

    for (int epoch = 0; epoch < epochs; ++epoch) {
      double epoch_loss = 0;
      for (int64_t step = 0; step < steps; ++step) {
        Tensor x = mine.x.slice(0, step * my_batch, (step + 1) * my_batch);
        Tensor y = mine.y.slice(0, step * my_batch, (step + 1) * my_batch);
        Gradients g = forward_backward(model, x, y);
        epoch_loss += g.loss;

        std::vector<Tensor*> grads = {&g.w1, &g.b1, &g.w2, &g.b2};
        int64_t off = 0;
        for (Tensor* gr : grads) {
          bucket.slice(0, off, off + gr->numel()).view(gr->shape()).copy_(*gr * weight);
          off += gr->numel();
        }
        dtr::all_reduce(bucket, dtr::ReduceOp::Sum);
        off = 0;
        auto params = model.params();
        for (std::size_t k = 0; k < params.size(); ++k) {
          Tensor avg = bucket.slice(0, off, off + params[k]->numel()).view(params[k]->shape());
          params[k]->sub_(avg * kLearningRate);
          off += params[k]->numel();
        }
      }
      std::cout << "rank " << rank << " epoch " << epoch << " loss " << std::fixed
                << std::setprecision(6) << epoch_loss / static_cast<double>(steps) << std::endl;
    }

    std::ostringstream hash;
    hash << std::hex << std::setw(16) << std::setfill('0') << fnv1a(model.params());
    std::cout << "rank " << rank << " parameters fnv1a64 " << hash.str() << "\n";
    dtr::destroy_process_group();
  } catch (const std::exception& e) {
    std::cerr << "pg_sgd: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
