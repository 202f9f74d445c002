// Captured graphs on a worker (worker/graph.hpp): the upload's checks and resolution, a
// replay's dispatch, the order of replays, graph memory.
#include "worker/graph.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <set>
#include <type_traits>
#include <unordered_set>
#include <utility>

namespace dtr::worker::detail {

namespace cmd = protocol::cmd;
using protocol::CmdType;
using protocol::Command;
using protocol::TensorId;

namespace {

struct Refused {
  std::string why;
};

std::string describe_strided(const TensorMeta& m) {
  return fmt::format("{} (strides [{}], offset {})", describe(m), fmt::join(m.strides, ", "),
                     m.offset);
}

// Whether command `c` makes a tensor (`out`), in place or not.
template <class C>
bool makes_output(const C& c) {
  if constexpr (requires { c.inplace; })
    return !c.inplace;
  else if constexpr (requires { c.makes_tensor(); })
    return c.makes_tensor();
  else
    return requires {
      c.out;
    };
}

// Resolves an upload's program step by step (see build_graph). Every check that fails
// throws Refused naming the command.
class Builder {
 public:
  Builder(const cmd::GraphUpload& c, GraphEnv env)
      : c_(c), env_(env), g_(std::make_shared<Graph>()) {}

  GraphPtr build();

 private:
  void declare_inputs();
  template <class C>
  void add(const C& c, size_t index);
  // The parts of add() for each kind of command: the temporary's metadata from `in`.
  template <class C>
  TensorMeta resolve(const C& c, GraphStep& st, std::span<const TensorMeta> in);
  uint32_t part_of(uint32_t stream);
  GraphOperand operand(TensorId id, TensorMeta* meta);
  int32_t make_temp(TensorId id, const TensorMeta& meta, bool bindable);
  int32_t event_of(uint64_t id, bool record);
  void check_peer(uint32_t peer);
  void check_token(uint64_t token, bool receiving);
  int64_t inline_work_of(const GraphPart& p) const;
  void find_segments(GraphPart& p) const;
  void finish();

  template <typename... Args>
  [[noreturn]] void refuse(fmt::format_string<Args...> format, Args&&... args) {
    std::string what = fmt::format(format, std::forward<Args>(args)...);
    if (name_.empty()) throw Refused{std::move(what)};
    throw Refused{fmt::format("command {} ({}) {}", index_, name_, what)};
  }

