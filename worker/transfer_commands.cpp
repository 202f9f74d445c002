// A tensor's bytes in and out of the session: Put (from its payload frame, at dispatch),
// PutFrom (read from the master's memory on the same host, on its stream), Get (answered
// on its stream, or at once from the dispatch thread on an idle stream; pulled: its bytes
// held here until the master's Release), Attach (the same-host handshake), ToDevice (a
// copy to another device, on its stream) and Free. Part of Session::Impl
// (worker/session_impl.hpp).
#include <fmt/format.h>

#include <optional>
#include <vector>

#include "common/same_host.hpp"
#include "worker/device_order.hpp"
#include "worker/session_impl.hpp"

namespace dtr::worker {

namespace cmd = protocol::cmd;
using namespace detail;

void Session::Impl::on(const cmd::Put& c, Payloads payloads) {
  if (stream_of(c)) put(c, payloads);
}

void Session::Impl::put(const cmd::Put& c, Payloads payloads) {
  if (!table.check_new_id(c.out, "put")) return;
  auto fail = [&](std::string message) {
    table.set(c.out, Slot::failed_with(failures.root(c.out, "put", std::move(message), c.device)));
  };
  if (c.payload < 1 || c.payload > payloads.size())  // the decoder checks it too
    return fail(
        fmt::format("payload frame {} does not exist (1 to {})", c.payload, payloads.size()));
  const PayloadFrame& frame = payloads[c.payload - 1];
  rec.counters.add_bytes<cmd::Put>(static_cast<int64_t>(frame.size));
  const TensorMeta& m = c.meta;
  if (std::string problem = size_problem(m); !problem.empty()) return fail(std::move(problem));
  size_t expected = static_cast<size_t>(m.numel()) * element_size(m.dtype);
  if (frame.size != expected)
    return fail(
        fmt::format("payload has {} bytes, {} needs {}", frame.size, describe(m), expected));
  try {
    local::Tensor host = frame_tensor(frame, m);
    // On the device's default stream; streams that read it wait for its event.
    table.set(c.out, c.device < 0 ? Slot::of(std::move(host)) : uploaded(host, c.device));
  } catch (const std::exception& e) {
    fail(e.what());
  }
}

void Session::Impl::on(const cmd::PutFrom& c) {
  StreamQueuePtr stream = stream_of(c);
  if (!stream || !table.check_new_id(c.out, "put")) return;
  std::string problem = size_problem(c.meta);
  if (problem.empty() && master_pid.load(std::memory_order_relaxed) == 0)
    problem =
        "the master sent its tensor by address, but this worker has not attached to it "
        "(no successful Attach)";
  if (problem.empty() && c.address == 0 && c.meta.numel() > 0)
    problem = "the master's tensor is at address 0";
  if (!problem.empty()) {
    table.set(c.out, Slot::failed_with(failures.root(c.out, "put", std::move(problem), c.device)));
    return;
  }
  Task t = task(c);
  t.out = table.make_output(c.out);
  streams.stage(stream, std::move(t));
}

bool Session::Impl::run(StreamQueue& s, const StreamQueuePtr&, Task& t, const cmd::PutFrom& c) {
  try {
    const TensorMeta& m = c.meta;
    local::Tensor host = local::empty(m.shape, m.dtype);
    const size_t bytes = static_cast<size_t>(m.numel()) * element_size(m.dtype);
    common::read_process_memory(master_pid.load(std::memory_order_relaxed), c.address,
                                host.raw_data(), bytes, "reading the master's tensor");
    rec.counters.add_bytes<cmd::Put>(static_cast<int64_t>(bytes));  // as a Put's
    if (c.device < 0) {
      t.out->publish(std::move(host));
      return true;
    }
    cuda::StreamScope scope(c.device, s.cuda.get(c.device));
    local::Tensor out = host.to_device(c.device);
    wrote(s.cuda, *t.out, out);
    t.out->publish(std::move(out));
  } catch (const std::exception& e) {
    fail_output(s, t, failures.root(c.out, "put", e.what(), c.device));
  }
  return true;
}

void Session::Impl::on(const cmd::Get& c) {
  const StreamQueuePtr& stream = stream_of(c);
  if (!stream) return;
  SlotPtr in = table.find(c.input);
  if (!in) {
    reply_failure(c,
                  make_failure(c.input, "get", fmt::format("tensor %{} does not exist", c.input)));
    return;
  }
  Task t = task(c);
  t.in[0] = std::move(in);
  Slot* raw[1] = {t.in[0].get()};
  // On an idle stream with the tensor ready: answered from the dispatch thread.
  if (may_run_inline(stream, raw, 1) && run(*stream, stream, t, c)) return;
  streams.stage(stream, std::move(t));
}

bool Session::Impl::run(StreamQueue& s, const StreamQueuePtr& self, Task& t, const cmd::Get& c) {
  if (!t.in[0]->ready_or_park(self)) {
    waiting_for_tensor(s, t, c.input);
    return false;
  }
  protocol::reply::Get r;
  r.request = c.request;
  std::vector<local::Tensor> payloads;
  if (Failure f = t.in[0]->get_failure()) {
    r.failure = *f;
    failures.mark_reported(*f);  // raised by to_local()/item(): not again by synchronize()
  } else {
    try {
      local::Tensor packed = use(s.cuda, *t.in[0]);
      if (packed.device() >= 0) {
        cuda::StreamScope scope(packed.device(), s.cuda.get(packed.device()));
        packed = packed.cpu();  // returns once the bytes are here
      }
      packed = packed.contiguous();
      r.meta = packed.meta();
      rec.counters.add_bytes<cmd::Get>(packed.numel() *
                                       static_cast<int64_t>(element_size(packed.dtype())));
      // Pulled: the master reads the bytes here (same host), once this reply is out.
      if (c.pull && master_pid.load(std::memory_order_relaxed) != 0 && packed.numel() > 0 &&
          pin_pulled(c.request, packed))
        r.address = reinterpret_cast<uint64_t>(packed.raw_data());
      else
        payloads.push_back(std::move(packed));
    } catch (const std::exception& e) {
      r.failure = make_failure(c.input, "get", e.what());
    }
  }
  outbox.send_get(std::move(r), std::move(payloads));
  return true;
}

bool Session::Impl::pin_pulled(uint64_t request, local::Tensor bytes) {
  std::lock_guard lock(pulled_mu);
  if (pulled.size() >= kMaxPulled) return false;
  pulled[request] = std::move(bytes);
  return true;
}

void Session::Impl::on(const cmd::Release& c) {
  local::Tensor dropped;  // freed outside the lock
  std::lock_guard lock(pulled_mu);
  auto it = pulled.find(c.request);
  if (it == pulled.end()) return;  // a Get answered with a frame, or released before
  dropped = std::move(it->second);
  pulled.erase(it);
}

void Session::Impl::on(const cmd::Attach& c) {
  protocol::reply::Attach r;
  r.request = c.request;
  if (!common::same_host_enabled()) {
    r.message = "DTR_SAME_HOST is off on the worker";
  } else {
    r.message = common::challenge_problem(c.pid, c.address, challenge);
    r.done = r.message.empty();
  }
  if (r.done) {
    held_challenge = c.challenge;  // for the master to read back
    r.address = reinterpret_cast<uint64_t>(&held_challenge);
  }
  master_pid.store(r.done ? c.pid : 0, std::memory_order_relaxed);
  outbox.reply(std::move(r));
}

void Session::Impl::on(const cmd::ToDevice& c) {
  StreamQueuePtr stream = stream_of(c);
  if (!stream) return;
  if (!table.check_new_id(c.out, "to_device")) return;
  Task t = task(c);
  t.in[0] = table.input(c.input, c.out, "to_device", c.out);
  if (!t.in[0]) return;
  t.out = table.make_output(c.out);
  streams.stage(stream, std::move(t));
}

bool Session::Impl::run(StreamQueue& s, const StreamQueuePtr& self, Task& t,
                        const cmd::ToDevice& c) {
  if (!t.in[0]->ready_or_park(self)) {
    waiting_for_tensor(s, t, c.input);
    return false;
  }
  if (Failure cause = t.in[0]->get_failure()) {
    fail_output(s, t, dependent_failure(c.out, "to_device", c.input, *cause));
    return true;
  }
  try {
    local::Tensor in = use(s.cuda, *t.in[0]);
    // Host to device runs on the target's stream; device to host or device to device on
    // the source's.
    const int device = in.device() >= 0 ? in.device() : c.device;
    std::optional<cuda::StreamScope> scope;
    if (device >= 0) scope.emplace(device, s.cuda.get(device));
    local::Tensor out = in.to_device(c.device);
    rec.counters.add_bytes<cmd::ToDevice>(out.numel() *
                                          static_cast<int64_t>(element_size(out.dtype())));
    if (out.device() >= 0) {
      if (out.device() != device) {
        // Device to device across devices: readers of `out` order on the target device.
        scope.reset();
        scope.emplace(out.device(), s.cuda.get(out.device()));
      }
      wrote(s.cuda, *t.out, out);
    }
    t.out->publish(std::move(out));
  } catch (const std::exception& e) {
    fail_output(s, t, failures.root(c.out, "to_device", e.what(), c.device));
  }
  return true;
}

void Session::Impl::on(const cmd::Free& c) {
  if (current_begin != 0) {  // tracing: the freed tensor's shape goes with the free's slice
    SlotPtr s = table.find(c.input);
    traced_meta.reset();
    if (s && s->ready.load(std::memory_order_acquire) && !s->failed.load(std::memory_order_acquire))
      traced_meta = s->tensor.meta();
  }
  if (!table.erase(c.input))
    failures.root(c.input, "free", fmt::format("tensor %{} does not exist", c.input));
}

}  // namespace dtr::worker
