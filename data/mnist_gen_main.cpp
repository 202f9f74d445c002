// dtr-mnist-gen DIR [N] [SEED]: writes N (default 2048) synthetic MNIST-like samples to
// DIR/train-images-idx3-ubyte and DIR/train-labels-idx1-ubyte.
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

#include "dtr/data.hpp"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4 || std::string(argv[1]) == "--help") {
    std::cerr << "usage: dtr-mnist-gen DIR [N=2048] [SEED=0]\n";
    return argc < 2 ? 2 : 0;
  }
  try {
    const int64_t n = argc > 2 ? std::stoll(argv[2]) : 2048;
    const uint64_t seed = argc > 3 ? std::stoull(argv[3]) : 0;
    dtr::data::MnistFiles f = dtr::data::write_synthetic_mnist(argv[1], n, seed);
    std::cout << f.images << "\n" << f.labels << "\n";
  } catch (const std::exception& e) {
    std::cerr << "dtr-mnist-gen: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
