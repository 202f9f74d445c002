// The capability table of docs/process_groups.md agrees with backend_supports() and with
// behaviour: supported zmq cells run, unsupported ones throw InvalidArgument.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "dtr/config.hpp"
#include "pg_test_util.hpp"

using namespace dtr;
using namespace dtr::pgtest;

namespace {

std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  std::getline(ss, cell, '|');  // before the first bar
  while (std::getline(ss, cell, '|')) {
    auto b = cell.find_first_not_of(' '), e = cell.find_last_not_of(' ');
    out.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
  }
  if (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

// Runs `op` once on a 2-rank group (both ranks do their part).
void run_op(ProcessGroup& g, CommOp op) {
  const int r = g.rank();
  auto t = local::ones(Shape{4});
  std::vector<local::Tensor> list{local::zeros(Shape{4}), local::zeros(Shape{4})};
  switch (op) {
    case CommOp::Send:
    case CommOp::Recv:
      if (r == 0)
        g.send(t, 1);
      else
        g.recv(t, 0);
      break;
    case CommOp::RecvAnySource:
      if (r == 0)
        g.send(t, 1);
      else
        g.recv(t, kAnySource);
      break;
    case CommOp::Broadcast:
      g.broadcast(t, 0);
      break;
    case CommOp::AllReduce:
      g.all_reduce(t);
      break;
    case CommOp::Reduce:
      g.reduce(t, 0);
      break;
    case CommOp::AllGather:
      g.all_gather(list, t);
      break;
    case CommOp::Gather:
      g.gather(t, r == 0 ? &list : nullptr, 0);
      break;
    case CommOp::Scatter:
      g.scatter(t, r == 0 ? &list : nullptr, 0);
      break;
    case CommOp::ReduceScatter:
      g.reduce_scatter(t, list);
      break;
    case CommOp::Barrier:
      g.barrier();
      break;
  }
}

}  // namespace

TEST_CASE("capability table in docs/process_groups.md matches backend_supports and behaviour") {
  std::ifstream f(std::string(DTR_SOURCE_DIR) + "/docs/process_groups.md");
  REQUIRE(f.good());
  std::string line;
  bool in = false;
  std::vector<std::string> header;
  std::map<std::string, std::vector<std::string>> rows;
  while (std::getline(f, line)) {
    if (line.find("capability-table:begin") != std::string::npos) {
      in = true;
      continue;
    }
    if (line.find("capability-table:end") != std::string::npos) break;
    if (!in || line.empty() || line[0] != '|') continue;
    auto c = cells(line);
    if (header.empty()) {
      header = c;
      continue;
    }
    if (c.size() > 1 && c[1].starts_with("---")) continue;
    rows[c[0]] = c;
  }
  REQUIRE(header.size() == 1 + 2 * std::size(kKnownBackends));
  REQUIRE(rows.size() == static_cast<size_t>(kNumCommOps));

  std::vector<std::pair<CommOp, bool>> zmq_cpu;
  for (int i = 0; i < kNumCommOps; ++i) {
    const auto op = static_cast<CommOp>(i);
    const std::string name(comm_op_name(op));
    REQUIRE_MESSAGE(rows.count(name), "no row for " << name);
    const auto& row = rows[name];
    REQUIRE(row.size() == header.size());
    for (size_t col = 1; col < header.size(); ++col) {
      const auto sp = header[col].find(' ');
      const std::string backend = header[col].substr(0, sp);
      const std::string dev = header[col].substr(sp + 1);
      REQUIRE((dev == "CPU" || dev == "CUDA"));
      REQUIRE((row[col] == "yes" || row[col] == "no"));
      const DeviceKind d = dev == "CPU" ? DeviceKind::CPU : DeviceKind::CUDA;
      CAPTURE(name);
      CAPTURE(header[col]);
      CHECK((row[col] == "yes") == backend_supports(backend, op, d));
      if (backend == "zmq" && d == DeviceKind::CPU) zmq_cpu.emplace_back(op, row[col] == "yes");
    }
  }
  // Behaviour of the built backend.
  check_no_errors(run_ranks(2, [&](ProcessGroup& g) {
    for (auto [op, yes] : zmq_cpu) {
      if (yes)
        run_op(g, op);
      else
        CHECK_THROWS_AS(g.check_supported(op, DeviceKind::CPU), InvalidArgument);
    }
    for (int i = 0; i < kNumCommOps; ++i) {
      const auto op = static_cast<CommOp>(i);
      if (!backend_supports("zmq", op, DeviceKind::CUDA)) {
        CHECK_THROWS_AS(g.check_supported(op, DeviceKind::CUDA), InvalidArgument);
      }
    }
  }));
  // Unbuilt backends are refused up front.
  for (auto b : kKnownBackends) {
    CHECK(backend_available(b) == (b == "zmq" || (b == "nccl" && DTR_WITH_CUDA)));
    if (backend_available(b)) continue;
    ProcessGroupOptions o;
    o.backend = std::string(b);
    CHECK_THROWS_AS(ProcessGroup::create(make_hash_store(), 0, 1, o), InvalidArgument);
  }
}
