// Failures: an op that fails on a worker poisons its dependents, which report the first
// cause; a failure is raised once, by to_local()/item() or else by synchronize(); the worker keeps
// serving. Shape and dtype mistakes throw on the master, at the call, before anything is sent.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "master/cluster.hpp"

namespace {

using namespace dtr;
using namespace dtr::test;
using dtr::local::Tensor;

// "%ID": how messages name a tensor.
std::string tensor_ref(uint64_t id) {
  std::string s(1, '%');
  s += std::to_string(id);
  return s;
}

// What the wait interrupt check below throws.
struct Interrupted {};
std::atomic<int> g_interrupt_calls{0};

}  // namespace

TEST_CASE("RemoteError::failure() gives the worker's report as fields") {
  Cluster cluster(1);
  DistributedTensor bad = dtr::arange(5).pow(-1);
  DistributedTensor dep = bad.add(1);
  bool thrown = false;
  try {
    (void)dep.to_local();
  } catch (const RemoteError& e) {
    thrown = true;
    const RemoteFailureInfo* f = e.failure();
    REQUIRE(f != nullptr);
    CHECK(f->op == "add");
    CHECK(f->tensor == dep.id());
    CHECK(f->node == 0);
    CHECK(f->device == -1);
    CHECK(f->cause_op == "pow");
    CHECK(f->cause_tensor == bad.id());
    CHECK(contains(f->cause_message, "negative integer powers"));
  }
  CHECK(thrown);
  CHECK(RemoteError("not from a worker").failure() == nullptr);
  // to_local() raised it: synchronize() does not again. A root nobody read, synchronize()
  // reports, with its report too.
  CHECK_NOTHROW(synchronize());
  DistributedTensor unread = dtr::arange(5).pow(-1);
  try {
    synchronize();
    FAIL("synchronize() did not report the root failure");
  } catch (const RemoteError& e) {
    REQUIRE(e.failure() != nullptr);
    CHECK(e.failure()->op == "pow");
    CHECK(e.failure()->cause_tensor == unread.id());
  }
}

TEST_CASE("a wait interrupt check ends a blocking sync point and the session goes on") {
  Cluster cluster(1);
  DistributedTensor x = dtr::randn({512, 512});
  for (int i = 0; i < 40; ++i) x = x.matmul(x) / 512;  // some hundreds of ms of worker time
  g_interrupt_calls = 0;
  set_wait_interrupt_check([] {
    if (++g_interrupt_calls >= 3) throw Interrupted{};
  });
  CHECK_THROWS_AS(synchronize(), Interrupted);
  set_wait_interrupt_check(nullptr);
  CHECK(g_interrupt_calls.load() == 3);
  // The interrupt cancelled what was queued (issue 40): the matmuls not yet started did
  // not run, the last one's output says so, and synchronize() reports the cancel once.
  std::string why = message_of<RemoteError>([&] { (void)x.to_local(); });
  CHECK_MESSAGE((contains(why, "cancelled before it ran") && contains(why, "node 0")), why);
  CHECK_NOTHROW(synchronize());  // reported by to_local() already
  CHECK(g_interrupt_calls.load() == 3);
  CHECK((dtr::ones({2}) + 1).sum().item<float>() == 4.0f);
}

