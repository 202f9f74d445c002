// The master-worker session: starting it, nodes and devices (current node/device, per
// thread), sync points, memory stats and node_info, streams and events, the collectives
// the master issues, captured graphs, and the local worker daemons that `python -m dtr`
// starts.
#include <nanobind/stl/chrono.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <algorithm>

#include "bindings.hpp"
#include "repl/local_workers.hpp"

namespace dtr::python {

namespace {

using nb::arg;
using std::chrono::milliseconds;

void init(std::optional<std::vector<std::string>> workers, std::optional<std::string> listen,
          int num_workers, std::optional<double> connect_timeout,
          std::optional<double> sync_timeout, std::optional<double> heartbeat_timeout,
          std::string key_file, bool insecure, std::string backend) {
  auto ms = [](double seconds) { return milliseconds(static_cast<int64_t>(seconds * 1000)); };
  nb::gil_scoped_release nogil;
  MasterOptions o;
  if (!workers && !listen) {
    // The environment names the workers (DTR_WORKERS, DTR_LISTEN, MASTER_ADDR, ...: set by
    // `dtr-exec --workers` and `--launched`); the arguments given override it.
    o = master_options_from_environment();
  } else {
    if (workers) o.workers = *workers;
    if (listen) o.listen = *listen;
    o.num_workers = num_workers;
  }
  if (connect_timeout) o.connect_timeout = ms(*connect_timeout);
  if (sync_timeout) o.sync_timeout = ms(*sync_timeout);
  if (heartbeat_timeout) {
    o.heartbeat_timeout = ms(*heartbeat_timeout);
    // Heartbeats come at least five times per timeout (as with DTR_HEARTBEAT_TIMEOUT_MS).
    o.heartbeat = std::clamp(o.heartbeat_timeout / 5, std::chrono::milliseconds(1), o.heartbeat);
  }
  if (!key_file.empty()) o.key_file = key_file;
  if (insecure) o.insecure = true;
  if (!backend.empty()) o.backend = backend;
  init_master_worker(o);
}

nb::dict stats_dict(const NodeMemoryStats& s) {
  nb::dict d;
  d["bytes_in_use"] = s.bytes_in_use;
  d["peak_bytes"] = s.peak_bytes;
  d["live_tensors"] = s.live_tensors;
  d["graph_bytes"] = s.graph_bytes;
  d["graph_tensors"] = s.graph_tensors;
  return d;
}

void bind_nodes(nb::module_& m) {
  m.def("_init_master_worker", &init, arg("workers") = nb::none(), arg("listen") = nb::none(),
        arg("num_workers") = 0, arg("connect_timeout") = nb::none(),
        arg("sync_timeout") = nb::none(), arg("heartbeat_timeout") = nb::none(),
        arg("key_file") = "", arg("insecure") = false, arg("backend") = "");
  m.def(
      "shutdown_master_worker",
      [] {
        nb::gil_scoped_release nogil;
        shutdown_master_worker();
      },
      "Flushes, says goodbye to every worker (they free the session's tensors), closes.");
  m.def("is_master_worker_initialized", &is_master_worker_initialized);
  m.def("node_count", &node_count);
  m.def("current_node", &current_node);
  m.def("set_node", &set_node, arg("node"));
  m.def("device_count", &device_count, arg("node"), "CUDA devices on a node (0: CPU only).");
  m.def("current_device", &current_device, "-1: the CPU");
  m.def("set_device", &set_device, arg("device"));
  m.def("cuda_device_count", &cuda_device_count, "CUDA devices of this process.");
  m.def("cuda_unavailable_reason", &cuda_unavailable_reason);
  m.def(
      "synchronize",
      [](int node) {
        nb::gil_scoped_release nogil;
        synchronize(node);
      },
      arg("node") = -1,
      "Waits until every command sent to node (all: -1) has run; raises "
      "RemoteError for the first failure not reported before.");
  m.def(
      "cancel", [](int node) { cancel(node); }, arg("node") = -1,
      "Cancels the work queued on node (all: -1): ops not yet started do not run, their "
      "outputs raise RemoteError naming the cancel when read, and synchronize() reports it "
      "once. Ctrl-C at a sync point does this for every node.");
  m.def(
      "memory_stats",
      [](int node, int device) {
        NodeMemoryStats s;
        {
          nb::gil_scoped_release nogil;
          s = memory_stats(node, device);
        }
        return stats_dict(s);
      },
      arg("node"), arg("device") = -1, "Sync point: memory in use on a node's CPU or device.");
  m.def(
      "node_info",
      [](int node) {
        NodeInfo info = node_info(node);
        nb::dict d;
        d["worker"] = info.worker;
        d["threads"] = info.threads;
        d["cpu_total_memory"] = info.cpu_total_memory;
        d["cuda_devices"] = info.cuda_devices;
        d["same_host"] = info.same_host;
        d["same_host_note"] = info.same_host_note;
        d["max_message_bytes"] = info.max_message_bytes;
        return d;
      },
      arg("node"));
}

// The timeline, the flight recorder and the live figures (dtr/observability.hpp).
void bind_observability(nb::module_& m) {
  m.def(
      "start_trace",
      [] {
        nb::gil_scoped_release nogil;
        start_trace();
      },
      "Starts recording the session's timeline (the master's calls and sync points, every "
      "node's streams); see docs/observability.md.");
  m.def(
      "stop_trace",
      [](const std::string& path) {
        TraceSummary t;
        {
          nb::gil_scoped_release nogil;
          t = stop_trace(path);
        }
        nb::dict d;
        d["path"] = t.path;
        d["slices"] = t.slices;
        d["dropped"] = t.dropped;
        d["lost_nodes"] = t.lost_nodes;
        return d;
      },
      arg("path"),
      "Sync point: stops recording and writes the trace (Chrome's trace event format: "
      "Perfetto, chrome://tracing) to path; a dict of what was written.");
  m.def("is_tracing", &is_tracing);
  m.def(
      "flight_recorder",
      [](int node, int finished) {
        nb::gil_scoped_release nogil;
        return flight_recorder(node, finished);
      },
      arg("node"), arg("finished") = 16,
      "A node's last commands in words: those not finished (and what they wait on), then "
      "the last `finished` done or failed ones.");
  m.def(
      "node_metrics",
      [](int node) {
        NodeMetrics n;
        {
          nb::gil_scoped_release nogil;
          n = node_metrics(node);
        }
        nb::dict d;
        d["commands"] = nb::dict();
        for (const auto& [kind, v] : n.commands) d["commands"][kind.c_str()] = v;
        d["bytes"] = nb::dict();
        for (const auto& [kind, v] : n.bytes) d["bytes"][kind.c_str()] = v;
        d["stream_queues"] = nb::dict();
        for (const auto& [stream, v] : n.stream_queues) d["stream_queues"][nb::int_(stream)] = v;
        nb::list devices;
        for (const auto& dev : n.devices) {
          nb::dict e;
          e["device"] = dev.device;
          e["live_tensors"] = dev.live_tensors;
          e["bytes_in_use"] = dev.bytes_in_use;
          devices.append(e);
        }
        d["devices"] = devices;
        d["sessions"] = n.sessions;
        d["session_active"] = n.session_active;
        d["refused_connections"] = n.refused_connections;
        d["master_heartbeat_age_s"] = n.master_heartbeat_age_s;
        d["threads"] = n.threads;
        d["flight_records"] = n.flight_records;
        d["tracing"] = n.tracing;
        d["trace_dropped"] = n.trace_dropped;
        return d;
      },
      arg("node"), "A node's live figures (what dtr-worker --metrics-port serves), as a dict.");
}

void bind_streams(nb::module_& m) {
  nb::class_<Event>(m, "Event", "A point in a stream; waits across nodes go worker to worker.")
      .def(nb::init<bool>(), arg("enable_timing") = false)
      .def(
          "record", [](Event& e, const Stream* s) { s ? e.record(*s) : e.record(); },
          arg("stream") = nb::none())
      .def_prop_ro("recorded", &Event::recorded)
      .def_prop_ro("node", &Event::node)
      .def(
          "query",
          [](const Event& e) {
            nb::gil_scoped_release nogil;
            return e.query();
          },
          "Sync point: whether the latest record has run.")
      .def(
          "synchronize",
          [](const Event& e) {
            nb::gil_scoped_release nogil;
            e.synchronize();
          },
          "Sync point: waits for the latest record; raises its stream's failure.")
      .def(
          "elapsed_time",
          [](const Event& e, const Event& end) {
            nb::gil_scoped_release nogil;
            return e.elapsed_time(end);
          },
          arg("end"), "Sync point: milliseconds from this event's record to end's.");
  nb::class_<Stream>(m, "Stream", "A stream of commands on one node (CUDA-style).")
      .def_static("create", &Stream::create, arg("node") = -1,
                  "A new stream on node (-1: the current one) and the current device.")
      .def_prop_ro("node", &Stream::node)
      .def_prop_ro("device", &Stream::device)
      .def_prop_ro("id", &Stream::id)
      .def_prop_ro("is_default", &Stream::is_default)
      .def("wait_event", &Stream::wait, arg("event"), "Later commands wait for the event.")
      .def("wait", &Stream::wait, arg("event"))
      .def("record_event", &Stream::record_event, arg("enable_timing") = false)
      .def("query",
           [](const Stream& s) {
             nb::gil_scoped_release nogil;
             return s.query();
           })
      .def("synchronize",
           [](const Stream& s) {
             nb::gil_scoped_release nogil;
             s.synchronize();
           })
      .def("__eq__",
           [](const Stream& a, nb::handle b) {
             return nb::isinstance<Stream>(b) && a == *nb::inst_ptr<Stream>(b);
           })
      .def("__hash__",
           [](const Stream& s) {
             return std::hash<int64_t>()((int64_t(s.node()) << 32) ^ int64_t(s.id()));
           })
      .def("__repr__", [](const Stream& s) {
        return "dtr.Stream(node=" + std::to_string(s.node()) + ", id=" + std::to_string(s.id()) +
               ")";
      });
  m.def("current_stream", &current_stream, arg("node") = -1);
  m.def("default_stream", &default_stream, arg("node") = -1);
  m.def("set_stream", &set_stream, arg("stream"));
}

void bind_session_collectives(nb::module_& m) {
  m.def(
      "all_reduce",
      [](std::vector<DistributedTensor> tensors, ReduceOp op) { all_reduce(tensors, op); },
      arg("tensors"), arg("op") = ReduceOp::Sum,
      "In place: every tensor (one per node) becomes the reduction of all of them.");
  m.def(
      "broadcast",
      [](std::vector<DistributedTensor> tensors, int root) { broadcast(tensors, root); },
      arg("tensors"), arg("root"), "In place: every tensor becomes a copy of tensors[root].");
  m.def(
      "all_gather",
      [](const std::vector<DistributedTensor>& tensors) { return all_gather(tensors); },
      arg("tensors"), "Result i, on tensors[i]'s node, stacks all of them.");
  m.def(
      "reduce_scatter",
      [](const std::vector<DistributedTensor>& tensors, ReduceOp op) {
        return reduce_scatter(tensors, op);
      },
      arg("tensors"), arg("op") = ReduceOp::Sum,
      "Result i (on tensors[i]'s node) reduces rows [i*m, (i+1)*m) of every input.");
}

void bind_graphs(nb::module_& m) {
  nb::class_<Graph>(m, "Graph",
                    "A captured graph (dtr.capture): replay() runs its commands again, one "
                    "command per node.")
      .def_prop_ro("defined", &Graph::defined)
      .def_prop_ro("id", &Graph::id)
      .def_prop_ro("replays", &Graph::replays, "How many times replay() was called.")
      .def_prop_ro("nodes", &Graph::nodes, "The nodes with a part of the graph.")
      .def("commands", &Graph::commands, arg("node"), "The commands recorded for a node.")
      .def(
          "replay",
          [](Graph& g) {
            nb::gil_scoped_release nogil;
            g.replay();
          },
          "Runs the graph again (returns at once).")
      .def("reset", &Graph::reset, "Frees the graph on its workers; later replays raise.")
      .def("__repr__", [](const Graph& g) {
        return g.defined() ? "dtr.Graph(id=" + std::to_string(g.id()) +
                                 ", replays=" + std::to_string(g.replays()) + ")"
                           : std::string("dtr.Graph()");
      });
  m.def(
      "capture", [](nb::callable fn) { return capture([&] { fn(); }); }, arg("fn"),
      "Records the commands fn() issues (on any node) into a graph instead of running them; "
      "sync points inside raise InvalidArgument.");
  m.def("is_capturing", &is_capturing, "Whether this thread is inside capture().");
}

void bind_local_workers(nb::module_& m) {
  nb::class_<repl::LocalWorkers>(m, "LocalWorkers",
                                 "dtr-worker daemons on loopback, stopped by stop() or when "
                                 "garbage collected.")
      .def(
          "__init__",
          [](repl::LocalWorkers* self, int count, const std::string& binary,
             const std::string& log_level, double timeout) {
            nb::gil_scoped_release nogil;
            new (self) repl::LocalWorkers(count, binary, log_level,
                                          milliseconds(static_cast<int64_t>(timeout * 1000)));
          },
          arg("count"), arg("worker_binary"), arg("log_level") = "warn", arg("timeout") = 20.0)
      .def_prop_ro("endpoints", &repl::LocalWorkers::endpoints)
      .def_prop_ro("pids",
                   [](const repl::LocalWorkers& w) {
                     return std::vector<int>(w.pids().begin(), w.pids().end());
                   })
      .def(
          "stop",
          [](repl::LocalWorkers& w, double timeout) {
            nb::gil_scoped_release nogil;
            w.stop(milliseconds(static_cast<int64_t>(timeout * 1000)));
          },
          arg("timeout") = 5.0);
}

}  // namespace

void bind_session(nb::module_& m) {
  bind_nodes(m);
  bind_observability(m);
  bind_streams(m);
  bind_session_collectives(m);
  bind_graphs(m);
  bind_local_workers(m);
}

}  // namespace dtr::python
