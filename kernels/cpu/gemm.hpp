// Single-precision GEMM on the host through OpenBLAS (cblas_sgemm), row-major.
//
// The one place that talks to BLAS, so layers never see cblas enums and the
// CUDA backend can offer the same signature over cuBLAS.
#pragma once

#include <string>

namespace lpsgd::kernels::cpu {

/// C = alpha * op(A) * op(B) + beta * C with op(X) = X, or X^T when trans_x.
/// op(A) is m x k, op(B) is k x n, C is m x n; all row-major, and lda/ldb/ldc
/// are the row strides of A, B, C *as stored* (before the transpose). With
/// beta == 0, C is overwritten (its old contents may be garbage). m, n or k may
/// be 0 (k == 0 gives C = beta * C).
void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc);

/// Threads BLAS may use in this process (OpenBLAS otherwise takes every core,
/// which oversubscribes a node running one rank per core).
void set_blas_threads(int n);

/// "OpenBLAS 0.3.21 (Zen)": the library and the kernels it chose for this CPU.
std::string blas_version();

}  // namespace lpsgd::kernels::cpu
