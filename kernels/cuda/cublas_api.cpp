#include "kernels/cuda/cublas_api.h"

#include <dlfcn.h>

#include <string>

#include "src/util/error.h"

namespace redwood::cuda {

namespace {

#define RD_STR2(x) #x
#define RD_STR(x) RD_STR2(x)
constexpr const char* kLibrary = "libcublas.so." RD_STR(CUBLAS_VER_MAJOR);
#undef RD_STR
#undef RD_STR2

template <class F>
void bind(void* lib, const char* name, F& out) {
  dlerror();
  void* p = dlsym(lib, name);
  if (!p) throw Error(std::string("CUDA backend: ") + kLibrary + " has no " + name + " (" + dlerror() + ")");
  out = reinterpret_cast<F>(p);
}

CublasApi load() {
  void* lib = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    throw Error(std::string("CUDA backend: cannot load ") + kLibrary + " (" + (why ? why : "unknown error") +
                "); install the CUDA toolkit's cuBLAS or put it on LD_LIBRARY_PATH");
  }
  CublasApi a;  // the library stays loaded for the life of the process
  bind(lib, "cublasCreate_v2", a.create);
  bind(lib, "cublasSetStream_v2", a.set_stream);
  bind(lib, "cublasSetWorkspace_v2", a.set_workspace);
  bind(lib, "cublasDestroy_v2", a.destroy);
  bind(lib, "cublasGemmEx", a.gemm_ex);
  return a;
}

}  // namespace

const CublasApi& cublas() {
  static const CublasApi api = load();
  return api;
}

}  // namespace redwood::cuda
