// Single-precision GEMM on the GPU through cuBLAS, with the row-major
// signature of kernels/cpu/gemm.hpp so layers call one GEMM on either device.
#pragma once

#include <cublas_v2.h>

namespace lpsgd::kernels::cuda {

/// C = alpha * op(A) * op(B) + beta * C, everything as in kernels::cpu::sgemm
/// (row-major, lda/ldb/ldc the row strides as stored, beta == 0 overwrites C,
/// k == 0 gives C = beta * C). Queued on the stream `handle` is bound to.
void sgemm(cublasHandle_t handle, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
           const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);

/// Throws lpsgd::Error for a cuBLAS status other than success.
void cublas_check(cublasStatus_t status, const char* what);

}  // namespace lpsgd::kernels::cuda
