// Packed-weight chunks (kernels/common/wpack.h) expanded on the device: the
// stored bytes of a packed layer cross PCIe as they are and this kernel writes
// the decoded weights into the ring slot in VRAM. Pointers are device memory;
// `stream` is a cudaStream_t.
#pragma once
#include <cstdint>

namespace redwood::cuda {

// One chunk to decode: `stored` bytes at `chunk` into n elements of w bytes at `out`.
struct UnpackJob {
  const uint8_t* chunk = nullptr;
  uint8_t* out = nullptr;
  uint64_t stored = 0;
  uint32_t n = 0;
  uint32_t w = 0;
};

// Decodes jobs[0, count) (one block per chunk, following the plan in
// kernels/common/wpack.h: escapes counted per segment, a prefix sum, segments
// decoded in parallel). Sets *status (device) to 1 when a chunk is malformed
// (its head, or codes that escape other than n_exc times); never reads past a
// chunk's stored bytes nor writes past its n * w output bytes.
void unpack_chunks(void* stream, const UnpackJob* jobs, int count, int* status);

}  // namespace redwood::cuda
