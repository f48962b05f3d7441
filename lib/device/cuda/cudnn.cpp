// cuDNN plans for the CUDA device (see cudnn.hpp).
//
// The convolution itself is cuDNN's; the bias add, the fused ReLU and the
// bias gradient are the device's own kernels (the CPU's functors, so they
// round exactly as the CPU does, and the bias gradient's fixed-order
// reduction keeps it deterministic).
//
// A bf16 convolution (Precision::bf16, class Bf16Conv2d) converts x, W and dy
// to bf16 on the device (kernels/cuda's convert) and asks cuDNN for float
// results from them: y, dx and dW descriptors in CUDNN_DATA_FLOAT beside bf16
// x, W and dy, a float compute type and tensor-core math. That is what the
// CPU's oneDNN plans do (bf16 products, fp32 sums, fp32 outputs), and it is
// not one of the data-type configurations cuDNN's legacy convolution API
// documents (PSEUDO_BFLOAT16_CONFIG has bf16 outputs), so the plan is only
// made where cuDNN accepts it: its heuristics return a deterministic
// tensor-core GEMM algorithm for every direction and a trial run of each on
// the plan's own (zeroed) buffers succeeds. Otherwise the caller falls back
// to the cuBLAS bf16 plan (cuda_device.cpp), which has exactly these
// semantics by construction. Rounding the outputs to bf16 instead would lose
// what the CPU keeps: dW is a sum over the whole batch.
#include "device/cuda/cudnn.hpp"

#include <algorithm>
#include <initializer_list>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"
#include "device/cuda/cuda_device.hpp"
#include "device/device.hpp"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/nn.cuh"
#include "lpsgd/config.hpp"

#if LPSGD_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace lpsgd::cudnn {

#if LPSGD_HAVE_CUDNN

namespace {
void check(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) LPSGD_THROW(what << " failed: " << cudnnGetErrorString(status));
}
}  // namespace

