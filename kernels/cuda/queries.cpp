// The CUDA build's answers to kernels/backend.h's process-wide queries.
#include "kernels/backend.h"
#include "kernels/cuda/device.h"

namespace redwood {

double host_to_device_bandwidth(size_t bytes) {
  return cuda::host_to_device_bandwidth(bytes);
}

}  // namespace redwood
