#include "device/cuda/cuda_device.hpp"

#include <cuda_runtime_api.h>

#include "kernels/cuda/elementwise.cuh"

namespace lpsgd {
namespace {

// The neural-network kernels of Device are not on the GPU yet (issue 10 adds
// cuBLAS GEMM and CUDA launchers for kernels/common/nn.hpp). Until then every
// one of them says so instead of silently doing something else.
[[noreturn]] void nn_not_on_cuda(const char* op) {
  LPSGD_THROW("Device::" << op << " is not implemented on the cuda device yet (CUDA neural-"
              "network kernels come with issue 10); train with --device cpu for now");
}

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal) {
    CUDA_CHECK(cudaSetDevice(ordinal_));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal_));
    name_ = "cuda:" + std::to_string(ordinal_) + " (" + prop.name + ")";
  }
  ~CudaDevice() override { cudaStreamDestroy(stream_); }

  DeviceKind kind() const override { return DeviceKind::Cuda; }
  std::string name() const override { return name_; }

  void* alloc(size_t bytes) override {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return p;
  }
  void free(void* p) noexcept override { cudaFree(p); }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes && dst != src)
      CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void zero(void* p, size_t bytes) override { CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_)); }
  void reduce_add(DType t, void* out, const void* a, const void* b, size_t n) override {
    kernels::cuda::reduce_add(t, out, a, b, n, stream_);
  }
  void scale(DType t, void* x, double alpha, size_t n) override {
    kernels::cuda::scale(t, x, alpha, n, stream_);
  }
  void axpy(DType t, void* y, double alpha, const void* x, size_t n) override {
    kernels::cuda::axpy(t, y, alpha, x, n, stream_);
  }
  void synchronize() override { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  void gemm(bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*,
            int) override {
    nn_not_on_cuda("gemm");
  }
  void im2col(float*, const float*, const kernels::Window2d&) override { nn_not_on_cuda("im2col"); }
  void col2im(float*, const float*, const kernels::Window2d&) override { nn_not_on_cuda("col2im"); }
  void maxpool_forward(float*, int32_t*, const float*, const kernels::Window2d&, size_t) override {
    nn_not_on_cuda("maxpool_forward");
  }
  void maxpool_backward(float*, const float*, const int32_t*, const kernels::Window2d&,
                        size_t) override {
    nn_not_on_cuda("maxpool_backward");
  }
  void bias_add(float*, const float*, size_t, size_t, size_t) override {
    nn_not_on_cuda("bias_add");
  }
  void bias_grad(float*, const float*, size_t, size_t, size_t) override {
    nn_not_on_cuda("bias_grad");
  }
  void relu_forward(float*, const float*, size_t) override { nn_not_on_cuda("relu_forward"); }
  void relu_backward(float*, const float*, const float*, size_t) override {
    nn_not_on_cuda("relu_backward");
  }
  void dropout(float*, const float*, size_t, float, uint64_t, uint64_t, uint64_t) override {
    nn_not_on_cuda("dropout");
  }
  void softmax_xent(float*, float*, int32_t*, const float*, const int32_t*, size_t, size_t,
                    float) override {
    nn_not_on_cuda("softmax_xent");
  }
  void sgd_update(float*, float*, const float*, size_t, const kernels::SgdHyper&) override {
    nn_not_on_cuda("sgd_update");
  }

 private:
  int ordinal_;
  cudaStream_t stream_ = nullptr;
  std::string name_;
};

}  // namespace

int cuda_usable_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::unique_ptr<Device> make_cuda_device(int local_rank) {
  const int n = cuda_usable_device_count();
  if (n == 0)
    LPSGD_USAGE_ERROR("--device cuda: no usable GPU (no CUDA driver or no device visible); "
                      "use --device cpu");
  return std::make_unique<CudaDevice>(local_rank % n);
}

}  // namespace lpsgd
