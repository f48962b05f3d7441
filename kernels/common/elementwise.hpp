// Element-wise operations written once, as functors over raw pointers.
//
// Each functor's operator()(i) does the work for element i. kernels/cpu runs it
// in a loop; kernels/cuda runs it in a grid-stride kernel. The same source is the
// CPU reference for the CUDA kernels. Pointers may alias exactly (out == a) but
// must not partially overlap.
//
// Each computes in acc_t<T> (core/half.hpp): T itself for float, double and
// int32, so those round exactly as plain T arithmetic; float for the 16-bit
// types, which are converted to float, added and scaled in float, and rounded
// to 16 bits once per stored result.
#pragma once

#include <cstddef>
#include <type_traits>

#include "core/half.hpp"
#include "core/hd.hpp"

namespace lpsgd::kernels {

/// out[i] = a[i] + b[i]: the reduce step of every collective.
template <class T>
struct ReduceAdd {
  using A = acc_t<T>;
  T* out;
  const T* a;
  const T* b;
  LPSGD_HD void operator()(size_t i) const {
    out[i] = static_cast<T>(static_cast<A>(a[i]) + static_cast<A>(b[i]));
  }
};

/// out[i] = (a[i] + b[i]) * alpha: the last step of an average in one pass.
/// For float, double and int32 rounded exactly as ReduceAdd followed by Scale;
/// a 16-bit result is rounded once, after the multiply.
template <class T>
struct ReduceAddScale {
  using A = acc_t<T>;
  T* out;
  const T* a;
  const T* b;
  A alpha;
  LPSGD_HD void operator()(size_t i) const {
    const A sum = static_cast<A>(static_cast<A>(a[i]) + static_cast<A>(b[i]));
    out[i] = static_cast<T>(static_cast<A>(sum * alpha));
  }
};

/// x[i] *= alpha (average = sum then scale by 1/P).
template <class T>
struct Scale {
  using A = acc_t<T>;
  T* x;
  A alpha;
  LPSGD_HD void operator()(size_t i) const {
    x[i] = static_cast<T>(static_cast<A>(static_cast<A>(x[i]) * alpha));
  }
};

/// y[i] += alpha * x[i].
template <class T>
struct Axpy {
  using A = acc_t<T>;
  T* y;
  const T* x;
  A alpha;
  LPSGD_HD void operator()(size_t i) const {
    y[i] = static_cast<T>(static_cast<A>(static_cast<A>(y[i]) + alpha * static_cast<A>(x[i])));
  }
};

/// dst[i] = src[i] converted through float: float <-> bf16 / fp16 (the wire's
/// conversions; to 16 bits rounds to nearest even).
template <class D, class S>
struct Convert {
  D* dst;
  const S* src;
  LPSGD_HD void operator()(size_t i) const { dst[i] = static_cast<D>(static_cast<float>(src[i])); }
};

/// An operand of a 16-bit reduction as type T holds it: a T as it is, a float
/// rounded to T first. A collective that reads a float input this way gives
/// the bits of converting that input to T and then reducing it.
template <class T, class S>
LPSGD_HD acc_t<T> as_wire(const S& x) {
  if constexpr (std::is_same<T, bfloat16>::value && std::is_same<S, float>::value)
    return bf16_round(x);  // the same bits, without packing to 16 bits and back
  else
    return static_cast<acc_t<T>>(static_cast<T>(x));
}

/// out0[i] = out1[i] = (a[i] + b[i]) * alpha, rounded to T once, with each
/// operand read by as_wire (SA and SB: T or float): the first reduction of a
/// 16-bit collective whose input is float, fused with the conversion. out1
/// may equal out0 (one output); alpha == 1 leaves the sum unscaled, which
/// multiplying by 1 would too, bit for bit.
template <class T, class SA, class SB>
struct ReduceAddFrom {
  using A = acc_t<T>;
  T* out0;
  T* out1;
  const SA* a;
  const SB* b;
  A alpha;
  LPSGD_HD void operator()(size_t i) const {
    const A sum = static_cast<A>(as_wire<T>(a[i]) + as_wire<T>(b[i]));
    const A v = static_cast<A>(sum * alpha);
    out0[i] = static_cast<T>(v);
    out1[i] = static_cast<T>(v);
  }
};

/// out0[i] = out1[i] = (a[i] + b[i]) * alpha for float a and b, computed in
/// float and rounded to the 16-bit T once: two float inputs reduced where
/// nothing travels between them (LP's two halves of a node), so nothing is
/// rounded before the sum. out1 may equal out0.
template <class T>
struct ReduceAddTo {
  T* out0;
  T* out1;
  const float* a;
  const float* b;
  float alpha;
  LPSGD_HD void operator()(size_t i) const {
    const float v = static_cast<float>(static_cast<float>(a[i] + b[i]) * alpha);
    out0[i] = static_cast<T>(v);
    out1[i] = static_cast<T>(v);
  }
};

/// x[i] = value.
template <class T>
struct Fill {
  T* x;
  T value;
  LPSGD_HD void operator()(size_t i) const { x[i] = value; }
};

}  // namespace lpsgd::kernels
