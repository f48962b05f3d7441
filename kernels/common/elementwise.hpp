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

/// x[i] = value.
template <class T>
struct Fill {
  T* x;
  T value;
  LPSGD_HD void operator()(size_t i) const { x[i] = value; }
};

}  // namespace lpsgd::kernels
