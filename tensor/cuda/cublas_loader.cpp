// cuBLAS loaded on first use (tensor/cuda/cublas_loader.hpp).
#include "tensor/cuda/cublas_loader.hpp"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <atomic>
#include <mutex>
#include <string>

#include "dtr/error.hpp"

namespace dtr::cuda::detail {

namespace {

#define DTR_CUBLAS_NAME2(x) #x
#define DTR_CUBLAS_NAME(x) DTR_CUBLAS_NAME2(x)  // the symbol after cublas_v2.h's macros

std::atomic<bool> g_loaded{false};

// The directory of the CUDA runtime this process loaded ("" when unknown).
std::string cudart_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &info) == 0 || !info.dli_fname)
    return {};
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

std::string loader_error() {
  const char* why = dlerror();
  return why ? why : "unknown reason";
}

void* open_library(const std::string& soname) {
  if (void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  const std::string by_name = loader_error();
  const std::string beside = cudart_directory() + soname;
  if (void* h = dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  throw DeviceError(fmt::format(
      "cuBLAS could not be loaded ({}; beside the CUDA runtime: {}); matmul on a CUDA device "
      "needs it",
      by_name, loader_error()));
}

template <class F>
void bind(void* library, F& slot, const char* name, const std::string& soname) {
  slot = reinterpret_cast<F>(dlsym(library, name));
  if (!slot)
    throw DeviceError(
        fmt::format("cuBLAS ({}) lacks {}: it is older than the toolkit dtr was "
                    "built with (cuBLAS {}.{})",
                    soname, name, CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR));
}

CublasApi load() {
  const std::string soname = fmt::format("libcublas.so.{}", CUBLAS_VER_MAJOR);
  void* lib = open_library(soname);
  CublasApi api{};
#define DTR_BIND(field, fn) bind(lib, api.field, DTR_CUBLAS_NAME(fn), soname)
  DTR_BIND(create, cublasCreate);
  DTR_BIND(destroy, cublasDestroy);
  DTR_BIND(set_stream, cublasSetStream);
  DTR_BIND(set_math_mode, cublasSetMathMode);
  DTR_BIND(status_name, cublasGetStatusName);
  DTR_BIND(status_string, cublasGetStatusString);
  DTR_BIND(sgemm_strided_batched, cublasSgemmStridedBatched_64);
  DTR_BIND(dgemm_strided_batched, cublasDgemmStridedBatched_64);
  DTR_BIND(gemm_strided_batched_ex, cublasGemmStridedBatchedEx_64);
#undef DTR_BIND
  return api;  // the library stays loaded for the life of the process
}

}  // namespace

const CublasApi& cublas() {
  // A failed load throws from here each time it is asked for (call_once retries).
  static std::once_flag once;
  static CublasApi api;
  std::call_once(once, [] {
    api = load();
    g_loaded.store(true);
  });
  return api;
}

bool cublas_loaded() {
  return g_loaded.load();
}

}  // namespace dtr::cuda::detail