// Issue 40, item 8: an interrupted program could not drop the work it had queued; the next
// sync point waited for all of it.
TEST_CASE("cancel(): queued ops do not run, their outputs say so, the session goes on") {
  Cluster cluster(2);
  DistributedTensor a = dtr::randn({256, 256});
  DistributedTensor target = dtr::zeros({4});
  DistributedTensor kept = dtr::full({4}, 2.0f);
  synchronize();
  // Seconds of work on node 0's default stream, an in-place write behind it, and a copy to
  // node 1 of its result.
  DistributedTensor y = a;
  for (int i = 0; i < 400; ++i) y = y.matmul(a) / 256;
  target.add_(1);
  DistributedTensor moved = y.to(1);
  cancel();
  // The last op (the division after the last matmul) never ran: its output fails naming the
  // cancel; so do what depends on it (the copy) and the in-place write's target.
  std::string why = message_of<RemoteError>([&] { (void)y.to_local(); });
  CHECK_MESSAGE((contains(why, "div failed") && contains(why, "cancelled before it ran") &&
                 contains(why, "cancel")),
                why);
  CHECK(contains(message_of<RemoteError>([&] { (void)target.to_local(); }), "cancelled"));
  CHECK(contains(message_of<RemoteError>([&] { (void)moved.to_local(); }), "cancel"));
  // Reported once, by to_local() above.
  CHECK_NOTHROW(synchronize());
  // What existed before the cancel is untouched, and new work runs.
  check_same(kept, local::full({4}, 2.0f));
  check_same(kept * 3, local::full({4}, 6.0f));
  with_node(1, [] { check_same(dtr::arange(3) + 1, local::arange(1, 4)); });
  // A cancel with nothing queued reports nothing.
  cancel(0);
  CHECK_NOTHROW(synchronize());
  // Reported by synchronize() when nothing read the failed tensors.
  DistributedTensor z = a;
  for (int i = 0; i < 400; ++i) z = z.matmul(a) / 256;
  cancel(0);
  why = message_of<RemoteError>([] { synchronize(); });
  CHECK_MESSAGE(contains(why, "cancel"), why);
  CHECK_NOTHROW(synchronize());
  CHECK(contains(message_of<InvalidArgument>([] { cancel(5); }), "node 5"));
}

TEST_CASE("a dist_send whose wait is interrupted frees the tensor it sent") {
  Cluster cluster(1);
  DistributedTensor x = dtr::randn({512, 512});
  const int64_t live = memory_stats(0).live_tensors;
  for (int i = 0; i < 40; ++i) x = x.matmul(x) / 512;  // keeps the worker busy for a while
  g_interrupt_calls = 0;
  set_wait_interrupt_check([] {
    ++g_interrupt_calls;
    throw Interrupted{};
  });
  CHECK_THROWS_AS(dtr::dist_send(dtr::local::ones({1000})), Interrupted);
  set_wait_interrupt_check(nullptr);
  CHECK(g_interrupt_calls.load() == 1);
  // The interrupt cancelled the queued matmuls (reported once), not the Put and the Free.
  CHECK_THROWS_AS(synchronize(), RemoteError);
  CHECK(memory_stats(0).live_tensors == live);  // x only: the sent tensor was freed
}

TEST_CASE("the wait interrupt check ends init_master_worker's handshake") {
  g_interrupt_calls = 0;
  set_wait_interrupt_check([] {
    if (++g_interrupt_calls >= 2) throw Interrupted{};
  });
  MasterOptions o = test_options();
  o.workers = {"tcp://127.0.0.1:1"};  // nobody answers there
  o.connect_timeout = 30s;
  auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(init_master_worker(o), Interrupted);
  set_wait_interrupt_check(nullptr);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  CHECK_FALSE(is_master_worker_initialized());
}

