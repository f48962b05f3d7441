// The CPU device: 64-byte aligned host memory, element-wise work on the calling
// thread through kernels/cpu, GEMM through OpenBLAS, convolution and fully
// connected layers through oneDNN where it is built (cpu/onednn.hpp).
#pragma once

#include "device/device.hpp"

namespace lpsgd {

class CpuDevice : public Device {
 public:
  /// Sets flush-to-zero and denormals-are-zero on the calling thread (x86;
  /// threads it starts later inherit them): softmax gradients of confident
  /// predictions are denormal, and GEMMs over them ran the MLP's step 9%
  /// slower. Values below 1.2e-38 become 0; runs stay deterministic.
  CpuDevice();
  DeviceKind kind() const override { return DeviceKind::Cpu; }
  std::string name() const override { return "cpu"; }
  void* alloc(size_t bytes) override;
  void free(void* p) noexcept override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void zero(void* p, size_t bytes) override;
  void reduce_add(DType t, void* out, const void* a, const void* b, size_t n) override;
  void reduce_add_scale(DType t, void* out, const void* a, const void* b, double alpha,
                        size_t n) override;
  void scale(DType t, void* x, double alpha, size_t n) override;
  void axpy(DType t, void* y, double alpha, const void* x, size_t n) override;
  void copy_uncached(void* dst, const void* src, size_t bytes) override;
  void reduce_add_uncached(DType t, void* out, const void* a, const void* b, size_t n) override;
  void reduce_add_twice(DType t, void* out0, void* out1, const void* a, const void* b,
                        double alpha, size_t n, bool uncached) override;
  /// Half the last-level cache (a message and its output fill it), or
  /// LPSGD_UNCACHED_BYTES: at 16 and 64 MiB on 2 ranks non-temporal stores
  /// made LP's allreduce, bcast and reduce about 20% faster.
  size_t uncached_min_bytes() const override;
  void synchronize() override {}

  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override;
  void im2col(float* col, const float* x, const kernels::Window2d& g) override;
  void col2im(float* x, const float* col, const kernels::Window2d& g) override;
  void maxpool_forward(float* y, int32_t* argmax, const float* x, const kernels::Window2d& g,
                       size_t planes) override;
  void maxpool_backward(float* dx, const float* dy, const int32_t* argmax,
                        const kernels::Window2d& g, size_t planes) override;
  void bias_add(float* y, const float* bias, size_t outer, size_t channels,
                size_t inner) override;
  void bias_grad(float* db, const float* dy, size_t outer, size_t channels,
                 size_t inner) override;
  void relu_forward(float* y, const float* x, size_t n) override;
  void relu_backward(float* dx, const float* dy, const float* y, size_t n) override;
  void avgpool_forward(float* y, const float* x, const kernels::Window2d& g, size_t planes,
                       bool count_pad) override;
  void avgpool_backward(float* dx, const float* dy, const kernels::Window2d& g, size_t planes,
                        bool count_pad) override;
  void add_forward(float* y, const float* a, const float* b, size_t n, bool relu) override;
  void channel_moments(double* s, const float* u, const float* v, const kernels::BnShape& sh,
                       const kernels::BnMask& mask) override;
  void bn_forward_coeffs(const kernels::BnForwardCoeffs& f) override;
  void bn_backward_coeffs(const kernels::BnBackwardCoeffs& f) override;
  void bn_apply(float* y, const float* x, const float* a, const float* b, const kernels::BnShape& sh,
                bool relu) override;
  void bn_backward(float* dx, const float* dy, const float* x, const float* pqr,
                   const kernels::BnShape& sh, const kernels::BnMask& mask) override;
  void dropout(float* out, const float* in, size_t n, float p, uint64_t seed, uint64_t stream,
               uint64_t counter) override;
  void softmax_xent(float* grad, float* row_loss, int32_t* status, const float* logits,
                    const int32_t* labels, size_t rows, size_t classes,
                    float grad_scale) override;
  void sgd_update(float* w, float* v, const float* g, size_t n,
                  const kernels::SgdHyper& h) override;
  void sgd_update_from(DType g_type, float* w, float* v, const void* g, size_t n,
                       const kernels::SgdHyper& h) override;
  void adamw_update(DType g_type, float* w, float* m, float* v, const void* g, size_t n,
                    const kernels::AdamWHyper& h) override;
  void lars_update(DType g_type, float* w, float* v, const void* g, const kernels::LarsBucket& b,
                   const kernels::LarsHyper& h) override;
  void convert(DType to, void* dst, DType from, const void* src, size_t n) override;
  void reduce_add_float_to(DType t, void* out0, void* out1, const float* a, const float* b,
                           double alpha, size_t n) override;
  void reduce_add_from(DType t, void* out0, void* out1, DType ta, const void* a, DType tb,
                       const void* b, double alpha, size_t n) override;

  // oneDNN where it has a fast kernel for the shape, else the generic plans.
  // Max pooling stays the hand-written loop: oneDNN 2.6's pooling took 3-5x
  // longer on LeNet's planes here, in plain and in blocked layouts.
  bool bf16_compute(std::string* how) const override;
  std::unique_ptr<AffinePlan> plan_conv2d(const Conv2dSpec& s) override;
  std::unique_ptr<AffinePlan> plan_linear(const LinearSpec& s) override;
};

}  // namespace lpsgd
