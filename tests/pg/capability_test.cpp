// The capability table of docs/process_groups.md agrees with backend_supports() and with
// behaviour: on every backend built (PG_BACKEND_TEST), supported CPU cells run and
// unsupported ones throw InvalidArgument; backends not built are refused up front.
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

// The table's cells: (backend, device) -> op -> "yes"/"no". Checks its shape on the way.
std::map<std::pair<std::string, std::string>, std::map<CommOp, bool>> read_table() {
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
  std::map<std::pair<std::string, std::string>, std::map<CommOp, bool>> table;
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
      table[{backend, dev}][op] = row[col] == "yes";
    }
  }
  return table;
}

}  // namespace

PG_BACKEND_TEST("capability: the table in docs/process_groups.md matches the backends") {
  const auto table = read_table();
  for (const auto& [column_, ops] : table) {
    const auto& column = column_;  // captured (clang 14: not a binding)
    const DeviceKind d = column.second == "CPU" ? DeviceKind::CPU : DeviceKind::CUDA;
    for (const auto& [op_, yes] : ops) {
      const auto& op = op_;  // captured (clang 14: not a binding)
      CAPTURE(column.first);
      CAPTURE(column.second);
      CAPTURE(comm_op_name(op));
      CHECK(yes == backend_supports(column.first, op, d));
    }
  }
  // Backends not built are refused up front; "tcp" is zmq.
  for (auto b : kKnownBackends) {
    const bool built = b == "zmq" || (b == "nccl" && DTR_WITH_CUDA) ||
                       (b == "gloo" && DTR_WITH_GLOO) || (b == "mpi" && DTR_WITH_MPI);
    CHECK(backend_available(b) == built);
    if (built) continue;
    ProcessGroupOptions o;
    o.backend = std::string(b);
    CHECK_THROWS_AS(ProcessGroup::create(make_hash_store(), 0, 1, o), InvalidArgument);
  }
  CHECK(backend_available("tcp"));
  CHECK(canonical_backend("tcp") == "zmq");
  // Behaviour of this case's backend.
  const auto& cpu = table.at({backend.name, "CPU"});
  const auto& cuda = table.at({backend.name, "CUDA"});
  check_no_errors(run_ranks(backend, 2, [&](ProcessGroup& g) {
    for (auto [op, yes] : cpu) {
      if (yes)
        run_op(g, op);
      else
        CHECK_THROWS_AS(g.check_supported(op, DeviceKind::CPU), InvalidArgument);
    }
    for (auto [op, yes] : cuda) {
      if (!yes) CHECK_THROWS_AS(g.check_supported(op, DeviceKind::CUDA), InvalidArgument);
    }
  }));
}
