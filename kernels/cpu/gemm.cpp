// cblas_sgemm behind the project's row-major GEMM signature (see gemm.hpp).
#include "kernels/cpu/gemm.hpp"

#include <cblas.h>

#include "core/error.hpp"

namespace lpsgd::kernels::cpu {

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  LPSGD_CHECK(m >= 0 && n >= 0 && k >= 0,
              "sgemm: negative size m=" << m << " n=" << n << " k=" << k);
  if (m == 0 || n == 0) return;
  if (k == 0) {  // BLAS would also do this, but some builds reject the empty lda
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace lpsgd::kernels::cpu

extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_config();
extern "C" char* openblas_get_corename();

namespace lpsgd::kernels::cpu {

void set_blas_threads(int n) { openblas_set_num_threads(n); }

std::string blas_version() {
  // The config reads "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64".
  std::string config = openblas_get_config();
  const size_t second_space = config.find(' ', config.find(' ') + 1);
  return config.substr(0, second_space) + " (" + openblas_get_corename() + ")";
}

}  // namespace lpsgd::kernels::cpu
