// Device: where tensors and message buffers live and where element-wise work
// runs. The CPU backend (cpu/) is always built; the CUDA backend (cuda/) when
// nvcc is found. Communication and model code only ever talk to this interface.
//
// Memory from alloc() is already touched (zeroed), so nothing pays first-touch
// page faults later inside a collective or a training step. Operations on a
// CUDA device are queued on the device's stream; synchronize() waits for them.
//
// A CUDA device has two streams: a compute stream (this Device) and a
// communication stream (comm_queue(), the same GPU and memory). Events order
// work between them without blocking the host: record an event on one and
// wait() for it on the other. On the CPU everything runs on the calling thread
// in order, so comm_queue() is the device itself and events are always done.
//
// Besides memory and the element-wise ops of the collectives, a Device runs the
// float32 neural-network kernels lib/nn and lib/train need (GEMM, im2col,
// pooling, ...). They are virtual here so model code is backend-free: the CPU
// backend runs kernels/cpu (OpenBLAS), a GPU backend runs kernels/cuda (cuBLAS).
// Pointers passed to them are this device's memory. The layers' heavy
// operations come as plans (plans.hpp), set up once per shape: the CPU backend
// makes them with oneDNN, the CUDA backend with cuDNN, and any backend falls
// back to the generic plans over the kernels above.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.hpp"
#include "device/plans.hpp"
#include "kernels/common/nn.hpp"

namespace lpsgd {

enum class DeviceKind { Cpu, Cuda };

/// A point in a device's queue of work (CUDA: a cudaEvent_t). Made by
/// Device::create_event(), placed by Device::record().
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  /// True once the work queued before the last record() has finished (true
  /// when never recorded).
  virtual bool done() = 0;
  /// Blocks the calling thread until done().
  virtual void synchronize() = 0;
};

