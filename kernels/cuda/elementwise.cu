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

template <class T>
__global__ void reduce_add_packed(size_t n, T* out, const T* a, const T* b) {
  using P = Pack<T>;
  const size_t packs = n / P::N;
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t j = tid; j < packs; j += stride) {
    const P pa = reinterpret_cast<const P*>(a)[j];
    const P pb = reinterpret_cast<const P*>(b)[j];
    P po;
    const ReduceAdd<T> f{po.v, pa.v, pb.v};
#pragma unroll
    for (int k = 0; k < P::N; ++k) f(k);
    reinterpret_cast<P*>(out)[j] = po;
  }
  if (tid < n - packs * P::N) ReduceAdd<T>{out, a, b}(packs * P::N + tid);
}

template <class T>
__global__ void scale_packed(size_t n, T* x, T alpha) {
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
__global__ void axpy_packed(size_t n, T* y, const T* x, T alpha) {
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
    auto* o = static_cast<T*>(out);
    auto* pa = static_cast<const T*>(a);
    auto* pb = static_cast<const T*>(b);
    if (aligned16(o) && aligned16(pa) && aligned16(pb)) {
      reduce_add_packed<T><<<packed_grid<T>(n), kThreads, 0, s>>>(n, o, pa, pb);
      CUDA_CHECK(cudaGetLastError());
    } else {
      launch(n, ReduceAdd<T>{o, pa, pb}, s);
    }
  });
}

void scale(DType t, void* x, double alpha, size_t n, cudaStream_t s) {
  if (n == 0) return;
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    auto* px = static_cast<T*>(x);
    if (aligned16(px)) {
      scale_packed<T><<<packed_grid<T>(n), kThreads, 0, s>>>(n, px, static_cast<T>(alpha));
      CUDA_CHECK(cudaGetLastError());
    } else {
      launch(n, Scale<T>{px, static_cast<T>(alpha)}, s);
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
      axpy_packed<T><<<packed_grid<T>(n), kThreads, 0, s>>>(n, py, px, static_cast<T>(alpha));
      CUDA_CHECK(cudaGetLastError());
    } else {
      launch(n, Axpy<T>{py, px, static_cast<T>(alpha)}, s);
    }
  });
}

}  // namespace lpsgd::kernels::cuda
