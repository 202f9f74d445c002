// cuBLAS, loaded when the first matmul on a GPU needs it rather than when the process
// starts. Linking libcublas (and with it libcublasLt) costs every process that loads the
// tensor library about 150 MB resident, most of it libcublasLt's relocated tables: a
// CPU-only worker and a master paid that for a library they never call. The library is
// dlopen'ed by its soname (libcublas.so.<major> of the toolkit built against), found the
// way the linker would find it (the library's run path, LD_LIBRARY_PATH, ld.so.cache) or
// else beside the CUDA runtime this process loaded.
//
// Thread safety: cublas() may be called from any thread; the first call loads it once.
#pragma once

#include <cublas_v2.h>

namespace dtr::cuda::detail {

// The entry points dtr uses (cublas_v2.h's names; their symbols are the _v2 ones).
struct CublasApi {
  decltype(&cublasCreate) create;
  decltype(&cublasDestroy) destroy;
  decltype(&cublasSetStream) set_stream;
  decltype(&cublasSetMathMode) set_math_mode;
  decltype(&cublasGetStatusName) status_name;
  decltype(&cublasGetStatusString) status_string;
  decltype(&cublasSgemmStridedBatched_64) sgemm_strided_batched;
  decltype(&cublasDgemmStridedBatched_64) dgemm_strided_batched;
  decltype(&cublasGemmStridedBatchedEx_64) gemm_strided_batched_ex;
};

// Loads cuBLAS on the first call. Throws DeviceError naming the library and the loader's
// reason when it cannot be loaded or lacks an entry point.
const CublasApi& cublas();

// Whether cuBLAS is loaded in this process (for tests: a process that never multiplied on
// a GPU does not hold it).
bool cublas_loaded();

}  // namespace dtr::cuda::detail
