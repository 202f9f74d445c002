// The flight recorder in words (common/flight_text.hpp).
#include "common/flight_text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "dtr/op_table.hpp"

namespace dtr::common {

using protocol::CmdType;
using protocol::FlightRecord;
using protocol::FlightSnapshot;
using protocol::FlightState;
using protocol::WaitKind;

namespace {

std::string seconds(int64_t ns) {
  double s = static_cast<double>(ns) / 1e9;
  if (s < 0.001) return fmt::format("{:.0f} us", static_cast<double>(ns) / 1e3);
  if (s < 1.0) return fmt::format("{:.1f} ms", s * 1e3);
  return fmt::format("{:.1f} s", s);
}

std::string_view state_name(FlightState s) {
  switch (s) {
    case FlightState::Queued:
      return "queued";
    case FlightState::Waiting:
      return "waiting";
    case FlightState::Running:
      return "running";
    case FlightState::Done:
      return "done";
    case FlightState::Failed:
      return "failed";
  }
  return "?";
}

// "for the members of group 0", "for tensor %12", ...
std::string waiting_for(const FlightRecord& r) {
  switch (r.wait) {
    case WaitKind::None:
      return {};
    case WaitKind::Tensor:
      return fmt::format(" for tensor %{} (made on another stream)", r.wait_on);
    case WaitKind::Event:
      return fmt::format(" for event {}", r.wait_on);
    case WaitKind::Peer:
      return fmt::format(" for token {} from node {}", r.wait_on, r.peer);
    case WaitKind::Group:
      return fmt::format(" for the members of group {}", r.wait_on);
    case WaitKind::Streams:
      return " for the other streams";
  }
  return {};
}

bool finished(FlightState s) {
  return s == FlightState::Done || s == FlightState::Failed;
}

// The observability commands themselves (asking for a dump, figures, the clock, a trace).
bool is_observer(CmdType k) {
  return k == CmdType::ClockSync || k == CmdType::Trace || k == CmdType::FlightDump ||
         k == CmdType::Metrics;
}

}  // namespace

std::string event_name(CmdType kind, uint16_t op) {
  if (kind == CmdType::RunOp && is_valid_op(op))
    return std::string(op_def(static_cast<OpId>(op)).name);
  if (kind == CmdType::Collective) {
    static constexpr std::string_view kNames[] = {"collective", "all_reduce", "broadcast",
                                                  "all_gather", "reduce_scatter"};
    return std::string(kNames[op < 5 ? op : 0]);
  }
  return std::string(protocol::command_type_name(static_cast<uint8_t>(kind)));
}

std::string describe(const FlightRecord& r, int64_t now_ns) {
  std::string name = event_name(r.kind, static_cast<uint16_t>(r.op));
  std::string text = fmt::format("#{} {}", r.seq, name);
  if (r.out != protocol::kNoTensor) text += fmt::format(" out %{}", r.out);
  if (r.in0 != protocol::kNoTensor) text += fmt::format(" in %{}", r.in0);
  if (r.in1 != protocol::kNoTensor) text += fmt::format(", %{}", r.in1);
  if (r.peer != protocol::kNoPeer && r.wait != WaitKind::Peer)
    text += fmt::format(" node {}", r.peer);
  text += fmt::format(" on stream {}: {}", r.stream, state_name(r.state));
  auto since = [&](int64_t t) { return seconds(std::max<int64_t>(now_ns - t, 0)); };
  if (r.state == FlightState::Waiting || r.state == FlightState::Running) {
    text += waiting_for(r);
    const int64_t from = r.started_ns > 0 ? r.started_ns : r.queued_ns;
    if (from > 0) text += fmt::format(" for {}", since(from));
  } else if (r.state == FlightState::Queued) {
    if (r.queued_ns > 0) text += fmt::format(" for {}", since(r.queued_ns));
  } else if (r.ended_ns > 0) {
    text += fmt::format(" {} ago", since(r.ended_ns));
  }
  return text;
}

std::string describe(const FlightSnapshot& d, size_t max_pending, size_t max_done,
                     const std::string& indent) {
  std::vector<const FlightRecord*> pending, failed, done;
  for (auto it = d.records.rbegin(); it != d.records.rend(); ++it) {
    if (!finished(it->state)) {
      if (pending.size() < max_pending) pending.push_back(&*it);
    } else if (it->state == FlightState::Failed) {
      if (failed.size() < max_done) failed.push_back(&*it);
    } else if (!is_observer(it->kind) && done.size() < max_done) {
      done.push_back(&*it);
    }
  }
  // The finished ones: failed first (what went wrong), then done, `max_done` in all.
  done.resize(std::min(done.size(), max_done - failed.size()));
  if (pending.empty() && failed.empty() && done.empty()) return indent + "(no commands recorded)";
  std::string text;
  auto line = [&](const FlightRecord* r) {
    if (!text.empty()) text += '\n';
    text += indent + describe(*r, d.now_ns);
  };
  // Oldest first within each group.
  for (auto it = pending.rbegin(); it != pending.rend(); ++it) line(*it);
  for (auto it = failed.rbegin(); it != failed.rend(); ++it) line(*it);
  for (auto it = done.rbegin(); it != done.rend(); ++it) line(*it);
  return text;
}

}  // namespace dtr::common