const char* device_kind_name(DeviceKind k);
/// "cpu" or "cuda"; a usage error for anything else or for cuda when not built.
DeviceKind parse_device_kind(const std::string& name);

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  /// Human-readable, e.g. "cpu" or "cuda:0 (NVIDIA H200)".
  virtual std::string name() const = 0;

  /// Allocates bytes of device memory, zeroed; never returns null (throws).
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* p) noexcept = 0;

  /// Copies within this device's memory (regions must not overlap).
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void zero(void* p, size_t bytes) = 0;

  /// out[i] = a[i] + b[i] for n elements; out may be a or b. 16-bit types
  /// (bf16, fp16) add in float and round once.
  virtual void reduce_add(DType t, void* out, const void* a, const void* b, size_t n) = 0;
  /// out[i] = (a[i] + b[i]) * alpha (the last step of an average): float,
  /// double and int32 rounded as reduce_add then scale; 16-bit types add and
  /// multiply in float and round once (the CPU and CUDA devices override this;
  /// the default, exactly those two calls, rounds a 16-bit sum twice).
  virtual void reduce_add_scale(DType t, void* out, const void* a, const void* b, double alpha,
                                size_t n) {
    reduce_add(t, out, a, b, n);
    scale(t, out, alpha, n);
  }
  /// x[i] *= alpha.
  virtual void scale(DType t, void* x, double alpha, size_t n) = 0;
  /// y[i] += alpha * x[i].
  virtual void axpy(DType t, void* y, double alpha, const void* x, size_t n) = 0;

  /// Outputs nobody reads soon (a large collective's): copy and reduce_add
  /// that may write past the caches (the CPU's non-temporal stores), for
  /// messages of at least uncached_min_bytes(). By default exactly copy and
  /// reduce_add, and no message is large enough.
  virtual void copy_uncached(void* dst, const void* src, size_t bytes) { copy(dst, src, bytes); }
  virtual void reduce_add_uncached(DType t, void* out, const void* a, const void* b, size_t n) {
    reduce_add(t, out, a, b, n);
  }
  virtual size_t uncached_min_bytes() const { return SIZE_MAX; }
  /// out0[i] = out1[i] = (a[i] + b[i]) * alpha: one sum written to two places
  /// (two ranks' outputs), with the bits of reduce_add (alpha = 1) or
  /// reduce_add_scale; past the caches where `uncached`. Each output may be a
  /// or b (in place), not overlap them otherwise. By default the sum into
  /// out0 (past the caches only where alpha = 1), then a copy.
  virtual void reduce_add_twice(DType t, void* out0, void* out1, const void* a, const void* b,
                                double alpha, size_t n, bool uncached) {
    if (alpha != 1.0) reduce_add_scale(t, out0, a, b, alpha, n);
    else if (uncached) reduce_add_uncached(t, out0, a, b, n);
    else reduce_add(t, out0, a, b, n);
    if (uncached) copy_uncached(out1, out0, n * dtype_size(t));
    else copy(out1, out0, n * dtype_size(t));
  }

  /// Waits until all work queued on this device has finished.
  virtual void synchronize() = 0;

  // ---- streams, events, pinned host memory -------------------------------------
  // Defaults are the CPU's: one in-order queue on the calling thread.

  /// The same device and memory, with work queued on its communication stream
  /// (CUDA); the device itself where there is only one queue. Owned by *this.
  virtual Device& comm_queue() { return *this; }
  virtual std::unique_ptr<DeviceEvent> create_event();
  /// Makes e mark all work queued on this device so far.
  virtual void record(DeviceEvent& e) { (void)e; }
  /// Work queued on this device from now on starts after e's work (no host wait).
  virtual void wait(DeviceEvent& e) { (void)e; }

  /// Page-locked host memory (CUDA: cudaHostAlloc), zeroed, for asynchronous
  /// copies and MPI staging; never returns null (throws).
  virtual void* alloc_host(size_t bytes);
  virtual void free_host(void* p) noexcept;
  /// Queued copies between this device and host memory from alloc_host(); they
  /// complete in queue order (record an event to know when). CPU: immediate.
  virtual void copy_to_host_async(void* host_dst, const void* src, size_t bytes) {
    copy_to_host(host_dst, src, bytes);
  }
  virtual void copy_from_host_async(void* dst, const void* host_src, size_t bytes) {
    copy_from_host(dst, host_src, bytes);
  }

  // ---- neural-network kernels: float32, row-major, see kernels/common/nn.hpp ----

  /// C = alpha * op(A) * op(B) + beta * C; op(A) is m x k, op(B) k x n, C m x n;
  /// lda/ldb/ldc are row strides of the matrices as stored. beta == 0 overwrites C.
  virtual void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    int lda, const float* b, int ldb, float beta, float* c, int ldc) = 0;
  /// One image [g.channels, g.in_h, g.in_w] to col [g.col_rows(), g.col_cols()].
  virtual void im2col(float* col, const float* x, const kernels::Window2d& g) = 0;
  /// Adjoint of im2col: overwrites the image x with the sums of col.
  virtual void col2im(float* x, const float* col, const kernels::Window2d& g) = 0;
  /// Max pooling of `planes` planes of g.in_h x g.in_w; argmax (int32, one per
  /// output) records the winner for backward.
  virtual void maxpool_forward(float* y, int32_t* argmax, const float* x,
                               const kernels::Window2d& g, size_t planes) = 0;
  /// Overwrites dx [planes, in_h, in_w] with dy routed through argmax.
  virtual void maxpool_backward(float* dx, const float* dy, const int32_t* argmax,
                                const kernels::Window2d& g, size_t planes) = 0;
  /// y[o, c, k] += bias[c] for y [outer, channels, inner].
  virtual void bias_add(float* y, const float* bias, size_t outer, size_t channels,
                        size_t inner) = 0;
  /// db[c] = sum over o, k of dy[o, c, k]; overwrites db.
  virtual void bias_grad(float* db, const float* dy, size_t outer, size_t channels,
                         size_t inner) = 0;
  /// y = max(x, 0); y may be x.
  virtual void relu_forward(float* y, const float* x, size_t n) = 0;
  /// dx = dy where y > 0 else 0 (y the forward output); dx may be dy.
  virtual void relu_backward(float* dx, const float* dy, const float* y, size_t n) = 0;
  /// Average pooling of `planes` planes (kernels/common/nn.hpp AvgPoolForward),
  /// and its adjoint, which overwrites dx [planes, in_h, in_w].
  virtual void avgpool_forward(float* y, const float* x, const kernels::Window2d& g, size_t planes,
                               bool count_pad) = 0;
  virtual void avgpool_backward(float* dx, const float* dy, const kernels::Window2d& g,
                                size_t planes, bool count_pad) = 0;
  /// y = a + b, then max(., 0) when relu (a residual join).
  virtual void add_forward(float* y, const float* a, const float* b, size_t n, bool relu) = 0;
  /// Batch normalization over [outer, channels, inner] (kernels/common/nn.hpp
  /// BnShape): per-channel s[c] = Σu, s[C + c] = Σu·v in double (v may be u;
  /// with a mask (a fused ReLU), u counts where the mask kept v's element);
  /// the per-channel coefficients from such sums (BnForwardCoeffs,
  /// BnBackwardCoeffs); and the per-element passes (BnApply, BnBackward).
  /// Pointers are device memory, the sums included.
  virtual void channel_moments(double* s, const float* u, const float* v,
                               const kernels::BnShape& sh, const kernels::BnMask& mask) = 0;
  virtual void bn_forward_coeffs(const kernels::BnForwardCoeffs& f) = 0;
  virtual void bn_backward_coeffs(const kernels::BnBackwardCoeffs& f) = 0;
  virtual void bn_apply(float* y, const float* x, const float* a, const float* b,
                        const kernels::BnShape& sh, bool relu) = 0;
  virtual void bn_backward(float* dx, const float* dy, const float* x, const float* pqr,
                           const kernels::BnShape& sh, const kernels::BnMask& mask) = 0;
  /// Inverted dropout with drop probability p in [0, 1): the mask is a pure
  /// function of (seed, stream, counter, i), so the same call on dy is backward.
  virtual void dropout(float* out, const float* in, size_t n, float p, uint64_t seed,
                       uint64_t stream, uint64_t counter) = 0;
  /// Per-row softmax cross-entropy of logits [rows, classes] against int32
  /// labels: row_loss, status (1 right, 0 wrong, -1 bad label) and, unless grad
  /// is null, grad = (softmax - onehot) * grad_scale.
  virtual void softmax_xent(float* grad, float* row_loss, int32_t* status, const float* logits,
                            const int32_t* labels, size_t rows, size_t classes,
                            float grad_scale) = 0;
  /// One SGD step over n elements of weights w, velocity v and gradient g.
  virtual void sgd_update(float* w, float* v, const float* g, size_t n,
                          const kernels::SgdHyper& h) = 0;
  /// The same step from a gradient g of type g_type (float, or the bf16 /
  /// fp16 it travelled in: --wire), widened to float in the update's pass.
  virtual void sgd_update_from(DType g_type, float* w, float* v, const void* g, size_t n,
                               const kernels::SgdHyper& h) {
    LPSGD_CHECK(g_type == DType::F32, "device " << name() << " updates from float gradients only");
    sgd_update(w, v, static_cast<const float*>(g), n, h);
  }
  /// One AdamW step (kernels/common/nn.hpp AdamWUpdate) over n elements of
  /// weights w, first and second moments m and v, from a gradient g of type
  /// g_type (float, bf16 or fp16), widened in the update's pass.
  virtual void adamw_update(DType g_type, float* w, float* m, float* v, const void* g, size_t n,
                            const kernels::AdamWHyper& h) = 0;
  /// One LARS step over the whole tensors of bucket b (kernels/common/nn.hpp
  /// LarsBucket, LarsUpdate): each tensor's Σw² and Σg² in double, in a fixed
  /// order (deterministic), its trust ratio, then its update; w, v and g
  /// (of type g_type) start at element b.first. Nothing waits for the host.
  virtual void lars_update(DType g_type, float* w, float* v, const void* g,
                           const kernels::LarsBucket& b, const kernels::LarsHyper& h) = 0;
  /// The first reduction of a 16-bit collective whose input is float (the
  /// wire type t, bf16 or fp16): out0[i] (and out1[i] unless out1 is null) =
  /// (a[i] + b[i]) * alpha, added and scaled in float and rounded to t once,
  /// where each operand is of type t or float (ta, tb) and a float one is
  /// first rounded to t: the bits of convert() and then reduce_add_scale /
  /// reduce_add_twice, in one pass over the float input.
  virtual void reduce_add_from(DType t, void* out0, void* out1, DType ta, const void* a, DType tb,
                               const void* b, double alpha, size_t n) {
    (void)t, (void)out0, (void)out1, (void)ta, (void)a, (void)tb, (void)b, (void)alpha, (void)n;
    LPSGD_THROW("device " << name() << " has no 16-bit conversions");
  }
  /// out0[i] (and out1[i] unless out1 is null) = (a[i] + b[i]) * alpha for
  /// float a and b, in float, rounded to the 16-bit t once: LP's two halves
  /// of a 16-bit message whose inputs are float, where nothing travels
  /// between the ranks, so no operand is rounded before the sum.
  virtual void reduce_add_float_to(DType t, void* out0, void* out1, const float* a, const float* b,
                                   double alpha, size_t n) {
    (void)t, (void)out0, (void)out1, (void)a, (void)b, (void)alpha, (void)n;
    LPSGD_THROW("device " << name() << " has no 16-bit conversions");
  }
  /// dst (type `to`) = src (type `from`) for n elements: float to bf16 / fp16
  /// (round to nearest even) and back.
  virtual void convert(DType to, void* dst, DType from, const void* src, size_t n) {
    (void)to, (void)dst, (void)from, (void)src, (void)n;
    LPSGD_THROW("device " << name() << " has no 16-bit conversions");
  }

  // ---- layer plans (plans.hpp): made once per shape, at set-up ---------------
  // Defaults: the generic plans over the kernels above (fp32 whatever the
  // spec's precision).

  /// Where Precision::bf16 plans multiply in bf16 on this device: true with
  /// *how set to what runs it ("avx512_core_bf16 (oneDNN)"), or false with
  /// *how set to why not (naming the hardware's ISA). Where it is false a
  /// bf16 spec gets an fp32 plan; a trainer refuses --precision bf16 first.
  virtual bool bf16_compute(std::string* how) const {
    *how = "no bf16 plans on this backend";
    return false;
  }

  virtual std::unique_ptr<AffinePlan> plan_conv2d(const Conv2dSpec& s) {
    return generic_conv2d(*this, s);
  }
  virtual std::unique_ptr<AffinePlan> plan_linear(const LinearSpec& s) {
    return generic_linear(*this, s);
  }
  virtual std::unique_ptr<MaxPool2dPlan> plan_maxpool2d(const MaxPool2dSpec& s) {
    return generic_maxpool2d(*this, s);
  }
};

