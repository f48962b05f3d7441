// oneDNN plans for the CPU device (see onednn.hpp).
//
// A convolution lets oneDNN pick its layouts (format "any"): on AVX2 and
// AVX-512 that is a channel-blocked layout (nChw8c / nChw16c) in which its JIT
// kernels run at 70-90% of the core's peak, where the same kernels on plain
// NCHW fall back to im2col + GEMM at about 40%. The layers around a
// convolution keep plain NCHW, so the plan reorders the input, the weights
// and the output gradient into the blocked layout and the output and input
// gradient back; the blocked copy of the input made in forward is reused by
// backward. Measured on LeNet's second convolution (batch 64) those reorders
// cost about 2% of the convolution.
//
// In bf16 (Precision::bf16) the same staging converts: the reorder that puts
// x, W or dy into the primitive's layout also rounds it from fp32 to bf16, so
// a convolution pays nothing extra for it, and the primitives write fp32
// outputs (y, dx, dW, db) straight into the caller's tensors, summing the
// bf16 products in fp32 (AVX512_BF16's dot products, or AMX). W is converted
// once per forward, when it has just changed, and backward reuses that copy;
// the fp32 weights the optimizer updates are never touched. A bf16 plan is
// only made where the CPU multiplies bf16 natively (bf16_isa()): oneDNN's
// emulation on plain AVX-512 is slower than fp32.
//
// Everything shape-dependent (primitive descriptors, primitives, memory
// objects, the argument maps, reorder buffers and one user-managed scratchpad)
// is made in the constructor; forward() and backward() only set data handles
// and execute.
#include "device/cpu/onednn.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "core/error.hpp"
#include "device/device.hpp"
#include "kernels/cpu/isa.hpp"
#include "lpsgd/config.hpp"

#if LPSGD_HAVE_ONEDNN
#include <omp.h>

#include <dnnl.hpp>
#endif

namespace lpsgd::onednn {

#if LPSGD_HAVE_ONEDNN
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Args = std::unordered_map<int, memory>;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

using DT = memory::data_type;

memory::desc md(const memory::dims& d, Tag t, DT dt = DT::f32) { return memory::desc(d, dt, t); }

// The type a plan of precision p reads x, W and dy in.
DT input_type(Precision p) { return p == Precision::bf16 ? DT::bf16 : DT::f32; }

// oneDNN's reference implementations are correct but slow (10-1000x): a plan
// that would use one is not made, and the caller falls back to the generic
// plan over BLAS.
bool is_reference(const char* impl) { return std::strncmp(impl, "ref", 3) == 0; }

// Staging memory that inference plans share (Conv2dSpec::forward_only): they
// keep nothing from one call to the next, so one buffer per operand serves
// them all, grown to the largest. The CPU device computes on one thread.
void* shared_stage(int slot, size_t bytes) {
  static std::vector<std::vector<char>> slots(4);
  std::vector<char>& s = slots.at(static_cast<size_t>(slot));
  if (s.size() < bytes) {
    s.clear();
    s.shrink_to_fit();
    s.resize(bytes);  // zeroed: touched once, here, not inside a later call
  }
  return s.data();
}

// A tensor the caller holds in its plain layout and a primitive wants in
// `want`. When the two differ, the plan owns a buffer in `want` (or, for an
// inference plan, uses shared staging slot `slot`) and the reorders between
// them; otherwise inner() is the caller's memory itself.
class Staged {
 public:
  Staged() = default;
  Staged(Device& dev, const memory::desc& plain, const memory::desc& want, int slot = -1)
      : user_(plain, engine(), DNNL_MEMORY_NONE) {
    if (want == plain) {
      inner_ = user_;
      return;
    }
    reorders_ = true;
    slot_ = slot;
    bytes_ = want.get_size();
    if (slot < 0) buf_ = DeviceBuffer(dev, bytes_);
    else shared_stage(slot, bytes_);  // sized now, not in the first call
    inner_ = memory(want, engine(), slot < 0 ? buf_.data() : DNNL_MEMORY_NONE);
    to_inner_ = dnnl::reorder(user_, inner_);
    to_user_ = dnnl::reorder(inner_, user_);
  }
  bool reorders() const { return reorders_; }
  /// The memory the primitive reads or writes.
  memory& inner() { return inner_; }
  /// Points at the caller's data p and, when the layouts differ, reorders it
  /// into inner().
  void load(dnnl::stream& s, const float* p) {
    user_.set_data_handle(const_cast<float*>(p));
    if (!reorders_) return;
    point_inner();
    to_inner_.execute(s, user_, inner_);
  }
  /// Points at where the caller wants a result (p); after the primitive wrote
  /// inner(), store() puts it there.
  void target(float* p) {
    user_.set_data_handle(p);
    if (reorders_) point_inner();
  }
  void store(dnnl::stream& s) {
    if (reorders_) to_user_.execute(s, inner_, user_);
  }

