// The CUDA device: device memory from a caching pool, pinned host memory, a
// compute stream and a communication stream (comm_queue()), events, kernels
// from kernels/cuda and GEMM through cuBLAS. Built only when nvcc is found.
//
// Memory: every block is its own cudaMalloc, rounded up to a size class and
// kept in a free list of that class when freed, so steady-state training and
// collectives never call cudaMalloc/cudaFree (which synchronise the whole GPU).
// A block handed out again first waits for both streams, so work queued before
// its free() cannot touch its next owner's data. The cache is returned to CUDA
// when an allocation would otherwise fail, and everything at destruction.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "device/device.hpp"

namespace lpsgd {

/// Usable GPUs; any error from cudaGetDeviceCount (no driver, no GPU) counts as 0.
int cuda_usable_device_count();

/// "cuBLAS 13.0.0, cuDNN 9.19.0": the GPU compute libraries of this build.
std::string cuda_libraries();

/// Where --precision bf16 runs on GPUs (lpsgd --version's line): "sm_80+
/// tensor cores (cuDNN/cuBLAS; here cuda:0 sm_90 yes)", or "...; no usable
/// GPU here)".
std::string cuda_bf16_support();

/// The cuBLAS bf16 convolution plan (im2col + cublasGemmEx), whatever cuDNN
/// could do for the spec: plan_conv2d prefers cuDNN's where cuDNN writes float
/// results from bf16 inputs; the tests run both. Throws on a GPU older than
/// compute capability 8.0 or a device of another kind.
std::unique_ptr<AffinePlan> cuda_bf16_gemm_conv2d(Device& dev, const Conv2dSpec& s);

/// A CUDA device for this rank (GPU local_rank % count); a usage error when
/// no GPU is usable.
std::unique_ptr<Device> make_cuda_device(int local_rank);

// For code that queues its own CUDA work alongside a Device's (the CUDA peer
// links): the stream and GPU behind a CUDA Device. They throw for other kinds.
cudaStream_t cuda_stream_of(Device& dev);
int cuda_ordinal_of(Device& dev);
/// Makes dev's GPU current on the calling thread (any thread may use a
/// Device, e.g. the progress engine's); cheap when it already is.
void cuda_make_current(Device& dev);

}  // namespace lpsgd
