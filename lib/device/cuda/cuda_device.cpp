#include "device/cuda/cuda_device.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/half.hpp"
#include "core/log.hpp"
#include "device/cuda/cudnn.hpp"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/nn.cuh"
#include "lpsgd/config.hpp"

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
    cc_major_ = prop.major;
    cc_minor_ = prop.minor;
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
  /// Compute capability, e.g. 9 and 0 for an H100 or H200 (sm_90).
  int cc_major() const { return cc_major_; }
  int cc_minor() const { return cc_minor_; }
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
  int cc_major_ = 0, cc_minor_ = 0;
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

// ---- bf16 plans over cuBLAS ---------------------------------------------------
//
// The GPU's side of --precision bf16, with the CPU's semantics (oneDNN,
// cpu/onednn.cpp): x, W and dy are rounded to bf16 (nearest even) as a plan
// reads them, every product of two bf16 values is summed in float
// (cublasGemmEx: CUDA_R_16BF inputs, CUDA_R_32F output, CUBLAS_COMPUTE_32F;
// tensor cores on compute capability 8.0+), and y, dx, dW and db are written
// in float; the caller's tensors, the master weights among them, stay float.
// The bias gradient sums the bf16 dy, as oneDNN's does. W is converted in
// forward and backward reuses the copy (W only changes in the optimizer
// step), x's copy (or its unfolding) likewise.
//
// Deterministic: the conversions and reorders are gathers (one thread per
// output, no atomics), the bias gradient a fixed-order reduction, and for the
// GEMMs the plans rely on cuBLAS's documented reproducibility: a routine gives
// the same bits on every run on GPUs of the same architecture and number of
// SMs with the same library version, as long as one stream uses the handle.
// The plans use the device's one handle, bound to its compute stream (the
// communication stream never calls cuBLAS), with cuBLAS's defaults: atomics
// not allowed (CUBLAS_ATOMICS_NOT_ALLOWED) and its own workspace. So whatever
// kernel (split-k or not) cuBLAS picks for a shape, it picks it every time
// and reduces the same way; the fp32 generic plans rely on the same.

size_t checked_int(size_t v, const char* what) {
  LPSGD_CHECK(v <= static_cast<size_t>(INT32_MAX), "bf16 plan: " << what << " of " << v
                                                                   << " is too large for cuBLAS");
  return v;
}

// y[N, out] = x W^T + b: x and W in bf16 copies made in forward, dy in one
// made in backward, three GEMMs.
class CublasBf16Linear final : public AffinePlan {
 public:
  CublasBf16Linear(Device& dev, int ordinal, cudaStream_t stream, cublasHandle_t blas,
                   const LinearSpec& s)
      : ordinal_(ordinal), stream_(stream), blas_(blas), s_(s),
        n_(static_cast<int>(checked_int(static_cast<size_t>(s.batch), "batch"))),
        in_(static_cast<int>(checked_int(static_cast<size_t>(s.in), "input width"))),
        out_(static_cast<int>(checked_int(static_cast<size_t>(s.out), "output width"))),
        x16_(dev, size_x() * sizeof(bfloat16)), w16_(dev, size_w() * sizeof(bfloat16)),
        dy16_(dev, size_y() * sizeof(bfloat16)) {}

  std::string impl() const override { return "cublas bf16 gemm (tensor cores, fp32 sums)"; }

  void forward(float* y, const float* x, const float* w, const float* b) override {
    make_current(ordinal_);
    kernels::cuda::convert(DType::BF16, x16_.data(), DType::F32, x, size_x(), stream_);
    kernels::cuda::convert(DType::BF16, w16_.data(), DType::F32, w, size_w(), stream_);
    // y[N, out] = x[N, in] W[out, in]^T.
    kernels::cuda::gemm_bf16(blas_, false, true, n_, out_, in_, 1.0f, x16(), in_, w16(), in_, 0.0f,
                             y, out_);
    kernels::cuda::bias_add(y, b, static_cast<size_t>(n_), static_cast<size_t>(out_), 1, stream_);
    if (s_.relu) kernels::cuda::relu_forward(y, y, size_y(), stream_);
    saved_ = true;
  }