  const cmd::GraphUpload& c_;
  GraphEnv env_;
  GraphPtr g_;
  size_t index_ = 0;
  std::string_view name_;
  struct Declared {
    SlotPtr slot;
    TensorMeta meta;
    int32_t check = -1;
  };
  std::unordered_map<TensorId, Declared> declared_;
  std::unordered_map<TensorId, int32_t> temp_of_;
  std::unordered_map<uint32_t, uint32_t> part_of_stream_;
  std::unordered_map<uint64_t, int32_t> event_index_;
  std::vector<uint64_t> event_ids_;
  std::unordered_set<uint64_t> sent_tokens_, received_tokens_;
  std::set<uint32_t> peers_;
};

GraphPtr Builder::build() {
  g_->id = c_.graph;
  g_->program = c_.program;
  declare_inputs();
  if (c_.program) {
    const std::vector<Command>& commands = c_.program->commands;
    g_->steps.reserve(commands.size());
    for (size_t i = 0; i < commands.size(); ++i)
      std::visit([&](const auto& x) { add(x, i); }, commands[i]);
  }
  name_ = {};
  finish();
  return g_;
}

void Builder::declare_inputs() {
  for (const protocol::GraphInput& in : c_.inputs) {
    if (in.id == protocol::kNoTensor) refuse("declares input id 0, which is never a tensor");
    if (declared_.count(in.id)) refuse("declares input %{} twice", in.id);
    SlotPtr slot = env_.table.find(in.id);
    if (!slot) refuse("declares input %{}, which does not exist on this worker", in.id);
    Declared d{slot, in.meta, -1};
    if (slot->ready.load(std::memory_order_acquire) &&
        !slot->failed.load(std::memory_order_acquire)) {
      if (!(slot->tensor.meta() == in.meta))
        refuse("input %{} is {} on this worker, the graph was captured with {}", in.id,
               describe_strided(slot->tensor.meta()), describe_strided(in.meta));
    } else {
      // Not made yet (or failed): compared when a replay first reads it.
      d.check = static_cast<int32_t>(g_->checks.size());
      GraphInputCheck& k = g_->checks.emplace_back();
      k.id = in.id;
      k.slot = slot;
      k.declared = in.meta;
    }
    g_->inputs.push_back(slot);
    declared_.emplace(in.id, std::move(d));
  }
}

template <class C>
void Builder::add(const C& c, size_t index) {
  index_ = index;
  if constexpr (std::is_same_v<C, cmd::RunOp>)
    name_ = op_def(c.op).name;
  else
    name_ = C::kName;
  if constexpr (!protocol::in_graph_v<C>) {
    refuse("cannot be part of a graph");  // the decoder refuses it first
  } else {
    GraphStep st;
    st.cmd = &c_.program->commands[index];
    st.type = C::kType;
    st.index = index;
    if constexpr (requires { c.device; }) {
      if (c.device >= env_.devices)
        refuse("names CUDA device {}, this node has {}", c.device,
               env_.devices == 0 ? std::string("none") : fmt::format("0 to {}", env_.devices - 1));
    }
    std::vector<TensorMeta> metas;
    protocol::for_each_command_input(c, [&](TensorId id) {
      TensorMeta m;
      st.in.push_back(operand(id, &m));
      metas.push_back(std::move(m));
    });
    TensorMeta out_meta = resolve(c, st, metas);
    if constexpr (requires { c.out; }) {
      if (makes_output(c)) st.out = make_temp(c.out, out_meta, std::is_same_v<C, cmd::RunOp>);
    }
    if constexpr (std::is_same_v<C, cmd::RunOp>) st.elements = out_meta.numel();
    const auto at = static_cast<uint32_t>(g_->steps.size());
    // A command that is dispatch work only in eager mode (NotifyPeer) is so in a replay
    // (dispatch_step); the others run on their stream.
    static_assert(protocol::on_stream_v<C> || std::is_same_v<C, cmd::NotifyPeer>,
                  "a command a graph may hold is a stream task, or its replay's dispatch "
                  "work needs a case in dispatch_step()");
    if constexpr (protocol::on_stream_v<C>) {
      st.part = part_of(c.stream);
      g_->parts[st.part].steps.push_back(at);
    }
    if (st.slot >= 0 || st.type == CmdType::NotifyPeer) g_->dispatch_steps.push_back(at);
    g_->steps.push_back(std::move(st));
  }
}

template <class C>
TensorMeta Builder::resolve(const C& c, GraphStep& st, std::span<const TensorMeta> in) {
  if constexpr (std::is_same_v<C, cmd::RunOp>) {
    if (c.inplace && in.empty()) refuse("is in place and has no input 0 (its target)");
    if (c.inplace && c.out != protocol::kNoTensor)
      refuse("is in place and names output %{}", c.out);
    try {
      if (c.inplace) {
        infer_inplace(c.op, in, c.attrs);
        return in[0];
      }
      return infer(c.op, in, c.attrs, false).meta;
    } catch (const Error& e) {
      refuse("fails its shape rule: {}", e.what());
    }
  } else if constexpr (std::is_same_v<C, cmd::Record> || std::is_same_v<C, cmd::WaitEvent>) {
    st.event = event_of(c.event, std::is_same_v<C, cmd::Record>);
    st.slot = static_cast<int32_t>(g_->targets++);
  } else if constexpr (std::is_same_v<C, cmd::NotifyPeer>) {
    check_peer(c.peer);
    check_token(c.token, false);
    st.event = event_of(c.event, false);
  } else if constexpr (std::is_same_v<C, cmd::WaitRemote> || std::is_same_v<C, cmd::RecvPeer>) {
    check_peer(c.peer);
    check_token(c.token, true);
    st.slot = static_cast<int32_t>(g_->remotes++);
    if constexpr (std::is_same_v<C, cmd::RecvPeer>) {
      if (std::string problem = size_problem(c.meta); !problem.empty()) refuse("{}", problem);
      return c.meta;
    }
  } else if constexpr (std::is_same_v<C, cmd::SendPeer>) {
    check_peer(c.peer);
    check_token(c.token, false);
  } else if constexpr (std::is_same_v<C, cmd::Collective>) {
    st.group = env_.groups.find(c.group);
    if (!st.group && c.group != 0) refuse("names group {}, which does not exist", c.group);
    if (c.makes_tensor()) {
      if (std::string problem = size_problem(c.meta); !problem.empty()) refuse("{}", problem);
      return c.meta;
    }
  } else if constexpr (std::is_same_v<C, cmd::ToDevice>) {
    return TensorMeta::contiguous(in[0].dtype, in[0].shape);
  }
  return {};
}

uint32_t Builder::part_of(uint32_t stream) {
  auto it = part_of_stream_.find(stream);
  if (it != part_of_stream_.end()) return it->second;
  const StreamQueuePtr& s = env_.streams.find(stream);
  if (!s) refuse("runs on stream {}, which does not exist on this worker", stream);
  auto part = static_cast<uint32_t>(g_->parts.size());
  g_->parts.emplace_back().stream = s;
  part_of_stream_.emplace(stream, part);
  return part;
}

GraphOperand Builder::operand(TensorId id, TensorMeta* meta) {
  if (auto t = temp_of_.find(id); t != temp_of_.end()) {
    *meta = g_->temps[static_cast<size_t>(t->second)].meta;
    return GraphOperand{nullptr, t->second, -1};
  }
  if (auto d = declared_.find(id); d != declared_.end()) {
    *meta = d->second.meta;
    return GraphOperand{d->second.slot, -1, d->second.check};
  }
  refuse(
      "reads tensor %{}, which no earlier command of the graph makes and the upload does not "
      "declare as an input",
      id);
}

int32_t Builder::make_temp(TensorId id, const TensorMeta& meta, bool bindable) {
  if (id == protocol::kNoTensor) refuse("makes output id 0, which is never a tensor");
  if (temp_of_.count(id)) refuse("makes tensor %{}, which an earlier command made", id);
  if (declared_.count(id) || env_.table.contains(id))
    refuse("makes tensor %{}, which exists already", id);
  auto index = static_cast<int32_t>(g_->temps.size());
  GraphTemp& t = g_->temps.emplace_back();
  t.id = id;
  t.meta = meta;
  t.bindable = bindable;
  temp_of_.emplace(id, index);
  return index;
}

int32_t Builder::event_of(uint64_t id, bool record) {
  if (id == 0) refuse("names event id 0, which is never an event");
  if (auto it = event_index_.find(id); it != event_index_.end()) return it->second;
  EventPtr e = env_.events.find(id);
  if (!e && !record)
    refuse("waits for event {}, which was recorded neither on this worker nor earlier in the graph",
           id);
  auto index = static_cast<int32_t>(g_->events.size());
  g_->events.push_back(std::move(e));  // null: made by finish() (first recorded here)
  event_ids_.push_back(id);
  event_index_.emplace(id, index);
  return index;
}

void Builder::check_peer(uint32_t peer) {
  if (std::optional<std::string> problem = env_.outbox.peer_problem(peer)) refuse("{}", *problem);
  peers_.insert(peer);
}

void Builder::check_token(uint64_t token, bool receiving) {
  if (token == 0 || token >= protocol::kGraphTokenLimit)
    refuse("has token {}, expected 1 to 2^40 - 1 (a replay derives its own from it)", token);
  if (!(receiving ? received_tokens_ : sent_tokens_).insert(token).second)
    refuse("uses token {}, which an earlier command of the graph uses", token);
}

void Builder::finish() {
  std::unordered_set<TensorId> outputs;
  for (TensorId id : c_.outputs) {
    auto t = temp_of_.find(id);
    if (t == temp_of_.end()) refuse("names output %{}, which the program does not make", id);
    if (!outputs.insert(id).second) refuse("names output %{} twice", id);
    g_->temps[static_cast<size_t>(t->second)].output = true;
  }
  for (size_t i = 0; i < g_->events.size(); ++i) {
    if (g_->events[i]) continue;
    std::string problem;
    g_->events[i] = env_.events.for_record(event_ids_[i], &problem);
    if (!g_->events[i]) refuse("{}", problem);
  }
  g_->peers.assign(peers_.begin(), peers_.end());
  for (GraphPart& p : g_->parts) {
    g_->running_parts += p.steps.empty() ? 0 : 1;
    p.inline_work = inline_work_of(p);
    find_segments(p);
  }
  // Master-held outputs exist from now on; reading one before a replay says so.
  for (const GraphTemp& t : g_->temps) {
    if (!t.output) continue;
    auto f = std::make_shared<protocol::RemoteFailure>(make_failure(
        t.id, "capture",
        fmt::format("graph {} has not been replayed yet (a captured tensor exists once a replay "
                    "has made it)",
                    g_->id)));
    env_.table.set(t.id, Slot::failed_with(std::move(f)));
  }
}

int64_t Builder::inline_work_of(const GraphPart& p) const {
  int64_t work = 0;
  for (uint32_t i : p.steps) {
    const GraphStep& st = g_->steps[i];
    if (st.type == CmdType::Record) continue;
    if (st.type != CmdType::RunOp) return -1;
    const auto& c = std::get<cmd::RunOp>(*st.cmd);
    if (op_def(c.op).kind == OpKind::Linalg || c.device >= 0 || st.elements > env_.inline_elements)
      return -1;
    work += st.elements + 1;
  }
  return work;
}

void Builder::find_segments(GraphPart& p) const {
  // The device of a step that may be part of a CUDA segment, else -1.
  auto device_of = [&](uint32_t i) {
    const GraphStep& st = g_->steps[p.steps[i]];
    if (st.type != CmdType::RunOp) return -1;
    const auto& c = std::get<cmd::RunOp>(*st.cmd);
    switch (op_def(c.op).kind) {
      case OpKind::Unary:
      case OpKind::Binary:
      case OpKind::Clamp:
      case OpKind::Mutate:
      case OpKind::View:
        return c.device;
      default:
        return -1;
    }
  };
  const auto n = static_cast<uint32_t>(p.steps.size());
  for (uint32_t i = 0; i < n;) {
    const int device = device_of(i);
    uint32_t j = i + 1;
    while (device >= 0 && j < n && device_of(j) == device) ++j;
    if (device >= 0 && j - i >= 2) {
      CudaSegment& seg = p.segments.emplace_back();
      seg.begin = i;
      seg.end = j;
      seg.device = device;
    }
    i = j;
  }
}

// Dispatch work of step `st` in run `run`: records issued, waits' generations taken,
// notifications armed, remote waits made.
void dispatch_step(GraphRun& run, const GraphStep& st, GraphEnv& env) {
  Graph& g = *run.graph;
  auto wait_for = [&](uint32_t peer, uint64_t token) {
    std::string problem;
    RemoteWaitPtr w = env.tokens.wait(protocol::graph_token(token, run.replay), peer, &problem);
    if (!w) {
      if (run.remote_problems.empty()) run.remote_problems.resize(run.remotes.size());
      run.remote_problems[static_cast<size_t>(st.slot)] = std::move(problem);
    }
    run.remotes[static_cast<size_t>(st.slot)] = std::move(w);
  };
  std::visit(
      [&](const auto& c) {
        using C = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<C, cmd::Record>) {
          run.targets[static_cast<size_t>(st.slot)] =
              ++g.events[static_cast<size_t>(st.event)]->issued;
        } else if constexpr (std::is_same_v<C, cmd::WaitEvent>) {
          run.targets[static_cast<size_t>(st.slot)] =
              g.events[static_cast<size_t>(st.event)]->issued;
        } else if constexpr (std::is_same_v<C, cmd::NotifyPeer>) {
          const uint64_t token = protocol::graph_token(c.token, run.replay);
          const auto peer = static_cast<int32_t>(c.peer);
          if (g.events[static_cast<size_t>(st.event)]->done_or_notify(peer, token))
            env.outbox.send_notify(peer, token);
        } else if constexpr (std::is_same_v<C, cmd::WaitRemote> ||
                             std::is_same_v<C, cmd::RecvPeer>) {
          wait_for(c.peer, c.token);
        }
      },
      *st.cmd);
}

}  // namespace