class Handle {
 public:
  explicit Handle(cudaStream_t stream) {
    check(cudnnCreate(&h_), "cudnnCreate");
    check(cudnnSetStream(h_, stream), "cudnnSetStream");
  }
  ~Handle() { cudnnDestroy(h_); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  cudnnHandle_t get() const { return h_; }

 private:
  cudnnHandle_t h_ = nullptr;
};

void HandleDeleter::operator()(Handle* h) const noexcept { delete h; }

HandlePtr make_handle(cudaStream_t stream) { return HandlePtr(new Handle(stream)); }

std::string version() {
  const size_t v = cudnnGetVersion();  // major * 10000 + minor * 100 + patch (cuDNN 9)
  return "cuDNN " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

namespace {

// RAII for the descriptor kinds used here.
template <class T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Desc {
 public:
  Desc() { check(Create(&d_), "cudnnCreate*Descriptor"); }
  ~Desc() { Destroy(d_); }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  T get() const { return d_; }

 private:
  T d_{};
};
using TensorDesc = Desc<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor,
                        cudnnDestroyTensorDescriptor>;
using FilterDesc = Desc<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor,
                        cudnnDestroyFilterDescriptor>;
using ConvDesc = Desc<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                      cudnnDestroyConvolutionDescriptor>;
using PoolDesc = Desc<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor,
                      cudnnDestroyPoolingDescriptor>;

void set_nchw(const TensorDesc& d, int64_t n, int c, int h, int w) {
  check(cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                   static_cast<int>(n), c, h, w),
        "cudnnSetTensor4dDescriptor");
}

// The first algorithm of a heuristic list that cuDNN reports deterministic and
// computing in plain FP32 FMA (no tensor-core math); -1 when there is none.
template <class Perf>
int pick(const std::vector<Perf>& perf, int returned) {
  for (int i = 0; i < returned; ++i) {
    const Perf& p = perf[static_cast<size_t>(i)];
    if (p.status == CUDNN_STATUS_SUCCESS && p.determinism == CUDNN_DETERMINISTIC &&
        p.mathType != CUDNN_TENSOR_OP_MATH && p.mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
      return static_cast<int>(p.algo);
  }
  return -1;
}

// Thrown where cuDNN has no plan for a spec (conv2d() then returns nullptr).
struct Unsupported {};

class Conv2d final : public AffinePlan {
 public:
  Conv2d(Device& dev, Handle& h, const Conv2dSpec& s) : dev_(dev), h_(h.get()), s_(s) {
    const auto& g = s.g;
    set_nchw(x_, s.batch, g.channels, g.in_h, g.in_w);
    set_nchw(y_, s.batch, s.out_channels, g.out_h, g.out_w);
    check(cudnnSetFilter4dDescriptor(w_.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s.out_channels,
                                     g.channels, g.kernel_h, g.kernel_w),
          "cudnnSetFilter4dDescriptor");
    check(cudnnSetConvolution2dDescriptor(conv_.get(), g.pad_h, g.pad_w, g.stride_h, g.stride_w, 1,
                                          1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
          "cudnnSetConvolution2dDescriptor");
    check(cudnnSetConvolutionMathType(conv_.get(), CUDNN_FMA_MATH), "cudnnSetConvolutionMathType");
    int dims[4] = {};
    check(cudnnGetConvolutionNdForwardOutputDim(conv_.get(), x_.get(), w_.get(), 4, dims),
          "cudnnGetConvolutionNdForwardOutputDim");
    LPSGD_CHECK(dims[2] == g.out_h && dims[3] == g.out_w,
                "cuDNN computes a " << dims[2] << "x" << dims[3] << " output where lpsgd expects "
                                    << g.out_h << "x" << g.out_w);

    int n = 0;
    std::vector<cudnnConvolutionFwdAlgoPerf_t> fp(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
    check(cudnnGetConvolutionForwardAlgorithm_v7(h_, x_.get(), w_.get(), conv_.get(), y_.get(),
                                                 static_cast<int>(fp.size()), &n, fp.data()),
          "cudnnGetConvolutionForwardAlgorithm_v7");
    const int fa = pick(fp, n);
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> wp(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
    check(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h_, x_.get(), y_.get(), conv_.get(),
                                                        w_.get(), static_cast<int>(wp.size()), &n,
                                                        wp.data()),
          "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
    const int wa = pick(wp, n);
    int da = 0;
    if (s.input_grad) {
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> dp(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
      check(cudnnGetConvolutionBackwardDataAlgorithm_v7(h_, w_.get(), y_.get(), conv_.get(),
                                                        x_.get(), static_cast<int>(dp.size()), &n,
                                                        dp.data()),
            "cudnnGetConvolutionBackwardDataAlgorithm_v7");
      da = pick(dp, n);
    }
    if (fa < 0 || wa < 0 || da < 0) throw Unsupported{};
    fwd_algo_ = static_cast<cudnnConvolutionFwdAlgo_t>(fa);
    bww_algo_ = static_cast<cudnnConvolutionBwdFilterAlgo_t>(wa);
    bwd_algo_ = static_cast<cudnnConvolutionBwdDataAlgo_t>(da);

    size_t bytes = 0, b = 0;
    check(cudnnGetConvolutionForwardWorkspaceSize(h_, x_.get(), w_.get(), conv_.get(), y_.get(),
                                                  fwd_algo_, &b),
          "cudnnGetConvolutionForwardWorkspaceSize");
    bytes = std::max(bytes, b);
    check(cudnnGetConvolutionBackwardFilterWorkspaceSize(h_, x_.get(), y_.get(), conv_.get(),
                                                         w_.get(), bww_algo_, &b),
          "cudnnGetConvolutionBackwardFilterWorkspaceSize");
    bytes = std::max(bytes, b);
    if (s.input_grad) {
      check(cudnnGetConvolutionBackwardDataWorkspaceSize(h_, w_.get(), y_.get(), conv_.get(),
                                                         x_.get(), bwd_algo_, &b),
            "cudnnGetConvolutionBackwardDataWorkspaceSize");
      bytes = std::max(bytes, b);
    }
    work_ = DeviceBuffer(dev, bytes);
  }

  std::string impl() const override {
    return "cudnn fwd algo " + std::to_string(fwd_algo_) + ", bwd-filter algo " +
           std::to_string(bww_algo_) +
           (s_.input_grad ? ", bwd-data algo " + std::to_string(bwd_algo_) : std::string());
  }

  void forward(float* y, const float* x, const float* w, const float* b) override {
    cuda_make_current(dev_);
    x_saved_ = x;
    const float one = 1.0f, zero = 0.0f;
    check(cudnnConvolutionForward(h_, &one, x_.get(), x, w_.get(), w, conv_.get(), fwd_algo_,
                                  work_.data(), work_.bytes(), &zero, y_.get(), y),
          "cudnnConvolutionForward");
    const size_t n = static_cast<size_t>(s_.batch), c = static_cast<size_t>(s_.out_channels),
                 p = s_.g.col_cols();
    dev_.bias_add(y, b, n, c, p);
    if (s_.relu) dev_.relu_forward(y, y, n * c * p);
  }

  void do_backward(float* dx, float* dw, float* db, const float* dy, const float* w,
                   const std::function<void()>& grads_written) override {
    LPSGD_CHECK(x_saved_, "conv2d plan: backward before forward");
    cuda_make_current(dev_);
    const float one = 1.0f, zero = 0.0f;
    check(cudnnConvolutionBackwardFilter(h_, &one, x_.get(), x_saved_, y_.get(), dy, conv_.get(),
                                         bww_algo_, work_.data(), work_.bytes(), &zero, w_.get(),
                                         dw),
          "cudnnConvolutionBackwardFilter");
    dev_.bias_grad(db, dy, static_cast<size_t>(s_.batch), static_cast<size_t>(s_.out_channels),
                   s_.g.col_cols());
    if (grads_written) grads_written();
    if (s_.input_grad)
      check(cudnnConvolutionBackwardData(h_, &one, w_.get(), w, y_.get(), dy, conv_.get(),
                                         bwd_algo_, work_.data(), work_.bytes(), &zero, x_.get(),
                                         dx),
            "cudnnConvolutionBackwardData");
  }

 private:
  Device& dev_;
  cudnnHandle_t h_;
  Conv2dSpec s_;
  TensorDesc x_, y_;
  FilterDesc w_;
  ConvDesc conv_;
  cudnnConvolutionFwdAlgo_t fwd_algo_{};
  cudnnConvolutionBwdFilterAlgo_t bww_algo_{};
  cudnnConvolutionBwdDataAlgo_t bwd_algo_{};
  DeviceBuffer work_;
  const float* x_saved_ = nullptr;
};

// For a bf16 plan: the first algorithm of a heuristic list that cuDNN reports
// deterministic and running on tensor cores (CUDNN_TENSOR_OP_MATH, what the
// descriptor asks for), among `sums`: the algorithms that multiply the bf16
// values themselves and add the products (implicit or explicit GEMM). FFT and
// Winograd transform the inputs first; their errors are not those of bf16
// products summed in float, so they are never picked. -1 when there is none.
template <class Perf, class Algo>
int pick_bf16(const std::vector<Perf>& perf, int returned, std::initializer_list<Algo> sums) {
  for (int i = 0; i < returned; ++i) {
    const Perf& p = perf[static_cast<size_t>(i)];
    if (p.status == CUDNN_STATUS_SUCCESS && p.determinism == CUDNN_DETERMINISTIC &&
        p.mathType == CUDNN_TENSOR_OP_MATH &&
        std::find(sums.begin(), sums.end(), p.algo) != sums.end())
      return static_cast<int>(p.algo);
  }
  return -1;
}

// A cuDNN call in a bf16 plan's set-up: any failure means cuDNN does not run
// this configuration, and the caller takes the cuBLAS plan.
void need(cudnnStatus_t status) {
  if (status != CUDNN_STATUS_SUCCESS) throw Unsupported{};
}

// The bf16 convolution (see the top of the file): bf16 copies of x and W made
// in forward (backward reuses both: W has not changed since) and of dy in
// backward, float y, dx and dW written by cuDNN straight into the caller's
// tensors; the bias gradient sums the bf16 dy, as oneDNN's does on the CPU.
class Bf16Conv2d final : public AffinePlan {
 public:
  Bf16Conv2d(Device& dev, Handle& h, const Conv2dSpec& s)
      : dev_(dev), h_(h.get()), s_(s), stream_(cuda_stream_of(dev)),
        nx_(static_cast<size_t>(s.batch) * static_cast<size_t>(s.g.channels) * s.g.in_plane()),
        nw_(static_cast<size_t>(s.out_channels) * s.g.col_rows()),
        ny_(static_cast<size_t>(s.batch) * static_cast<size_t>(s.out_channels) * s.g.col_cols()),
        x16_(dev, nx_ * sizeof(bfloat16)), w16_(dev, nw_ * sizeof(bfloat16)),
        dy16_(dev, ny_ * sizeof(bfloat16)) {
    const auto& g = s.g;
    const int n = static_cast<int>(s.batch);
    need(cudnnSetTensor4dDescriptor(x16_d_.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_BFLOAT16, n,
                                    g.channels, g.in_h, g.in_w));
    need(cudnnSetTensor4dDescriptor(dx_d_.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n,
                                    g.channels, g.in_h, g.in_w));
    need(cudnnSetTensor4dDescriptor(y_d_.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n,
                                    s.out_channels, g.out_h, g.out_w));
    need(cudnnSetTensor4dDescriptor(dy16_d_.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_BFLOAT16, n,
                                    s.out_channels, g.out_h, g.out_w));
    need(cudnnSetFilter4dDescriptor(w16_d_.get(), CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NCHW,
                                    s.out_channels, g.channels, g.kernel_h, g.kernel_w));
    need(cudnnSetFilter4dDescriptor(dw_d_.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                    s.out_channels, g.channels, g.kernel_h, g.kernel_w));
    need(cudnnSetConvolution2dDescriptor(conv_.get(), g.pad_h, g.pad_w, g.stride_h, g.stride_w, 1,
                                         1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    need(cudnnSetConvolutionMathType(conv_.get(), CUDNN_TENSOR_OP_MATH));
    int dims[4] = {};
    need(cudnnGetConvolutionNdForwardOutputDim(conv_.get(), x16_d_.get(), w16_d_.get(), 4, dims));
    LPSGD_CHECK(dims[2] == g.out_h && dims[3] == g.out_w,
                "cuDNN computes a " << dims[2] << "x" << dims[3] << " output where lpsgd expects "
                                    << g.out_h << "x" << g.out_w);

    int got = 0;
    std::vector<cudnnConvolutionFwdAlgoPerf_t> fp(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
    need(cudnnGetConvolutionForwardAlgorithm_v7(h_, x16_d_.get(), w16_d_.get(), conv_.get(),
                                                y_d_.get(), static_cast<int>(fp.size()), &got,
                                                fp.data()));
    const int fa = pick_bf16(fp, got,
                             {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                              CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                              CUDNN_CONVOLUTION_FWD_ALGO_GEMM});
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> wp(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
    need(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h_, x16_d_.get(), dy16_d_.get(),
                                                       conv_.get(), dw_d_.get(),
                                                       static_cast<int>(wp.size()), &got,
                                                       wp.data()));
    const int wa = pick_bf16(wp, got,
                             {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
                              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
                              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3});
    int da = 0;
    if (s.input_grad) {
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> dp(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
      need(cudnnGetConvolutionBackwardDataAlgorithm_v7(h_, w16_d_.get(), dy16_d_.get(),
                                                       conv_.get(), dx_d_.get(),
                                                       static_cast<int>(dp.size()), &got,
                                                       dp.data()));
      da = pick_bf16(dp, got,
                     {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1});
    }
    if (fa < 0 || wa < 0 || da < 0) throw Unsupported{};
    fwd_algo_ = static_cast<cudnnConvolutionFwdAlgo_t>(fa);
    bww_algo_ = static_cast<cudnnConvolutionBwdFilterAlgo_t>(wa);
    bwd_algo_ = static_cast<cudnnConvolutionBwdDataAlgo_t>(da);

    size_t bytes = 0, b = 0;
    need(cudnnGetConvolutionForwardWorkspaceSize(h_, x16_d_.get(), w16_d_.get(), conv_.get(),
                                                 y_d_.get(), fwd_algo_, &b));
    bytes = std::max(bytes, b);
    need(cudnnGetConvolutionBackwardFilterWorkspaceSize(h_, x16_d_.get(), dy16_d_.get(),
                                                        conv_.get(), dw_d_.get(), bww_algo_, &b));
    bytes = std::max(bytes, b);
    if (s.input_grad) {
      need(cudnnGetConvolutionBackwardDataWorkspaceSize(h_, w16_d_.get(), dy16_d_.get(),
                                                        conv_.get(), dx_d_.get(), bwd_algo_, &b));
      bytes = std::max(bytes, b);
    }
    work_ = DeviceBuffer(dev, bytes);
    if (!trial()) throw Unsupported{};
  }

  std::string impl() const override {
    return "cudnn bf16 fwd algo " + std::to_string(fwd_algo_) + ", bwd-filter algo " +
           std::to_string(bww_algo_) +
           (s_.input_grad ? ", bwd-data algo " + std::to_string(bwd_algo_) : std::string()) +
           " (tensor cores, fp32 outputs)";
  }

  void forward(float* y, const float* x, const float* w, const float* b) override {
    cuda_make_current(dev_);
    kernels::cuda::convert(DType::BF16, x16_.data(), DType::F32, x, nx_, stream_);
    kernels::cuda::convert(DType::BF16, w16_.data(), DType::F32, w, nw_, stream_);
    check(run_forward(y), "cudnnConvolutionForward (bf16 in, float out)");
    const size_t n = static_cast<size_t>(s_.batch), c = static_cast<size_t>(s_.out_channels),
                 p = s_.g.col_cols();
    dev_.bias_add(y, b, n, c, p);
    if (s_.relu) dev_.relu_forward(y, y, n * c * p);
    saved_ = true;
  }

  void do_backward(float* dx, float* dw, float* db, const float* dy, const float*,
                   const std::function<void()>& grads_written) override {
    LPSGD_CHECK(saved_, "conv2d plan: backward before forward");
    cuda_make_current(dev_);
    kernels::cuda::convert(DType::BF16, dy16_.data(), DType::F32, dy, ny_, stream_);
    check(run_backward_filter(dw), "cudnnConvolutionBackwardFilter (bf16 in, float out)");
    kernels::cuda::bias_grad(db, dy16_.as<bfloat16>(), static_cast<size_t>(s_.batch),
                             static_cast<size_t>(s_.out_channels), s_.g.col_cols(), stream_);
    if (grads_written) grads_written();
    // W is unchanged since forward (AffinePlan's contract): its bf16 copy is still right.
    if (s_.input_grad)
      check(run_backward_data(dx), "cudnnConvolutionBackwardData (bf16 in, float out)");
  }

 private:
  cudnnStatus_t run_forward(float* y) {
    const float one = 1.0f, zero = 0.0f;
    return cudnnConvolutionForward(h_, &one, x16_d_.get(), x16_.data(), w16_d_.get(), w16_.data(),
                                   conv_.get(), fwd_algo_, work_.data(), work_.bytes(), &zero,
                                   y_d_.get(), y);
  }
  cudnnStatus_t run_backward_filter(float* dw) {
    const float one = 1.0f, zero = 0.0f;
    return cudnnConvolutionBackwardFilter(h_, &one, x16_d_.get(), x16_.data(), dy16_d_.get(),
                                          dy16_.data(), conv_.get(), bww_algo_, work_.data(),
                                          work_.bytes(), &zero, dw_d_.get(), dw);
  }
  cudnnStatus_t run_backward_data(float* dx) {
    const float one = 1.0f, zero = 0.0f;
    return cudnnConvolutionBackwardData(h_, &one, w16_d_.get(), w16_.data(), dy16_d_.get(),
                                        dy16_.data(), conv_.get(), bwd_algo_, work_.data(),
                                        work_.bytes(), &zero, dx_d_.get(), dx);
  }

  // Every direction once on the plan's zeroed bf16 buffers, into scratch
  // outputs: false when cuDNN refuses one (the heuristics may list an
  // algorithm for a configuration that the call itself then rejects).
  bool trial() {
    DeviceBuffer y(dev_, ny_ * sizeof(float)), dw(dev_, nw_ * sizeof(float)),
        dx(dev_, s_.input_grad ? nx_ * sizeof(float) : 0);
    bool good = run_forward(y.as<float>()) == CUDNN_STATUS_SUCCESS &&
                run_backward_filter(dw.as<float>()) == CUDNN_STATUS_SUCCESS &&
                (!s_.input_grad || run_backward_data(dx.as<float>()) == CUDNN_STATUS_SUCCESS);
    if (cudaStreamSynchronize(stream_) != cudaSuccess) {
      (void)cudaGetLastError();
      good = false;
    }
    return good;
  }

  Device& dev_;
  cudnnHandle_t h_;
  Conv2dSpec s_;
  cudaStream_t stream_;
  size_t nx_, nw_, ny_;
  TensorDesc x16_d_, dx_d_, y_d_, dy16_d_;
  FilterDesc w16_d_, dw_d_;
  ConvDesc conv_;
  cudnnConvolutionFwdAlgo_t fwd_algo_{};
  cudnnConvolutionBwdFilterAlgo_t bww_algo_{};
  cudnnConvolutionBwdDataAlgo_t bwd_algo_{};
  DeviceBuffer x16_, w16_, dy16_, work_;
  bool saved_ = false;
};

// cuDNN's max pooling backward reads the forward's x and y (it finds each
// window's maximum again) rather than a stored argmax.
class MaxPool2d final : public MaxPool2dPlan {
 public:
  MaxPool2d(Device& dev, Handle& h, const MaxPool2dSpec& s) : dev_(dev), h_(h.get()) {
    const auto& g = s.g;
    set_nchw(x_, s.batch, g.channels, g.in_h, g.in_w);
    set_nchw(y_, s.batch, g.channels, g.out_h, g.out_w);
    check(cudnnSetPooling2dDescriptor(pool_.get(), CUDNN_POOLING_MAX_DETERMINISTIC,
                                      CUDNN_NOT_PROPAGATE_NAN, g.kernel_h, g.kernel_w, g.pad_h,
                                      g.pad_w, g.stride_h, g.stride_w),
          "cudnnSetPooling2dDescriptor");
    int dims[4] = {};
    check(cudnnGetPoolingNdForwardOutputDim(pool_.get(), x_.get(), 4, dims),
          "cudnnGetPoolingNdForwardOutputDim");
    LPSGD_CHECK(dims[2] == g.out_h && dims[3] == g.out_w,
                "cuDNN pools to " << dims[2] << "x" << dims[3] << " where lpsgd expects "
                                  << g.out_h << "x" << g.out_w);
  }

  std::string impl() const override { return "cudnn max (deterministic)"; }

  void forward(float* y, const float* x) override {
    cuda_make_current(dev_);
    x_saved_ = x;
    y_saved_ = y;
    const float one = 1.0f, zero = 0.0f;
    check(cudnnPoolingForward(h_, pool_.get(), &one, x_.get(), x, &zero, y_.get(), y),
          "cudnnPoolingForward");
  }

  void backward(float* dx, const float* dy) override {
    LPSGD_CHECK(x_saved_, "max pooling plan: backward before forward");
    cuda_make_current(dev_);
    const float one = 1.0f, zero = 0.0f;
    check(cudnnPoolingBackward(h_, pool_.get(), &one, y_.get(), y_saved_, y_.get(), dy, x_.get(),
                               x_saved_, &zero, x_.get(), dx),
          "cudnnPoolingBackward");
  }

 private:
  Device& dev_;
  cudnnHandle_t h_;
  TensorDesc x_, y_;
  PoolDesc pool_;
  const float* x_saved_ = nullptr;
  const float* y_saved_ = nullptr;
};

}  // namespace

std::unique_ptr<AffinePlan> conv2d(Device& dev, Handle* h, const Conv2dSpec& s) {
  if (!h) return nullptr;
  try {
    if (s.precision == Precision::bf16) return std::make_unique<Bf16Conv2d>(dev, *h, s);
    return std::make_unique<Conv2d>(dev, *h, s);
  } catch (const Unsupported&) {
    return nullptr;
  }
}

std::unique_ptr<MaxPool2dPlan> maxpool2d(Device& dev, Handle* h, const MaxPool2dSpec& s) {
  if (!h) return nullptr;
  return std::make_unique<MaxPool2d>(dev, *h, s);
}

#else  // built without cuDNN

class Handle {};
void HandleDeleter::operator()(Handle* h) const noexcept { delete h; }
HandlePtr make_handle(cudaStream_t) { return nullptr; }
std::string version() { return "cuDNN not built"; }
std::unique_ptr<AffinePlan> conv2d(Device&, Handle*, const Conv2dSpec&) { return nullptr; }
std::unique_ptr<MaxPool2dPlan> maxpool2d(Device&, Handle*, const MaxPool2dSpec&) {
  return nullptr;
}

#endif

}  // namespace lpsgd::cudnn