  void do_backward(float* dx, float* dw, float* db, const float* dy, const float*,
                   const std::function<void()>& grads_written) override {
    LPSGD_CHECK(saved_, "linear plan: backward before forward");
    make_current(ordinal_);
    kernels::cuda::convert(DType::BF16, dy16_.data(), DType::F32, dy, size_y(), stream_);
    // dW[out, in] = dy[N, out]^T x[N, in];  db = the batch's sum of dy.
    kernels::cuda::gemm_bf16(blas_, true, false, out_, in_, n_, 1.0f, dy16(), out_, x16(), in_,
                             0.0f, dw, in_);
    kernels::cuda::bias_grad(db, dy16(), static_cast<size_t>(n_), static_cast<size_t>(out_), 1,
                             stream_);
    if (grads_written) grads_written();
    // dx[N, in] = dy[N, out] W[out, in], from forward's copy of W (unchanged since).
    if (s_.input_grad)
      kernels::cuda::gemm_bf16(blas_, false, false, n_, in_, out_, 1.0f, dy16(), out_, w16(), in_,
                               0.0f, dx, in_);
  }

 private:
  size_t size_x() const { return static_cast<size_t>(n_) * static_cast<size_t>(in_); }
  size_t size_w() const { return static_cast<size_t>(out_) * static_cast<size_t>(in_); }
  size_t size_y() const { return static_cast<size_t>(n_) * static_cast<size_t>(out_); }
  const bfloat16* x16() const { return x16_.as<bfloat16>(); }
  const bfloat16* w16() const { return w16_.as<bfloat16>(); }
  bfloat16* dy16() const { return dy16_.as<bfloat16>(); }

  int ordinal_;
  cudaStream_t stream_;
  cublasHandle_t blas_;
  LinearSpec s_;
  int n_, in_, out_;
  DeviceBuffer x16_, w16_, dy16_;
  bool saved_ = false;
};

// A convolution as one GEMM per direction over the whole batch. With K =
// C kh kw rows of the unfolding and M = N OH OW columns (every image's output
// positions side by side):
//   forward         Y[Cout, M] = W[Cout, K] col[K, M], then y[n, c, p] = act(Y[c, n P + p] + b[c])
//   backward-weights dW[Cout, K] = dY[Cout, M] col[K, M]^T (all N OH OW terms in one float sum)
//   backward-data   dcol[K, M] = W[Cout, K]^T dY[Cout, M], then col2im per image (float sums)
// col is x unfolded and rounded to bf16 in one pass (kept from forward for
// backward-weights), dY is dy reordered to [Cout, M] and rounded in one pass.
// Memory: col and dY in bf16, one float buffer of max(Cout, K) x M shared by
// forward's Y and backward's dcol.
class CublasBf16Conv2d final : public AffinePlan {
 public:
  CublasBf16Conv2d(Device& dev, int ordinal, cudaStream_t stream, cublasHandle_t blas,
                   const Conv2dSpec& s)
      : ordinal_(ordinal), stream_(stream), blas_(blas), s_(s),
        k_(static_cast<int>(checked_int(s.g.col_rows(), "unfolding rows"))),
        m_(static_cast<int>(
            checked_int(static_cast<size_t>(s.batch) * s.g.col_cols(), "batch x output size"))),
        cout_(s.out_channels),
        w16_(dev, static_cast<size_t>(cout_) * k_ * sizeof(bfloat16)),
        col16_(dev, static_cast<size_t>(k_) * m_ * sizeof(bfloat16)),
        dy16_(dev, static_cast<size_t>(cout_) * m_ * sizeof(bfloat16)),
        scratch_(dev, static_cast<size_t>(s.input_grad ? std::max(cout_, k_) : cout_) * m_ *
                          sizeof(float)) {}

  std::string impl() const override {
    return "cublas bf16 im2col+gemm (tensor cores, fp32 sums)";
  }

  void forward(float* y, const float* x, const float* w, const float* b) override {
    make_current(ordinal_);
    const size_t batch = static_cast<size_t>(s_.batch);
    kernels::cuda::convert(DType::BF16, w16_.data(), DType::F32, w,
                           static_cast<size_t>(cout_) * k_, stream_);
    kernels::cuda::im2col_bf16(col16(), x, s_.g, batch, stream_);
    kernels::cuda::gemm_bf16(blas_, false, false, cout_, m_, k_, 1.0f, w16(), k_, col16(), m_,
                             0.0f, scratch(), m_);
    kernels::cuda::from_channels_first_bias(y, scratch(), b, batch,
                                            static_cast<size_t>(cout_), s_.g.col_cols(), s_.relu,
                                            stream_);
    saved_ = true;
  }

