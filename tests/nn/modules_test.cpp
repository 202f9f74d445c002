// Modules, functions and state files on local tensors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "autograd/gradcheck.hpp"
#include "dtr/nn.hpp"
#include "support/message_of.hpp"

namespace dtr::test {
namespace {

namespace F = nn::functional;
using V = const std::vector<Tensor>&;

// A (3, 4) float64 input, transposed in memory.
Tensor local_input() {
  static uint64_t seed = 100;
  Generator gen(seed++);
  return local::randn({4, 3}, gen, DType::Float64).t();
}

struct TwoLayer : nn::Module<Tensor> {
  nn::Linear<Tensor> fc1{4, 3}, fc2{3, 2, false};
  nn::Dropout<Tensor> drop{0.5};
  TwoLayer() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("drop", drop);
  }
  Tensor forward(const Tensor& x) { return fc2(drop(F::relu(fc1(x)))); }
};

TEST_CASE("nn: parameters, names, modes and zero_grad") {
  manual_seed(1);
  TwoLayer m;
  auto named = m.named_parameters();
  REQUIRE(named.size() == 3);
  CHECK(named[0].first == "fc1.weight");
  CHECK(named[1].first == "fc1.bias");
  CHECK(named[2].first == "fc2.weight");
  CHECK(named[0].second.shape() == Shape{3, 4});
  for (auto& [name, p] : named) CHECK(p.requires_grad());
  const double bound = 0.5;  // 1 / sqrt(4)
  for (float v : m.fc1.weight.to_vector<float>()) CHECK(std::abs(v) <= bound);
  CHECK(m.is_training());
  m.eval();
  CHECK_FALSE(m.drop.is_training());
  Tensor x = local::ones({5, 4});
  Tensor y = m.forward(x);
  CHECK(y.shape() == Shape{5, 2});
  y.sum().backward();
  CHECK(m.fc1.weight.grad().defined());
  m.zero_grad(false);
  CHECK(m.fc1.weight.grad().to_vector<float>() == std::vector<float>(12, 0.0f));
  m.zero_grad();
  CHECK_FALSE(m.fc1.weight.grad().defined());
}

TEST_CASE("nn: dropout is seeded, scaled, and off in eval mode") {
  Tensor x = local::ones({1000});
  Generator g1(9), g2(9);
  Tensor a = F::dropout(x, 0.5, true, &g1), b = F::dropout(x, 0.5, true, &g2);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  int kept = 0;
  for (float v : a.to_vector<float>()) {
    CHECK((v == 0.0f || v == 2.0f));
    kept += v != 0;
  }
  CHECK(kept > 400);
  CHECK(kept < 600);
  CHECK(F::dropout(x, 0.5, false).storage() == x.storage());
  Tensor c = F::dropout2d(local::ones({2, 8, 3, 3}), 0.5, true, &g1);
  auto v = c.to_vector<float>();
  for (size_t ch = 0; ch < 16; ++ch)
    for (size_t k = 1; k < 9; ++k) CHECK(v[ch * 9 + k] == v[ch * 9]);  // whole channels
}

TEST_CASE("nn: functions against finite differences") {
  gradcheck("log_softmax", [](V x) { return F::log_softmax(x[0], 1); }, {local_input()});
  gradcheck("softmax", [](V x) { return F::softmax(x[0], 0); }, {local_input()});
  Tensor target = local::from_vector<int64_t>({2, 0, 3});
  gradcheck("cross_entropy", [target](V x) { return F::cross_entropy(x[0], target); },
            {local_input()});
  gradcheck(
      "linear", [](V x) { return F::linear(x[0], x[1], x[2]); },
      {local_input(), local::randn({2, 4}, DType::Float64), local::randn({2}, DType::Float64)});
  gradcheck("dropout",
            [](V x) {
              Generator g(3);
              return F::dropout(x[0], 0.3, true, &g);
            },
            {local_input()});
  CHECK(has(message_of<ShapeError>([] {
              F::nll_loss(local::ones({3, 4}), local::ones({4}, DType::Int64));
            }),
            "nll_loss"));
}

TEST_CASE("nn: log_softmax and nll_loss values") {
  Tensor x = local::from_vector<float>({1, 2, 3, 1, 1, 1}, {2, 3});
  auto l = F::log_softmax(x, 1).to_vector<float>();
  CHECK(l[2] == doctest::Approx(3 - std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0))));
  CHECK(l[3] == doctest::Approx(-std::log(3.0)));
  Tensor t = local::from_vector<int64_t>({2, 0});
  CHECK(F::nll_loss(F::log_softmax(x, 1), t).item<float>() == doctest::Approx(-(l[2] + l[3]) / 2));
}

std::string temp_path(const char* name) {
  return std::string("/tmp/dtr_nn_test_") + std::to_string(::getpid()) + "_" + name;
}

TEST_CASE("nn: state files round trip and refuse bad files") {
  manual_seed(2);
  TwoLayer a;
  manual_seed(3);
  TwoLayer b;
  const std::string path = temp_path("state");
  a.save(path);
  b.load(path);
  for (size_t i = 0; i < 3; ++i)
    CHECK(a.parameters()[i].to_vector<float>() == b.parameters()[i].to_vector<float>());
  CHECK(b.fc1.weight.requires_grad());
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  auto write = [&](const std::string& content) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
  };
  write("NOTSTATE" + bytes.substr(8));
  CHECK(has(message_of<InvalidArgument>([&] { b.load(path); }), "not a dtr state file"));
  std::string v2 = bytes;
  v2[8] = 2;
  write(v2);
  CHECK(has(message_of<InvalidArgument>([&] { b.load(path); }), "format version 2"));
  write(bytes.substr(0, bytes.size() - 40));
  CHECK(has(message_of<InvalidArgument>([&] { b.load(path); }), "cut short"));
  std::string flipped = bytes;
  flipped[bytes.size() - 20] ^= 1;
  write(flipped);
  CHECK(has(message_of<InvalidArgument>([&] { b.load(path); }), "checksum mismatch"));
  write(bytes + "x");
  CHECK(has(message_of<InvalidArgument>([&] { b.load(path); }), "follow the checksum"));
  nn::save_state(path, {{"fc1.weight", local::zeros({3, 5})}});
  CHECK(has(message_of<ShapeError>([&] { b.load(path); }), "'fc1.weight' has shape [3, 5]"));
  nn::save_state(path, {{"bogus", local::zeros({1})}});
  CHECK(has(message_of<InvalidArgument>([&] { b.load(path); }), "'bogus' names no parameter"));
  CHECK(has(message_of<InvalidArgument>([&] { b.load(path + ".missing"); }), "cannot open"));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace dtr::test
