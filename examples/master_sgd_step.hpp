// master_sgd's training step on remote tensors (examples/master_sgd.cpp), shared with the
// graph benchmark (bench/graph_bench.cpp): a replica per node, its forward and backward
// pass into a flat gradient bucket, the bucket's all_reduce among the workers, the update.
// The arithmetic is pg_sgd's (examples/pg_sgd.cpp), so both end with the same parameters.
//
// The step reads its batch from `x` and `y` and writes only in place (the bucket, the
// parameters, the summed loss), so it can be issued eagerly on slices of the node's data or
// captured once (dtr::capture) on batch buffers that are refilled in place before each
// replay; either way the parameters come out bit for bit the same.
//
// Thread safety: plain functions over handles; call them from one thread.
#pragma once

#include <dtr/dtr.hpp>
#include <vector>

#include "sgd_common.hpp"

namespace sgd {

// One node's replica: its data and its copy of the parameters.
struct Replica {
  dtr::DistributedTensor x, y;    // the node's part of the data set
  dtr::DistributedTensor xb, yb;  // batch buffers (for a captured step)
  dtr::DistributedTensor w1, b1, w2, b2;
  dtr::DistributedTensor bucket;  // the flat gradient, all_reduced each step
  dtr::DistributedTensor loss;    // the epoch's summed loss
  int64_t batch = 0;
  float weight = 0;
  std::vector<dtr::DistributedTensor*> params() { return {&w1, &b1, &w2, &b2}; }
};

// Queues one step's forward and backward pass of `r` on batch (x, y) and packs the
// weighted gradients into its bucket (pg_sgd's forward_backward, on remote tensors).
inline void forward_backward(Replica& r, const dtr::DistributedTensor& x,
                             const dtr::DistributedTensor& y) {
  using dtr::DistributedTensor;
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

inline void update(Replica& r) {
  int64_t off = 0;
  for (dtr::DistributedTensor* p : r.params()) {
    dtr::DistributedTensor avg = r.bucket.slice(0, off, off + p->numel()).view(p->shape());
    p->sub_(avg * kLearningRate);
    off += p->numel();
  }
}

// The step after the batch is in place: every replica's pass, the gradients' all_reduce
// among the workers, every update. (x, y) of each replica: its batch buffers when
// `buffers`, else the slices of step `step` of its data.
inline void train_step(std::vector<Replica>& replicas, bool buffers, int64_t step) {
  std::vector<dtr::DistributedTensor> buckets;
  for (Replica& r : replicas) {
    if (buffers)
      forward_backward(r, r.xb, r.yb);
    else
      forward_backward(r, r.x.slice(0, step * r.batch, (step + 1) * r.batch),
                       r.y.slice(0, step * r.batch, (step + 1) * r.batch));
    buckets.push_back(r.bucket);
  }
  dtr::all_reduce(buckets, dtr::ReduceOp::Sum);  // among the workers
  for (Replica& r : replicas) update(r);
}

// Refills each replica's batch buffers with step `step`'s slices (on the workers).
inline void load_batch(std::vector<Replica>& replicas, int64_t step) {
  for (Replica& r : replicas) {
    r.xb.copy_(r.x.slice(0, step * r.batch, (step + 1) * r.batch));
    r.yb.copy_(r.y.slice(0, step * r.batch, (step + 1) * r.batch));
  }
}

// Sends each node (0..n-1) its replica: its part of the data, the initial parameters
// (init_model(100), as pg_sgd's rank 0 has them), a zero bucket, batch buffers. Prints
// nothing.
inline std::vector<Replica> make_replicas(int n, const Plan& plan) {
  Dataset all = make_dataset();
  DataPartitioner partitioner(kSamples, plan.fractions, kShuffleSeed);
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
    std::vector<dtr::DistributedTensor*> dst = r.params();
    for (std::size_t i = 0; i < src.size(); ++i) *dst[i] = dtr::dist_send(*src[i], k);
    dtr::node_guard on(k);
    r.batch = plan.batch[static_cast<std::size_t>(k)];
    r.bucket = dtr::zeros({bucket_size});
    r.xb = dtr::zeros({r.batch, kInputs});
    r.yb = dtr::zeros({r.batch, 1});
    r.loss = dtr::zeros({});
    r.weight = static_cast<float>(r.batch) / static_cast<float>(plan.batch_total);
  }
  return replicas;
}

// The parameters of a replica, on the master.
inline std::vector<Tensor> parameters(Replica& r) {
  std::vector<Tensor> out;
  for (dtr::DistributedTensor* p : r.params()) out.push_back(p->to_local());
  return out;
}

}  // namespace sgd
