// dtr_gpu_bench: the CUDA backend of dtr against hand-written CUDA / cuBLAS baselines,
// each pair measured in the same run, on the same device buffers where both can use them.
//
//   1 add        a.add_(b) over two 1 GiB float32 tensors on cuda:0 (the local engine),
//                GB/s counting 3 GiB (a and b read, a written). Baseline: cudaMemcpyAsync
//                device to device of 1 GiB (b into a cudaMalloc'd buffer), GB/s counting
//                2 GiB (read + written). Goal: ratio of the two GB/s >= 0.8. Also reported
//                (info): `c = a + b` with a fresh output from dtr's caching allocator.
//   2 matmul     A.matmul(B), 8192 x 8192 float32 on cuda:0, TFLOP/s counting 2 n^3.
//                Baseline: cublasSgemm (default math mode, so FP32) on the same A and B
//                buffers into a cudaMalloc'd C. Goal: ratio >= 0.95. Also reported
//                (baseline only: dtr has no TF32 switch): cublasGemmEx with
//                CUBLAS_COMPUTE_32F_FAST_TF32. Results are checked on 64 sampled entries
//                against a double-precision reference computed on the host.
//   3 dispatch   One dtr-worker started here (the dtr-worker of this build, or
//                $DTR_WORKER_BIN) on a loopback port: N x.add_(1.0) on a 4-element float32
//                tensor on the worker's cuda:0, then dtr::synchronize(); ops/s. Baseline:
//                the same on a CPU tensor of the same worker. Goal: ratio >= 0.5. The
//                values are checked after every rep (each element == N). Also reported
//                (info), in this process: the local engine's x.add_(1.0) on cuda:0, and the
//                same on a CUDA stream with an event recorded per op (the worker's CUDA work
//                per op), each against the same kernel launched by hand (raw_kernels.cu).
//   4 copies     256 MiB float32: local::Tensor::cuda() of a host tensor and cpu() of a
//                device tensor (dtr's pinned staging) against cudaMemcpy from / to pinned
//                memory (cudaHostAlloc) to / from a cudaMalloc'd buffer; GB/s counting the
//                bytes once. No goal set. Also reported (info): cudaMemcpy from / to the
//                same pageable host memory that dtr copies from, and the staging copy
//                alone (copy_between into tensors that exist: no allocation, no first touch).
//   5 matmul16   A.matmul(B), 8192 x 8192 float16 and bfloat16 on cuda:0 (inputs: float32
//                N(0,1) draws rounded to the 16-bit type on the host), TFLOP/s counting
//                2 n^3. Baseline: cublasGemmEx with CUDA_R_16F / CUDA_R_16BF inputs and
//                output, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT, on the same A and B buffers
//                (dtr calls cublasGemmStridedBatchedEx_64 the same way). Goal: ratio >= 0.95.
//                Results are checked on 64 sampled entries against a double-precision
//                reference from the same 16-bit inputs (tolerance: check_matmul16).
//   6 rng        Agreement, not speed: rand, uniform_(-2, 3), randn and normal_(64, 3) in
//                float32, float64, float16 and bfloat16, n = 2^25 values each (--quick:
//                2^22) drawn with the same (seed, offset) on the CPU and on cuda:0; counts
//                the elements that are not bit-identical, the largest difference in ulps
//                and in value. Fails only past the claim of docs/architecture.md ("CPU and
//                CUDA draws"): rand and uniform_ must match bit for bit; randn and normal_
//                within 4 ulp in float32 / float64 and 1 ulp in float16 / bfloat16.
//
// Method: warm-up reps first, then the contestants interleaved rep by rep (order rotated),
// median of the reps per contestant; ratio = dtr rate / baseline rate (>= 1: as fast).
// Device work is timed with steady_clock between two cudaDeviceSynchronize() calls, so
// that it covers whatever stream dtr queues on. Every CUDA and cuBLAS call is checked.
// Prints a markdown table and RESULT {json} lines; exits 1 when a check or a benchmark
// fails (not when a goal is missed). Without a CUDA device it prints the table with every
// figure "not yet measured" and the reason, and exits 0.
//
// Usage: dtr_gpu_bench [--quick] [--only N] [--reps N]
//   --quick    fewer reps, ops and draws: a smoke run; figures are rough
//   --only N   run benchmark N only (1..6 as numbered above)
//   --reps N   timed reps per contestant (default 10; dispatch: 5)
//
// Thread safety: single-threaded program (the dtr master session has its own threads);
// nothing here is shared between threads.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "dtr/device.hpp"
#include "dtr/distributed.hpp"
#include "dtr/generator.hpp"
#include "dtr/half.hpp"
#include "dtr/tensor.hpp"
#include "raw_kernels.hpp"
#include "tensor/device_runtime.hpp"
#include "worker_daemon.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using dtr::DType;
using dtr::local::Tensor;

constexpr int kDevice = 0;
constexpr char kNotMeasured[] = "not yet measured";

// ---------------------------------------------------------------------------------------
// Checked CUDA and cuBLAS calls.

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(err) + ": " +
                             cudaGetErrorString(err));
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + cublasGetStatusName(status) + ": " +
                             cublasGetStatusString(status));
}

// Owned device memory from cudaMalloc.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { check_cuda(cudaMalloc(&ptr_, bytes), "cudaMalloc"); }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);  // teardown: an error here cannot be acted on
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

