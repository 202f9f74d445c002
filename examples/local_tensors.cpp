// local_tensors: a tour of dtr's local (in-process, CPU) tensor API.
#include <iostream>

#include <dtr/dtr.hpp>

int main() {
  using dtr::local::Tensor;
  dtr::Generator gen(42);  // seeded: the same numbers on every run and every machine

  // Creation.
  Tensor x = dtr::local::randn({2, 3}, gen);
  Tensor row = dtr::local::arange(3).to(dtr::DType::Float32);  // [0, 1, 2]
  Tensor w = dtr::local::ones({3, 4});
  std::cout << "x =\n" << x << "\n\nrow =\n" << row << "\n\n";

  // Broadcasting: (2, 3) + (3) adds `row` to each row of x.
  Tensor y = x + row;
  std::cout << "x + row =\n" << y << "\n\n";

  // Matrix product: (2, 3) @ (3, 4) -> (2, 4).
  Tensor z = y.matmul(w);
  std::cout << "(x + row) @ ones(3, 4) has shape " << z.shape() << ":\n" << z << "\n\n";

  // Reductions, over one dim or everything.
  std::cout << "sum over dim 1 = " << y.sum(1) << "\n";
  std::cout << "mean of all    = " << y.mean().item<double>() << "\n\n";

  // Views share storage with their base: no copy.
  Tensor m = dtr::local::arange(12).view({3, 4});
  Tensor mt = m.t();              // (4, 3), non-contiguous
  Tensor col = m.slice(1, 1, 3);  // columns 1 and 2
  std::cout << "m =\n" << m << "\n\nm.t() =\n" << mt << "\n\nm[:, 1:3] =\n" << col << "\n";
  std::cout << "m.t() is contiguous: " << std::boolalpha << mt.is_contiguous() << "\n\n";
  col.fill_(-1);  // writes through to m
  std::cout << "after m[:, 1:3].fill_(-1), m =\n" << m << "\n";
  return 0;
}