 private:
  // A shared slot may have moved since (grown for a larger plan).
  void point_inner() {
    if (slot_ >= 0) inner_.set_data_handle(shared_stage(slot_, bytes_));
  }
  memory user_, inner_;
  DeviceBuffer buf_;
  dnnl::reorder to_inner_, to_user_;
  bool reorders_ = false;
  int slot_ = -1;
  size_t bytes_ = 0;
};

dnnl::primitive_attr make_attr(bool relu) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (relu) {
    dnnl::post_ops po;
    po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(po);
  }
  return attr;
}

// The primitives of one layer shape: forward, backward-weights and, when the
// layer wants input gradients, backward-data; their argument maps (memory
// objects whose data handles the plan points at the caller's tensors on each
// call) and one scratchpad as large as the largest of them wants, shared
// since they run one after another on one stream.
template <class Fwd, class BwdData, class BwdWeights>
struct Primitives {
  typename Fwd::primitive_desc fwd_pd;
  typename BwdWeights::primitive_desc bww_pd;
  typename BwdData::primitive_desc bwd_pd;  // empty without input gradients
  Fwd fwd;
  BwdWeights bww;
  BwdData bwd;
  Args fwd_args, bww_args, bwd_args;
  dnnl::stream stream{engine()};
  bool has_bwd = false;
  bool has_bww = true;  // false in an inference plan (forward only)
  const char* kind = "onednn ";  // "onednn bf16 " for a bf16 plan

  // Makes the primitives once the descriptors are chosen; the argument maps
  // get the scratchpad here.
  void make(Device& dev, Args f, Args w, Args d) {
    size_t bytes = fwd_pd.scratchpad_desc().get_size();
    if (has_bww) bytes = std::max(bytes, bww_pd.scratchpad_desc().get_size());
    if (has_bwd) bytes = std::max(bytes, bwd_pd.scratchpad_desc().get_size());
    scratch_ = DeviceBuffer(dev, std::max<size_t>(bytes, 64));
    const auto pad = [&](const memory::desc& want) { return memory(want, engine(), scratch_.data()); };
    fwd = Fwd(fwd_pd);
    fwd_args = std::move(f);
    fwd_args.emplace(DNNL_ARG_SCRATCHPAD, pad(fwd_pd.scratchpad_desc()));
    if (has_bww) {
      bww = BwdWeights(bww_pd);
      bww_args = std::move(w);
      bww_args.emplace(DNNL_ARG_SCRATCHPAD, pad(bww_pd.scratchpad_desc()));
    }
    if (has_bwd) {
      bwd = BwdData(bwd_pd);
      bwd_args = std::move(d);
      bwd_args.emplace(DNNL_ARG_SCRATCHPAD, pad(bwd_pd.scratchpad_desc()));
    }
  }
  bool any_reference() const {
    return is_reference(fwd_pd.impl_info_str()) || (has_bww && is_reference(bww_pd.impl_info_str())) ||
           (has_bwd && is_reference(bwd_pd.impl_info_str()));
  }
  std::string impl() const {
    std::string s = std::string(kind) + "fwd " + fwd_pd.impl_info_str();
    if (!has_bww) return s + " (inference)";
    s += std::string(", bwd-weights ") + bww_pd.impl_info_str();
    if (has_bwd) s += std::string(", bwd-data ") + bwd_pd.impl_info_str();
    return s;
  }

