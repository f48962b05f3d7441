// Stream-ordered signals to other processes: a store into host memory that is
// mapped for the GPU, made once the work queued before it has finished. Peer
// links publish "block ready" and "slot free" this way, so no host thread
// waits for the GPU to say so.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace lpsgd::kernels::cuda {

/// Queues *flag = value on the stream, after all work queued before it;
/// flag is the device address of mapped (cudaHostRegisterMapped) host memory.
void publish(uint64_t* flag, uint64_t value, cudaStream_t s);

}  // namespace lpsgd::kernels::cuda
