// Softmax cross-entropy: the per-row work runs on the device, the sums on the host.
#include "nn/loss.hpp"

#include "core/error.hpp"

namespace lpsgd::nn {

SoftmaxCrossEntropy::SoftmaxCrossEntropy(Device& dev) : dev_(dev), grad_mem_(dev), row_mem_(dev) {}

LossStats SoftmaxCrossEntropy::forward(const Tensor& logits, const int32_t* labels,
                                       bool want_grad, int64_t mean_over) {
  LPSGD_CHECK(logits.shape().rank() == 2 && logits.shape()[0] >= 1 && logits.shape()[1] >= 1,
              "softmax cross-entropy needs logits [N, classes], got " << logits.shape().str());
  const size_t rows = static_cast<size_t>(logits.shape()[0]);
  const size_t classes = static_cast<size_t>(logits.shape()[1]);
  // One scratch holds the per-row loss (float) then the per-row status (int32).
  auto* row_loss = static_cast<float*>(row_mem_.reserve(rows * (sizeof(float) + sizeof(int32_t))));
  auto* status = reinterpret_cast<int32_t*>(row_loss + rows);
  float* grad = nullptr;
  if (want_grad) {
    grad_ = grad_mem_.tensor(logits.shape());
    grad = grad_.data();
  }
  LPSGD_CHECK(mean_over == 0 || mean_over >= static_cast<int64_t>(rows),
              "softmax cross-entropy: a mean over " << mean_over << " samples of " << rows << " rows");
  dev_.softmax_xent(grad, row_loss, status, logits.data(), labels, rows, classes,
                    1.0f / static_cast<float>(mean_over > 0 ? mean_over : static_cast<int64_t>(rows)));
  host_loss_.resize(rows);
  host_status_.resize(rows);
  dev_.copy_to_host(host_loss_.data(), row_loss, rows * sizeof(float));
  dev_.copy_to_host(host_status_.data(), status, rows * sizeof(int32_t));

  LossStats s;
  s.count = static_cast<int64_t>(rows);
  for (size_t r = 0; r < rows; ++r) {
    LPSGD_CHECK(host_status_[r] >= 0, "label of batch row " << r << " is outside [0, " << classes
                                          << "): the data's labels do not match the model's "
                                          << classes << " outputs");
    s.loss_sum += static_cast<double>(host_loss_[r]);
    s.correct += host_status_[r];
  }
  return s;
}

}  // namespace lpsgd::nn