 private:
  DeviceBuffer scratch_;
};

// Thrown (and caught by make_or_null) where oneDNN only has a reference
// implementation for a shape.
struct Unsupported {};

class Conv2d final : public AffinePlan {
  using Fwd = dnnl::convolution_forward;
  using BwdData = dnnl::convolution_backward_data;
  using BwdWeights = dnnl::convolution_backward_weights;

 public:
  Conv2d(Device& dev, const Conv2dSpec& s) {
    const auto& g = s.g;
    const memory::dim n = s.batch, c = g.channels, oc = s.out_channels;
    const memory::dims src{n, c, g.in_h, g.in_w}, wei{oc, c, g.kernel_h, g.kernel_w}, bia{oc},
        dst{n, oc, g.out_h, g.out_w}, strides{g.stride_h, g.stride_w}, pad_l{g.pad_h, g.pad_w},
        // The right/bottom padding that makes the output size come out (less
        // than pad_l, or negative, when the last window stops short).
        pad_r{(g.out_h - 1) * g.stride_h + g.kernel_h - g.in_h - g.pad_h,
              (g.out_w - 1) * g.stride_w + g.kernel_w - g.in_w - g.pad_w};
    // The caller's tensors (p_*, plain fp32); what the primitives read (x, W,
    // dy: i_*, in the plan's input type) and write (y, dx, dW: a_*, fp32), in
    // oneDNN's chosen layouts ("any") or plain ones (the fallbacks below).
    // In fp32 the i_ and a_ descriptors are the same.
    const DT it = input_type(s.precision);
    if (s.precision == Precision::bf16) p_.kind = "onednn bf16 ";
    const memory::desc p_src = md(src, Tag::nchw), p_wei = md(wei, Tag::oihw),
                       p_bia = md(bia, Tag::a), p_dst = md(dst, Tag::nchw);
    const memory::desc a_src = md(src, Tag::any), a_wei = md(wei, Tag::any),
                       a_dst = md(dst, Tag::any);
    const memory::desc i_src = md(src, Tag::any, it), i_wei = md(wei, Tag::any, it),
                       i_dst = md(dst, Tag::any, it), ip_src = md(src, Tag::nchw, it),
                       ip_dst = md(dst, Tag::nchw, it);
    const auto algo = dnnl::algorithm::convolution_direct;
    auto& p = p_;

    // Forward: oneDNN's layouts, or plain ones where it has only a reference
    // kernel for those.
    const auto prop = s.forward_only ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training;
    const auto fwd_pd = [&](const memory::desc& sm, const memory::desc& dm) {
      return Fwd::primitive_desc(Fwd::desc(prop, algo, sm, i_wei, p_bia, dm, strides, pad_l, pad_r),
                                 make_attr(s.relu), engine());
    };
    p.fwd_pd = fwd_pd(i_src, a_dst);
    if (is_reference(p.fwd_pd.impl_info_str())) p.fwd_pd = fwd_pd(ip_src, p_dst);
    b_ = memory(p_bia, engine(), DNNL_MEMORY_NONE);
    if (s.forward_only) {  // inference: forward alone, staged in the shared slots
      forward_only_ = true;
      p.has_bww = p.has_bwd = false;
      if (p.any_reference()) throw Unsupported{};
      x_ = Staged(dev, p_src, p.fwd_pd.src_desc(), 0);
      w_ = Staged(dev, p_wei, p.fwd_pd.weights_desc(), 1);
      y_ = Staged(dev, p_dst, p.fwd_pd.dst_desc(), 2);
      p.make(dev,
             {{DNNL_ARG_SRC, x_.inner()}, {DNNL_ARG_WEIGHTS, w_.inner()}, {DNNL_ARG_BIAS, b_},
              {DNNL_ARG_DST, y_.inner()}},
             {}, {});
      return;
    }

    // Backward weights. With fewer input channels than a vector holds (a
    // first layer on grey or RGB images) the blocked JIT kernel is slower than
    // im2col + GEMM on the plain layouts (LeNet's first layer: 13 ms against
    // 6.5 ms on AVX2), so those take the plain layouts.
    const auto bww_pd = [&](const memory::desc& sm, const memory::desc& dm) {
      return BwdWeights::primitive_desc(
          BwdWeights::desc(algo, sm, a_wei, p_bia, dm, strides, pad_l, pad_r), make_attr(false),
          engine(), p.fwd_pd);
    };
    // In bf16 it is the other way round: the bf16 GEMM on plain layouts is
    // the slow one (LeNet's first layer, batch 64, AVX512_BF16: 7-12 ms
    // against 1.7-2.8 ms blocked), so bf16 plans keep the blocked layouts.
    const bool plain_bww = c < 8 && s.precision == Precision::fp32;
    p.bww_pd = plain_bww ? bww_pd(ip_src, ip_dst) : bww_pd(i_src, i_dst);
    if (!plain_bww && is_reference(p.bww_pd.impl_info_str()))
      p.bww_pd = bww_pd(ip_src, ip_dst);

    p.has_bwd = s.input_grad;
    if (s.input_grad) {
      const auto bwd_pd = [&](const memory::desc& sm, const memory::desc& dm) {
        return BwdData::primitive_desc(BwdData::desc(algo, sm, i_wei, dm, strides, pad_l, pad_r),
                                       make_attr(false), engine(), p.fwd_pd);
      };
      p.bwd_pd = bwd_pd(a_src, i_dst);
      if (is_reference(p.bwd_pd.impl_info_str())) p.bwd_pd = bwd_pd(p_src, ip_dst);
    }
    if (p.any_reference()) throw Unsupported{};

    // Staging between the caller's plain tensors and the chosen layouts;
    // backward reuses forward's copies of x and W, and bwd-data reuses
    // bwd-weights' copy of dy, wherever they want the same layout.
    x_ = Staged(dev, p_src, p.fwd_pd.src_desc());
    w_ = Staged(dev, p_wei, p.fwd_pd.weights_desc());
    y_ = Staged(dev, p_dst, p.fwd_pd.dst_desc());
    db_ = memory(p_bia, engine(), DNNL_MEMORY_NONE);
    x_bw_same_ = p.bww_pd.src_desc() == p.fwd_pd.src_desc();
    if (!x_bw_same_) x_bw_ = Staged(dev, p_src, p.bww_pd.src_desc());
    dy_w_ = Staged(dev, p_dst, p.bww_pd.diff_dst_desc());
    dw_ = Staged(dev, p_wei, p.bww_pd.diff_weights_desc());
    if (s.input_grad) {
      dy_d_same_ = p.bwd_pd.diff_dst_desc() == p.bww_pd.diff_dst_desc();
      if (!dy_d_same_) dy_d_ = Staged(dev, p_dst, p.bwd_pd.diff_dst_desc());
      w_bd_same_ = p.bwd_pd.weights_desc() == p.fwd_pd.weights_desc();
      if (!w_bd_same_) w_bd_ = Staged(dev, p_wei, p.bwd_pd.weights_desc());
      dx_ = Staged(dev, p_src, p.bwd_pd.diff_src_desc());
    }
    p.make(dev,
           {{DNNL_ARG_SRC, x_.inner()},
            {DNNL_ARG_WEIGHTS, w_.inner()},
            {DNNL_ARG_BIAS, b_},
            {DNNL_ARG_DST, y_.inner()}},
           {{DNNL_ARG_SRC, x_bw_same_ ? x_.inner() : x_bw_.inner()},
            {DNNL_ARG_DIFF_DST, dy_w_.inner()},
            {DNNL_ARG_DIFF_WEIGHTS, dw_.inner()},
            {DNNL_ARG_DIFF_BIAS, db_}},
           s.input_grad ? Args{{DNNL_ARG_DIFF_DST, dy_d_same_ ? dy_w_.inner() : dy_d_.inner()},
                               {DNNL_ARG_WEIGHTS, w_bd_same_ ? w_.inner() : w_bd_.inner()},
                               {DNNL_ARG_DIFF_SRC, dx_.inner()}}
                        : Args{});
  }

