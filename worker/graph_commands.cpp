// Captured graphs' commands (the graphs themselves are worker/graph.hpp's): GraphUpload
// (checked and resolved once), GraphReplay (its dispatch work, then one task per part on
// the part's stream, or a small CPU part at once on an idle one) and GraphFree; and a
// part's run: its steps in order, each as eager mode would run its command, CUDA segments
// as one launch. Part of Session::Impl (worker/session_impl.hpp).
#include <fmt/format.h>

#include <string>

#include "common/trace_clock.hpp"
#include "worker/session_impl.hpp"
#include "worker/trace_slices.hpp"

namespace dtr::worker {

namespace cmd = protocol::cmd;
using protocol::CmdType;
using protocol::TensorId;
using namespace detail;

GraphEnv Session::Impl::graph_env() {
  return GraphEnv{table, streams, events, tokens, groups, outbox, options.devices, kInlineElements};
}

void Session::Impl::on(const cmd::GraphUpload& c) {
  std::string problem;
  GraphPtr g;
  if (graphs.contains(c.graph))
    problem = "it exists already";
  else if (graphs.size() >= protocol::kMaxGraphs)
    problem = fmt::format("this worker allows at most {} graphs per session", protocol::kMaxGraphs);
  else
    g = build_graph(c, graph_env(), &problem);
  if (g) return graphs.add(std::move(g));
  Failure f = failures.root(protocol::kNoTensor, "capture",
                            fmt::format("graph {} was refused: {}", c.graph, problem));
  if (!graphs.contains(c.graph) && graphs.size() < protocol::kMaxGraphs)
    graphs.refuse(c.graph, problem);
  // The tensors the master holds handles of say why when read.
  for (TensorId id : c.outputs) table.fail_new(id, f);
}

void Session::Impl::on(const cmd::GraphReplay& c) {
  std::string problem;
  GraphPtr g = graphs.find(c.graph, &problem);
  GraphRunPtr run = g ? start_run(g, c.replay, graph_env(), &problem) : nullptr;
  if (!run) {
    Failure f = failures.root(
        protocol::kNoTensor, "replay_graph",
        fmt::format("replay {} of graph {} did not run: {}", c.replay, c.graph, problem));
    if (g) fail_outputs(*g, table, f);
    return;
  }
  for (uint32_t p = 0; p < run->parts.size(); ++p) {
    const GraphPart& part = g->parts[p];
    if (part.steps.empty()) continue;
    Task t = task(c);  // the replay's record follows its parts (ends with the last)
    t.graph_run = run;
    t.part = p;
    // A small CPU part on an idle stream runs at once, as small eager work does.
    if (part.inline_work >= 0 && part.inline_work <= inline_budget &&
        streams.idle_now(part.stream)) {
      inline_budget -= part.inline_work;
      const int64_t begin = current_begin != 0 ? trace::ticks() : 0;
      if (run_graph_part(*part.stream, part.stream, t, true)) {
        if (begin != 0)
          trace_replay_part(rec.tracer, part.stream->id, c.replay, begin, trace::ticks());
        continue;
      }
    }
    streams.stage(part.stream, std::move(t));
  }
  traced_here = true;  // each part is a slice on its stream (above, or when its task ends)
}

bool Session::Impl::run(StreamQueue& s, const StreamQueuePtr& self, Task& t,
                        const cmd::GraphReplay&) {
  return run_graph_part(s, self, t, false);
}

void Session::Impl::on(const cmd::GraphFree& c) {
  if (!graphs.erase(c.graph))
    failures.root(protocol::kNoTensor, "free_graph",
                  fmt::format("graph {} does not exist on this worker", c.graph));
}

bool Session::Impl::run_graph_part(StreamQueue& s, const StreamQueuePtr& self, Task& t, bool now) {
  GraphRun& run = *t.graph_run;
  Graph& g = *run.graph;
  GraphRun::PartState& ps = run.parts[t.part];
  if (!ps.started) {
    if (!previous_done_or_park(g, run.replay, now ? nullptr : &self)) return false;
    ps.started = true;
    begin_device_work(g, run.replay, s.cuda);
  }
  GraphPart& part = g.parts[t.part];
  ReplayNote note(g.id, run.replay);
  while (ps.cursor < part.steps.size()) {
    GraphStep& st = g.steps[part.steps[ps.cursor]];
    note.at(st.index);
    while (ps.segment < part.segments.size() && part.segments[ps.segment].begin < ps.cursor)
      ++ps.segment;
    if (!now && ps.segment < part.segments.size() && part.segments[ps.segment].begin == ps.cursor) {
      CudaSegment& seg = part.segments[ps.segment];
      SegmentOutcome r = run_cuda_segment(s, self, run, part, seg, failures);
      if (r == SegmentOutcome::kParked) return false;
      ++ps.segment;
      if (r == SegmentOutcome::kRan) {
        ps.cursor = seg.end;
        continue;
      }
    }
    if (!run_graph_step(s, self, run, st, now)) return false;
    ++ps.cursor;
  }
  end_device_work(g, run.replay, s.cuda);
  finish_part(run, t.part);
  return true;
}

bool Session::Impl::run_graph_step(StreamQueue& s, const StreamQueuePtr& self, GraphRun& run,
                                   GraphStep& st, bool now) {
  if (st.type == CmdType::RunOp) return run_graph_op(s, self, run, st, now);
  if (now && st.type != CmdType::Record) return false;
  Graph& g = *run.graph;
  // The task eager mode would run, with the graph's slots, generations, waits and tokens.
  Task t;
  if (!st.in.empty()) t.in[0] = st.in[0].input ? st.in[0].input : run.temps[st.in[0].temp];
  if (st.out >= 0) t.out = run.temps[static_cast<size_t>(st.out)];
  if (st.event >= 0) t.event = g.events[static_cast<size_t>(st.event)];
  t.group = st.group;
  cmd::SendPeer send;   // a SendPeer with this replay's token
  std::string missing;  // why a remote wait could not be made
  std::visit(
      [&](const auto& c) {
        using C = std::decay_t<decltype(c)>;
        if constexpr (protocol::on_stream_v<C>) t.cmd = &c;
        if constexpr (std::is_same_v<C, cmd::Record> || std::is_same_v<C, cmd::WaitEvent>) {
          t.target = run.targets[static_cast<size_t>(st.slot)];
        } else if constexpr (std::is_same_v<C, cmd::WaitRemote> ||
                             std::is_same_v<C, cmd::RecvPeer>) {
          t.remote = run.remotes[static_cast<size_t>(st.slot)];
          if (!t.remote) missing = run.remote_problems[static_cast<size_t>(st.slot)];
        } else if constexpr (std::is_same_v<C, cmd::SendPeer>) {
          send = c;
          send.token = protocol::graph_token(c.token, run.replay);
          t.cmd = &send;
        } else if constexpr (std::is_same_v<C, cmd::Collective>) {
          if (!c.makes_tensor()) t.out = t.in[0];
        }
      },
      *st.cmd);
  const TensorId target =
      st.out >= 0 ? g.temps[static_cast<size_t>(st.out)].id : protocol::kNoTensor;
  Slot* in0 = t.in[0].get();
  if (std::string why = t.in[0] ? input_mismatch(g, st, &in0) : "";
      !why.empty() || !missing.empty()) {
    Failure f = failures.root(target, protocol::command_name(*st.cmd), why.empty() ? missing : why);
    if (t.out) fail_output(s, *t.out, std::move(f));
    return true;
  }
  return execute(s, self, t);
}

bool Session::Impl::run_graph_op(StreamQueue& s, const StreamQueuePtr& self, GraphRun& run,
                                 GraphStep& st, bool now) {
  const auto& c = std::get<cmd::RunOp>(*st.cmd);
  Graph& g = *run.graph;
  Slot* in[protocol::Inputs::kMax];  // the first n are set (no zeroing: up to 64 per op)
  const size_t n = st.in.size();
  bool failed = false;
  for (size_t i = 0; i < n; ++i) {
    in[i] = operand_slot(run, st.in[i]);
    if (now ? !in[i]->ready.load(std::memory_order_acquire) : !in[i]->ready_or_park(self))
      return false;
    failed = failed || in[i]->failed.load(std::memory_order_acquire);
  }
  GraphTemp* t = st.out >= 0 ? &g.temps[static_cast<size_t>(st.out)] : nullptr;
  Slot& out = t ? *run.temps[static_cast<size_t>(st.out)] : *in[0];
  if (st.fast && !failed) {  // the loop alone: every tensor is fixed and checked
    st.fast();
    if (t) out.publish(t->bound);
    return true;
  }
  const std::string_view name = op_def(c.op).name;
  const TensorId target = t ? t->id : c.inputs[0];
  if (std::string why = input_mismatch(g, st, in); !why.empty()) {
    fail_output(s, out, failures.root(target, name, std::move(why)));
    return true;
  }
  if (t && t->is_bound() && t->aliases) {  // a view, fixed since its first run
    if (failed) {
      for (size_t i = 0; i < n; ++i)
        if (Failure cause = in[i]->get_failure())
          return fail_output(s, out, dependent_failure(target, name, c.inputs[i], *cause)), true;
    }
    out.publish(t->bound);
    return true;
  }
  run_op_ready(s, c, in, out, t && t->is_bound() ? &t->bound : nullptr);
  if (t && !t->is_bound() && !out.failed.load(std::memory_order_acquire))
    bind(g, st, *t, out.tensor, n > 0 ? *in[0] : out);
  if (!st.tried_fast) prepare_fast(g, st, c, in);
  return true;
}

}  // namespace dtr::worker
