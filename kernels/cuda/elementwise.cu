// CUDA launchers for kernels/common/elementwise.hpp. These are the reduce steps
// of every collective, so they are bandwidth-bound: when all pointers are
// 16-byte aligned each thread moves whole 16-byte packs and applies the same
// functor to them in registers; the last n % N elements (and any misaligned
// call) go through the functor element by element.
#include "kernels/common/elementwise.hpp"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/launch.cuh"

namespace lpsgd::kernels::cuda {
namespace {

// A binary functor over (out, a, b) on 16-byte packs: make(o, x, y) builds it
// for the arrays it is given (packs in registers, or memory for the tail).
template <class T, class Make>
__global__ void binary_packed(size_t n, T* out, const T* a, const T* b, Make make) {
  using P = Pack<T>;
  const size_t packs = n / P::N;
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t j = tid; j < packs; j += stride) {
    const P pa = reinterpret_cast<const P*>(a)[j];
    const P pb = reinterpret_cast<const P*>(b)[j];
    P po;
    const auto f = make(po.v, pa.v, pb.v);
#pragma unroll
    for (int k = 0; k < P::N; ++k) f(k);
    reinterpret_cast<P*>(out)[j] = po;
  }
  if (tid < n - packs * P::N) make(out, a, b)(packs * P::N + tid);
}

template <class T>
struct MakeReduceAdd {
  LPSGD_HD ReduceAdd<T> operator()(T* o, const T* x, const T* y) const { return {o, x, y}; }
};
template <class T>
struct MakeReduceAddScale {
  acc_t<T> alpha;
  LPSGD_HD ReduceAddScale<T> operator()(T* o, const T* x, const T* y) const {
    return {o, x, y, alpha};
  }
};

// out = f(a, b) for the functor make builds: packed where every pointer allows.
template <class T, class Make>
void launch_binary(size_t n, T* out, const T* a, const T* b, Make make, cudaStream_t s) {
  if (aligned16(out) && aligned16(a) && aligned16(b)) {
    binary_packed<T><<<packed_grid<T>(n), kThreads, 0, s>>>(n, out, a, b, make);
    CUDA_CHECK(cudaGetLastError());
  } else {
    launch(n, make(out, a, b), s);
  }
}

template <class T>
__global__ void scale_packed(size_t n, T* x, acc_t<T> alpha) {
  using P = Pack<T>;
  const size_t packs = n / P::N;
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t j = tid; j < packs; j += stride) {
    P px = reinterpret_cast<const P*>(x)[j];
    const Scale<T> f{px.v, alpha};
#pragma unroll
    for (int k = 0; k < P::N; ++k) f(k);
    reinterpret_cast<P*>(x)[j] = px;
  }
  if (tid < n - packs * P::N) Scale<T>{x, alpha}(packs * P::N + tid);
}

template <class T>
__global__ void axpy_packed(size_t n, T* y, const T* x, acc_t<T> alpha) {
  using P = Pack<T>;
  const size_t packs = n / P::N;
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t j = tid; j < packs; j += stride) {
    P py = reinterpret_cast<const P*>(y)[j];
    const P px = reinterpret_cast<const P*>(x)[j];
    const Axpy<T> f{py.v, px.v, alpha};
#pragma unroll
    for (int k = 0; k < P::N; ++k) f(k);
    reinterpret_cast<P*>(y)[j] = py;
  }
  if (tid < n - packs * P::N) Axpy<T>{y, x, alpha}(packs * P::N + tid);
}

}  // namespace

void reduce_add(DType t, void* out, const void* a, const void* b, size_t n, cudaStream_t s) {
  if (n == 0) return;
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    launch_binary(n, static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b),
                  MakeReduceAdd<T>{}, s);
  });
}

void reduce_add_scale(DType t, void* out, const void* a, const void* b, double alpha, size_t n,
                      cudaStream_t s) {
  if (n == 0) return;
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    launch_binary(n, static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b),
                  MakeReduceAddScale<T>{static_cast<acc_t<T>>(alpha)}, s);
  });
}

