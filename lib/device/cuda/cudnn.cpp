// cuDNN plans for the CUDA device (see cudnn.hpp).
//
// The convolution itself is cuDNN's; the bias add, the fused ReLU and the
// bias gradient are the device's own kernels (the CPU's functors, so they
// round exactly as the CPU does, and the bias gradient's fixed-order
// reduction keeps it deterministic).
#include "device/cuda/cudnn.hpp"

#include <algorithm>
#include <vector>

#include "core/error.hpp"
#include "device/cuda/cuda_device.hpp"
#include "device/device.hpp"
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

class Conv2d final : public AffinePlan {
 public:
  struct Unsupported {};

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

  void backward(float* dx, float* dw, float* db, const float* dy, const float* w) override {
    LPSGD_CHECK(x_saved_, "conv2d plan: backward before forward");
    cuda_make_current(dev_);
    const float one = 1.0f, zero = 0.0f;
    check(cudnnConvolutionBackwardFilter(h_, &one, x_.get(), x_saved_, y_.get(), dy, conv_.get(),
                                         bww_algo_, work_.data(), work_.bytes(), &zero, w_.get(),
                                         dw),
          "cudnnConvolutionBackwardFilter");
    dev_.bias_grad(db, dy, static_cast<size_t>(s_.batch), static_cast<size_t>(s_.out_channels),
                   s_.g.col_cols());
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
    return std::make_unique<Conv2d>(dev, *h, s);
  } catch (const Conv2d::Unsupported&) {
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