  std::string impl() const override { return p_.impl(); }

  void forward(float* y, const float* x, const float* w, const float* b) override {
    auto& st = p_.stream;
    x_saved_ = x;
    x_.load(st, x);
    w_.load(st, w);
    b_.set_data_handle(const_cast<float*>(b));
    y_.target(y);
    p_.fwd.execute(st, p_.fwd_args);
    y_.store(st);
    st.wait();
  }

  void do_backward(float* dx, float* dw, float* db, const float* dy, const float* w,
                   const std::function<void()>& grads_written) override {
    LPSGD_CHECK(!forward_only_, "conv2d plan: backward of an inference plan");
    LPSGD_CHECK(x_saved_, "conv2d plan: backward before forward");
    auto& st = p_.stream;
    if (!x_bw_same_) x_bw_.load(st, x_saved_);
    dy_w_.load(st, dy);
    dw_.target(dw);
    db_.set_data_handle(db);
    p_.bww.execute(st, p_.bww_args);
    dw_.store(st);
    if (grads_written) {
      st.wait();
      grads_written();
    }
    if (p_.has_bwd) {
      if (!dy_d_same_) dy_d_.load(st, dy);
      if (!w_bd_same_) w_bd_.load(st, w);
      dx_.target(dx);
      p_.bwd.execute(st, p_.bwd_args);
      dx_.store(st);
    }
    st.wait();
  }

