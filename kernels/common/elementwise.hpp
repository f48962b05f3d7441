// Element-wise operations written once, as functors over raw pointers.
//
// Each functor's operator()(i) does the work for element i. kernels/cpu runs it
// in a loop; kernels/cuda runs it in a grid-stride kernel. The same source is the
// CPU reference for the CUDA kernels. Pointers may alias exactly (out == a) but
// must not partially overlap.
#pragma once

#include <cstddef>

#include "core/hd.hpp"

namespace lpsgd::kernels {

/// out[i] = a[i] + b[i]: the reduce step of every collective.
template <class T>
struct ReduceAdd {
  T* out;
  const T* a;
  const T* b;
  LPSGD_HD void operator()(size_t i) const { out[i] = a[i] + b[i]; }
};

/// out[i] = (a[i] + b[i]) * alpha: the last step of an average in one pass,
/// rounded exactly as ReduceAdd followed by Scale.
template <class T>
struct ReduceAddScale {
  T* out;
  const T* a;
  const T* b;
  T alpha;
  LPSGD_HD void operator()(size_t i) const {
    const T sum = static_cast<T>(a[i] + b[i]);
    out[i] = static_cast<T>(sum * alpha);
  }
};

/// x[i] *= alpha (average = sum then scale by 1/P).
template <class T>
struct Scale {
  T* x;
  T alpha;
  LPSGD_HD void operator()(size_t i) const { x[i] = static_cast<T>(x[i] * alpha); }
};

/// y[i] += alpha * x[i].
template <class T>
struct Axpy {
  T* y;
  const T* x;
  T alpha;
  LPSGD_HD void operator()(size_t i) const { y[i] = static_cast<T>(y[i] + alpha * x[i]); }
};

/// x[i] = value.
template <class T>
struct Fill {
  T* x;
  T value;
  LPSGD_HD void operator()(size_t i) const { x[i] = value; }
};

}  // namespace lpsgd::kernels
