#include "device/cpu/cpu_device.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "device/cpu/onednn.hpp"
#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/nn.hpp"

namespace lpsgd {

CpuDevice::CpuDevice() {
#if defined(__x86_64__)
  constexpr unsigned kFlushToZero = 0x8000, kDenormalsAreZero = 0x0040;  // MXCSR bits
  _mm_setcsr(_mm_getcsr() | kFlushToZero | kDenormalsAreZero);
#endif
}

// Device memory is host memory here: 64-byte aligned and touched (zeroed) now,
// not inside a collective.
void* CpuDevice::alloc(size_t bytes) { return alloc_host(bytes); }

void CpuDevice::free(void* p) noexcept { free_host(p); }

void CpuDevice::copy(void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src) std::memcpy(dst, src, bytes);
}

void CpuDevice::zero(void* p, size_t bytes) {
  if (bytes) std::memset(p, 0, bytes);
}

void CpuDevice::reduce_add(DType t, void* out, const void* a, const void* b, size_t n) {
  kernels::cpu::reduce_add(t, out, a, b, n);
}

void CpuDevice::reduce_add_scale(DType t, void* out, const void* a, const void* b, double alpha,
                                 size_t n) {
  kernels::cpu::reduce_add_scale(t, out, a, b, alpha, n);
}

void CpuDevice::copy_uncached(void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src) kernels::cpu::copy_uncached(dst, src, bytes);
}

void CpuDevice::reduce_add_uncached(DType t, void* out, const void* a, const void* b, size_t n) {
  kernels::cpu::reduce_add_uncached(t, out, a, b, n);
}

void CpuDevice::reduce_add_twice(DType t, void* out0, void* out1, const void* a, const void* b,
                                 double alpha, size_t n, bool uncached) {
  kernels::cpu::reduce_add_twice(t, out0, out1, a, b, alpha, n, uncached);
}

size_t CpuDevice::uncached_min_bytes() const {
  static const size_t bytes = [] {
    if (const char* v = std::getenv("LPSGD_UNCACHED_BYTES"))
      return static_cast<size_t>(std::strtoull(v, nullptr, 10));
    // The last-level cache this core sees (sysfs: 32 MiB on a Zen 3 CCX),
    // not the whole package's that sysconf reports (256 MiB there).
    size_t llc = 0;
    if (std::FILE* f = std::fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r")) {
      unsigned long v = 0;
      char unit = 0;
      if (std::fscanf(f, "%lu%c", &v, &unit) >= 1)
        llc = v << (unit == 'K' ? 10 : unit == 'M' ? 20 : 0);
      std::fclose(f);
    }
    if (llc == 0 && sysconf(_SC_LEVEL3_CACHE_SIZE) > 0)
      llc = static_cast<size_t>(sysconf(_SC_LEVEL3_CACHE_SIZE));
    return llc ? llc / 2 : size_t{16} << 20;
  }();
  return bytes;
}

void CpuDevice::scale(DType t, void* x, double alpha, size_t n) {
  kernels::cpu::scale(t, x, alpha, n);
}

void CpuDevice::axpy(DType t, void* y, double alpha, const void* x, size_t n) {
  kernels::cpu::axpy(t, y, alpha, x, n);
}

void CpuDevice::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                     int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  kernels::cpu::sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void CpuDevice::im2col(float* col, const float* x, const kernels::Window2d& g) {
  kernels::cpu::im2col(col, x, g);
}

void CpuDevice::col2im(float* x, const float* col, const kernels::Window2d& g) {
  kernels::cpu::col2im(x, col, g);
}

void CpuDevice::maxpool_forward(float* y, int32_t* argmax, const float* x,
                                const kernels::Window2d& g, size_t planes) {
  kernels::cpu::maxpool_forward(y, argmax, x, g, planes);
}

void CpuDevice::maxpool_backward(float* dx, const float* dy, const int32_t* argmax,
                                 const kernels::Window2d& g, size_t planes) {
  kernels::cpu::maxpool_backward(dx, dy, argmax, g, planes);
}

void CpuDevice::bias_add(float* y, const float* bias, size_t outer, size_t channels,
                         size_t inner) {
  kernels::cpu::bias_add(y, bias, outer, channels, inner);
}

void CpuDevice::bias_grad(float* db, const float* dy, size_t outer, size_t channels,
                          size_t inner) {
  kernels::cpu::bias_grad(db, dy, outer, channels, inner);
}

void CpuDevice::relu_forward(float* y, const float* x, size_t n) {
  kernels::cpu::relu_forward(y, x, n);
}

void CpuDevice::relu_backward(float* dx, const float* dy, const float* y, size_t n) {
  kernels::cpu::relu_backward(dx, dy, y, n);
}

void CpuDevice::avgpool_forward(float* y, const float* x, const kernels::Window2d& g, size_t planes,
                                bool count_pad) {
  kernels::cpu::avgpool_forward(y, x, g, planes, count_pad);
}

void CpuDevice::avgpool_backward(float* dx, const float* dy, const kernels::Window2d& g,
                                 size_t planes, bool count_pad) {
  kernels::cpu::avgpool_backward(dx, dy, g, planes, count_pad);
}

