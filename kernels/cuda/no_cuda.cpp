// Built instead of the CUDA backend when REDWOOD_CUDA is OFF or nvcc/cuBLAS
// were not found: the backend factory says so in one line.
#include "kernels/backend.h"
#include "src/util/error.h"

namespace redwood {

std::unique_ptr<Backend> make_cuda_backend(int) {
  throw Error("this redwood was built without the CUDA backend (configure with -DREDWOOD_CUDA=ON and nvcc/cuBLAS)");
}

bool cuda_backend_available() {
  return false;
}

double host_to_device_bandwidth(size_t) {
  return 0;
}

}  // namespace redwood
