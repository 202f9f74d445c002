// Ops (cmd::RunOp): the handler, which checks and resolves an op and runs small CPU work
// at once on the dispatch thread (an idle stream, ready inputs, within the batch's inline
// budget), and the runner, which runs it on its stream once its inputs are ready; both end
// in run_op_ready(), which a graph replay's op steps use too. Part of Session::Impl
// (worker/session_impl.hpp).
#include <fmt/format.h>

#include <array>
#include <optional>
#include <span>
#include <vector>

#include "common/trace_clock.hpp"
#include "worker/device_order.hpp"
#include "worker/session_impl.hpp"
#include "worker/trace_slices.hpp"

namespace dtr::worker {

namespace cmd = protocol::cmd;
using protocol::TensorId;
using namespace detail;

namespace {

// Ops whose work is not bounded by their inputs' size (matrix products, convolutions):
// never run inline on the dispatch thread.
bool heavy_op(const OpDef& d) {
  return d.kind == OpKind::Linalg || d.id == OpId::linear || d.id == OpId::conv2d ||
         d.id == OpId::conv2d_input_grad || d.id == OpId::conv2d_weight_grad;
}

}  // namespace

void Session::Impl::on(const cmd::RunOp& c) {
  const StreamQueuePtr& stream = stream_of(c);
  if (!stream) return;
  const OpDef& d = op_def(c.op);
  TensorId target = c.inplace ? input_of(c) : c.out;
  if (c.inplace) {
    if (c.inputs.n == 0) {
      failures.root(protocol::kNoTensor, d.name, "an in-place command needs input 0 (its target)");
      return;
    }
    if (c.out != protocol::kNoTensor) {
      failures.root(c.out, d.name, fmt::format("an in-place command names output id %{}", c.out));
      return;
    }
  } else if (!table.check_new_id(c.out, d.name)) {
    return;
  }
  // References into the table (no reference counting unless a task is made); only the
  // first c.inputs.n entries are set.
  const SlotPtr* in[protocol::Inputs::kMax];
  Slot* raw[protocol::Inputs::kMax];
  const uint8_t n = c.inputs.n;
  for (uint8_t i = 0; i < n; ++i) {
    in[i] = &table.input(c.inputs[i], target, d.name, protocol::command_output(c));
    if (!*in[i]) return;
    raw[i] = in[i]->get();
  }
  const SlotPtr& out = c.inplace ? *in[0] : table.make_output(c.out);
  if (!heavy_op(d) && c.device < 0 && may_run_inline(stream, raw, n)) {
    inline_failed = !run_op_ready(*stream, c, raw, *out);
    if (current_begin != 0) [[unlikely]]
      trace_inline(*stream, c, *out);
    return;
  }
  Task t = task(c);
  for (uint8_t i = 0; i < n && i < Task::kInlineInputs; ++i) t.in[i] = *in[i];
  if (n > Task::kInlineInputs) {
    t.more_in = std::make_unique<SlotPtr[]>(n - Task::kInlineInputs);
    for (uint8_t i = Task::kInlineInputs; i < n; ++i) t.more_in[i - Task::kInlineInputs] = *in[i];
  }
  t.out = out;
  streams.stage(stream, std::move(t));
}

bool Session::Impl::may_run_inline(const StreamQueuePtr& s, Slot* const* in, uint8_t n_inputs) {
  if (n_inputs == 0) return false;  // a creation op's size is not bounded by its inputs
  int64_t work = 0;
  for (uint8_t i = 0; i < n_inputs; ++i) {
    const Slot& slot = *in[i];
    if (!slot.ready.load(std::memory_order_acquire)) return false;
    if (slot.failed.load(std::memory_order_acquire)) continue;  // fails at once
    const local::Tensor& x = slot.tensor;
    if (x.device() >= 0) return false;
    const int64_t n = x.numel();
    if (n > kInlineElements) return false;
    work += n + 1;
  }
  if (work > inline_budget || !streams.idle_now(s)) return false;
  inline_budget -= work;
  return true;
}

void Session::Impl::trace_inline(StreamQueue& s, const cmd::RunOp& c, Slot& out) {
  last_end = trace::ticks();
  trace_inline_op(rec.tracer, s.id, c, out, current_begin, last_end);
  traced_here = true;
}

void Session::Impl::on(const cmd::Cancel&) {
  {
    std::lock_guard lock(cancel_mu);
    cancel_root.reset();  // this cancel's root is made when it first skips an op
  }
  cancelled_before.store(current_seq, std::memory_order_release);
}

Failure Session::Impl::cancel_cause() {
  std::lock_guard lock(cancel_mu);
  if (!cancel_root)
    cancel_root = failures.root(protocol::kNoTensor, "cancel",
                                "the master cancelled the work queued on this node (Ctrl-C at a "
                                "sync point, or dtr::cancel): ops that had not started did not "
                                "run, and their outputs are failed");
  return cancel_root;
}

bool Session::Impl::skip_cancelled(StreamQueue& s, const Task& t, const cmd::RunOp& c) {
  const Failure cause = cancel_cause();
  auto f = std::make_shared<protocol::RemoteFailure>();
  f->tensor = c.inplace ? c.inputs.ids[0] : c.out;
  f->device = c.device;
  f->op = std::string(op_def(c.op).name);
  f->message = "cancelled before it ran";
  f->cause_tensor = cause->cause_tensor;
  f->cause_op = cause->cause_op;
  f->cause_message = cause->cause_message;
  fail_output(s, *t.out, std::move(f));
  return true;
}

bool Session::Impl::run(StreamQueue& s, const StreamQueuePtr& self, Task& t, const cmd::RunOp& c) {
  if (t.flight < cancelled_before.load(std::memory_order_acquire)) [[unlikely]]
    return skip_cancelled(s, t, c);
  Slot* in[protocol::Inputs::kMax];
  for (uint8_t i = 0; i < c.inputs.n; ++i) {
    in[i] = t.input(i).get();
    if (!in[i]->ready_or_park(self)) {
      waiting_for_tensor(s, t, c.inputs[i]);
      return false;
    }
  }
  run_op_ready(s, c, in, *t.out);
  return true;
}

bool Session::Impl::run_op_ready(StreamQueue& s, const cmd::RunOp& c, Slot* const* in, Slot& out,
                                 const local::Tensor* into) {
  const OpDef& d = op_def(c.op);
  const uint8_t n = c.inputs.n;
  TensorId target = c.inplace ? c.inputs.ids[0] : c.out;
  for (uint8_t i = 0; i < n; ++i) {
    if (Failure cause = in[i]->get_failure()) {
      fail_output(s, out, dependent_failure(target, d.name, c.inputs[i], *cause));
      return false;
    }
  }
  const int device = n > 0 ? in[0]->tensor.device() : c.device;
  try {
    local::Tensor result;
    if (device < 0 && n <= 1 && !into) {
      // A CPU op of one input reads the slot's tensor where it is (a ready slot's handle
      // no longer changes).
      std::span<const local::Tensor> inputs;
      if (n == 1) inputs = std::span<const local::Tensor>(&in[0]->tensor, 1);
      if (c.inplace) {
        local::execute_inplace(c.op, inputs, c.attrs);
        return true;
      }
      result = local::execute(c.op, inputs, c.attrs, false, c.device);
    } else {
      std::array<local::Tensor, Task::kInlineInputs> few;
      std::vector<local::Tensor> many(n > few.size() ? n : 0);
      local::Tensor* inputs = n > few.size() ? many.data() : few.data();
      for (uint8_t i = 0; i < n; ++i) inputs[i] = use(s.cuda, *in[i]);
      std::optional<cuda::StreamScope> scope;
      Tracer::DeviceMark mark;
      if (device >= 0) {
        scope.emplace(device, s.cuda.get(device));
        mark = rec.tracer.mark_begin(device, s.cuda.get(device));
      }
      const std::span<const local::Tensor> operands(inputs, n);
      if (into) {
        local::run_kernel(c.op, operands, c.attrs, *into);
        result = *into;
      } else {
        result = local::execute(c.op, operands, c.attrs, c.inplace, c.device);
      }
      if (result.device() >= 0) wrote(s.cuda, out, result);
      if (mark.begin) trace_device_op(s, c, inputs, result, std::move(mark));
    }
    if (!c.inplace) out.publish(std::move(result));
    return true;
  } catch (const std::bad_alloc&) {
    fail_output(s, out, failures.root(target, d.name, "out of host memory", device));
  } catch (const std::exception& e) {
    fail_output(s, out, failures.root(target, d.name, e.what(), device));
  }
  return false;
}

void Session::Impl::trace_device_op(StreamQueue& s, const cmd::RunOp& c,
                                    const local::Tensor* inputs, const local::Tensor& result,
                                    Tracer::DeviceMark mark) {
  Tracer::Slice sl = op_slice(s.id, c);
  Tracer::TensorRef refs[protocol::kMaxTraceTensors];
  size_t n = 0;
  for (uint8_t i = 0; i < c.inputs.n && i < 2; ++i)
    refs[n++] = {c.inputs.ids[i], &inputs[i].meta()};
  if (!c.inplace && result.defined()) refs[n++] = {c.out, &result.meta()};
  if (result.defined())
    sl.bytes = result.numel() * static_cast<int64_t>(element_size(result.dtype()));
  const int device = result.defined() ? result.device() : c.device;
  rec.tracer.mark_end(std::move(mark), device, s.cuda.get(device), sl,
                      std::span<const Tracer::TensorRef>(refs, n));
}

}  // namespace dtr::worker
