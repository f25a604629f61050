// cuBLAS, opened when the first CUDA backend is made (dlopen) instead of linked:
// its libraries (libcublas + libcublasLt) map ~150 MiB of relocated data into
// every process that links them, which a CPU-only run would then carry in its
// resident set (and in a memory budget it is compared under). The few entry
// points the backend calls, as function pointers.
#pragma once
#include <cublas_v2.h>

namespace redwood::cuda {

struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  // The exported cublasGemmEx (the header adds an inline C++ overload).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
};

// Loads libcublas.so.<the major version built against> once (thread-safe);
// throws redwood::Error naming the library and the dlopen/dlsym message.
const CublasApi& cublas();

}  // namespace redwood::cuda
