// Uses an installed dtr through find_package(dtr) and dtr::master; prints 6.
#include <iostream>

#include <dtr/dtr.hpp>

int main() {
  static_assert(DTR_VERSION_MAJOR >= 0, "dtr/config.hpp is installed");
  std::cout << dtr::local::ones({2, 3}).sum().item<double>() << "\n";
  return 0;
}
