// seed_sgd: the seed tutorial 003 ("Distributed Synchronous SGD") as its author wrote it:
// MNIST split by the DataPartitioner (one partition per rank), the tutorial's Net, batches
// of 128 / world size, SGD(lr=0.01, momentum=0.5), the gradients averaged with all_reduce
// after every backward, 10 epochs.
//
//   dtr-exec -n 2 ./seed_sgd                 # SPMD: two ranks, process groups
//   dtr-exec --workers 2 ./seed_sgd          # one master, a replica on each worker
//   ./seed_sgd                               # one process, world size 1
//
// Options: --epochs N (10), --images PATH --labels PATH (real MNIST IDX files; default:
// synthetic ones made in --data-dir, --samples of them), --mode spmd|master|local (default:
// spmd under dtr-exec -n, master with DTR_WORKERS, else local).
//
// Each replica's partition is shuffled every epoch (the DataLoader's shuffle=True) by
// Python's random.Random(1234 + epoch), the same on every replica. Printed per epoch and
// replica: the mean loss over its batches, and an FNV-1a hash of its parameters' bytes,
// the same on every replica; the modes give the same hashes for the same world size.
#include <dtr/data.hpp>
#include <dtr/dtr.hpp>
#include <dtr/nn.hpp>
#include <dtr/optim.hpp>

#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "seed_net.hpp"

namespace {

using dtr::DistributedTensor;
using dtr::local::Tensor;
namespace F = dtr::nn::functional;

constexpr uint64_t kSeed = 1234;

struct Args {
  int epochs = 10;
  std::string images, labels, data_dir = "/tmp/dtr-seed-mnist", mode;
  int64_t samples = 2048;
};

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (s == "--epochs")
      a.epochs = std::stoi(value());
    else if (s == "--images")
      a.images = value();
    else if (s == "--labels")
      a.labels = value();
    else if (s == "--data-dir")
      a.data_dir = value();
    else if (s == "--samples")
      a.samples = std::stoll(value());
    else if (s == "--mode")
      a.mode = value();
    else {
      std::cerr << "usage: seed_sgd [--epochs N] [--images PATH --labels PATH] [--data-dir DIR] "
                   "[--samples N] [--mode spmd|master|local]\n";
      return false;
    }
  }
  if (a.mode.empty())
    a.mode = std::getenv("RANK") ? "spmd" : std::getenv("DTR_WORKERS") ? "master" : "local";
  return true;
}

dtr::data::Mnist load(const Args& a) {
  if (!a.images.empty()) return dtr::data::load_mnist(a.images, a.labels);
  dtr::data::MnistFiles f = dtr::data::write_synthetic_mnist(
      a.data_dir + "/" + std::to_string(::getpid()), a.samples, kSeed);
  return dtr::data::load_mnist(f.images, f.labels);
}

