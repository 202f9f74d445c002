// Quickstart: a master program driving tensors on two worker daemons.
//
// Run it through scripts/demo.sh, which starts two local `dtr-worker` daemons and points
// DTR_WORKERS at them; by hand:
//   build/worker/dtr-worker --listen tcp://127.0.0.1:7000 &
//   build/worker/dtr-worker --listen tcp://127.0.0.1:7001 &
//   DTR_WORKERS=tcp://127.0.0.1:7000,tcp://127.0.0.1:7001 build/examples/quickstart
#include <cassert>
#include <dtr/dtr.hpp>
#include <iostream>

int main() {
  dtr::init_master_worker();  // reads DTR_WORKERS, says hello to every worker
  std::cout << "nodes: " << dtr::node_count() << "\n";

  auto x = dtr::DistributedFloatTensor({20, 20}).fill_(4);  // node 0, CPU
  auto y = dtr::dist_send(dtr::local::randn({20, 20}));     // master -> node 0
  auto z = x + y;                                           // queued on node 0; returns at once
  std::cout << "z lives on node " << z.get_node() << ", device " << z.get_device() << "\n";
  {
    dtr::node_guard on1(1);  // like `with torch.distributed.node(1):`
    auto a = dtr::DistributedFloatTensor({10});
    assert(a.get_node() == 1);
    std::cout << "a lives on node " << a.get_node() << "\n";
  }

  std::cout << "sum of z: " << z.sum().item<float>() << "\n";  // sync point
  auto local = z.to_local();                                   // sync point: copy back
  std::cout << "z[0, :4] on the master: " << local[0].narrow(0, 0, 4) << "\n";

  // Work on node 1 while node 0 is busy; results follow their inputs.
  auto w = dtr::with_node(1, [] { return dtr::randn({64, 64}).matmul(dtr::ones({64, 4})); });
  std::cout << "w: " << w.shape() << " on node " << w.get_node() << ", mean "
            << w.mean().item<float>() << "\n";

  // A mistake in shapes is caught on the master, at the line that made it.
  try {
    auto bad = x + dtr::ones({3});
  } catch (const dtr::ShapeError& e) {
    std::cout << "caught on the master: " << e.what() << "\n";
  }
  // A failure on a worker surfaces at the next sync point that touches it; the worker
  // stays up.
  auto r = dtr::arange(4).pow(-1);  // integers to negative powers fail on the worker
  try {
    r.to_local();
  } catch (const dtr::RemoteError& e) {
    std::cout << "remote error: " << e.what() << "\n";
  }
  try {
    dtr::synchronize();
  } catch (const dtr::RemoteError&) {
    // the same failure, reported once more by synchronize()
  }
  std::cout << "node 0 still works: " << (x * 2).mean().item<float>() << "\n";
  auto stats = dtr::memory_stats(0);
  std::cout << "node 0 holds " << stats.live_tensors << " tensors, " << stats.bytes_in_use
            << " bytes\n";
}