  void do_backward(float* dx, float* dw, float* db, const float* dy, const float*,
                   const std::function<void()>& grads_written) override {
    LPSGD_CHECK(saved_, "conv2d plan: backward before forward");
    make_current(ordinal_);
    const size_t batch = static_cast<size_t>(s_.batch);
    kernels::cuda::to_bf16_channels_first(dy16(), dy, batch, static_cast<size_t>(cout_),
                                          s_.g.col_cols(), stream_);
    kernels::cuda::gemm_bf16(blas_, false, true, cout_, k_, m_, 1.0f, dy16(), m_, col16(), m_,
                             0.0f, dw, k_);
    // dY is [Cout, M]: each channel's gradients are one row.
    kernels::cuda::bias_grad(db, dy16(), 1, static_cast<size_t>(cout_), static_cast<size_t>(m_),
                             stream_);
    if (grads_written) grads_written();
    if (s_.input_grad) {
      kernels::cuda::gemm_bf16(blas_, true, false, k_, m_, cout_, 1.0f, w16(), k_, dy16(), m_,
                               0.0f, scratch(), m_);
      kernels::cuda::col2im_batch(dx, scratch(), s_.g, batch, stream_);
    }
  }

 private:
  const bfloat16* w16() const { return w16_.as<bfloat16>(); }
  bfloat16* col16() const { return col16_.as<bfloat16>(); }
  bfloat16* dy16() const { return dy16_.as<bfloat16>(); }
  float* scratch() const { return scratch_.as<float>(); }

  int ordinal_;
  cudaStream_t stream_;
  cublasHandle_t blas_;
  Conv2dSpec s_;
  int k_, m_, cout_;
  DeviceBuffer w16_, col16_, dy16_, scratch_;
  bool saved_ = false;
};