 private:
  Primitives<Fwd, BwdData, BwdWeights> p_;
  Staged x_, w_, y_, x_bw_, dy_w_, dw_, dy_d_, w_bd_, dx_;
  bool x_bw_same_ = true, dy_d_same_ = true, w_bd_same_ = true, forward_only_ = false;
  memory b_, db_;
  const float* x_saved_ = nullptr;
};

// A fully connected layer as oneDNN's inner product, all in plain layouts
// (the weights are the arena's [out, in]); the bias add and a following ReLU
// are fused into forward, the bias gradient into backward-weights. In bf16,
// x, W and dy are staged into bf16 copies in the layouts oneDNN picks (x's
// and W's made in forward and reused by backward, dy's shared by both
// backward primitives); in fp32 the staging is the caller's memory itself.
class Linear final : public AffinePlan {
  using Fwd = dnnl::inner_product_forward;
  using BwdData = dnnl::inner_product_backward_data;
  using BwdWeights = dnnl::inner_product_backward_weights;

 public:
  Linear(Device& dev, const LinearSpec& s) {
    const memory::dims d_src{s.batch, s.in}, d_wei{s.out, s.in}, d_dst{s.batch, s.out};
    const memory::desc src = md(d_src, Tag::nc), wei = md(d_wei, Tag::oi),
                       bia = md({s.out}, Tag::a), dst = md(d_dst, Tag::nc);
    // What the primitives read x, W and dy as: the plain fp32 tensors
    // themselves, or bf16 in oneDNN's layouts.
    const bool bf16 = s.precision == Precision::bf16;
    const memory::desc i_src = bf16 ? md(d_src, Tag::any, DT::bf16) : src,
                       i_wei = bf16 ? md(d_wei, Tag::any, DT::bf16) : wei,
                       i_dst = bf16 ? md(d_dst, Tag::any, DT::bf16) : dst;
    auto& p = p_;
    if (bf16) p.kind = "onednn bf16 ";
    p.fwd_pd = Fwd::primitive_desc(
        Fwd::desc(s.forward_only ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training,
                  i_src, i_wei, bia, dst),
        make_attr(s.relu), engine());
    y_ = memory(dst, engine(), DNNL_MEMORY_NONE);
    for (auto* m : {&b_, &db_}) *m = memory(bia, engine(), DNNL_MEMORY_NONE);
    if (s.forward_only) {  // inference: forward alone, staged in the shared slots
      forward_only_ = true;
      p.has_bww = p.has_bwd = false;
      if (p.any_reference()) throw Unsupported{};
      x_ = Staged(dev, src, p.fwd_pd.src_desc(), 0);
      w_ = Staged(dev, wei, p.fwd_pd.weights_desc(), 1);
      p.make(dev, {{DNNL_ARG_SRC, x_.inner()}, {DNNL_ARG_WEIGHTS, w_.inner()}, {DNNL_ARG_BIAS, b_}, {DNNL_ARG_DST, y_}},
             {}, {});
      return;
    }
    p.bww_pd = BwdWeights::primitive_desc(BwdWeights::desc(p.fwd_pd.src_desc(), wei, bia, i_dst),
                                          make_attr(false), engine(), p.fwd_pd);
    p.has_bwd = s.input_grad;
    if (s.input_grad)
      p.bwd_pd = BwdData::primitive_desc(
          BwdData::desc(src, p.fwd_pd.weights_desc(), p.bww_pd.diff_dst_desc()), make_attr(false),
          engine(), p.fwd_pd);
    if (p.any_reference()) throw Unsupported{};
    // Backward-weights reads forward's copy of x (asked for in its layout
    // above), backward-data forward's copy of W and backward-weights' of dy.
    x_ = Staged(dev, src, p.fwd_pd.src_desc());
    w_ = Staged(dev, wei, p.fwd_pd.weights_desc());
    dy_ = Staged(dev, dst, p.bww_pd.diff_dst_desc());
    LPSGD_CHECK(p.bww_pd.src_desc() == p.fwd_pd.src_desc() &&
                    (!s.input_grad || (p.bwd_pd.weights_desc() == p.fwd_pd.weights_desc() &&
                                       p.bwd_pd.diff_dst_desc() == p.bww_pd.diff_dst_desc())),
                "oneDNN linear plan: backward wants other layouts than forward made");
    dx_ = memory(src, engine(), DNNL_MEMORY_NONE);
    dw_ = memory(wei, engine(), DNNL_MEMORY_NONE);
    p.make(dev,
           {{DNNL_ARG_SRC, x_.inner()},
            {DNNL_ARG_WEIGHTS, w_.inner()},
            {DNNL_ARG_BIAS, b_},
            {DNNL_ARG_DST, y_}},
           {{DNNL_ARG_SRC, x_.inner()},
            {DNNL_ARG_DIFF_DST, dy_.inner()},
            {DNNL_ARG_DIFF_WEIGHTS, dw_},
            {DNNL_ARG_DIFF_BIAS, db_}},
           {{DNNL_ARG_DIFF_DST, dy_.inner()}, {DNNL_ARG_WEIGHTS, w_.inner()}, {DNNL_ARG_DIFF_SRC, dx_}});
  }

