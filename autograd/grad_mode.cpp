// Grad mode: one flag per thread (dtr/autograd.hpp).
#include "dtr/autograd.hpp"

namespace dtr::autograd {

namespace {
thread_local bool t_grad_enabled = true;
}

bool is_grad_enabled() {
  return t_grad_enabled;
}
void set_grad_enabled(bool enabled) {
  t_grad_enabled = enabled;
}

no_grad::no_grad() : previous_(t_grad_enabled) {
  t_grad_enabled = false;
}
no_grad::~no_grad() {
  t_grad_enabled = previous_;
}
enable_grad::enable_grad() : previous_(t_grad_enabled) {
  t_grad_enabled = true;
}
enable_grad::~enable_grad() {
  t_grad_enabled = previous_;
}

}  // namespace dtr::autograd
