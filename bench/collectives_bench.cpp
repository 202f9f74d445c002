// Collectives benchmark of the process-group library (dtr::pg), run as N ranks by dtr-exec
// (backends zmq and gloo) or by mpirun (backend mpi):
//
//   dtr-exec -n 2 build/bench/dtr_collectives_bench [--backend zmq|gloo] [--transport tcp|ipc]
//                 [--scale S] [--sizes 4,4096,...] [--ops all_reduce,broadcast,all_gather,pingpong]
//                 [--verify]
//   mpirun -np 2 --mca btl vader,self build/bench/dtr_collectives_bench --backend mpi
//                 --transport mpi-shm ...
//
// zmq reports the collectives of ranks on one host as transport "shm" (the same-host path,
// pg/zmq/shm_path.hpp; DTR_SAME_HOST=0 keeps them on --transport's sockets), and their ping-pong
// too (sends of 64 KiB or more go by address; smaller ones use --transport's sockets).
// --backend gloo reports transport "gloo"; with --backend mpi, --transport is only the label
// of the rows (mpirun's --mca btl chooses the transport). gloo and mpi run without the
// per-collective signature check (ProcessGroupOptions::verify_collectives) unless --verify
// is given, so that the rows measure the wrapper against the library called directly
// (bench/collectives_compare.sh runs both side by side); the note field says which.
//
// Method (the same as the peer baselines in ../shared/bench-peers, so that the figures can
// be put side by side): for each op and size, a barrier, then warm-up iterations (a tenth of
// the count, plus one), then `iters` back-to-back ops, each timed on its own with
// steady_clock; rank 0 reports the median and the p99 of its per-op times. iters = 256 MiB
// / bytes, clamped to [8, 2000], times --scale (at least 3). Float32 payloads.
//
// Bandwidths follow nccl-tests (PERFORMANCE.md there). algbw = bytes / time, and
//   all_reduce (SUM):  busbw = algbw * 2(n-1)/n   (bytes: the tensor reduced)
//   all_gather:        busbw = algbw * (n-1)/n    (bytes: the gathered output, n inputs)
//   broadcast (root 0) busbw = algbw              (time measured on the root)
// Ping-pong: ranks 0 and 1 bounce `bytes` back and forth (the other ranks wait in a
// barrier); time = round trip, rate = 2 * bytes / round trip.
//
// Every op's result is checked (all_reduce of ones gives n everywhere, the broadcast root's
// values arrive, each gathered slice holds its rank's value, the ping-pong payload comes
// back) and a mismatch fails the run.
//
// Output, from rank 0: one `RESULT {json}` line per measurement in the peers' format
// (suite "dtr-pg"), then a table.
//
// Thread safety: a single-threaded program.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <dtr/process_group.hpp>
#include <dtr/tensor.hpp>

namespace {

using Clock = std::chrono::steady_clock;
using dtr::local::Tensor;

struct Row {
  std::string bench;
  int64_t bytes;
  std::size_t iters;
  double median_us, p99_us, busbw_gbs;
};

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  auto idx = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(idx, v.size() - 1)];
}

std::size_t iters_for(int64_t bytes, double scale) {
  int64_t it = std::clamp<int64_t>((int64_t{256} << 20) / std::max<int64_t>(bytes, 1), 8, 2000);
  return static_cast<std::size_t>(std::max<int64_t>(3, static_cast<int64_t>(it * scale)));
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoll(item));
  return out;
}

std::vector<std::string> parse_names(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v) throw dtr::InvalidArgument(std::string("collectives_bench: ") + name + " is not set");
  return std::atoi(v);
}

