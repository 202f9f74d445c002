// The commands' facts (protocol/commands.hpp: kOnStream, kBarrier, kCountsBytes, kTraced,
// kInGraph) and the worker's lists derived from them: the task variant, the barrier
// variant, the byte-counted kinds of the metrics. Each set is named here once, so that a
// changed fact shows in review; the lists themselves are never written out in the worker.
#include <doctest/doctest.h>

#include <set>
#include <variant>

#include "protocol/commands.hpp"
#include "worker/recorder.hpp"
#include "worker/streams.hpp"

namespace {

using namespace dtr;
using protocol::CmdType;
using protocol::Command;

// The wire codes of the commands whose fact `keep` holds.
template <class Keep, class... C>
std::set<CmdType> where(Keep keep, const std::variant<C...>*) {
  std::set<CmdType> out;
  (..., (keep(static_cast<const C*>(nullptr)) ? void(out.insert(C::kType)) : void()));
  return out;
}
template <class Keep>
std::set<CmdType> where(Keep keep) {
  return where(keep, static_cast<const Command*>(nullptr));
}

// Alternatives of a variant, counted by the predicate.
template <class... C>
constexpr size_t count_on_stream(const std::variant<C...>*) {
  return (size_t{protocol::on_stream_v<C>} + ...);
}
template <class... C>
constexpr size_t count_barriers(const std::variant<C...>*) {
  return (size_t{protocol::barrier_v<C>} + ...);
}

// One task alternative per stream command, plus "none" and a barrier's arrival; one barrier
// alternative per barrier command.
static_assert(std::variant_size_v<worker::detail::TaskCommand> ==
              2 + count_on_stream(static_cast<const Command*>(nullptr)));
static_assert(std::variant_size_v<worker::detail::BarrierCommand> ==
              count_barriers(static_cast<const Command*>(nullptr)));
// A task's command is a reference: a task is as cheap to move as before the variant.
static_assert(sizeof(worker::detail::TaskCommand) <= 2 * sizeof(void*));

TEST_CASE("command facts: which commands run on a stream, are barriers, count bytes, are traced") {
  auto on_stream = [](const auto* c) {
    return protocol::on_stream_v<std::remove_cvref_t<decltype(*c)>>;
  };
  auto barrier = [](const auto* c) {
    return protocol::barrier_v<std::remove_cvref_t<decltype(*c)>>;
  };
  auto bytes = [](const auto* c) {
    return protocol::counts_bytes_v<std::remove_cvref_t<decltype(*c)>>;
  };
  auto untraced = [](const auto* c) {
    return !protocol::traced_v<std::remove_cvref_t<decltype(*c)>>;
  };
  auto in_graph = [](const auto* c) {
    return protocol::in_graph_v<std::remove_cvref_t<decltype(*c)>>;
  };
  CHECK(where(on_stream) == std::set<CmdType>{CmdType::RunOp, CmdType::Get, CmdType::Record,
                                              CmdType::WaitEvent, CmdType::WaitRemote,
                                              CmdType::SendPeer, CmdType::RecvPeer,
                                              CmdType::Collective, CmdType::ToDevice,
                                              CmdType::PutFrom, CmdType::GraphReplay});
  CHECK(where(barrier) == std::set<CmdType>{CmdType::Sync, CmdType::Stats, CmdType::Trace});
  CHECK(where(bytes) == std::set<CmdType>{CmdType::Put, CmdType::Get, CmdType::SendPeer,
                                          CmdType::RecvPeer, CmdType::Collective,
                                          CmdType::ToDevice});
  CHECK(where(untraced) == std::set<CmdType>{CmdType::ClockSync, CmdType::Trace,
                                             CmdType::FlightDump, CmdType::Metrics, CmdType::Attach,
                                             CmdType::Release, CmdType::NotifyPeer});
  // What a graph may hold runs on a stream, except NotifyPeer (a replay's dispatch work).
  std::set<CmdType> graph_not_on_stream;
  for (CmdType t : where(in_graph))
    if (!where(on_stream).count(t)) graph_not_on_stream.insert(t);
  CHECK(graph_not_on_stream == std::set<CmdType>{CmdType::NotifyPeer});
}

TEST_CASE("command facts: the metrics count the bytes of the commands that say kCountsBytes") {
  worker::detail::Recorder r;
  protocol::NodeMetrics m;
  r.fill(m);
  std::set<CmdType> kinds;
  for (const auto& b : m.bytes) kinds.insert(static_cast<CmdType>(b.kind));
  CHECK(kinds == where([](const auto* c) {
          return protocol::counts_bytes_v<std::remove_cvref_t<decltype(*c)>>;
        }));
  CHECK(m.bytes.size() == kinds.size());
}

}  // namespace