void CpuDevice::add_forward(float* y, const float* a, const float* b, size_t n, bool relu) {
  kernels::cpu::add_forward(y, a, b, n, relu);
}

void CpuDevice::channel_moments(double* s, const float* u, const float* v,
                                const kernels::BnShape& sh, const kernels::BnMask& mask) {
  kernels::cpu::channel_moments(s, u, v, sh, mask);
}

void CpuDevice::bn_forward_coeffs(const kernels::BnForwardCoeffs& f) {
  kernels::cpu::launch(f.channels, f);
}

void CpuDevice::bn_backward_coeffs(const kernels::BnBackwardCoeffs& f) {
  kernels::cpu::launch(f.channels, f);
}

void CpuDevice::bn_apply(float* y, const float* x, const float* a, const float* b,
                         const kernels::BnShape& sh, bool relu) {
  kernels::cpu::bn_apply(y, x, a, b, sh, relu);
}

void CpuDevice::bn_backward(float* dx, const float* dy, const float* x, const float* pqr,
                            const kernels::BnShape& sh, const kernels::BnMask& mask) {
  kernels::cpu::bn_backward(dx, dy, x, pqr, sh, mask);
}

void CpuDevice::dropout(float* out, const float* in, size_t n, float p, uint64_t seed,
                        uint64_t stream, uint64_t counter) {
  kernels::cpu::dropout(out, in, n, p, seed, stream, counter);
}

void CpuDevice::softmax_xent(float* grad, float* row_loss, int32_t* status, const float* logits,
                             const int32_t* labels, size_t rows, size_t classes,
                             float grad_scale) {
  kernels::cpu::softmax_xent(grad, row_loss, status, logits, labels, rows, classes, grad_scale);
}

void CpuDevice::sgd_update_from(DType g_type, float* w, float* v, const void* g, size_t n,
                                const kernels::SgdHyper& h) {
  kernels::cpu::sgd_update(w, v, g_type, g, n, h);
}

void CpuDevice::adamw_update(DType g_type, float* w, float* m, float* v, const void* g, size_t n,
                             const kernels::AdamWHyper& h) {
  kernels::cpu::adamw_update(w, m, v, g_type, g, n, h);
}

void CpuDevice::lars_update(DType g_type, float* w, float* v, const void* g,
                            const kernels::LarsBucket& b, const kernels::LarsHyper& h) {
  kernels::cpu::lars_update(w, v, g_type, g, b, h);
}

void CpuDevice::reduce_add_from(DType t, void* out0, void* out1, DType ta, const void* a,
                                DType tb, const void* b, double alpha, size_t n) {
  kernels::cpu::reduce_add_from(t, out0, out1, ta, a, tb, b, alpha, n);
}

void CpuDevice::reduce_add_float_to(DType t, void* out0, void* out1, const float* a,
                                    const float* b, double alpha, size_t n) {
  kernels::cpu::reduce_add_float_to(t, out0, out1, a, b, alpha, n);
}

void CpuDevice::convert(DType to, void* dst, DType from, const void* src, size_t n) {
  kernels::cpu::convert(to, dst, from, src, n);
}

void CpuDevice::sgd_update(float* w, float* v, const float* g, size_t n,
                           const kernels::SgdHyper& h) {
  kernels::cpu::sgd_update(w, v, g, n, h);
}

bool CpuDevice::bf16_compute(std::string* how) const {
  const std::string isa = onednn::bf16_isa();
  if (!isa.empty()) {
    *how = isa + " (oneDNN)";
    return true;
  }
  using kernels::cpu::isa_cap;
  const std::string where = isa_cap() < kernels::cpu::cpu_isa()
                                ? std::string("not under LPSGD_MAX_ISA=") + kernels::cpu::isa_name(isa_cap())
                                : std::string("not on this CPU");
  *how = onednn::enabled() ? where + " (" + onednn::describe() +
                                 ": no AVX512_BF16 or AMX, where bf16 would be emulated, slower than fp32)"
                           : onednn::describe() + ": the generic plans compute in fp32 only";
  return false;
}

// A bf16 plan oneDNN cannot make fast for a shape (it would run a reference
// kernel) becomes the fp32 plan: slower to emulate than to compute in fp32.
// impl() names what runs either way.
namespace {
template <class Spec>
Spec in_fp32(Spec s) {
  s.precision = Precision::fp32;
  return s;
}
}  // namespace

std::unique_ptr<AffinePlan> CpuDevice::plan_conv2d(const Conv2dSpec& s) {
  if (auto p = onednn::conv2d(*this, s)) return p;
  if (s.precision != Precision::fp32) return plan_conv2d(in_fp32(s));
  return generic_conv2d(*this, s);
}

std::unique_ptr<AffinePlan> CpuDevice::plan_linear(const LinearSpec& s) {
  if (auto p = onednn::linear(*this, s)) return p;
  if (s.precision != Precision::fp32) return plan_linear(in_fp32(s));
  return generic_linear(*this, s);
}

}  // namespace lpsgd
