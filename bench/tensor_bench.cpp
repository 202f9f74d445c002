// dtr_tensor_bench: the CPU op table against hand-written Eigen, in one run, on the same
// buffers.
//
//   add_64MiB      c = a + b over 16 Mi float32 (64 MiB per array)
//                  - eigen                 Map<ArrayXf>(c) = Map<ArrayXf>(a) + Map<ArrayXf>(b)
//                  - op_table_run_kernel   run_kernel(OpId::add, {a, b}, {}, out), out preallocated
//                  - op_table_execute      execute(OpId::add, {a, b}, {}, false), fresh output
//                                          each rep (shows allocation + page-fault cost)
//                  - eigen_fresh_output    ArrayXf c = Map(a) + Map(b): the same fresh-output
//                                          cost without the op table, to compare execute with
//   matmul_1024    C = A * B, 1024 x 1024 float32, row-major
//                  - eigen                 Map<row-major>(C).noalias() = Map(A) * Map(B)
//                  - op_table_run_kernel   run_kernel(OpId::matmul, {A, B}, {}, out)
//                  - op_table_matmul       A.matmul(B) (fresh 4 MiB output)
//
// Method: warm-up reps of every contestant, then the contestants are interleaved rep by rep
// (the order rotated each rep) so that machine noise hits all of them alike. Reported per
// contestant: median, p10 and p90 time, throughput (GB/s = 3 * bytes / time for add,
// GFLOP/s = 2 n^3 / time for matmul), ratio_vs_eigen = median(eigen) / median(impl)
// (>= 1: the op table is as fast as Eigen) and the median of the per-rep paired ratios.
// Results are checked (max abs diff against Eigen and against a plain reference); the exit
// status is 1 when a check fails.
//
// Usage: dtr_tensor_bench [--reps N] [--warmup N]
//   --reps N     timed reps per contestant for both benchmarks (default 30 add, 20 matmul)
//   --warmup N   untimed reps per contestant first (default 3)
//
// Single-threaded: the project builds without OpenMP and Eigen is pinned to one thread.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "dtr/op_table.hpp"
#include "dtr/tensor.hpp"

namespace {

using dtr::OpId;
using dtr::local::Tensor;

// Keeps the compiler from moving or dropping memory work across the timer reads.
inline void clobber_memory() {
  asm volatile("" : : : "memory");
}

struct Contestant {
  std::string impl;
  std::function<void()> run;      // timed
  std::function<void()> cleanup;  // untimed, after each run (may be empty)
  std::vector<double> us;         // per timed rep
};

struct Stats {
  double median = 0, p10 = 0, p90 = 0;
};

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  double pos = q * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, v.size() - 1);
  double frac = pos - static_cast<double>(lo);
  return v[lo] * (1.0 - frac) + v[hi] * frac;
}

Stats stats_of(const std::vector<double>& v) {
  return Stats{percentile(v, 0.5), percentile(v, 0.1), percentile(v, 0.9)};
}

// Warm-up, then `reps` interleaved rounds; round r starts with contestant r % k.
void run_interleaved(std::vector<Contestant>& cs, int warmup, int reps) {
  using clock = std::chrono::steady_clock;
  for (int w = 0; w < warmup; ++w)
    for (auto& c : cs) {
      c.run();
      clobber_memory();
      if (c.cleanup) c.cleanup();
    }
  for (auto& c : cs) c.us.reserve(static_cast<size_t>(reps));
  const size_t k = cs.size();
  for (int r = 0; r < reps; ++r) {
    for (size_t j = 0; j < k; ++j) {
      Contestant& c = cs[(static_cast<size_t>(r) + j) % k];
      clobber_memory();
      auto t0 = clock::now();
      c.run();
      clobber_memory();
      auto t1 = clock::now();
      if (c.cleanup) c.cleanup();
      c.us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
  }
}

void fill_uniform(float* p, int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) p[i] = dist(gen);
}

float max_abs_diff(const float* x, const float* y, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) {
    float d = std::fabs(x[i] - y[i]);
    if (!(d <= m)) m = d;  // NaN propagates as a failure
  }
  return m;
}