template <class Spec>
Spec in_fp32(Spec s) {
  s.precision = Precision::fp32;
  return s;
}

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
  void avgpool_forward(float* y, const float* x, const kernels::Window2d& g, size_t planes,
                       bool count_pad) override {
    bind();
    kernels::cuda::avgpool_forward(y, x, g, planes, count_pad, stream_);
  }
  void avgpool_backward(float* dx, const float* dy, const kernels::Window2d& g, size_t planes,
                        bool count_pad) override {
    bind();
    kernels::cuda::avgpool_backward(dx, dy, g, planes, count_pad, stream_);
  }
  void add_forward(float* y, const float* a, const float* b, size_t n, bool relu) override {
    bind();
    kernels::cuda::add_forward(y, a, b, n, relu, stream_);
  }
  void channel_moments(double* s, const float* u, const float* v, const kernels::BnShape& sh,
                       const kernels::BnMask& mask) override {
    bind();
    kernels::cuda::channel_moments(s, u, v, sh, mask, stream_);
  }
  void bn_forward_coeffs(const kernels::BnForwardCoeffs& f) override {
    bind();
    kernels::cuda::bn_forward_coeffs(f, stream_);
  }
  void bn_backward_coeffs(const kernels::BnBackwardCoeffs& f) override {
    bind();
    kernels::cuda::bn_backward_coeffs(f, stream_);
  }
  void bn_apply(float* y, const float* x, const float* a, const float* b, const kernels::BnShape& sh,
                bool relu) override {
    bind();
    kernels::cuda::bn_apply(y, x, a, b, sh, relu, stream_);
  }
  void bn_backward(float* dx, const float* dy, const float* x, const float* pqr,
                   const kernels::BnShape& sh, const kernels::BnMask& mask) override {
    bind();
    kernels::cuda::bn_backward(dx, dy, x, pqr, sh, mask, stream_);
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
  void adamw_update(DType g_type, float* w, float* m, float* v, const void* g, size_t n,
                    const kernels::AdamWHyper& h) override {
    bind();
    kernels::cuda::adamw_update(w, m, v, g_type, g, n, h, stream_);
  }
  void lars_update(DType g_type, float* w, float* v, const void* g, const kernels::LarsBucket& b,
                   const kernels::LarsHyper& h) override {
    bind();
    kernels::cuda::lars_update(w, v, g_type, g, b, h, stream_);
  }
  void convert(DType to, void* dst, DType from, const void* src, size_t n) override {
    bind();
    kernels::cuda::convert(to, dst, from, src, n, stream_);
  }
  void reduce_add_float_to(DType t, void* out0, void* out1, const float* a, const float* b,
                           double alpha, size_t n) override {
    bind();
    kernels::cuda::reduce_add_float_to(t, out0, out1, a, b, alpha, n, stream_);
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
  // bf16 (compute capability 8.0+): cuDNN where it writes float results from
  // bf16 inputs, else the cuBLAS bf16 plan; on an older GPU a bf16 spec gets
  // the fp32 plan (a trainer refuses --precision bf16 there first).
  std::unique_ptr<AffinePlan> plan_conv2d(const Conv2dSpec& s) override {
    bind();
    if (s.precision == Precision::bf16) {
      if (!bf16_here()) return plan_conv2d(in_fp32(s));
      if (auto p = cudnn::conv2d(*this, dnn(), s)) return p;
      return bf16_gemm_conv2d(s);
    }
    if (auto p = cudnn::conv2d(*this, dnn(), s)) return p;
    return generic_conv2d(*this, s);
  }
  std::unique_ptr<AffinePlan> plan_linear(const LinearSpec& s) override {
    if (s.precision == Precision::bf16 && bf16_here()) {
      bind();
      return std::make_unique<CublasBf16Linear>(*this, gpu_->ordinal(), stream_, blas(), s);
    }
    return generic_linear(*this, in_fp32(s));
  }
  /// The cuBLAS bf16 convolution whatever cuDNN could do (the tests run both).
  std::unique_ptr<AffinePlan> bf16_gemm_conv2d(const Conv2dSpec& s) {
    LPSGD_CHECK(bf16_here(), "no bf16 plans on " << name() << " (compute capability "
                                                 << gpu_->cc_major() << "." << gpu_->cc_minor()
                                                 << ")");
    bind();
    return std::make_unique<CublasBf16Conv2d>(*this, gpu_->ordinal(), stream_, blas(), s);
  }
  // bf16 tensor cores (and cuBLAS's and cuDNN's bf16 kernels) start with
  // compute capability 8.0 (Ampere).
  bool bf16_compute(std::string* how) const override {
    const std::string sm =
        "sm_" + std::to_string(gpu_->cc_major()) + std::to_string(gpu_->cc_minor());
    if (bf16_here()) {
      *how = sm + " tensor cores (" + (build::have_cudnn ? "cuDNN/cuBLAS" : "cuBLAS") + ")";
      return true;
    }
    *how = "compute capability " + std::to_string(gpu_->cc_major()) + "." +
           std::to_string(gpu_->cc_minor()) + " (" + sm +
           ") has no bf16 tensor cores; lpsgd's GPU bf16 plans need 8.0 or newer";
    return false;
  }
  std::unique_ptr<MaxPool2dPlan> plan_maxpool2d(const MaxPool2dSpec& s) override {
    bind();
    if (auto p = cudnn::maxpool2d(*this, dnn(), s)) return p;
    return generic_maxpool2d(*this, s);
  }

 private:
  bool bf16_here() const { return gpu_->cc_major() >= 8; }
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
  std::string s = std::string("sm_80+ tensor cores (") +
                  (build::have_cudnn ? "cuDNN/cuBLAS" : "cuBLAS") + "; ";
  const int n = cuda_usable_device_count();
  if (n == 0) return s + "no usable GPU here)";
  s += "here";
  for (int i = 0; i < n; ++i) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, i) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, i) != cudaSuccess) {
      (void)cudaGetLastError();
      s += std::string(i ? "," : "") + " cuda:" + std::to_string(i) + " unknown";
      continue;
    }
    s += std::string(i ? "," : "") + " cuda:" + std::to_string(i) + " sm_" +
         std::to_string(major) + std::to_string(minor) + (major >= 8 ? " yes" : " no");
  }
  return s + ")";
}

std::unique_ptr<AffinePlan> cuda_bf16_gemm_conv2d(Device& dev, const Conv2dSpec& s) {
  return as_cuda_device(dev).bf16_gemm_conv2d(s);
}

cudaStream_t cuda_stream_of(Device& dev) { return as_cuda_device(dev).stream(); }
int cuda_ordinal_of(Device& dev) { return as_cuda_device(dev).ordinal(); }
void cuda_make_current(Device& dev) { as_cuda_device(dev).bind(); }

}  // namespace lpsgd