TEST_CASE("a failing op poisons its dependents and the worker survives") {
  Cluster cluster(2);
  DistributedTensor ok = dtr::arange(5);
  // Accepted by the shape rules (int64 ** int64 scalar), refused by the worker's kernel.
  DistributedTensor bad = dtr::arange(5).pow(-1);
  CHECK(bad.dtype() == DType::Int64);
  DistributedTensor dep = bad.add(1);
  DistributedTensor dep2 = (dep * 2).sum();

  std::string m = message_of<RemoteError>([&] { (void)dep.to_local(); });
  INFO("dependent: ", m);
  CHECK(contains(m, "add"));
  CHECK(contains(m, tensor_ref(dep.id())));
  CHECK(contains(m, tensor_ref(bad.id())));
  CHECK(contains(m, "node 0"));
  CHECK(contains(m, "cpu"));
  CHECK(contains(m, "pow"));
  CHECK(contains(m, "negative integer powers"));

  m = message_of<RemoteError>([&] { (void)dep2.item(); });
  INFO("dependent of a dependent: ", m);
  CHECK(contains(m, "sum"));
  CHECK(contains(m, "first cause: pow"));
  CHECK(contains(m, "negative integer powers"));

  m = message_of<RemoteError>([&] { (void)bad.to_local(); });
  INFO("root: ", m);
  CHECK(contains(m, "pow failed on node 0 (cpu)"));
  CHECK(contains(m, "negative integer powers"));

  // In place on a failed tensor: it stays failed.
  bad.add_(1);
  CHECK_THROWS_AS(bad.to_local(), RemoteError);

  // Raised by to_local() and item() already: synchronize() does not raise it again
  // (issue 40; it did).
  CHECK_NOTHROW(synchronize());
  // A failure nobody read: synchronize() reports its root once, and only it (dependents
  // are not roots).
  DistributedTensor unread = dtr::arange(3).pow(-1);
  DistributedTensor unread_dep = unread * 2;
  m = message_of<RemoteError>([] { synchronize(); });
  INFO("synchronize: ", m);
  CHECK(contains(m, "pow"));
  CHECK(contains(m, tensor_ref(unread.id())));
  CHECK(contains(m, "node 0"));
  CHECK_FALSE(contains(m, "more failures"));
  CHECK_NOTHROW(synchronize());
  CHECK_NOTHROW(synchronize(0));
  // Still failed when read, though reported.
  CHECK_THROWS_AS(unread_dep.to_local(), RemoteError);

  // The failed tensors still fail when read; everything else works.
  CHECK_THROWS_AS(dep.to_local(), RemoteError);
  check_same(ok, local::arange(5));
  DistributedTensor fine = dtr::arange(5) + 1;
  check_same(fine.pow(2), local::arange(1, 6).pow(2));
  CHECK(fine.sum().item<int64_t>() == 15);
  CHECK(memory_stats(0).live_tensors >= 4);
  CHECK_NOTHROW(synchronize());

  // A failure on node 1 is reported for node 1 only.
  DistributedTensor bad1 = with_node(1, [] { return dtr::arange(3).pow(-2); });
  m = message_of<RemoteError>([&] { (void)bad1.sum().to_local(); });
  CHECK_MESSAGE(contains(m, "node 1"), m);
  CHECK_NOTHROW(synchronize());  // raised already
  DistributedTensor unread1 = with_node(1, [] { return dtr::arange(3).pow(-2); });
  CHECK_NOTHROW(synchronize(0));
  m = message_of<RemoteError>([] { synchronize(1); });
  CHECK_MESSAGE((contains(m, "node 1") && contains(m, "negative integer powers")), m);
  CHECK_NOTHROW(synchronize());

  // Two root failures on two nodes: one synchronize() reports both, then none.
  DistributedTensor f0 = dtr::arange(2).pow(-1);
  DistributedTensor f1 = with_node(1, [] { return dtr::arange(2).pow(-1); });
  m = message_of<RemoteError>([] { synchronize(); });
  CHECK_MESSAGE(contains(m, "1 more failures"), m);
  CHECK_NOTHROW(synchronize());
  with_node(1, [] { check_same(dtr::arange(3) * 2, local::arange(0, 6, 2)); });
}

