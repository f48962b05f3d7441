// LPSGD_HD marks functions compiled for both host and device (nvcc), so the same
// element-wise functor source runs in kernels/cpu and kernels/cuda.
#pragma once

#if defined(__CUDACC__)
#define LPSGD_HD __host__ __device__ __forceinline__
#else
#define LPSGD_HD inline
#endif