  std::string impl() const override {
    return p_.kind + std::string(p_.fwd_pd.impl_info_str());
  }

  void forward(float* y, const float* x, const float* w, const float* b) override {
    auto& st = p_.stream;
    x_.load(st, x);
    w_.load(st, w);
    b_.set_data_handle(const_cast<float*>(b));
    y_.set_data_handle(y);
    p_.fwd.execute(st, p_.fwd_args);
    st.wait();
    saved_ = true;
  }

  void do_backward(float* dx, float* dw, float* db, const float* dy, const float*,
                   const std::function<void()>& grads_written) override {
    LPSGD_CHECK(!forward_only_, "linear plan: backward of an inference plan");
    LPSGD_CHECK(saved_, "linear plan: backward before forward");
    auto& st = p_.stream;
    dy_.load(st, dy);
    dw_.set_data_handle(dw);
    db_.set_data_handle(db);
    p_.bww.execute(st, p_.bww_args);  // x_ still holds (or points at) forward's input
    if (grads_written) {
      st.wait();
      grads_written();
    }
    if (p_.has_bwd) {
      // W is unchanged since forward (AffinePlan's contract): its copy, or
      // the caller's memory itself, is still right.
      dx_.set_data_handle(dx);
      p_.bwd.execute(st, p_.bwd_args);
    }
    st.wait();
  }