std::string env_str(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

void check(bool ok, const std::string& what) {
  if (!ok) throw dtr::Error("collectives_bench: wrong result: " + what);
}

// Runs `op` warm + iters times; `prepare` runs untimed before each op. The caller
// synchronizes the ranks first (every rank calls pg.barrier(), ping-pong's idle ones too).
template <typename Prepare, typename Op>
std::vector<double> time_op(std::size_t iters, Prepare prepare, Op op) {
  std::size_t warm = iters / 10 + 1;
  std::vector<double> times;
  times.reserve(iters);
  for (std::size_t i = 0; i < warm + iters; ++i) {
    prepare();
    auto t0 = Clock::now();
    op();
    double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (i >= warm) times.push_back(us);
  }
  return times;
}

// The group: zmq and gloo meet through the TCP store of dtr-exec's MASTER_ADDR/MASTER_PORT;
// mpi is the world of mpirun's job (init_process_group, destroyed at the end).
dtr::ProcessGroup open_group(const std::string& backend, const std::string& transport,
                             bool verify) {
  if (backend == "mpi") {
    ::setenv("DTR_PG_VERIFY", verify ? "1" : "0", 1);
    dtr::init_process_group("mpi", "env://", -1, -1, "collectives_bench",
                            std::chrono::seconds(120));
    return dtr::world_group();
  }
  const int rank = env_int("RANK"), n = env_int("WORLD_SIZE");
  auto store = dtr::make_tcp_store(env_str("MASTER_ADDR", "127.0.0.1"), env_int("MASTER_PORT"),
                                   rank == 0, std::chrono::seconds(60));
  dtr::ProcessGroup::Options options;
  options.backend = backend;
  options.transport = backend == "gloo" ? "tcp" : transport;
  options.verify_collectives = verify;
  options.group_name = "collectives_bench";
  options.timeout = std::chrono::seconds(120);
  return dtr::ProcessGroup::create(store, rank, n, options);
}

std::string human_bytes(int64_t b) {
  if (b >= (1 << 20) && b % (1 << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

}  // namespace

int main(int argc, char** argv) {
  std::string transport = "tcp", ops_arg = "all_reduce,broadcast,all_gather,pingpong";
  std::string backend = "zmq";
  bool verify = false;
  double scale = 1.0;
  std::vector<int64_t> sizes;
  for (int64_t b = 4; b <= (int64_t{64} << 20); b *= 4) sizes.push_back(b);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--transport" && i + 1 < argc) {
      transport = argv[++i];
    } else if (a == "--backend" && i + 1 < argc) {
      backend = argv[++i];
    } else if (a == "--verify") {
      verify = true;
    } else if (a == "--scale" && i + 1 < argc) {
      scale = std::atof(argv[++i]);
    } else if (a == "--sizes" && i + 1 < argc) {
      sizes = parse_list(argv[++i]);
    } else if (a == "--ops" && i + 1 < argc) {
      ops_arg = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: collectives_bench [--backend zmq|gloo|mpi] [--transport tcp|ipc|LABEL] "
                   "[--scale S] [--sizes B,...] [--ops all_reduce,broadcast,all_gather,pingpong] "
                   "[--verify]\n");
      return 2;
    }
  }

  try {
    dtr::ProcessGroup pg = open_group(backend, transport, verify);
    if (backend == "gloo") transport = "gloo";
    // zmq: collectives of ranks on one host take the same-host path unless DTR_SAME_HOST=0
    // (the first collective decides), and so do sends of 64 KiB or more after it; their rows
    // say "shm" (smaller sends stay on the sockets of --transport).
    pg.barrier();
    const std::string collective_transport =
        backend == "zmq" && pg.host_path() == "shared memory" ? "shm" : transport;
    const int rank = pg.rank(), n = pg.size();
    const std::string checked = backend == "zmq" ? "" : verify ? ", checked" : ", unchecked";

    std::vector<Row> rows;
    auto report = [&](const std::string& bench, int64_t bytes, const std::vector<double>& t,
                      double factor, const char* note) {
      if (rank != 0) return;
      Row r{bench, bytes, t.size(), percentile(t, 0.5), percentile(t, 0.99), 0};
      r.busbw_gbs = factor * static_cast<double>(bytes) / r.median_us / 1e3;
      rows.push_back(r);
      std::printf(
          "RESULT {\"suite\":\"dtr-pg\",\"bench\":\"%s\",\"transport\":\"%s\",\"world\":%d,"
          "\"bytes\":%lld,\"iters\":%zu,\"median_us\":%.3f,\"p99_us\":%.3f,\"rate\":%.6g,"
          "\"unit\":\"GB/s\",\"note\":\"%s (backend %s%s)\"}\n",
          bench.c_str(), collective_transport.c_str(), n, static_cast<long long>(bytes), r.iters,
          r.median_us, r.p99_us, r.busbw_gbs, note, backend.c_str(), checked.c_str());
      std::fflush(stdout);
    };
    const double fn = n;

    for (const std::string& op : parse_names(ops_arg)) {
      for (int64_t bytes : sizes) {
        const int64_t count = std::max<int64_t>(1, bytes / 4);
        const std::size_t iters = iters_for(bytes, scale);
        pg.barrier();
        if (op == "all_reduce") {
          Tensor t = dtr::local::empty({count});
          auto times = time_op(
              iters, [&] { t.fill_(1); }, [&] { pg.all_reduce(t); });
          const float* d = t.data<float>();
          check(d[0] == fn && d[count - 1] == fn, "all_reduce");
          report("all_reduce", bytes, times, 2.0 * (n - 1) / n,
                 "ring/recursive-doubling SUM float32; rate=busbw=2(n-1)/n*bytes/time");
        } else if (op == "broadcast") {
          Tensor t = dtr::local::empty({count});
          t.fill_(rank == 0 ? 7 : 0);
          auto times = time_op(
              iters, [] {}, [&] { pg.broadcast(t, 0); });
          const float* d = t.data<float>();
          check(d[0] == 7 && d[count - 1] == 7, "broadcast");
          report("broadcast", bytes, times, 1.0, "root 0, per-op time on root; rate=bytes/time");
        } else if (op == "all_gather") {
          const int64_t per_rank = std::max<int64_t>(1, count / n);
          Tensor in = dtr::local::full({per_rank}, rank);
          Tensor out = dtr::local::empty({per_rank * n});
          auto times = time_op(
              iters, [] {}, [&] { pg.all_gather_into_tensor(out, in); });
          const float* d = out.data<float>();
          for (int r = 0; r < n; ++r)
            check(d[r * per_rank] == r && d[(r + 1) * per_rank - 1] == r, "all_gather");
          report("all_gather", per_rank * n * 4, times, (n - 1.0) / n,
                 "all_gather_into_tensor float32; bytes=output; rate=busbw=(n-1)/n*bytes/time");
        } else if (op == "pingpong") {
          Tensor t = dtr::local::empty({count});
          t.fill_(rank == 0 ? 3 : 0);
          std::vector<double> times;
          if (rank < 2) {
            times = time_op(
                iters, [] {},
                [&] {
                  if (rank == 0) {
                    pg.send(t, 1);
                    pg.recv(t, 1);
                  } else {
                    pg.recv(t, 0);
                    pg.send(t, 0);
                  }
                });
            check(t.data<float>()[count - 1] == 3, "ping-pong");
          }
          pg.barrier();
          report("sendrecv_pingpong", count * 4, times, 2.0,
                 "send/recv echo 0<->1; median_us=round trip; rate=2*bytes/rtt");
        } else {
          throw dtr::InvalidArgument("collectives_bench: unknown op " + op);
        }
      }
    }

    if (rank == 0) {
      std::printf(
          "\nworld %d, backend %s%s, transport %s, collectives on %s (rate: busbw GB/s; "
          "ping-pong: 2*bytes/rtt)\n",
          n, backend.c_str(), checked.c_str(), transport.c_str(), collective_transport.c_str());
      std::printf("%-18s %10s %7s %12s %12s %9s %10s\n", "op", "bytes", "iters", "median_us",
                  "p99_us", "p99/med", "GB/s");
      for (const Row& r : rows)
        std::printf("%-18s %10s %7zu %12.1f %12.1f %9.2f %10.4g\n", r.bench.c_str(),
                    human_bytes(r.bytes).c_str(), r.iters, r.median_us, r.p99_us,
                    r.p99_us / r.median_us, r.busbw_gbs);
      // The path the group took in the end (a lane, or why not: docs/process_groups.md).
      const std::string path = pg.host_path();
      if (!path.empty()) std::printf("path: %s\n", path.c_str());
    }
    pg.barrier();
    pg.shutdown();
    if (backend == "mpi") dtr::destroy_process_group();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collectives_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