GraphPtr build_graph(const cmd::GraphUpload& c, GraphEnv env, std::string* problem) {
  try {
    return Builder(c, env).build();
  } catch (const Refused& r) {
    *problem = r.why;
    return nullptr;
  }
}

GraphRunPtr start_run(const GraphPtr& gp, uint64_t replay, GraphEnv env, std::string* problem) {
  Graph& g = *gp;
  if (replay != g.last_replay + 1) {
    *problem = fmt::format("it came after replay {} (replays are numbered 1, 2, ... in order)",
                           g.last_replay);
    return nullptr;
  }
  g.last_replay = replay;
  {
    std::lock_guard lock(g.mu);
    for (uint32_t p : g.peers) {
      if (!g.broken.empty()) break;
      if (std::optional<std::string> why = env.outbox.peer_problem(p)) g.broken = *why;
    }
    for (const GraphPart& part : g.parts) {
      if (!g.broken.empty()) break;
      if (env.streams.find(part.stream->id) != part.stream)
        g.broken = fmt::format("its stream {} was destroyed", part.stream->id);
    }
    if (!g.broken.empty()) {
      *problem = g.broken;
      return nullptr;
    }
  }
  auto run = std::make_shared<GraphRun>();
  run->graph = gp;
  run->replay = replay;
  run->temps.resize(g.temps.size());
  for (SlotPtr& s : run->temps) s = std::make_shared<Slot>();
  run->targets.resize(g.targets);
  run->remotes.resize(g.remotes);
  run->parts.resize(g.parts.size());
  run->parts_left.store(g.running_parts, std::memory_order_relaxed);
  for (uint32_t i : g.dispatch_steps) dispatch_step(*run, g.steps[i], env);
  for (size_t i = 0; i < g.temps.size(); ++i)
    if (g.temps[i].output && env.table.contains(g.temps[i].id))
      env.table.set(g.temps[i].id, run->temps[i]);
  std::lock_guard lock(g.mu);
  g.current = run;
  return run;
}