 private:
  Primitives<Fwd, BwdData, BwdWeights> p_;
  Staged x_, w_, dy_;
  memory y_, dx_, dw_, b_, db_;
  bool saved_ = false, forward_only_ = false;
};

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41: return "sse4.1";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2-vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512-vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512-bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512-amx";
    default: return "other";
  }
}

bool switched_off() {
  const char* v = std::getenv("LPSGD_ONEDNN");
  return v && std::strcmp(v, "0") == 0;
}

// Plans oneDNN cannot make fast (or at all) fall back to the generic ones.
template <class Plan, class Spec>
std::unique_ptr<AffinePlan> make_or_null(Device& dev, const Spec& s) {
  if (!enabled()) return nullptr;
  if (s.precision == Precision::bf16 && bf16_isa().empty()) return nullptr;
  try {
    return std::make_unique<Plan>(dev, s);
  } catch (const Unsupported&) {
    return nullptr;
  } catch (const dnnl::error&) {  // e.g. a shape the primitive rejects
    return nullptr;
  }
}

}  // namespace

// LPSGD_MAX_ISA caps oneDNN's JIT as it caps lpsgd's own kernels (isa.hpp),
// before oneDNN makes its first kernel; ONEDNN_MAX_CPU_ISA, where set, is
// oneDNN's own and stays in charge.
void cap_isa() {
  using kernels::cpu::Isa;
  if (const char* v = std::getenv("ONEDNN_MAX_CPU_ISA"); v && *v) return;
  dnnl::cpu_isa cap = dnnl::cpu_isa::all;
  switch (kernels::cpu::isa_cap()) {
    case Isa::Baseline: cap = dnnl::cpu_isa::sse41; break;
    case Isa::Avx2: cap = dnnl::cpu_isa::avx2; break;
    case Isa::Avx512: cap = dnnl::cpu_isa::avx512_core; break;
    case Isa::Avx512Bf16: return;
  }
  LPSGD_CHECK(dnnl::set_max_cpu_isa(cap) == dnnl::status::success,
              "LPSGD_MAX_ISA=" << kernels::cpu::isa_name(kernels::cpu::isa_cap())
                               << ": oneDNN would not take the cap (its kernels were made already)");
}

bool enabled() {
  static const bool on = [] {
    cap_isa();
    return !switched_off();
  }();
  return on;
}

std::string describe() {
  const bool on = enabled();
  const dnnl_version_t* v = dnnl_version();
  std::string s = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                  std::to_string(v->patch) + " (" + isa_name(dnnl::get_effective_cpu_isa()) + ")";
  if (!on) s += ", switched off by LPSGD_ONEDNN=0";
  return s;
}

std::string bf16_isa() {
  if (!enabled()) return "";
  // oneDNN's own view (ONEDNN_MAX_CPU_ISA lowers it): bf16 dot products
  // (AVX512_BF16) or tiles (AMX) in hardware, not the emulation on AVX-512.
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "";
  }
}

void set_threads(int n) { omp_set_num_threads(n); }

std::unique_ptr<AffinePlan> conv2d(Device& dev, const Conv2dSpec& s) {
  return make_or_null<Conv2d>(dev, s);
}

std::unique_ptr<AffinePlan> linear(Device& dev, const LinearSpec& s) {
  return make_or_null<Linear>(dev, s);
}

#else  // built without oneDNN

bool enabled() { return false; }
std::string describe() { return "oneDNN not built"; }
std::string bf16_isa() { return ""; }
void set_threads(int) {}
std::unique_ptr<AffinePlan> conv2d(Device&, const Conv2dSpec&) { return nullptr; }
std::unique_ptr<AffinePlan> linear(Device&, const LinearSpec&) { return nullptr; }

#endif

}  // namespace lpsgd::onednn