// One replica's data for an epoch: its partition in this epoch's shuffled order.
struct EpochData {
  Tensor images, labels;
};
EpochData epoch_data(const dtr::data::Mnist& all, const std::vector<int64_t>& part, int epoch) {
  std::vector<int64_t> order(part.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  dtr::data::PythonRandom(kSeed + static_cast<uint64_t>(epoch)).shuffle(order);
  std::vector<int64_t> rows;
  for (int64_t i : order) rows.push_back(part[static_cast<size_t>(i)]);
  return {dtr::data::gather_rows(all.images, rows), dtr::data::gather_rows(all.labels, rows)};
}

std::string params_hash(const std::vector<Tensor>& params) {
  uint64_t h = 1469598103934665603ull;
  for (const Tensor& p : params) {
    Tensor c = p.contiguous();
    const auto* b = static_cast<const unsigned char*>(c.raw_data());
    for (size_t i = 0; i < static_cast<size_t>(c.numel()) * sizeof(float); ++i)
      h = (h ^ b[i]) * 1099511628211ull;
  }
  std::ostringstream s;
  s << std::hex << std::setw(16) << std::setfill('0') << h;
  return s.str();
}

void report(const char* who, int id, int epoch, double loss, const std::string& hash) {
  std::cout << who << " " << id << ", epoch " << epoch << ": " << std::fixed << std::setprecision(6)
            << loss << " parameters fnv1a64 " << hash << std::endl;
}

// SPMD (and local: world size 1): the tutorial's run() on this rank's local tensors.
void run_spmd(const Args& a, int rank, int size) {
  const dtr::data::Mnist all = load(a);
  const int64_t bsz = 128 / size;
  dtr::data::DataPartitioner partitioner(
      all.labels.shape()[0], std::vector<double>(static_cast<size_t>(size), 1.0 / size));
  const std::vector<int64_t>& part = partitioner.use(static_cast<size_t>(rank));
  dtr::manual_seed(kSeed);
  dtr::Generator dropout_gen(kSeed);
  seed::Net<Tensor> model(&dropout_gen);
  dtr::optim::SGD<Tensor> optimizer(model.parameters(), {.lr = 0.01, .momentum = 0.5});
  const auto n = static_cast<int64_t>(part.size());
  const int64_t num_batches = (n + bsz - 1) / bsz;
  for (int epoch = 0; epoch < a.epochs; ++epoch) {
    EpochData d = epoch_data(all, part, epoch);
    double epoch_loss = 0;
    for (int64_t b = 0; b < num_batches; ++b) {
      Tensor data = d.images.slice(0, b * bsz, (b + 1) * bsz);
      Tensor target = d.labels.slice(0, b * bsz, (b + 1) * bsz);
      optimizer.zero_grad();
      Tensor loss = F::nll_loss(model(data), target);
      epoch_loss += loss.item<double>();
      loss.backward();
      if (size > 1)
        for (Tensor& p : model.parameters()) {  // average_gradients
          Tensor g = p.grad();
          dtr::all_reduce(g, dtr::ReduceOp::Sum);
          g /= static_cast<float>(size);
        }
      optimizer.step();
    }
    report("Rank", rank, epoch, epoch_loss / static_cast<double>(num_batches),
           params_hash(model.parameters()));
  }
}

// One master, a replica per worker: the same program with DistributedTensor, the gradient
// averaging a master-issued all_reduce among the workers.
void run_master(const Args& a) {
  const int size = dtr::node_count();
  const dtr::data::Mnist all = load(a);
  const int64_t bsz = 128 / size;
  dtr::data::DataPartitioner partitioner(
      all.labels.shape()[0], std::vector<double>(static_cast<size_t>(size), 1.0 / size));
  std::vector<std::unique_ptr<dtr::Generator>> gens;
  std::vector<std::unique_ptr<seed::Net<DistributedTensor>>> models;
  std::vector<std::unique_ptr<dtr::optim::SGD<DistributedTensor>>> optimizers;
  for (int k = 0; k < size; ++k) {
    dtr::node_guard on(k);
    dtr::manual_seed(kSeed);  // every replica starts from the same parameters, as every rank
    gens.push_back(std::make_unique<dtr::Generator>(kSeed));
    models.push_back(std::make_unique<seed::Net<DistributedTensor>>(gens.back().get()));
    optimizers.push_back(std::make_unique<dtr::optim::SGD<DistributedTensor>>(
        models.back()->parameters(), dtr::optim::SGDOptions{.lr = 0.01, .momentum = 0.5}));
  }
  const auto n = static_cast<int64_t>(partitioner.use(0).size());
  const int64_t num_batches = (n + bsz - 1) / bsz;
  for (int epoch = 0; epoch < a.epochs; ++epoch) {
    std::vector<DistributedTensor> images, labels, losses;
    for (int k = 0; k < size; ++k) {
      EpochData d = epoch_data(all, partitioner.use(static_cast<size_t>(k)), epoch);
      images.push_back(dtr::dist_send(d.images, k));
      labels.push_back(dtr::dist_send(d.labels, k));
      dtr::node_guard on(k);
      losses.push_back(dtr::zeros({}));
    }
    for (int64_t b = 0; b < num_batches; ++b) {
      for (int k = 0; k < size; ++k) {
        auto ku = static_cast<size_t>(k);
        DistributedTensor data = images[ku].slice(0, b * bsz, (b + 1) * bsz);
        DistributedTensor target = labels[ku].slice(0, b * bsz, (b + 1) * bsz);
        optimizers[ku]->zero_grad();
        DistributedTensor loss = F::nll_loss((*models[ku])(data), target);
        {
          dtr::no_grad off;
          losses[ku].add_(loss);
        }
        loss.backward();
      }
      const size_t num_params = models[0]->parameters().size();
      for (size_t i = 0; i < num_params; ++i) {  // average_gradients, worker to worker
        std::vector<DistributedTensor> grads;
        for (auto& m : models) grads.push_back(m->parameters()[i].grad());
        dtr::all_reduce(grads, dtr::ReduceOp::Sum);
        for (DistributedTensor& g : grads) g /= static_cast<float>(size);
      }
      for (auto& opt : optimizers) opt->step();
    }
    for (int k = 0; k < size; ++k) {
      std::vector<Tensor> params;
      for (const DistributedTensor& p : models[static_cast<size_t>(k)]->parameters())
        params.push_back(p.to_local());
      report("Node", k, epoch,
             losses[static_cast<size_t>(k)].item<double>() / static_cast<double>(num_batches),
             params_hash(params));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, a)) return 2;
  try {
    if (a.mode == "spmd") {
      dtr::init_process_group();
      run_spmd(a, dtr::get_rank(), dtr::get_world_size());
      dtr::destroy_process_group();
    } else if (a.mode == "master") {
      dtr::init_master_worker();
      run_master(a);
      dtr::shutdown_master_worker();
    } else if (a.mode == "local") {
      run_spmd(a, 0, 1);
    } else {
      std::cerr << "seed_sgd: unknown --mode " << a.mode << "\n";
      return 2;
    }
  } catch (const std::exception& e) {
    std::cerr << "seed_sgd: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
