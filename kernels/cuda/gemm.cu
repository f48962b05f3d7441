// cuBLAS behind the project's row-major GEMM (see gemm.cuh).
//
// cuBLAS is column-major. A row-major matrix X (r x c, row stride ld) is, read
// column-major, X^T (c x r, leading dimension ld). So the row-major product
//     C = op(A) op(B)            (m x n)
// is, read column-major, the product
//     C^T = op(B)^T op(A)^T      (n x m)
// whose column-major operands are the stored B and A themselves: op(B)^T is
// the stored B untransposed when trans_b is false (B row-major k x n = B^T
// column-major n x k) and transposed when it is true; likewise A. Hence
//     cublasSgemm(opB, opA, n, m, k, alpha, B, ldb, A, lda, beta, C, ldc)
// with opX = trans_x ? CUBLAS_OP_T : CUBLAS_OP_N — the operands swapped, the
// transpose flags and leading dimensions passed through unchanged.
#include "kernels/cuda/gemm.cuh"

#include "core/error.hpp"
#include "kernels/cuda/launch.cuh"

namespace lpsgd::kernels::cuda {
namespace {

// k == 0: C = beta * C (0 when beta == 0, whatever C held), as the CPU does.
struct ScaleMatrix {
  float* c;
  int n, ldc;
  float beta;
  __device__ void operator()(size_t i) const {
    float& x = c[(i / static_cast<size_t>(n)) * static_cast<size_t>(ldc) + i % static_cast<size_t>(n)];
    x = beta == 0.0f ? 0.0f : beta * x;
  }
};

// The cases sgemm and gemm_bf16 share: false when C is already done (an empty
// product, or k == 0: C = beta * C).
bool gemm_needed(cublasHandle_t handle, const char* what, int m, int n, int k, float beta, float* c,
                 int ldc) {
  LPSGD_CHECK(m >= 0 && n >= 0 && k >= 0,
              what << ": negative size m=" << m << " n=" << n << " k=" << k);
  if (m == 0 || n == 0) return false;
  if (k == 0) {
    cudaStream_t s = nullptr;
    cublas_check(cublasGetStream(handle, &s), "cublasGetStream");
    launch(static_cast<size_t>(m) * static_cast<size_t>(n), ScaleMatrix{c, n, ldc, beta}, s);
    return false;
  }
  return true;
}

}  // namespace

void cublas_check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    LPSGD_THROW(what << " failed: " << cublasGetStatusName(status) << ": "
                     << cublasGetStatusString(status));
}

void sgemm(cublasHandle_t handle, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
           const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (!gemm_needed(handle, "sgemm", m, n, k, beta, c, ldc)) return;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublas_check(cublasSgemm(handle, op_b, op_a, n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc),
               "cublasSgemm");
}

// The same operand swap as sgemm. bfloat16 is a 16-bit struct holding the
// bits, laid out as CUDA_R_16BF. CUBLAS_GEMM_DEFAULT lets cuBLAS pick its
// kernel (tensor cores for 16-bit inputs); the pick depends on the shapes, the
// GPU and the handle, not on the data, so repeated calls give the same bits.
void gemm_bf16(cublasHandle_t handle, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
               const bfloat16* a, int lda, const bfloat16* b, int ldb, float beta, float* c,
               int ldc) {
  static_assert(sizeof(bfloat16) == 2, "bfloat16 must be its 16 bits");
  if (!gemm_needed(handle, "gemm_bf16", m, n, k, beta, c, ldc)) return;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublas_check(cublasGemmEx(handle, op_b, op_a, n, m, k, &alpha, b, CUDA_R_16BF, ldb, a,
                            CUDA_R_16BF, lda, &beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx (bf16 x bf16 -> fp32)");
}

}  // namespace lpsgd::kernels::cuda