TEST_CASE("shape and dtype errors throw on the master and send nothing") {
  Cluster cluster(1);
  DistributedTensor x = dtr::zeros({20, 20});
  DistributedTensor y = dtr::zeros({3});
  DistributedTensor d = dtr::zeros({20, 20}, DType::Float64);
  DistributedTensor i = dtr::zeros({20}, DType::Int64);
  NodeMemoryStats before = memory_stats(0);
  CHECK(before.live_tensors == 4);

  auto check_shapes = [](const std::string& m, const char* op) {
    INFO(op, ": ", m);
    CHECK(contains(m, op));
    CHECK(contains(m, "[20, 20]"));
    CHECK(contains(m, "[3]"));
  };
  check_shapes(message_of<ShapeError>([&] { (void)(x + y); }), "add");
  check_shapes(message_of<ShapeError>([&] { (void)x.mul(y); }), "mul");
  check_shapes(message_of<ShapeError>([&] { (void)x.matmul(y); }), "matmul");
  check_shapes(message_of<ShapeError>([&] { x.add_(y); }), "add");
  check_shapes(message_of<ShapeError>([&] { (void)y.maximum(x.narrow(0, 0, 20)); }), "maximum");

  std::string m = message_of<ShapeError>([&] { (void)x.view({7, 3}); });
  CHECK_MESSAGE((contains(m, "view") && contains(m, "[7, 3]")), m);
  m = message_of<ShapeError>([&] { (void)x.mv(y); });
  CHECK_MESSAGE((contains(m, "mv") && contains(m, "[20, 20]") && contains(m, "[3]")), m);
  m = message_of<ShapeError>([&] { x.copy_(y); });
  CHECK_MESSAGE(contains(m, "copy_"), m);

  m = message_of<DTypeError>([&] { (void)x.matmul(d); });
  CHECK_MESSAGE((contains(m, "matmul") && contains(m, "float32") && contains(m, "float64")), m);
  m = message_of<DTypeError>([&] { i.add_(0.5); });  // a float32 result into int64: refused
  CHECK_MESSAGE((contains(m, "add_") && contains(m, "float32") && contains(m, "int64")), m);
  m = message_of<DTypeError>([&] { i.div_(i); });
  CHECK_MESSAGE((contains(m, "div_") && contains(m, "int64")), m);
  m = message_of<DTypeError>([&] { (void)dtr::arange(4).mean(); });
  CHECK_MESSAGE((contains(m, "mean") && contains(m, "int64")), m);
  m = message_of<DTypeError>([&] { (void)DistributedLongTensor(x); });
  CHECK_MESSAGE(contains(m, "float32"), m);

  m = message_of<IndexError>([&] { (void)x.select(0, 20); });
  CHECK_MESSAGE(contains(m, "select"), m);
  m = message_of<IndexError>([&] { (void)x.transpose(0, 2); });
  CHECK_MESSAGE(contains(m, "transpose"), m);
  CHECK_THROWS_AS((void)x.sum(2), IndexError);
  CHECK_THROWS_AS((void)x.item(), ShapeError);
  CHECK_THROWS_AS((void)DistributedTensor().to_local(), InvalidArgument);
  CHECK_THROWS_AS((void)(DistributedTensor() + x), InvalidArgument);

  // The arange above was sent (its creation is valid); nothing else reached the worker.
  NodeMemoryStats after = memory_stats(0);
  CHECK(after.live_tensors == before.live_tensors);
  CHECK_NOTHROW(synchronize());
  check_same(x, local::zeros({20, 20}));  // the refused in-place calls changed nothing
  check_same(i, local::zeros({20}, DType::Int64));
}

TEST_CASE("a worker's memory limit: allocations past it fail cleanly, the worker stays up") {
  WorkerProcess worker({"--memory-limit", "1MiB"});
  SessionGuard guard;
  MasterOptions o = test_options();
  o.workers = {worker.endpoint()};
  init_master_worker(o);
  DistributedTensor small = dtr::ones({1000});   // 4 KB
  DistributedTensor big = dtr::ones({1 << 19});  // 2 MiB: past the limit
  std::string m = message_of<RemoteError>([&] { big.to_local(); });
  CHECK(contains(m, "memory limit of 1048576 bytes"));
  CHECK(contains(m, "allocating 2097152 bytes"));
  CHECK(contains(m, "full"));
  // Data sent from the master counts too.
  DistributedTensor sent = dist_send(local::ones({1 << 19}));
  CHECK(contains(message_of<RemoteError>([&] { sent.to_local(); }), "memory limit"));
  CHECK_NOTHROW(synchronize());  // both raised by to_local() above
  // Under the limit everything works, before and after.
  check_same(small.sum(), local::full({}, 1000.0));
  DistributedTensor half = dtr::ones({1 << 17});  // 512 KiB
  check_same(half.sum(), local::full({}, 131072.0));
  CHECK(worker.running());
}