void scale(DType t, void* x, double alpha, size_t n, cudaStream_t s) {
  if (n == 0) return;
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    auto* px = static_cast<T*>(x);
    if (aligned16(px)) {
      scale_packed<T><<<packed_grid<T>(n), kThreads, 0, s>>>(n, px, static_cast<acc_t<T>>(alpha));
      CUDA_CHECK(cudaGetLastError());
    } else {
      launch(n, Scale<T>{px, static_cast<acc_t<T>>(alpha)}, s);
    }
  });
}

void axpy(DType t, void* y, double alpha, const void* x, size_t n, cudaStream_t s) {
  if (n == 0) return;
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    auto* py = static_cast<T*>(y);
    auto* px = static_cast<const T*>(x);
    if (aligned16(py) && aligned16(px)) {
      axpy_packed<T><<<packed_grid<T>(n), kThreads, 0, s>>>(n, py, px, static_cast<acc_t<T>>(alpha));
      CUDA_CHECK(cudaGetLastError());
    } else {
      launch(n, Axpy<T>{py, px, static_cast<acc_t<T>>(alpha)}, s);
    }
  });
}

void reduce_add_from(DType t, void* out0, void* out1, DType ta, const void* a, DType tb,
                     const void* b, double alpha, size_t n, cudaStream_t s) {
  LPSGD_CHECK(dtype_is_16bit(t), "reduce_add_from: " << dtype_name(t) << " is not a 16-bit type");
  LPSGD_CHECK((ta == t || ta == DType::F32) && (tb == t || tb == DType::F32),
              "reduce_add_from: a " << dtype_name(t) << " reduction reads " << dtype_name(t)
                                    << " or float operands");
  if (n == 0) return;
  dispatch_dtype(t, [&](auto tag) {
    using H = decltype(tag);
    if constexpr (sizeof(H) == 2) {
      auto* o0 = static_cast<H*>(out0);
      auto* o1 = out1 ? static_cast<H*>(out1) : o0;
      const float al = static_cast<float>(alpha);
      const auto run = [&](auto sa, auto sb) {
        using SA = decltype(sa);
        using SB = decltype(sb);
        launch(n, ReduceAddFrom<H, SA, SB>{o0, o1, static_cast<const SA*>(a),
                                           static_cast<const SB*>(b), al}, s);
      };
      if (ta == DType::F32 && tb == DType::F32) run(float{}, float{});
      else if (ta == DType::F32) run(float{}, H{});
      else if (tb == DType::F32) run(H{}, float{});
      else run(H{}, H{});
    }
  });
}

void reduce_add_float_to(DType t, void* out0, void* out1, const float* a, const float* b,
                         double alpha, size_t n, cudaStream_t s) {
  LPSGD_CHECK(dtype_is_16bit(t), "reduce_add_float_to: " << dtype_name(t) << " is not a 16-bit type");
  if (n == 0) return;
  dispatch_dtype(t, [&](auto tag) {
    using H = decltype(tag);
    if constexpr (sizeof(H) == 2) {
      auto* o0 = static_cast<H*>(out0);
      launch(n, ReduceAddTo<H>{o0, out1 ? static_cast<H*>(out1) : o0, a, b, static_cast<float>(alpha)}, s);
    }
  });
}

// One element per thread: a conversion moves 6 bytes per element, and the
// grid-stride loop's loads and stores are coalesced as they are.
void convert(DType to, void* dst, DType from, const void* src, size_t n, cudaStream_t s) {
  if (n == 0) return;
  if (from == DType::F32 && dtype_is_16bit(to)) {
    dispatch_dtype(to, [&](auto tag) {
      using D = decltype(tag);
      if constexpr (sizeof(D) == 2)
        launch(n, Convert<D, float>{static_cast<D*>(dst), static_cast<const float*>(src)}, s);
    });
  } else if (to == DType::F32 && dtype_is_16bit(from)) {
    dispatch_dtype(from, [&](auto tag) {
      using S = decltype(tag);
      if constexpr (sizeof(S) == 2)
        launch(n, Convert<float, S>{static_cast<float*>(dst), static_cast<const S*>(src)}, s);
    });
  } else {
    LPSGD_THROW("convert: " << dtype_name(from) << " to " << dtype_name(to) << " is not supported");
  }
}

}  // namespace lpsgd::kernels::cuda