struct Row {
  std::string bench, impl;
  Stats s;
  double throughput;      // GB/s or GFLOP/s
  const char* tp_unit;    // "gbps" or "gflops"
  double ratio_vs_eigen;  // median(eigen) / median(impl)
  double paired_ratio;    // median over reps of eigen_us[r] / impl_us[r]
  double max_abs_diff;    // against eigen's result
  int reps;
};

void report(const std::string& bench, const std::vector<Contestant>& cs, double work,
            const char* tp_unit, const std::vector<double>& diffs, std::vector<Row>& rows) {
  const Contestant& base = cs[0];  // eigen is always first
  Stats bs = stats_of(base.us);
  for (size_t i = 0; i < cs.size(); ++i) {
    const Contestant& c = cs[i];
    Row row;
    row.bench = bench;
    row.impl = c.impl;
    row.s = stats_of(c.us);
    row.throughput = work / (row.s.median * 1e-6) / 1e9;
    row.tp_unit = tp_unit;
    row.ratio_vs_eigen = bs.median / row.s.median;
    std::vector<double> paired(c.us.size());
    for (size_t r = 0; r < c.us.size(); ++r) paired[r] = base.us[r] / c.us[r];
    row.paired_ratio = percentile(paired, 0.5);
    row.max_abs_diff = diffs[i];
    row.reps = static_cast<int>(c.us.size());
    rows.push_back(row);
  }
}

void print_table(const std::vector<Row>& rows) {
  std::printf("\n%-12s %-22s %11s %11s %11s %12s %9s %9s %12s\n", "bench", "impl", "median_us",
              "p10_us", "p90_us", "throughput", "ratio", "paired", "max_abs_diff");
  std::printf("%s\n", std::string(115, '-').c_str());
  for (const Row& r : rows) {
    char tp[32];
    std::snprintf(tp, sizeof tp, "%.1f %s", r.throughput,
                  std::strcmp(r.tp_unit, "gbps") == 0 ? "GB/s" : "GF/s");
    std::printf("%-12s %-22s %11.1f %11.1f %11.1f %12s %9.3f %9.3f %12.3g\n", r.bench.c_str(),
                r.impl.c_str(), r.s.median, r.s.p10, r.s.p90, tp, r.ratio_vs_eigen, r.paired_ratio,
                r.max_abs_diff);
  }
  std::printf(
      "(ratio = median(eigen) / median(impl); >= 1 means as fast as Eigen. paired = median\n"
      " of per-rep ratios. max_abs_diff: against eigen's result; eigen's own row is against\n"
      " a plain reference: the scalar loop for add, double precision on 256 entries for "
      "matmul.)\n\n");
  for (const Row& r : rows) {
    std::printf(
        "RESULT {\"bench\":\"%s\",\"impl\":\"%s\",\"median_us\":%.3f,\"p10_us\":%.3f,"
        "\"p90_us\":%.3f,\"%s\":%.3f,\"ratio_vs_eigen\":%.4f,\"paired_ratio_vs_eigen\":%.4f,"
        "\"max_abs_diff\":%.6g,\"reps\":%d}\n",
        r.bench.c_str(), r.impl.c_str(), r.s.median, r.s.p10, r.s.p90, r.tp_unit, r.throughput,
        r.ratio_vs_eigen, r.paired_ratio, r.max_abs_diff, r.reps);
  }
}