/// A device of the given kind; a CUDA device is chosen as local_rank % count.
std::unique_ptr<Device> make_device(DeviceKind kind, int local_rank = 0);

/// Host threads the CPU backend's compute libraries (OpenBLAS, oneDNN) may use
/// in the calling thread's work (default: 1 is right for one rank per core).
void set_host_threads(int n);

/// The compute libraries this build uses, e.g. "OpenBLAS 0.3.21, oneDNN 2.6.3
/// (avx2), cuBLAS 13.0, cuDNN 9.13" (lpsgd --version, benchmark headers).
std::string compute_libraries();

/// Which --precision runs where, for lpsgd --version: "fp32 everywhere; bf16
/// compute: cpu avx512_core_bf16 (oneDNN)" or "... cpu not on this CPU (...)".
std::string precision_support();

/// Number of usable GPUs (0 when CUDA is not built or no driver/GPU is present).
int cuda_device_count();

/// Owning, move-only memory from a Device; Alloc/Free say which kind.
template <void* (Device::*Alloc)(size_t), void (Device::*Free)(void*) noexcept>
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(Device& dev, size_t bytes) : dev_(&dev), bytes_(bytes) {
    ptr_ = bytes ? (dev.*Alloc)(bytes) : nullptr;
  }
  ~DeviceMemory() { reset(); }
  DeviceMemory(DeviceMemory&& o) noexcept { *this = std::move(o); }
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    if (this != &o) {
      reset();
      dev_ = o.dev_;
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  void reset() noexcept {
    if (ptr_) (dev_->*Free)(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  /// Gives the memory up without freeing it and returns it: for memory that
  /// someone else may still use (MPI on an error path), leaked on purpose.
  void* release() noexcept {
    void* p = ptr_;
    ptr_ = nullptr;
    bytes_ = 0;
    return p;
  }
  void* data() const { return ptr_; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  Device* device() const { return dev_; }

 private:
  Device* dev_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// Owning buffer of device memory (move-only).
using DeviceBuffer = DeviceMemory<&Device::alloc, &Device::free>;
/// Owning buffer of pinned host memory from Device::alloc_host (move-only).
using PinnedBuffer = DeviceMemory<&Device::alloc_host, &Device::free_host>;

}  // namespace lpsgd