// Owned pinned host memory from cudaHostAlloc.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(size_t bytes) {
    check_cuda(cudaHostAlloc(&ptr_, bytes, cudaHostAllocDefault), "cudaHostAlloc");
  }
  ~PinnedBuffer() {
    if (ptr_) cudaFreeHost(ptr_);  // teardown: an error here cannot be acted on
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

class CublasHandle {
 public:
  CublasHandle() {
    check_cublas(cublasCreate(&handle_), "cublasCreate");
    // The legacy default stream, as dtr's local engine uses by default; FP32 math unless
    // a call asks for another compute type.
    check_cublas(cublasSetStream(handle_, nullptr), "cublasSetStream");
    check_cublas(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  }
  ~CublasHandle() {
    if (handle_) cublasDestroy(handle_);  // teardown: an error here cannot be acted on
  }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

// Element `index` of a device array of T.
template <typename T>
T read_device(const void* base, int64_t index) {
  T v{};
  check_cuda(cudaMemcpy(&v, static_cast<const T*>(base) + index, sizeof v, cudaMemcpyDeviceToHost),
             "cudaMemcpy (reading one element back)");
  return v;
}

// `count` (row, column) entries of an n x n matrix, from a fixed LCG: the same every run.
std::vector<std::pair<int, int>> sample_entries(int n, int count) {
  std::vector<std::pair<int, int>> out;
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (int sample = 0; sample < count; ++sample) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    int i = static_cast<int>((s >> 33) % static_cast<uint64_t>(n));
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    int j = static_cast<int>((s >> 33) % static_cast<uint64_t>(n));
    out.emplace_back(i, j);
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Timing and statistics.

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Seconds that `body` and all device work it queued take: the device is idle before.
double time_device(const std::function<void()>& body) {
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (before a timed rep)");
  auto t0 = Clock::now();
  body();
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (after a timed rep)");
  return seconds_since(t0);
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t mid = v.size() / 2;
  return v.size() % 2 ? v[mid] : 0.5 * (v[mid - 1] + v[mid]);
}

// Runs `warmup` untimed reps of every contestant, then `reps` timed reps each, interleaved
// with the order rotated per rep. A contestant returns the seconds of one rep. Returns
// the rep times per contestant.
std::vector<std::vector<double>> interleave(int warmup, int reps,
                                            const std::vector<std::function<double()>>& cs) {
  for (int w = 0; w < warmup; ++w)
    for (const auto& c : cs) c();
  std::vector<std::vector<double>> out(cs.size());
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < cs.size(); ++i) {
      size_t k = (i + static_cast<size_t>(r)) % cs.size();
      out[k].push_back(cs[k]());
    }
  return out;
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// ---------------------------------------------------------------------------------------
// The result table.

struct Row {
  Row(std::string what_, std::string goal_) : what(std::move(what_)), goal(std::move(goal_)) {}
  std::string what;
  std::string goal;
  std::string dtr = kNotMeasured;
  std::string baseline = kNotMeasured;
  std::string ratio = kNotMeasured;
};

struct Table {
  Row add{"1 add_ 1 GiB f32 (GB/s r+w): `a.add_(b)` vs cudaMemcpyAsync D2D", ">= 0.8"};
  Row add_fresh{"1 (info) `c = a + b`, fresh output from the caching allocator, vs the same", "-"};
  Row matmul{"2 matmul 8192^2 f32 (TFLOP/s): `A.matmul(B)` vs cublasSgemm", ">= 0.95"};
  Row matmul_tf32{"2 (info) matmul tf32: cublasGemmEx FAST_TF32 (baseline only)", "-"};
  Row dispatch{"3 dispatch `x.add_(1.0)`, 4 f32 (ops/s): worker cuda:0 vs worker CPU", ">= 0.5"};
  Row h2d{"4 host->device 256 MiB (GB/s): `t.cuda()` vs cudaMemcpy from pinned", "none set"};
  Row d2h{"4 device->host 256 MiB (GB/s): `t.cpu()` vs cudaMemcpy to pinned", "none set"};
  Row h2d_pageable{"4 (info) `t.cuda()` vs cudaMemcpy from the same pageable memory", "-"};
  Row d2h_pageable{"4 (info) `t.cpu()` vs cudaMemcpy to pageable memory", "-"};
  Row h2d_into{"4 (info) host->device into an existing tensor (staging alone) vs pinned", "-"};
  Row d2h_into{"4 (info) device->host into an existing tensor (staging alone) vs pinned", "-"};
  Row dispatch_local{"3 (info) in-process `x.add_(1.0)` cuda:0, local engine (ops/s) vs raw launch",
                     "-"};
  Row dispatch_local_event{
      "3 (info) in-process on a CUDA stream + event record per op (the worker's CUDA work) vs raw "
      "launch",
      "-"};
  Row matmul_f16{"5 matmul 8192^2 f16 (TFLOP/s): `A.matmul(B)` vs cublasGemmEx 16F, compute 32F",
                 ">= 0.95"};
  Row matmul_bf16{"5 matmul 8192^2 bf16 (TFLOP/s): `A.matmul(B)` vs cublasGemmEx 16BF, compute 32F",
                  ">= 0.95"};
  Row rng{"6 rng: CPU vs cuda:0 draws, 4 ops x 4 dtypes of 2^25 values (agreement, not speed)",
          "rand, uniform_ bit-identical; randn, normal_ <= 4 ulp (16-bit: 1)"};

  Table() {
    // dtr has no TF32 switch: this row is a baseline figure only.
    matmul_tf32.dtr = "- (dtr has no tf32 switch)";
    matmul_tf32.ratio = "-";
    // Values, not rates: the CPU's draws are what the device's are compared with.
    rng.baseline = "- (the CPU draws are the reference)";
    rng.ratio = "-";
  }

  std::vector<const Row*> rows() const {
    return {&add,
            &add_fresh,
            &matmul,
            &matmul_tf32,
            &dispatch,
            &dispatch_local,
            &dispatch_local_event,
            &h2d,
            &d2h,
            &h2d_pageable,
            &d2h_pageable,
            &h2d_into,
            &d2h_into,
            &matmul_f16,
            &matmul_bf16,
            &rng};
  }
};

void print_table(const Table& t) {
  std::printf("\n| what | dtr | baseline | ratio | goal |\n|---|---|---|---|---|\n");
  for (const Row* r : t.rows())
    std::printf("| %s | %s | %s | %s | %s |\n", r->what.c_str(), r->dtr.c_str(),
                r->baseline.c_str(), r->ratio.c_str(), r->goal.c_str());
  std::fflush(stdout);
}

// Fills a row from two rates (higher is better) and prints its RESULT line.
void set_rates(Row& row, const char* bench, const char* unit, double dtr_rate, double base_rate,
               double goal) {
  double ratio = dtr_rate / base_rate;
  row.dtr = fmt("%.3g ", dtr_rate) + unit;
  row.baseline = fmt("%.3g ", base_rate) + unit;
  row.ratio = fmt("%.3f", ratio);
  if (goal > 0) row.ratio += ratio >= goal ? " (met)" : " (not met)";
  std::printf(
      "RESULT {\"bench\":\"%s\",\"unit\":\"%s\",\"dtr\":%.6g,\"baseline\":%.6g,"
      "\"ratio\":%.6g}\n",
      bench, unit, dtr_rate, base_rate, ratio);
  std::fflush(stdout);
}

void mark_failed(Row& row, const std::string& why) {
  row.dtr = "failed: " + why;
  // Moved-in strings: g++ 12 warns (-Wrestrict, a false positive) on operator=("-") here.
  row.baseline = std::string("-");
  row.ratio = std::string("-");
}

// ---------------------------------------------------------------------------------------
// 1. Elementwise add against a device-to-device copy.

bool bench_add(Table& t, bool quick, int reps) {
  const int64_t n = int64_t{1} << 28;  // 1 GiB of float32
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  const int ops_per_rep = quick ? 2 : 5;
  const int warmup = 2;
  std::printf(
      "\n[1] add: a.add_(b) over 2 x 1 GiB float32 on cuda:%d, %d per rep, vs "
      "cudaMemcpyAsync D2D of 1 GiB\n",
      kDevice, ops_per_rep);
  std::fflush(stdout);

  Tensor a = dtr::local::empty({n}, dtr::DType::Float32, kDevice);
  Tensor b = dtr::local::empty({n}, dtr::DType::Float32, kDevice);
  a.fill_(1.0);
  b.fill_(2.0);
  DeviceBuffer dst(bytes);
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (add setup)");

  auto dtr_inplace = [&] {
    return time_device([&] {
      for (int i = 0; i < ops_per_rep; ++i) a.add_(b);
    });
  };
  auto dtr_fresh = [&] {
    return time_device([&] {
      for (int i = 0; i < ops_per_rep; ++i) {
        Tensor c = a + b;  // freed at once: its block goes back to the cache
      }
    });
  };
  auto memcpy_d2d = [&] {
    return time_device([&] {
      for (int i = 0; i < ops_per_rep; ++i)
        check_cuda(
            cudaMemcpyAsync(dst.get(), b.raw_data(), bytes, cudaMemcpyDeviceToDevice, nullptr),
            "cudaMemcpyAsync D2D");
    });
  };
  auto times = interleave(warmup, reps, {dtr_inplace, dtr_fresh, memcpy_d2d});
  const int64_t adds = static_cast<int64_t>(warmup + reps) * ops_per_rep;

  // Checks: a == 1 + 2 * adds, a + b == a's value + 2, the copy == 2.
  bool ok = true;
  const float expect_a = 1.0f + 2.0f * static_cast<float>(adds);
  Tensor c = a + b;
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (add check)");
  for (int64_t idx : {int64_t{0}, n / 2 + 12345, n - 1}) {
    float va = read_device<float>(a.raw_data(), idx);
    float vc = read_device<float>(c.raw_data(), idx);
    float vd = read_device<float>(dst.get(), idx);
    if (va != expect_a || vc != expect_a + 2.0f || vd != 2.0f) {
      std::printf(
          "CHECK FAILED add at %lld: a %g (want %g), a + b %g (want %g), copy %g "
          "(want 2)\n",
          static_cast<long long>(idx), va, expect_a, vc, expect_a + 2.0f, vd);
      ok = false;
    }
  }

  const double gib = static_cast<double>(bytes);
  double t_inplace = median(times[0]) / ops_per_rep;
  double t_fresh = median(times[1]) / ops_per_rep;
  double t_copy = median(times[2]) / ops_per_rep;
  double copy_rate = 2 * gib / t_copy / 1e9;
  set_rates(t.add, "add_inplace_1GiB", "GB/s", 3 * gib / t_inplace / 1e9, copy_rate, 0.8);
  set_rates(t.add_fresh, "add_fresh_1GiB", "GB/s", 3 * gib / t_fresh / 1e9, copy_rate, 0);
  return ok;
}

// ---------------------------------------------------------------------------------------
// 2. Matmul against cuBLAS.

bool bench_matmul(Table& t, bool quick, int reps) {
  const int n = 8192;
  const int64_t nn = int64_t{n} * n;
  const size_t bytes = static_cast<size_t>(nn) * sizeof(float);
  const int warmup = quick ? 1 : 2;
  std::printf(
      "\n[2] matmul: %d x %d float32 on cuda:%d, A.matmul(B) vs cublasSgemm on the "
      "same buffers (and cublasGemmEx FAST_TF32)\n",
      n, n, kDevice);
  std::fflush(stdout);

  dtr::Generator gen(2026);
  Tensor a_host = dtr::local::randn({n, n}, gen);
  Tensor b_host = dtr::local::randn({n, n}, gen);
  Tensor a = a_host.cuda(kDevice);
  Tensor b = b_host.cuda(kDevice);
  DeviceBuffer c_sgemm(bytes);
  DeviceBuffer c_tf32(bytes);
  CublasHandle handle;
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (matmul setup)");

  const float alpha = 1.0f, beta = 0.0f;
  // Row-major C = A B is column-major C^T = B^T A^T: pass B first.
  auto dtr_matmul = [&] { return time_device([&] { Tensor c = a.matmul(b); }); };
  auto sgemm = [&] {
    return time_device([&] {
      check_cublas(cublasSgemm(handle.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha,
                               static_cast<const float*>(b.raw_data()), n,
                               static_cast<const float*>(a.raw_data()), n, &beta,
                               static_cast<float*>(c_sgemm.get()), n),
                   "cublasSgemm");
    });
  };
  auto tf32 = [&] {
    return time_device([&] {
      check_cublas(
          cublasGemmEx(handle.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, b.raw_data(),
                       CUDA_R_32F, n, a.raw_data(), CUDA_R_32F, n, &beta, c_tf32.get(), CUDA_R_32F,
                       n, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx (CUBLAS_COMPUTE_32F_FAST_TF32)");
    });
  };
  auto times = interleave(warmup, reps, {dtr_matmul, sgemm, tf32});

  // Check 64 sampled entries of dtr's and cuBLAS's FP32 results against a double
  // reference. FP32 accumulation over k = 8192 of N(0,1) products errs by ~1e-3 at most;
  // TF32 inputs would err by ~1e-1, so the bound also tells FP32 from TF32.
  Tensor c = a.matmul(b);
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (matmul check)");
  const float* ah = a_host.data<float>();
  const float* bh = b_host.data<float>();
  double err_dtr = 0, err_sgemm = 0, err_tf32 = 0;
  for (auto [i, j] : sample_entries(n, 64)) {
    double ref = 0;
    for (int k = 0; k < n; ++k)
      ref +=
          static_cast<double>(ah[int64_t{i} * n + k]) * static_cast<double>(bh[int64_t{k} * n + j]);
    int64_t at = int64_t{i} * n + j;
    err_dtr = std::max(err_dtr, std::fabs(read_device<float>(c.raw_data(), at) - ref));
    err_sgemm = std::max(err_sgemm, std::fabs(read_device<float>(c_sgemm.get(), at) - ref));
    err_tf32 = std::max(err_tf32, std::fabs(read_device<float>(c_tf32.get(), at) - ref));
  }
  std::printf(
      "max abs error on 64 entries vs a double reference: dtr %.3g, cublasSgemm %.3g, "
      "tf32 %.3g\n",
      err_dtr, err_sgemm, err_tf32);
  const double tol = 1e-2;
  bool ok = err_dtr <= tol && err_sgemm <= tol;
  if (!ok) std::printf("CHECK FAILED matmul: an FP32 result errs by more than %g\n", tol);

  const double flops = 2.0 * n * static_cast<double>(n) * n;
  double dtr_rate = flops / median(times[0]) / 1e12;
  double sgemm_rate = flops / median(times[1]) / 1e12;
  double tf32_rate = flops / median(times[2]) / 1e12;
  set_rates(t.matmul, "matmul_8192_f32", "TFLOP/s", dtr_rate, sgemm_rate, 0.95);
  t.matmul_tf32.baseline = fmt("%.3g TFLOP/s", tf32_rate);
  std::printf(
      "RESULT {\"bench\":\"matmul_8192_tf32_baseline\",\"unit\":\"TFLOP/s\","
      "\"baseline\":%.6g}\n",
      tf32_rate);
  return ok;
}

// ---------------------------------------------------------------------------------------
// 3. Tiny-op dispatch through a worker: its cuda:0 against its CPU.

using dtr::bench::WorkerDaemon;

// Shuts the master session down on every way out of the dispatch benchmark.
struct SessionGuard {
  ~SessionGuard() {
    try {
      if (dtr::is_master_worker_initialized()) dtr::shutdown_master_worker();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "shutdown_master_worker: %s\n", e.what());
    }
  }
};

// The dispatch benchmarks' check: every element of `v` equals `ops` (one add_ per op).
bool all_equal(const std::vector<float>& v, int64_t ops, const char* bench, const char* where) {
  for (float e : v)
    if (e != static_cast<float>(ops)) {
      std::printf("CHECK FAILED %s (%s): an element is %g, want %lld\n", bench, where, e,
                  static_cast<long long>(ops));
      return false;
    }
  return true;
}

// In this process, the pieces of the worker's per-op cost on a CUDA tensor: the local
// engine's x.add_(1.0) on the default stream, and on a CUDA stream of its own with an event
// recorded after every op (what a dtr-worker does per op: the written tensor's event),
// against the same kernel launched by hand on that stream. Each rep starts from zeros and
// checks that every element is N afterwards.
bool bench_dispatch_local(Table& t, bool quick, int reps) {
  const int64_t ops = quick ? 20000 : 200000;
  std::printf("\n[3] in-process: %lld x.add_(1.0) on 4 float32 on cuda:%d vs raw launches\n",
              static_cast<long long>(ops), kDevice);
  std::fflush(stdout);
  Tensor x = dtr::local::zeros({4}, dtr::DType::Float32).cuda(kDevice);
  dtr::cuda::Stream stream(kDevice);
  dtr::cuda::Event written(kDevice);
  auto s = static_cast<cudaStream_t>(stream.handle());
  bool ok = true;
  auto run = [&](const char* what, const std::function<void()>& body) {
    x.fill_(0.0);
    double secs = time_device(body);
    ok &= all_equal(x.cpu().to_vector<float>(), ops, "in-process dispatch", what);
    return secs;
  };
  auto engine = [&] {
    return run("engine", [&] {
      for (int64_t i = 0; i < ops; ++i) x.add_(1.0);
    });
  };
  auto engine_event = [&] {
    return run("engine + event", [&] {
      dtr::cuda::StreamScope scope(kDevice, stream.handle());
      for (int64_t i = 0; i < ops; ++i) {
        x.add_(1.0);
        written.record(stream.handle());
      }
    });
  };
  auto launch_raw = [&] {
    check_cuda(dtr::bench::launch_add_scalar(static_cast<float*>(x.raw_data()), 1.0f, 4, s),
               "add_scalar launch");
  };
  auto raw = [&] {
    return run("raw", [&] {
      for (int64_t i = 0; i < ops; ++i) launch_raw();
    });
  };
  auto times = interleave(1, reps, {engine, engine_event, raw});
  // Host-bound or device-bound: the time to queue the launches against the time until
  // they have run (a launch returns before the kernel runs, until CUDA's queue is full).
  for (auto [what, fn] : {std::pair<const char*, std::function<void()>>{"raw launch", launch_raw},
                          {"engine x.add_(1.0)", [&] { x.add_(1.0); }}}) {
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (queue timing)");
    auto t0 = Clock::now();
    for (int64_t i = 0; i < ops; ++i) fn();
    double queued = seconds_since(t0);
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (queue timing)");
    double total = seconds_since(t0);
    std::printf("%s: %.2f us per op to queue, %.2f us per op until run\n", what,
                queued / static_cast<double>(ops) * 1e6, total / static_cast<double>(ops) * 1e6);
  }
  auto rate = [&](size_t k) { return static_cast<double>(ops) / median(times[k]); };
  set_rates(t.dispatch_local, "dispatch_local_engine", "ops/s", rate(0), rate(2), 0);
  set_rates(t.dispatch_local_event, "dispatch_local_engine_event", "ops/s", rate(1), rate(2), 0);
  return ok;
}

bool bench_dispatch(Table& t, bool quick, int reps) {
  const int64_t ops = quick ? 20000 : 200000;
  const int warmup = 1;
  std::printf(
      "\n[3] dispatch: %lld x.add_(1.0) on a 4-element float32 tensor then "
      "synchronize(), on the worker's cuda:%d vs its CPU\n",
      static_cast<long long>(ops), kDevice);
  std::fflush(stdout);

  WorkerDaemon worker;
  SessionGuard session;
  dtr::MasterOptions options;
  options.workers = {worker.endpoint()};
  options.connect_timeout = std::chrono::milliseconds(30000);
  options.sync_timeout = std::chrono::milliseconds(300000);
  dtr::init_master_worker(options);
  if (dtr::device_count(0) <= kDevice) {
    mark_failed(t.dispatch, "the worker reports no CUDA device");
    std::printf("the worker reports %d CUDA devices\n", dtr::device_count(0));
    return false;
  }

  dtr::DistributedTensor x_cuda, x_cpu = dtr::zeros({4});
  {
    dtr::device_guard on(kDevice);
    x_cuda = dtr::zeros({4});
  }
  if (x_cuda.get_device() != kDevice || x_cpu.get_device() != -1)
    throw std::runtime_error("dispatch: the tensors are not where they were asked to be");
  dtr::synchronize();

  bool ok = true;
  auto run = [&](dtr::DistributedTensor& x, const char* where) {
    x.fill_(0.0);
    dtr::synchronize();
    auto t0 = Clock::now();
    for (int64_t i = 0; i < ops; ++i) x.add_(1.0);
    dtr::synchronize();
    double secs = seconds_since(t0);
    ok &= all_equal(x.cpu().to_local().to_vector<float>(), ops, "dispatch", where);
    return secs;
  };
  auto times = interleave(warmup, reps,
                          {[&] { return run(x_cuda, "cuda"); }, [&] { return run(x_cpu, "cpu"); }});
  double cuda_rate = static_cast<double>(ops) / median(times[0]);
  double cpu_rate = static_cast<double>(ops) / median(times[1]);
  set_rates(t.dispatch, "dispatch_add_4", "ops/s", cuda_rate, cpu_rate, 0.5);
  return ok;
}

// ---------------------------------------------------------------------------------------
// 4. Host <-> device copies.

bool same_bytes(const void* got, const void* want, size_t bytes, const char* what) {
  if (std::memcmp(got, want, bytes) == 0) return true;
  std::printf("CHECK FAILED copies: %s differs from the source\n", what);
  return false;
}

// The copy rows from bench_copies' rep times (contestants in its order).
void set_copy_rates(Table& t, const std::vector<std::vector<double>>& times, size_t bytes) {
  const double gb = static_cast<double>(bytes) / 1e9;
  auto rate = [&](size_t k) { return gb / median(times[k]); };
  set_rates(t.h2d, "h2d_256MiB_vs_pinned", "GB/s", rate(0), rate(1), 0);
  set_rates(t.h2d_pageable, "h2d_256MiB_vs_pageable", "GB/s", rate(0), rate(2), 0);
  set_rates(t.d2h, "d2h_256MiB_vs_pinned", "GB/s", rate(3), rate(4), 0);
  set_rates(t.d2h_pageable, "d2h_256MiB_vs_pageable", "GB/s", rate(3), rate(5), 0);
  set_rates(t.h2d_into, "h2d_into_256MiB_vs_pinned", "GB/s", rate(6), rate(1), 0);
  set_rates(t.d2h_into, "d2h_into_256MiB_vs_pinned", "GB/s", rate(7), rate(4), 0);
}

bool bench_copies(Table& t, bool quick, int reps) {
  const int64_t n = int64_t{1} << 26;  // 256 MiB of float32
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  const int warmup = quick ? 1 : 2;
  std::printf(
      "\n[4] copies: 256 MiB float32, t.cuda() / t.cpu() vs cudaMemcpy from / to "
      "pinned memory (and the same pageable memory)\n");
  std::fflush(stdout);

  Tensor host = dtr::local::empty({n}, dtr::DType::Float32);
  float* hp = host.data<float>();
  for (int64_t i = 0; i < n; ++i) hp[i] = static_cast<float>(i % 1000003) * 0.5f;
  Tensor dev = host.cuda(kDevice);  // the source of the device-to-host copies
  PinnedBuffer pinned(bytes);
  std::memcpy(pinned.get(), hp, bytes);
  std::vector<float> pageable_back(static_cast<size_t>(n));
  DeviceBuffer dev_raw(bytes);
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (copies setup)");

  // The previous result is dropped before the timed region (a 256 MiB host free is a
  // munmap); the fresh result's allocation is part of cuda()/cpu() and is timed.
  Tensor last_h2d, last_d2h;
  auto dtr_h2d = [&] {
    last_h2d = Tensor();
    return time_device([&] { last_h2d = host.cuda(kDevice); });
  };
  auto pinned_h2d = [&] {
    return time_device([&] {
      check_cuda(cudaMemcpy(dev_raw.get(), pinned.get(), bytes, cudaMemcpyHostToDevice),
                 "cudaMemcpy H2D from pinned");
    });
  };
  auto pageable_h2d = [&] {
    return time_device([&] {
      check_cuda(cudaMemcpy(dev_raw.get(), hp, bytes, cudaMemcpyHostToDevice),
                 "cudaMemcpy H2D from pageable");
    });
  };
  auto dtr_d2h = [&] {
    last_d2h = Tensor();
    return time_device([&] { last_d2h = dev.cpu(); });
  };
  auto pinned_d2h = [&] {
    return time_device([&] {
      check_cuda(cudaMemcpy(pinned.get(), dev.raw_data(), bytes, cudaMemcpyDeviceToHost),
                 "cudaMemcpy D2H to pinned");
    });
  };
  auto pageable_d2h = [&] {
    return time_device([&] {
      check_cuda(cudaMemcpy(pageable_back.data(), dev.raw_data(), bytes, cudaMemcpyDeviceToHost),
                 "cudaMemcpy D2H to pageable");
    });
  };
  // The staging copy alone: into tensors that exist (no allocation, no first touch).
  Tensor dev_into = dtr::local::empty({n}, dtr::DType::Float32, kDevice);
  Tensor host_into = dtr::local::zeros({n}, dtr::DType::Float32);
  auto into = [&](const Tensor& dst, const Tensor& src) {
    return time_device([&] { dtr::cuda::copy_between(dst, src); });
  };
  auto times =
      interleave(warmup, reps,
                 {dtr_h2d, pinned_h2d, pageable_h2d, dtr_d2h, pinned_d2h, pageable_d2h,
                  [&] { return into(dev_into, host); }, [&] { return into(host_into, dev); }});

  // Checks: every copy holds the host tensor's bytes.
  if (last_h2d.device() != kDevice || last_d2h.device() != -1)
    throw std::runtime_error("copies: cuda()/cpu() returned a tensor on the wrong device");
  bool ok = same_bytes(last_d2h.raw_data(), hp, bytes, "t.cpu()");
  ok &= same_bytes(host_into.raw_data(), hp, bytes, "copy_between into a host tensor");
  ok &= same_bytes(pinned.get(), hp, bytes, "cudaMemcpy D2H to pinned");
  ok &= same_bytes(pageable_back.data(), hp, bytes, "cudaMemcpy D2H to pageable");
  for (auto [dev_ptr, what] : {std::pair<const void*, const char*>{last_h2d.raw_data(), "t.cuda()"},
                               {dev_into.raw_data(), "copy_between into a device tensor"},
                               {dev_raw.get(), "cudaMemcpy H2D"}}) {
    check_cuda(cudaMemcpy(pageable_back.data(), dev_ptr, bytes, cudaMemcpyDeviceToHost),
               "cudaMemcpy (reading a copy back)");
    ok &= same_bytes(pageable_back.data(), hp, bytes, what);
  }
  set_copy_rates(t, times, bytes);
  return ok;
}

// ---------------------------------------------------------------------------------------
// 5. float16 / bfloat16 matmul against cublasGemmEx.

// Checks 64 sampled entries of dtr's and cuBLAS's n x n products in H (float16 or bfloat16)
// against a double reference computed from the same 16-bit inputs. Bound per entry:
// |err| <= eps_H * (|ref| + sqrt(n)), eps_H the type's epsilon (2^-10 float16, 2^-7
// bfloat16). Why: a product of two 16-bit values is exact in float and CUBLAS_COMPUTE_32F
// sums in float, which over k = n = 8192 N(0,1) products (|sum| ~ sqrt(k) ~ 90) errs by
// ~1e-3; what remains is rounding the float sum to H, at most half an ulp <= eps_H / 2 *
// |ref| (~0.03 float16, ~0.25 bfloat16 at 90). eps_H * |ref| is twice that: room for one
// more rounding to H, which cuBLAS may do in this program's default math mode when it
// splits k and reduces the partial sums in the output type (dtr's handles disallow that);
// eps_H * sqrt(k) (0.09 float16, 0.7 bfloat16) is the slack for entries near zero. Sums
// accumulated in 16 bits would err by ~2 (float16) or ~10 (bfloat16) at 90, a wrong
// layout by ~100: both are far past the bound.
template <typename H>
bool check_matmul16(const Tensor& a_host, const Tensor& b_host, const void* c_dtr,
                    const void* c_blas, int n, const char* name) {
  const H* ah = a_host.data<H>();
  const H* bh = b_host.data<H>();
  const double eps = static_cast<float>(std::numeric_limits<H>::epsilon());
  const double slack = std::sqrt(static_cast<double>(n));
  double err_dtr = 0, err_blas = 0, worst_dtr = 0, worst_blas = 0;  // worst: err / bound
  for (auto [i, j] : sample_entries(n, 64)) {
    double ref = 0;
    for (int k = 0; k < n; ++k)
      ref += static_cast<double>(static_cast<float>(ah[int64_t{i} * n + k])) *
             static_cast<double>(static_cast<float>(bh[int64_t{k} * n + j]));
    const int64_t at = int64_t{i} * n + j;
    const double bound = eps * (std::fabs(ref) + slack);
    const double e_dtr = std::fabs(static_cast<float>(read_device<H>(c_dtr, at)) - ref);
    const double e_blas = std::fabs(static_cast<float>(read_device<H>(c_blas, at)) - ref);
    err_dtr = std::max(err_dtr, e_dtr);
    err_blas = std::max(err_blas, e_blas);
    worst_dtr = std::max(worst_dtr, e_dtr / bound);
    worst_blas = std::max(worst_blas, e_blas / bound);
  }
  std::printf(
      "%s: max abs error on 64 entries vs a double reference: dtr %.3g, cublasGemmEx %.3g; "
      "largest error / bound (eps %g * (|ref| + sqrt(k))): dtr %.3f, cublasGemmEx %.3f\n",
      name, err_dtr, err_blas, eps, worst_dtr, worst_blas);
  const bool ok = worst_dtr <= 1 && worst_blas <= 1;
  if (!ok) std::printf("CHECK FAILED matmul16 %s: a result errs past the bound\n", name);
  return ok;
}

// Benchmark 5 for one 16-bit type H (dtr::float16 or dtr::bfloat16), into `row`.
template <typename H>
bool bench_matmul16(Row& row, const char* bench, bool quick, int reps) {
  const int n = 8192;
  const int64_t nn = int64_t{n} * n;
  const bool f16 = std::is_same_v<H, dtr::float16>;
  const char* name = f16 ? "float16" : "bfloat16";
  const DType dtype = dtr::dtype_of_v<H>;
  const cudaDataType_t type = f16 ? CUDA_R_16F : CUDA_R_16BF;
  const int warmup = quick ? 1 : 2;
  std::printf(
      "\n[5] matmul16: %d x %d %s on cuda:%d, A.matmul(B) vs cublasGemmEx (%s, "
      "CUBLAS_COMPUTE_32F) on the same buffers\n",
      n, n, name, kDevice, f16 ? "CUDA_R_16F" : "CUDA_R_16BF");
  std::fflush(stdout);

  // float32 N(0,1) draws rounded to H (nearest even) on the host, then copied over.
  dtr::Generator gen(f16 ? 2027 : 2028);
  Tensor a_host = dtr::local::randn({n, n}, gen).to(dtype);
  Tensor b_host = dtr::local::randn({n, n}, gen).to(dtype);
  Tensor a = a_host.cuda(kDevice);
  Tensor b = b_host.cuda(kDevice);
  DeviceBuffer c_gemm(static_cast<size_t>(nn) * sizeof(H));
  CublasHandle handle;
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (matmul16 setup)");

  const float alpha = 1.0f, beta = 0.0f;  // CUBLAS_COMPUTE_32F takes float scalars
  // Row-major C = A B is column-major C^T = B^T A^T: pass B first.
  auto dtr_matmul = [&] { return time_device([&] { Tensor c = a.matmul(b); }); };
  auto gemm_ex = [&] {
    return time_device([&] {
      check_cublas(cublasGemmEx(handle.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha,
                                b.raw_data(), type, n, a.raw_data(), type, n, &beta, c_gemm.get(),
                                type, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx (CUBLAS_COMPUTE_32F)");
    });
  };
  auto times = interleave(warmup, reps, {dtr_matmul, gemm_ex});

  Tensor c = a.matmul(b);
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (matmul16 check)");
  if (c.dtype() != dtype || c.device() != kDevice)
    throw std::runtime_error("matmul16: the product is not a cuda:0 tensor of the inputs' dtype");
  bool ok = check_matmul16<H>(a_host, b_host, c.raw_data(), c_gemm.get(), n, name);

  const double flops = 2.0 * n * static_cast<double>(n) * n;
  set_rates(row, bench, "TFLOP/s", flops / median(times[0]) / 1e12, flops / median(times[1]) / 1e12,
            0.95);
  return ok;
}

// ---------------------------------------------------------------------------------------
// 6. CPU and CUDA random draws: agreement, not speed.

// A random op as drawn here: the creation ops rand and randn, and the in-place fills
// uniform_ and normal_ with parameters other than the defaults (their kernels are other
// code: Uniform and Normal in tensor/cuda/kernels_misc.cu, which scale and shift in double).
// normal_'s mean keeps every value >= 38 (|z| <= 8.6 with 53-bit uniforms): near zero, a
// last-bit difference of z would be any number of ulps of the cancelled sum.
struct RngOp {
  const char* name;
  dtr::OpId op;
  double a, b;  // uniform_: from, to; normal_: mean, stddev; unused by rand and randn
  bool exact;   // docs/architecture.md claims bit-identical draws
};

constexpr RngOp kRngOps[] = {
    {"rand", dtr::OpId::rand, 0, 0, true},
    {"uniform_(-2, 3)", dtr::OpId::uniform_, -2.0, 3.0, true},
    {"randn", dtr::OpId::randn, 0, 0, false},
    {"normal_(64, 3)", dtr::OpId::normal_, 64.0, 3.0, false},
};

// The largest difference in ulps a case may show, from docs/architecture.md ("CPU and CUDA
// draws"): rand and uniform_ none. randn and normal_: libdevice's log and cos are within
// 1-2 ulp of glibc's, so a float64 draw may differ in its last bits (4 ulp allows the two
// errors plus the final rounding), a float32 one (rounded from double) by 1 ulp in about one
// draw in 10^8 (4 as for float64); a float16 / bfloat16 draw is a float32 draw rounded, so
// at most 1 ulp.
uint64_t rng_bound_ulp(const RngOp& r, DType dtype) {
  if (r.exact) return 0;
  return dtype == DType::Float16 || dtype == DType::BFloat16 ? 1 : 4;
}

// n values of `r` in `dtype` on `device` (-1: the host) at (seed, offset).
Tensor rng_draw(const RngOp& r, DType dtype, int device, int64_t n, uint64_t seed,
                uint64_t offset) {
  if (r.op == dtr::OpId::rand || r.op == dtr::OpId::randn)
    return dtr::local::execute(r.op, {}, dtr::creation::random({n}, dtype, seed, offset), false,
                               device);
  Tensor t = dtr::local::empty({n}, dtype, device);
  dtr::Generator gen(seed);
  gen.advance(offset);
  if (r.op == dtr::OpId::uniform_)
    t.uniform_(r.a, r.b, gen);
  else
    t.normal_(r.a, r.b, gen);
  return t;
}

struct Agreement {
  int64_t mismatches = 0;  // elements that are not bit-identical
  uint64_t max_ulp = 0;
  double max_abs = 0;
};

// Ulps between two floats of `bits` width given as their encodings: their distance in
// the monotonic order of sign-magnitude values (+0 and -0 are both 0; no overflow, since
// each magnitude is below 2^63).
uint64_t ulp_distance(uint64_t x, uint64_t y, int bits) {
  const uint64_t sign = uint64_t{1} << (bits - 1);
  const uint64_t mx = x & (sign - 1), my = y & (sign - 1);
  if ((x & sign) == (y & sign)) return mx > my ? mx - my : my - mx;
  return mx + my;
}

// T: the element type; U: the unsigned integer of its width. Both tensors on the host.
template <typename T, typename U>
Agreement compare_draws(const Tensor& cpu, const Tensor& gpu) {
  static_assert(sizeof(T) == sizeof(U));
  const T* pc = static_cast<const T*>(cpu.raw_data());
  const T* pg = static_cast<const T*>(gpu.raw_data());
  Agreement r;
  for (int64_t i = 0; i < cpu.numel(); ++i) {
    const U xc = std::bit_cast<U>(pc[i]), xg = std::bit_cast<U>(pg[i]);
    if (xc == xg) continue;
    ++r.mismatches;
    r.max_ulp = std::max(r.max_ulp, ulp_distance(xc, xg, 8 * sizeof(U)));
    r.max_abs =
        std::max(r.max_abs, std::fabs(static_cast<double>(pc[i]) - static_cast<double>(pg[i])));
  }
  return r;
}

Agreement compare_draws(const Tensor& cpu, const Tensor& gpu) {
  if (gpu.dtype() != cpu.dtype() || gpu.numel() != cpu.numel() || gpu.device() != -1 ||
      !gpu.is_contiguous() || !cpu.is_contiguous())
    throw std::runtime_error("rng: the two draws are not alike contiguous host tensors");
  switch (cpu.dtype()) {
    case DType::Float32:
      return compare_draws<float, uint32_t>(cpu, gpu);
    case DType::Float64:
      return compare_draws<double, uint64_t>(cpu, gpu);
    case DType::Float16:
      return compare_draws<dtr::float16, uint16_t>(cpu, gpu);
    case DType::BFloat16:
      return compare_draws<dtr::bfloat16, uint16_t>(cpu, gpu);
    default:
      throw std::runtime_error("rng: not a floating dtype");
  }
}

bool bench_rng(Table& t, bool quick) {
  const int64_t n = int64_t{1} << (quick ? 22 : 25);
  const uint64_t seed = 0x0123456789abcdefull;  // both 32-bit halves of the key in use
  // The draws cross counter 2^32, where the counter's high word changes.
  const uint64_t offset = (uint64_t{1} << 32) - (uint64_t{1} << 20);
  const DType dtypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
  std::printf(
      "\n[6] rng: %lld values per case, seed %#llx, offset %llu, on the CPU and on cuda:%d; "
      "agreement, not speed\n\n| op | dtype | n | not bit-identical | max ulp | max abs diff "
      "| bound (ulp) | within |\n|---|---|---|---|---|---|---|---|\n",
      static_cast<long long>(n), static_cast<unsigned long long>(seed),
      static_cast<unsigned long long>(offset), kDevice);
  std::fflush(stdout);

  int cases = 0, identical = 0, past = 0;
  uint64_t worst_ulp = 0;  // over randn and normal_
  for (const RngOp& r : kRngOps)
    for (DType dtype : dtypes) {
      Tensor on_cpu = rng_draw(r, dtype, -1, n, seed, offset);
      Tensor on_gpu = rng_draw(r, dtype, kDevice, n, seed, offset).cpu();
      const Agreement g = compare_draws(on_cpu, on_gpu);
      const uint64_t bound = rng_bound_ulp(r, dtype);
      const bool within = g.max_ulp <= bound;  // bound 0: no mismatch at all
      const std::string dt(dtr::dtype_name(dtype));
      ++cases;
      identical += g.mismatches == 0;
      past += !within;
      if (!r.exact) worst_ulp = std::max(worst_ulp, g.max_ulp);
      std::printf("| %s | %s | %lld | %lld | %llu | %.3g | %llu | %s |\n", r.name, dt.c_str(),
                  static_cast<long long>(n), static_cast<long long>(g.mismatches),
                  static_cast<unsigned long long>(g.max_ulp), g.max_abs,
                  static_cast<unsigned long long>(bound), within ? "yes" : "NO");
      std::printf(
          "RESULT {\"bench\":\"rng_agreement\",\"op\":\"%s\",\"dtype\":\"%s\",\"n\":%lld,"
          "\"mismatches\":%lld,\"max_ulp\":%llu,\"max_abs_diff\":%.6g,\"bound_ulp\":%llu,"
          "\"within\":%s}\n",
          r.name, dt.c_str(), static_cast<long long>(n), static_cast<long long>(g.mismatches),
          static_cast<unsigned long long>(g.max_ulp), g.max_abs,
          static_cast<unsigned long long>(bound), within ? "true" : "false");
      std::fflush(stdout);
    }

  t.rng.dtr = "n = " + std::to_string(n) + ": " + std::to_string(identical) + " of " +
              std::to_string(cases) + " cases bit-identical; randn/normal_ max " +
              std::to_string(worst_ulp) + " ulp; " +
              (past == 0 ? "all within bound" : std::to_string(past) + " past bound");
  if (past != 0) std::printf("CHECK FAILED rng: %d of %d cases past their bound\n", past, cases);
  return past == 0;
}

int usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [--quick] [--only N (1..6)] [--reps N]\n", argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int only = 0;
  int reps = -1;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if ((arg == "--only" || arg == "--reps") && i + 1 < argc) {
      char* end = nullptr;
      long v = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || v < 1 || v > 1000) return usage(argv[0]);
      (arg == "--only" ? only : reps) = static_cast<int>(v);
    } else {
      return usage(argv[0]);
    }
  }
  if (only > 6) return usage(argv[0]);

  std::printf("dtr_gpu_bench: the CUDA backend vs CUDA/cuBLAS baselines in the same run\n");
  Table table;
  int devices = dtr::cuda_device_count();
  if (devices == 0) {
    std::string reason = dtr::cuda_unavailable_reason();
    print_table(table);
    std::printf("\nNo figure was measured: no CUDA device (%s).\n",
                reason.empty() ? "none reported" : reason.c_str());
    return 0;
  }

  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, kDevice), "cudaGetDeviceProperties");
  int runtime_version = 0, driver_version = 0;
  check_cuda(cudaRuntimeGetVersion(&runtime_version), "cudaRuntimeGetVersion");
  check_cuda(cudaDriverGetVersion(&driver_version), "cudaDriverGetVersion");
  std::printf("device %d of %d: %s (sm_%d%d, %d SMs, %.1f GiB), CUDA runtime %d, driver %d\n",
              kDevice, devices, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
              static_cast<double>(prop.totalGlobalMem) / (1 << 30), runtime_version,
              driver_version);
  check_cuda(cudaSetDevice(kDevice), "cudaSetDevice");

  const int timed = reps > 0 ? reps : (quick ? 3 : 10);
  const int dispatch_reps = reps > 0 ? reps : (quick ? 2 : 5);
  bool ok = true;
  auto guarded = [&](int which, std::vector<Row*> rows, const std::function<bool()>& body) {
    if (only != 0 && only != which) return;
    try {
      if (!body()) ok = false;
    } catch (const std::exception& e) {
      std::printf("benchmark %d failed: %s\n", which, e.what());
      for (Row* r : rows) mark_failed(*r, e.what());
      ok = false;
    }
    std::fflush(stdout);
  };
  guarded(1, {&table.add, &table.add_fresh}, [&] { return bench_add(table, quick, timed); });
  guarded(2, {&table.matmul, &table.matmul_tf32},
          [&] { return bench_matmul(table, quick, timed); });
  guarded(5, {&table.matmul_f16}, [&] {
    return bench_matmul16<dtr::float16>(table.matmul_f16, "matmul_8192_f16", quick, timed);
  });
  guarded(5, {&table.matmul_bf16}, [&] {
    return bench_matmul16<dtr::bfloat16>(table.matmul_bf16, "matmul_8192_bf16", quick, timed);
  });
  guarded(4,
          {&table.h2d, &table.d2h, &table.h2d_pageable, &table.d2h_pageable, &table.h2d_into,
           &table.d2h_into},
          [&] { return bench_copies(table, quick, timed); });
  guarded(6, {&table.rng}, [&] { return bench_rng(table, quick); });
  guarded(3, {&table.dispatch_local, &table.dispatch_local_event},
          [&] { return bench_dispatch_local(table, quick, dispatch_reps); });
  // Last: the worker is a second process on the same GPU.
  guarded(3, {&table.dispatch}, [&] { return bench_dispatch(table, quick, dispatch_reps); });

  print_table(table);
  std::printf("\nratio = dtr / baseline (>= 1: as fast); medians of %d reps (dispatch: %d)%s\n",
              timed, dispatch_reps, ok ? "" : "; SOME CHECK OR BENCHMARK FAILED (see above)");
  return ok ? 0 : 1;
}