bool bench_add(int warmup, int reps, std::vector<Row>& rows) {
  constexpr int64_t n = int64_t{16} << 20;  // 16 Mi floats = 64 MiB
  const double bytes = static_cast<double>(n) * sizeof(float);
  Tensor a = dtr::local::empty({n});
  Tensor b = dtr::local::empty({n});
  Tensor c_eigen = dtr::local::empty({n});
  Tensor c_rk = dtr::local::empty({n});
  fill_uniform(a.data<float>(), n, 1);
  fill_uniform(b.data<float>(), n, 2);
  std::fill_n(c_eigen.data<float>(), n, 0.0f);  // fault the output pages in, both alike
  std::fill_n(c_rk.data<float>(), n, 0.0f);
  const std::array<Tensor, 2> inputs{a, b};
  const dtr::OpAttrs attrs{};
  Tensor fresh;

  std::vector<Contestant> cs;
  cs.push_back({"eigen",
                [&] {
                  Eigen::Map<Eigen::ArrayXf>(c_eigen.data<float>(), n) =
                      Eigen::Map<const Eigen::ArrayXf>(a.data<float>(), n) +
                      Eigen::Map<const Eigen::ArrayXf>(b.data<float>(), n);
                },
                {},
                {}});
  cs.push_back({"op_table_run_kernel",
                [&] { dtr::local::run_kernel(OpId::add, inputs, attrs, c_rk); },
                {},
                {}});
  cs.push_back({"op_table_execute",
                [&] { fresh = dtr::local::execute(OpId::add, inputs, attrs, false); },
                [&] { fresh = Tensor(); },  // free outside the timed region
                {}});
  // Eigen into a freshly allocated array: what a fresh output costs without the op table.
  Eigen::ArrayXf fresh_eigen;
  cs.push_back({"eigen_fresh_output",
                [&] {
                  fresh_eigen = Eigen::Map<const Eigen::ArrayXf>(a.data<float>(), n) +
                                Eigen::Map<const Eigen::ArrayXf>(b.data<float>(), n);
                },
                [&] { Eigen::ArrayXf().swap(fresh_eigen); },
                {}});
  run_interleaved(cs, warmup, reps);

  // Checks: every result against eigen's, and eigen's against the plain sum.
  fresh = dtr::local::execute(OpId::add, inputs, attrs, false);
  bool ok = fresh.numel() == n && fresh.dtype() == dtr::DType::Float32 && fresh.is_contiguous();
  std::vector<float> ref(static_cast<size_t>(n));
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  for (int64_t i = 0; i < n; ++i) ref[static_cast<size_t>(i)] = pa[i] + pb[i];
  float d_ref = max_abs_diff(c_eigen.data<float>(), ref.data(), n);
  fresh_eigen = Eigen::Map<const Eigen::ArrayXf>(a.data<float>(), n) +
                Eigen::Map<const Eigen::ArrayXf>(b.data<float>(), n);
  std::vector<double> diffs = {
      d_ref, max_abs_diff(c_rk.data<float>(), c_eigen.data<float>(), n),
      ok ? max_abs_diff(fresh.data<float>(), c_eigen.data<float>(), n) : INFINITY,
      max_abs_diff(fresh_eigen.data(), c_eigen.data<float>(), n)};
  std::printf(
      "add_64MiB check: eigen vs plain loop max_abs_diff = %g; run_kernel vs eigen = %g; "
      "execute vs eigen = %g; eigen_fresh_output vs eigen = %g\n",
      d_ref, diffs[1], diffs[2], diffs[3]);
  // An elementwise float add is exact and order-free: every result must match bit for bit.
  for (double d : diffs) ok = ok && d == 0.0;
  report("add_64MiB", cs, 3.0 * bytes, "gbps", diffs, rows);
  return ok;
}

