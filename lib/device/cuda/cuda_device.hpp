// The CUDA device: device memory, a compute stream, element-wise work through
// kernels/cuda. Built only when nvcc is found.
#pragma once

#include <memory>

#include "device/device.hpp"

namespace lpsgd {

/// Usable GPUs; any error from cudaGetDeviceCount (no driver, no GPU) counts as 0.
int cuda_usable_device_count();

/// A CUDA device for this rank (GPU local_rank % count); throws when none is usable.
std::unique_ptr<Device> make_cuda_device(int local_rank);

}  // namespace lpsgd
