#include "device/cuda/cuda_device.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/log.hpp"
#include "device/cuda/cudnn.hpp"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/nn.cuh"

namespace lpsgd {
namespace {

// The GPU current on each thread, as last set through make_current().
thread_local int t_current_gpu = -1;

void make_current(int ordinal) {
  if (t_current_gpu == ordinal) return;
  CUDA_CHECK(cudaSetDevice(ordinal));
  t_current_gpu = ordinal;
}

/// Size classes of the pool: 512-byte steps up to 1 MiB, 2 MiB steps above.
size_t pool_class(size_t bytes) {
  constexpr size_t small = 512, large = 2u << 20, small_limit = 1u << 20;
  if (bytes == 0) bytes = 1;
  const size_t step = bytes <= small_limit ? small : large;
  return (bytes + step - 1) / step * step;
}

// What the compute and communication views of one GPU share: the streams and
// the memory pool. Destroyed with the last view.
class Gpu {
 public:
  explicit Gpu(int ordinal) : ordinal_(ordinal) {
    make_current(ordinal_);
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal_));
    name_ = "cuda:" + std::to_string(ordinal_) + " (" + prop.name + ")";
    // Communication gets the higher priority: a reduce step waiting behind a
    // long GEMM would stall the whole chain.
    int least = 0, greatest = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CUDA_CHECK(cudaStreamCreateWithPriority(&streams_[0], cudaStreamNonBlocking, least));
    CUDA_CHECK(cudaStreamCreateWithPriority(&streams_[1], cudaStreamNonBlocking, greatest));
  }
  ~Gpu() {
    if (cudaSetDevice(ordinal_) == cudaSuccess) t_current_gpu = ordinal_;
    for (cudaStream_t s : streams_) cudaStreamSynchronize(s);
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) cudaFree(p);
    for (auto& [p, size] : live_) cudaFree(p);  // a buffer that outlived its device
    for (cudaStream_t s : streams_) cudaStreamDestroy(s);
  }
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;

  int ordinal() const { return ordinal_; }
  const std::string& name() const { return name_; }
  cudaStream_t stream(int which) const { return streams_[which]; }

  /// A block of at least `bytes`; `reused` tells whether it came from the cache.
  void* take(size_t bytes, bool& reused) {
    const size_t size = pool_class(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    void* p = nullptr;
    auto it = free_.find(size);
    reused = it != free_.end() && !it->second.empty();
    if (reused) {
      p = it->second.back();
      it->second.pop_back();
      cached_ -= size;
    } else {
      cudaError_t rc = cudaMalloc(&p, size);
      if (rc == cudaErrorMemoryAllocation && cached_ > 0) {
        (void)cudaGetLastError();
        release_cache_locked();
        rc = cudaMalloc(&p, size);
      }
      if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        LPSGD_THROW("cudaMalloc of " << size << " bytes on " << name_ << " failed: "
                                     << cudaGetErrorString(rc) << " (" << in_use_
                                     << " bytes in use by lpsgd)");
      }
    }
    live_[p] = size;
    in_use_ += size;
    return p;
  }

  void give_back(void* p) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end()) return;  // not from this pool: nothing to do
    const size_t size = it->second;
    live_.erase(it);
    in_use_ -= size;
    cached_ += size;
    free_[size].push_back(p);
  }

 private:
  void release_cache_locked() {
    for (cudaStream_t s : streams_) cudaStreamSynchronize(s);
    for (auto& [size, blocks] : free_) {
      for (void* p : blocks) cudaFree(p);
      blocks.clear();
    }
    cached_ = 0;
  }

  int ordinal_;
  std::string name_;
  cudaStream_t streams_[2] = {nullptr, nullptr};
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // size class -> cached blocks
  std::unordered_map<void*, size_t> live_;               // handed out -> size class
  size_t in_use_ = 0, cached_ = 0;
};

// Any thread may ask an event (the progress engine polls the compute stream's):
// each call makes the event's GPU current first, so a thread that never chose
// a GPU does not get a context on GPU 0.
class CudaEvent final : public DeviceEvent {
 public:
  explicit CudaEvent(int ordinal) : ordinal_(ordinal) {
    make_current(ordinal);
    CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  }
  ~CudaEvent() override {
    if (cudaSetDevice(ordinal_) == cudaSuccess) t_current_gpu = ordinal_;
    cudaEventDestroy(event_);
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  bool done() override {
    make_current(ordinal_);
    const cudaError_t rc = cudaEventQuery(event_);
    if (rc == cudaSuccess) return true;
    if (rc == cudaErrorNotReady) {
      (void)cudaGetLastError();  // "not yet" is not an error; keep it out of later checks
      return false;
    }
    CUDA_CHECK(rc);
    return false;
  }
  void synchronize() override {
    make_current(ordinal_);
    CUDA_CHECK(cudaEventSynchronize(event_));
  }
  cudaEvent_t get() const { return event_; }

 private:
  int ordinal_;
  cudaEvent_t event_ = nullptr;
};

class CudaDevice final : public Device {
 public:
  /// which: 0 the compute stream, 1 the communication stream.
  CudaDevice(std::shared_ptr<Gpu> gpu, int which)
      : gpu_(std::move(gpu)), which_(which), stream_(gpu_->stream(which)) {
    if (which_ == 0) comm_ = std::make_unique<CudaDevice>(gpu_, 1);
  }
  ~CudaDevice() override {
    comm_.reset();
    if (cublas_ || cudnn_) {
      if (cudaSetDevice(gpu_->ordinal()) == cudaSuccess) t_current_gpu = gpu_->ordinal();
      cudaStreamSynchronize(stream_);
      cudnn_.reset();
      if (cublas_) cublasDestroy(cublas_);
    }
  }