bool bench_matmul(int warmup, int reps, std::vector<Row>& rows) {
  constexpr int64_t n = 1024;
  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Tensor A = dtr::local::empty({n, n});
  Tensor B = dtr::local::empty({n, n});
  Tensor C_eigen = dtr::local::empty({n, n});
  Tensor C_rk = dtr::local::empty({n, n});
  fill_uniform(A.data<float>(), n * n, 3);
  fill_uniform(B.data<float>(), n * n, 4);
  std::fill_n(C_eigen.data<float>(), n * n, 0.0f);
  std::fill_n(C_rk.data<float>(), n * n, 0.0f);
  const std::array<Tensor, 2> inputs{A, B};
  const dtr::OpAttrs attrs{};
  Tensor fresh;

  std::vector<Contestant> cs;
  cs.push_back({"eigen",
                [&] {
                  Eigen::Map<RowMat> C(C_eigen.data<float>(), n, n);
                  C.noalias() = Eigen::Map<const RowMat>(A.data<float>(), n, n) *
                                Eigen::Map<const RowMat>(B.data<float>(), n, n);
                },
                {},
                {}});
  cs.push_back({"op_table_run_kernel",
                [&] { dtr::local::run_kernel(OpId::matmul, inputs, attrs, C_rk); },
                {},
                {}});
  cs.push_back({"op_table_matmul", [&] { fresh = A.matmul(B); }, [&] { fresh = Tensor(); }, {}});
  run_interleaved(cs, warmup, reps);

  fresh = A.matmul(B);
  bool ok = fresh.numel() == n * n && fresh.dtype() == dtr::DType::Float32 &&
            fresh.is_contiguous() && fresh.dim() == 2;
  // Eigen's result against a double-precision reference on a sample of entries.
  std::mt19937 gen(5);
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  const float* pA = A.data<float>();
  const float* pB = B.data<float>();
  const float* pC = C_eigen.data<float>();
  double d_ref = 0;
  for (int s = 0; s < 256; ++s) {
    int64_t i = pick(gen), j = pick(gen);
    double acc = 0;
    for (int64_t k = 0; k < n; ++k) acc += double(pA[i * n + k]) * double(pB[k * n + j]);
    d_ref = std::max(d_ref, std::fabs(acc - double(pC[i * n + j])));
  }
  std::vector<double> diffs = {d_ref, max_abs_diff(C_rk.data<float>(), pC, n * n),
                               ok ? max_abs_diff(fresh.data<float>(), pC, n * n) : INFINITY};
  std::printf(
      "matmul_1024 check: eigen vs double reference (256 entries) max_abs_diff = %g; "
      "run_kernel vs eigen = %g; matmul vs eigen = %g\n",
      d_ref, diffs[1], diffs[2]);
  // Entries are sums of 1024 products of values in [-1, 1] (magnitude ~10); different
  // summation orders differ by a few float ulps of that.
  const double tol = 1e-3;
  for (double d : diffs) ok = ok && d <= tol;
  report("matmul_1024", cs, 2.0 * double(n) * double(n) * double(n), "gflops", diffs, rows);
  return ok;
}

int parse_int(const char* flag, const char* value) {
  char* end = nullptr;
  long v = value ? std::strtol(value, &end, 10) : 0;
  if (!value || *end != '\0' || v < 1 || v > 100000) {
    std::fprintf(stderr, "%s needs a positive integer\n", flag);
    std::exit(2);
  }
  return static_cast<int>(v);
}

}  // namespace

int main(int argc, char** argv) {
  int add_reps = 30, matmul_reps = 20, warmup = 3;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--reps") {
      add_reps = matmul_reps = parse_int("--reps", i + 1 < argc ? argv[++i] : nullptr);
    } else if (arg == "--warmup") {
      warmup = parse_int("--warmup", i + 1 < argc ? argv[++i] : nullptr);
    } else if (arg == "-h" || arg == "--help") {
      std::printf("usage: %s [--reps N] [--warmup N]\n", argv[0]);
      return 0;
    } else {
      std::fprintf(stderr, "unknown argument '%s' (usage: %s [--reps N] [--warmup N])\n",
                   arg.c_str(), argv[0]);
      return 2;
    }
  }
  Eigen::setNbThreads(1);
#ifndef NDEBUG
  std::printf("WARNING: built without NDEBUG (not a Release build); figures mean little\n");
#endif
  std::printf(
      "dtr_tensor_bench: Eigen %d.%d.%d (%s), %d thread, warmup %d, reps add %d / "
      "matmul %d, contestants interleaved\n",
      EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION,
      Eigen::SimdInstructionSetsInUse(), Eigen::nbThreads(), warmup, add_reps, matmul_reps);

  std::vector<Row> rows;
  bool ok_add = bench_add(warmup, add_reps, rows);
  bool ok_mm = bench_matmul(warmup, matmul_reps, rows);
  print_table(rows);
  if (!ok_add || !ok_mm) {
    std::printf("CHECK FAILED:%s%s\n", ok_add ? "" : " add_64MiB", ok_mm ? "" : " matmul_1024");
    return 1;
  }
  std::printf("checks: all results match\n");
  return 0;
}
