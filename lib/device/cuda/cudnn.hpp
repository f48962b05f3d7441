// cuDNN plans for the CUDA device: convolution and max pooling. cuBLAS stays
// for the fully connected layers (the generic plan's GEMM, or the bf16 plan
// in cuda_device.cpp).
//
// Built when CMake finds cuDNN beside the CUDA toolkit. Results must match the
// CPU's within float rounding and repeat bit for bit, so fp32 convolutions use
// FMA math only (no TF32 tensor cores) and, for each direction, the first
// algorithm of cuDNN's heuristic list that it reports deterministic; max
// pooling uses CUDNN_POOLING_MAX_DETERMINISTIC. bf16 convolutions use tensor
// cores and the first deterministic GEMM algorithm (never FFT or Winograd).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "device/plans.hpp"

namespace lpsgd {
class Device;
}

namespace lpsgd::cudnn {

/// A cuDNN handle bound to one stream (opaque outside cudnn.cpp).
class Handle;
struct HandleDeleter {
  void operator()(Handle* h) const noexcept;
};
using HandlePtr = std::unique_ptr<Handle, HandleDeleter>;

/// A handle queueing on `stream` of the current GPU; null when cuDNN is not
/// built.
HandlePtr make_handle(cudaStream_t stream);

/// "cuDNN 9.19.0" (the library loaded at run time), or "cuDNN not built".
std::string version();

/// Plans on dev (a CUDA device, borrowed) queueing through h; nullptr where
/// cuDNN is not built or has no deterministic FMA algorithm for the shape
/// (the caller then uses the generic plan). A Precision::bf16 spec gets a
/// bf16 plan (bf16 x, W and dy, float sums on tensor cores, float y, dx, dW
/// and db) only where cuDNN runs that mix of types for the shape with a
/// deterministic GEMM algorithm in every direction; nullptr otherwise (the
/// caller then uses its cuBLAS bf16 plan). Ask for bf16 only on compute
/// capability 8.0 or newer.
std::unique_ptr<AffinePlan> conv2d(Device& dev, Handle* h, const Conv2dSpec& s);
std::unique_ptr<MaxPool2dPlan> maxpool2d(Device& dev, Handle* h, const MaxPool2dSpec& s);

}  // namespace lpsgd::cudnn