  DeviceKind kind() const override { return DeviceKind::Cuda; }
  std::string name() const override { return which_ == 0 ? gpu_->name() : gpu_->name() + " comm"; }
  int ordinal() const { return gpu_->ordinal(); }
  cudaStream_t stream() const { return stream_; }
  void bind() { make_current(gpu_->ordinal()); }

  void* alloc(size_t bytes) override {
    bind();
    bool reused = false;
    void* p = gpu_->take(bytes, reused);
    try {
      if (reused)  // work queued before the previous owner's free() must be over
        for (int s = 0; s < 2; ++s) CUDA_CHECK(cudaStreamSynchronize(gpu_->stream(s)));
      if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
      CUDA_CHECK(cudaStreamSynchronize(stream_));
    } catch (...) {
      gpu_->give_back(p);
      throw;
    }
    return p;
  }
  void free(void* p) noexcept override {
    if (p) gpu_->give_back(p);
  }

  void copy(void* dst, const void* src, size_t bytes) override {
    if (!bytes || dst == src) return;
    bind();
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    copy_to_host_async(dst, src, bytes);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    copy_from_host_async(dst, src, bytes);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void copy_to_host_async(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    bind();
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  }
  void copy_from_host_async(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    bind();
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  }
  void zero(void* p, size_t bytes) override {
    if (!bytes) return;
    bind();
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  }
  void reduce_add(DType t, void* out, const void* a, const void* b, size_t n) override {
    bind();
    kernels::cuda::reduce_add(t, out, a, b, n, stream_);
  }
  void reduce_add_scale(DType t, void* out, const void* a, const void* b, double alpha,
                        size_t n) override {
    bind();
    kernels::cuda::reduce_add_scale(t, out, a, b, alpha, n, stream_);
  }
  void scale(DType t, void* x, double alpha, size_t n) override {
    bind();
    kernels::cuda::scale(t, x, alpha, n, stream_);
  }
  void axpy(DType t, void* y, double alpha, const void* x, size_t n) override {
    bind();
    kernels::cuda::axpy(t, y, alpha, x, n, stream_);
  }
  void synchronize() override {
    bind();
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  Device& comm_queue() override { return comm_ ? *comm_ : *this; }
  std::unique_ptr<DeviceEvent> create_event() override {
    return std::make_unique<CudaEvent>(gpu_->ordinal());
  }
  void record(DeviceEvent& e) override {
    bind();
    CUDA_CHECK(cudaEventRecord(as_cuda(e).get(), stream_));
  }
  void wait(DeviceEvent& e) override {
    bind();
    CUDA_CHECK(cudaStreamWaitEvent(stream_, as_cuda(e).get(), 0));
  }
  void* alloc_host(size_t bytes) override {
    bind();
    void* p = nullptr;
    CUDA_CHECK(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable));
    std::memset(p, 0, bytes);  // touched now, not inside a collective
    return p;
  }
  void free_host(void* p) noexcept override {
    if (p) cudaFreeHost(p);
  }

  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override {
    bind();
    kernels::cuda::sgemm(blas(), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void im2col(float* col, const float* x, const kernels::Window2d& g) override {
    bind();
    kernels::cuda::im2col(col, x, g, stream_);
  }
  void col2im(float* x, const float* col, const kernels::Window2d& g) override {
    bind();
    kernels::cuda::col2im(x, col, g, stream_);
  }
  void maxpool_forward(float* y, int32_t* argmax, const float* x, const kernels::Window2d& g,
                       size_t planes) override {
    bind();
    kernels::cuda::maxpool_forward(y, argmax, x, g, planes, stream_);
  }
  void maxpool_backward(float* dx, const float* dy, const int32_t* argmax,
                        const kernels::Window2d& g, size_t planes) override {
    bind();
    kernels::cuda::maxpool_backward(dx, dy, argmax, g, planes, stream_);
  }
  void bias_add(float* y, const float* bias, size_t outer, size_t channels,
                size_t inner) override {
    bind();
    kernels::cuda::bias_add(y, bias, outer, channels, inner, stream_);
  }
  void bias_grad(float* db, const float* dy, size_t outer, size_t channels,
                 size_t inner) override {
    bind();
    kernels::cuda::bias_grad(db, dy, outer, channels, inner, stream_);
  }
  void relu_forward(float* y, const float* x, size_t n) override {
    bind();
    kernels::cuda::relu_forward(y, x, n, stream_);
  }
  void relu_backward(float* dx, const float* dy, const float* y, size_t n) override {
    bind();
    kernels::cuda::relu_backward(dx, dy, y, n, stream_);
  }
  void dropout(float* out, const float* in, size_t n, float p, uint64_t seed, uint64_t stream,
               uint64_t counter) override {
    bind();
    kernels::cuda::dropout(out, in, n, p, seed, stream, counter, stream_);
  }
  void softmax_xent(float* grad, float* row_loss, int32_t* status, const float* logits,
                    const int32_t* labels, size_t rows, size_t classes,
                    float grad_scale) override {
    bind();
    kernels::cuda::softmax_xent(grad, row_loss, status, logits, labels, rows, classes,
                                grad_scale, stream_);
  }
  void sgd_update_from(DType g_type, float* w, float* v, const void* g, size_t n,
                       const kernels::SgdHyper& h) override {
    bind();
    kernels::cuda::sgd_update(w, v, g_type, g, n, h, stream_);
  }
  void convert(DType to, void* dst, DType from, const void* src, size_t n) override {
    bind();
    kernels::cuda::convert(to, dst, from, src, n, stream_);
  }
  void reduce_add_from(DType t, void* out0, void* out1, DType ta, const void* a, DType tb,
                       const void* b, double alpha, size_t n) override {
    bind();
    kernels::cuda::reduce_add_from(t, out0, out1, ta, a, tb, b, alpha, n, stream_);
  }
  void sgd_update(float* w, float* v, const float* g, size_t n,
                  const kernels::SgdHyper& h) override {
    bind();
    kernels::cuda::sgd_update(w, v, g, n, h, stream_);
  }

  // cuDNN for convolution and pooling where it has a deterministic FMA
  // algorithm; the fully connected layers stay on the generic plan (cuBLAS).
  std::unique_ptr<AffinePlan> plan_conv2d(const Conv2dSpec& s) override {
    bind();
    if (auto p = cudnn::conv2d(*this, dnn(), s)) return p;
    return generic_conv2d(*this, s);
  }
  // No bf16 plans on GPUs yet (issue 33 built the CPU's first): a trainer
  // refuses --precision bf16 here rather than run fp32 under its name.
  bool bf16_compute(std::string* how) const override {
    *how = cuda_bf16_support();
    return false;
  }
  std::unique_ptr<MaxPool2dPlan> plan_maxpool2d(const MaxPool2dSpec& s) override {
    bind();
    if (auto p = cudnn::maxpool2d(*this, dnn(), s)) return p;
    return generic_maxpool2d(*this, s);
  }

 private:
  static CudaEvent& as_cuda(DeviceEvent& e) {
    auto* c = dynamic_cast<CudaEvent*>(&e);
    LPSGD_CHECK(c, "an event of another device kind was given to a CUDA device");
    return *c;
  }
  // One cuBLAS handle per stream, made on first use (cublasCreate is slow).
  // FP32 math by default: no TF32, so results stay within float rounding of
  // the CPU's.
  cublasHandle_t blas() {
    if (!cublas_) {
      kernels::cuda::cublas_check(cublasCreate(&cublas_), "cublasCreate");
      kernels::cuda::cublas_check(cublasSetStream(cublas_, stream_), "cublasSetStream");
      kernels::cuda::cublas_check(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH),
                                  "cublasSetMathMode");
    }
    return cublas_;
  }
  // The cuDNN handle of this stream, made on first use; null without cuDNN.
  cudnn::Handle* dnn() {
    if (!cudnn_) cudnn_ = cudnn::make_handle(stream_);
    return cudnn_.get();
  }

  std::shared_ptr<Gpu> gpu_;
  int which_;
  cudaStream_t stream_;
  cublasHandle_t cublas_ = nullptr;
  cudnn::HandlePtr cudnn_;
  std::unique_ptr<CudaDevice> comm_;  // the communication-stream view (compute view only)
};

CudaDevice& as_cuda_device(Device& dev) {
  auto* c = dynamic_cast<CudaDevice*>(&dev);
  LPSGD_CHECK(c, "device " << dev.name() << " is not a CUDA device");
  return *c;
}

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
  LPSGD_CHECK(local_rank >= 0, "negative local rank " << local_rank);
  auto dev = std::make_unique<CudaDevice>(std::make_shared<Gpu>(local_rank % n), 0);
  LPSGD_DEBUG("device " << dev->name() << " for local rank " << local_rank << " of " << n
                        << " visible GPUs");
  return dev;
}

std::string cuda_libraries() {
  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  return "cuBLAS " + std::to_string(major) + "." + std::to_string(minor) + "." +
         std::to_string(patch) + ", " + cudnn::version();
}

std::string cuda_bf16_support() {
  return "not built yet (lpsgd's GPU plans compute in fp32 only; cuDNN and cuBLAS bf16 plans are "
         "to come)";
}

cudaStream_t cuda_stream_of(Device& dev) { return as_cuda_device(dev).stream(); }
int cuda_ordinal_of(Device& dev) { return as_cuda_device(dev).ordinal(); }
void cuda_make_current(Device& dev) { as_cuda_device(dev).bind(); }

}  // namespace lpsgd
