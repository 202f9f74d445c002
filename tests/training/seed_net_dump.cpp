// seed_net_dump OUT_FILE: runs the seed's Net (examples/seed_net.hpp) on one batch of
// synthetic MNIST and writes, as one dtr state file, what tests/training/seed_net_torch.py
// compares against torch: the parameters, the batch, the outputs in eval and training mode,
// the dropout masks drawn in training mode, every parameter's gradient in both modes, and
// the parameters after one SGD step (lr 0.01, momentum 0.5) on the training-mode gradients.
#include <dtr/data.hpp>
#include <dtr/nn.hpp>
#include <dtr/optim.hpp>

#include <exception>
#include <iostream>
#include <string>

#include "../../examples/seed_net.hpp"

namespace {

using dtr::local::Tensor;
namespace F = dtr::nn::functional;
constexpr uint64_t kDropoutSeed = 77;
constexpr int64_t kBatch = 16;

void add_grads(dtr::nn::NamedTensors& out, const seed::Net<Tensor>& net, const std::string& tag) {
  for (auto& [name, p] : net.named_parameters()) out.emplace_back(tag + name, p.grad().clone());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: seed_net_dump DATA_DIR OUT_FILE\n";
    return 2;
  }
  try {
    dtr::data::MnistFiles files = dtr::data::write_synthetic_mnist(argv[1], kBatch, 5);
    dtr::data::Mnist batch = dtr::data::load_mnist(files.images, files.labels);
    dtr::manual_seed(42);
    dtr::Generator gen(kDropoutSeed);
    seed::Net<Tensor> net(&gen);
    dtr::nn::NamedTensors out;
    for (auto& [name, p] : net.state_dict()) out.emplace_back("param." + name, p.clone());
    out.emplace_back("input", batch.images);
    out.emplace_back("target", batch.labels.to(dtr::DType::Float32));

    net.eval();
    Tensor y = net(batch.images);
    out.emplace_back("out.eval", y.detach());
    F::nll_loss(y, batch.labels).backward();
    add_grads(out, net, "grad.eval.");
    net.zero_grad();

    net.train();
    dtr::Generator replay(kDropoutSeed);  // the draws the two dropouts make, in order
    Tensor keep2d = dtr::local::ones({kBatch, 20, 8, 8}).dropout2d(0.5, true, replay) * 0.5f;
    Tensor keep = dtr::local::ones({kBatch, 50}).dropout(0.5, true, replay) * 0.5f;
    out.emplace_back("mask.conv2_drop", keep2d);
    out.emplace_back("mask.dropout", keep);
    dtr::optim::SGD<Tensor> opt(net.parameters(), {.lr = 0.01, .momentum = 0.5});
    y = net(batch.images);
    out.emplace_back("out.train", y.detach());
    Tensor loss = F::nll_loss(y, batch.labels);
    out.emplace_back("loss.train", loss.detach().view({1}));
    loss.backward();
    add_grads(out, net, "grad.train.");
    opt.step();
    for (auto& [name, p] : net.state_dict()) out.emplace_back("step." + name, p.clone());
    dtr::nn::save_state(argv[2], out);
  } catch (const std::exception& e) {
    std::cerr << "seed_net_dump: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