// Issue 40: a message larger than a worker's --max-message-bytes made ZeroMQ drop the
// connection with the commands on it, without a word; the master then waited for its sync
// timeout. Now what cannot fit is refused where it is issued, naming the size and the limit,
// and long batches are cut below the limit.
TEST_CASE("a worker's --max-message-bytes: oversized tensors refused at the call, batches cut") {
  MasterOptions options = test_options();
  options.same_host = false;  // the bytes travel as message frames
  Cluster cluster(2, WorkerArgs{{"--max-message-bytes", "65536"}}, options);
  CHECK(node_info(1).max_message_bytes == 65536);

  // dist_send of 80,000 bytes to a worker that takes 65,536.
  local::Tensor big = local::ones({20000});
  std::string why = message_of<InvalidArgument>([&] { dist_send(big, 1); });
  CHECK(contains(why, "dist_send"));
  CHECK(contains(why, "80000 bytes"));
  CHECK(contains(why, "65536 bytes"));
  CHECK(contains(why, "node 1"));
  CHECK(contains(why, "--max-message-bytes"));

  // A copy between workers: the receiver's limit.
  DistributedTensor made = dtr::ones({20000});  // made on node 0, never sent whole
  why = message_of<InvalidArgument>([&] { made.to(1); });
  CHECK(contains(why, "to: tensor %"));
  CHECK(contains(why, "80000 bytes"));
  CHECK(contains(why, "node 1"));

  // The session goes on: what fits still moves, both ways.
  local::Tensor small = local::arange(1000).to(DType::Float32);
  DistributedTensor s = dist_send(small, 1);
  check_same(s, small);
  check_same(made.slice(0, 0, 1000).to(1), local::ones({1000}));

  // A few thousand queued ops make headers far over 64 KiB: sent as several messages.
  DistributedTensor x = dist_send(local::full({4}, 1.0), 0);
  DistributedTensor y = x;
  for (int i = 0; i < 5000; ++i) y = y + x;
  check_same(y, local::full({4}, 5001.0));
  synchronize();
}

TEST_CASE("dtr-worker refuses a --max-message-bytes below 64 KiB, naming the least") {
  std::string err = (std::filesystem::temp_directory_path() /
                     ("dtr_small_limit_" + std::to_string(getpid()) + ".log"))
                        .string();
  WorkerProcess w = WorkerProcess::with_args(
      {"--listen", "tcp://127.0.0.1:0", "--max-message-bytes", "1024"}, err);
  // It exits by itself (a signal could end it before it has parsed its arguments).
  for (int i = 0; i < 1000 && w.running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK_FALSE(w.running());
  std::ifstream in(err);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(contains(text, "--max-message-bytes"));
  CHECK(contains(text, "65536"));
  std::filesystem::remove(err);
}

// Issue 40's sweep: DTR_SAME_HOST=false (anything but "0") left the same-host path on.
TEST_CASE("a DTR_* switch the master cannot read is refused at init_master_worker") {
  WorkerProcess worker;
  MasterOptions o = test_options();
  o.workers = {worker.endpoint()};
  {
    ScopedEnv bad("DTR_SAME_HOST", "flase");
    std::string why = message_of<InvalidArgument>([&] { init_master_worker(o); });
    CHECK_MESSAGE(contains(why, "DTR_SAME_HOST='flase'"), why);
    CHECK_FALSE(is_master_worker_initialized());
  }
  {
    ScopedEnv off("DTR_SAME_HOST", "false");  // now understood: the sockets carry the bytes
    SessionGuard guard;
    init_master_worker(o);
    CHECK_FALSE(node_info(0).same_host);
    CHECK(contains(node_info(0).same_host_note, "DTR_SAME_HOST"));
  }
}