void fail_outputs(Graph& g, TensorTable& table, const Failure& failure) {
  for (const GraphTemp& t : g.temps)
    if (t.output && table.contains(t.id)) table.set(t.id, Slot::failed_with(failure));
}

bool previous_done_or_park(Graph& g, uint64_t replay, const StreamQueuePtr* park) {
  std::lock_guard lock(g.mu);
  if (g.finished + 1 >= replay) return true;
  if (park) g.waiting.push_back(*park);
  return false;
}

void finish_part(GraphRun& run, uint32_t) {
  if (run.parts_left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  Graph& g = *run.graph;
  std::vector<StreamQueuePtr> woken;
  {
    std::lock_guard lock(g.mu);
    g.finished = run.replay;
    g.device_done[(run.replay + 1) % 2].clear();  // the previous replay's: every part has waited
    woken.swap(g.waiting);
  }
  for (const StreamQueuePtr& s : woken) wake(s);  // no lock held (session.hpp)
}

std::string input_mismatch(Graph& g, const GraphStep& st, Slot* const* in) {
  for (size_t i = 0; i < st.in.size(); ++i) {
    if (st.in[i].check < 0) continue;
    GraphInputCheck& k = g.checks[static_cast<size_t>(st.in[i].check)];
    if (k.done.load(std::memory_order_acquire) || in[i]->failed.load(std::memory_order_acquire))
      continue;
    const TensorMeta& actual = in[i]->tensor.meta();
    if (!(actual == k.declared))
      return fmt::format("input %{} is {} on this worker, the graph was captured with {}", k.id,
                         describe_strided(actual), describe_strided(k.declared));
    k.done.store(true, std::memory_order_release);
  }
  return {};
}

void bind(Graph& g, const GraphStep& st, GraphTemp& t, const local::Tensor& made, const Slot& in0) {
  const bool aliases =
      !st.in.empty() && in0.tensor.defined() && made.storage() == in0.tensor.storage();
  // A view of a temporary that each replay makes anew is made anew too.
  if (aliases && !st.in[0].input && !g.temps[static_cast<size_t>(st.in[0].temp)].is_bound()) return;
  std::lock_guard lock(g.mu);
  t.bound = made;
  t.aliases = aliases;
  t.bound_.store(true, std::memory_order_release);
}

void prepare_fast(Graph& g, GraphStep& st, const cmd::RunOp& c, Slot* const* in) {
  const GraphTemp* t = st.out >= 0 ? &g.temps[static_cast<size_t>(st.out)] : nullptr;
  if (t && !t->is_bound()) return;  // not yet (this run failed)
  if (t && t->aliases) {
    st.tried_fast = true;  // a view: no kernel to run
    return;
  }
  constexpr size_t kMax = std::extent_v<decltype(protocol::Inputs::ids)>;
  std::array<local::Tensor, kMax> tensors;
  for (size_t i = 0; i < st.in.size(); ++i) {
    const GraphOperand& o = st.in[i];
    if (!o.input && !g.temps[static_cast<size_t>(o.temp)].is_bound()) {
      st.tried_fast = true;  // its memory changes from replay to replay
      return;
    }
    if (in[i]->failed.load(std::memory_order_acquire)) return;  // not yet
    tensors[i] = in[i]->tensor;
  }
  st.tried_fast = true;
  const local::Tensor& target = t ? t->bound : tensors[0];
  st.fast = local::prepare_kernel(
      c.op, std::span<const local::Tensor>(tensors.data(), st.in.size()), c.attrs, target);
}

namespace {

// The tensor of operand `o` when it is fixed memory (an input, or a bound temporary).
const local::Tensor& fixed_tensor(const Graph& g, const GraphOperand& o) {
  return o.input ? o.input->tensor : g.temps[static_cast<size_t>(o.temp)].bound;
}

// The kernels of segment `seg`, on fixed memory, queued on the current CUDA stream.
void queue_segment(const Graph& g, const GraphPart& part, const CudaSegment& seg) {
  constexpr size_t kMax = std::extent_v<decltype(protocol::Inputs::ids)>;
  for (uint32_t i = seg.begin; i < seg.end; ++i) {
    const GraphStep& st = g.steps[part.steps[i]];
    const auto& c = std::get<cmd::RunOp>(*st.cmd);
    std::array<local::Tensor, kMax> in;
    for (size_t k = 0; k < st.in.size(); ++k) in[k] = fixed_tensor(g, st.in[k]);
    const std::span<const local::Tensor> operands(in.data(), st.in.size());
    if (st.out < 0) {
      local::execute_inplace(c.op, operands, c.attrs);
    } else if (const GraphTemp& t = g.temps[static_cast<size_t>(st.out)]; !t.aliases) {
      local::run_kernel(c.op, operands, c.attrs, t.bound);
    }
  }
}

}  // namespace

SegmentOutcome run_cuda_segment(StreamQueue& s, const StreamQueuePtr& self, GraphRun& run,
                                const GraphPart& part, CudaSegment& seg, FailureLog& failures) {
  Graph& g = *run.graph;
  if (!seg.refused.empty()) return SegmentOutcome::kStepwise;
  std::vector<Slot*> before;  // operands made before the segment
  std::unordered_set<int32_t> made_here;
  for (uint32_t i = seg.begin; i < seg.end; ++i) {
    const GraphStep& st = g.steps[part.steps[i]];
    for (const GraphOperand& o : st.in) {
      if (o.temp >= 0) {
        const GraphTemp& t = g.temps[static_cast<size_t>(o.temp)];
        if (!t.bindable) {
          seg.refused = fmt::format("it reads tensor %{}, which each replay makes anew", t.id);
          return SegmentOutcome::kStepwise;
        }
        if (!t.is_bound()) return SegmentOutcome::kStepwise;  // a run step by step binds it
        if (made_here.count(o.temp)) continue;
      }
      before.push_back(operand_slot(run, o));
    }
    if (st.out >= 0) {
      if (!g.temps[static_cast<size_t>(st.out)].is_bound()) return SegmentOutcome::kStepwise;
      made_here.insert(st.out);
    }
  }
  for (Slot* in : before)
    if (!in->ready_or_park(self)) return SegmentOutcome::kParked;
  for (Slot* in : before)
    if (in->failed.load(std::memory_order_acquire)) return SegmentOutcome::kStepwise;
  const cuda::StreamHandle stream = s.cuda.get(seg.device);
  for (Slot* in : before) use(s.cuda, *in);
  cuda::StreamScope scope(seg.device, stream);
  if (!seg.graph) {
    try {
      seg.graph =
          std::make_unique<cuda::Graph>(seg.device, stream, [&] { queue_segment(g, part, seg); });
    } catch (const std::exception& e) {
      seg.refused = e.what();
      return SegmentOutcome::kStepwise;
    }
  }
  Failure failed;
  try {
    seg.graph->launch(stream);
  } catch (const std::exception& e) {
    const GraphStep& first = g.steps[part.steps[seg.begin]];
    failed = failures.root(protocol::kNoTensor, protocol::command_name(*first.cmd), e.what(),
                           seg.device);
  }
  for (uint32_t i = seg.begin; i < seg.end; ++i) {
    const GraphStep& st = g.steps[part.steps[i]];
    Slot& out =
        st.out >= 0 ? *run.temps[static_cast<size_t>(st.out)] : *operand_slot(run, st.in[0]);
    if (failed) {
      fail_output(s, out, failed);
      continue;
    }
    const local::Tensor& t =
        st.out >= 0 ? g.temps[static_cast<size_t>(st.out)].bound : fixed_tensor(g, st.in[0]);
    wrote(s.cuda, out, t);
    if (st.out >= 0) out.publish(t);
  }
  return SegmentOutcome::kRan;
}

void begin_device_work(Graph& g, uint64_t replay, CudaStreams& mine) {
  std::vector<std::shared_ptr<cuda::Event>> before;
  {
    std::lock_guard lock(g.mu);
    before = g.device_done[(replay + 1) % 2];
  }
  for (const auto& e : before) e->block(mine.get(e->device()));
}

void end_device_work(Graph& g, uint64_t replay, CudaStreams& mine) {
  std::vector<std::shared_ptr<cuda::Event>> done = mine.record_all();
  if (done.empty()) return;
  std::lock_guard lock(g.mu);
  auto& list = g.device_done[replay % 2];
  list.insert(list.end(), done.begin(), done.end());
}

GraphMemory graph_memory(const std::vector<GraphPtr>& graphs, int device) {
  GraphMemory m;
  std::unordered_set<const Storage*> seen;
  auto count = [&](const local::Tensor& t) {
    if (!t.defined() || t.device() != device) return;
    ++m.tensors;
    if (seen.insert(t.storage().get()).second)
      m.bytes += static_cast<int64_t>(t.storage()->nbytes());
  };
  for (const GraphPtr& g : graphs) {
    std::lock_guard lock(g->mu);
    for (size_t i = 0; i < g->temps.size(); ++i) {
      const GraphTemp& t = g->temps[i];
      if (t.is_bound()) {
        count(t.bound);
      } else if (g->current && !t.bindable) {
        const Slot& s = *g->current->temps[i];
        if (s.ready.load(std::memory_order_acquire) && !s.failed.load(std::memory_order_acquire))
          count(s.tensor);
      }
    }
  }
  return m;
}

GraphPtr Graphs::find(uint64_t id, std::string* problem) const {
  if (auto it = graphs_.find(id); it != graphs_.end()) return it->second;
  if (auto it = refused_.find(id); it != refused_.end())
    *problem = fmt::format("graph {} was refused at upload: {}", id, it->second);
  else
    *problem = fmt::format("graph {} does not exist on this worker (never uploaded, or freed)", id);
  return nullptr;
}

void Graphs::add(GraphPtr g) {
  const uint64_t id = g->id;
  graphs_[id] = std::move(g);
}

bool Graphs::erase(uint64_t id) {
  if (auto it = graphs_.find(id); it != graphs_.end()) {
    // The latest run holds the graph: let go of it (running tasks hold it while they run).
    std::lock_guard lock(it->second->mu);
    it->second->current.reset();
  }
  return graphs_.erase(id) + refused_.erase(id) != 0;
}

std::vector<GraphPtr> Graphs::all() const {
  std::vector<GraphPtr> out;
  out.reserve(graphs_.size());
  for (const auto& [id, g] : graphs_) out.push_back(g);
  return out;
}

void Graphs::clear() {
  for (auto& [id, g] : graphs_) {
    std::lock_guard lock(g->mu);
    g->waiting.clear();
    g->current.reset();
  }
  graphs_.clear();
  refused_.clear();
}

}  // namespace dtr::worker::detail
