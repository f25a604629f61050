// RD_HD marks math shared by the CPU and CUDA backends: plain inline functions
// that nvcc compiles for the device and g++ for the host, so CPU tests cover them.
#pragma once
#if defined(__CUDACC__)
#define RD_HD __host__ __device__ __forceinline__
#else
#define RD_HD inline
#endif
