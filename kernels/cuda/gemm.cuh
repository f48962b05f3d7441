// Single-precision GEMM on the GPU through cuBLAS, with the row-major
// signature of kernels/cpu/gemm.hpp so layers call one GEMM on either device.
#pragma once

#include <cublas_v2.h>

#include "core/half.hpp"

namespace lpsgd::kernels::cuda {

/// C = alpha * op(A) * op(B) + beta * C, everything as in kernels::cpu::sgemm
/// (row-major, lda/ldb/ldc the row strides as stored, beta == 0 overwrites C,
/// k == 0 gives C = beta * C). Queued on the stream `handle` is bound to.
void sgemm(cublasHandle_t handle, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
           const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);

/// The same product with A and B in bfloat16 (core/half.hpp's bits, which are
/// CUDA's __nv_bfloat16) and C in float: cublasGemmEx with CUDA_R_16BF inputs,
/// a CUDA_R_32F output and CUBLAS_COMPUTE_32F, so every product of two bf16
/// values (exact in float) is summed in float and C is never rounded to bf16.
/// Tensor cores run it on compute capability 8.0 and newer. The result is the
/// same bits on every call with the same shapes on the same GPU and handle
/// (cuBLAS's reproducibility guarantee: one handle per stream, no atomics).
void gemm_bf16(cublasHandle_t handle, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
               const bfloat16* a, int lda, const bfloat16* b, int ldb, float beta, float* c,
               int ldc);

/// Throws lpsgd::Error for a cuBLAS status other than success.
void cublas_check(cublasStatus_t status, const char* what);

}  // namespace lpsgd::kernels::cuda
