// Softmax cross-entropy, the loss of every lpsgd model, and LossStats, the
// counts a trainer sums across ranks.
//
// Not a Layer: it also takes the labels and produces numbers for the host.
// Per row it is computed max-shifted (logsumexp), so large logits do not
// overflow; the gradient is that of the *mean* loss over the batch.
#pragma once

#include <cstdint>
#include <vector>

#include "nn/tensor.hpp"

namespace lpsgd::nn {

/// Sums over samples, so stats from several batches or ranks just add up.
struct LossStats {
  double loss_sum = 0.0;  ///< sum over samples of the cross-entropy (nats)
  int64_t correct = 0;    ///< samples whose arg-max logit is the label
  int64_t count = 0;      ///< samples seen
  double mean_loss() const { return count ? loss_sum / static_cast<double>(count) : 0.0; }
  double accuracy() const {
    return count ? static_cast<double>(correct) / static_cast<double>(count) : 0.0;
  }
  LossStats& operator+=(const LossStats& o) {
    loss_sum += o.loss_sum;
    correct += o.correct;
    count += o.count;
    return *this;
  }
};

class SoftmaxCrossEntropy {
 public:
  /// dev is borrowed and must outlive this object.
  explicit SoftmaxCrossEntropy(Device& dev);

  /// logits: [N, classes]; labels: N int32 in device memory, each in
  /// [0, classes) (an error naming the row otherwise). With want_grad, grad()
  /// becomes d(mean loss)/d(logits), the mean over `mean_over` samples
  /// (0: these N; more for one of several micro-batches whose gradients are
  /// summed). Waits for the device (the stats are host numbers).
  LossStats forward(const Tensor& logits, const int32_t* labels, bool want_grad,
                    int64_t mean_over = 0);
  /// [N, classes] from the last forward with want_grad; valid until the next.
  const Tensor& grad() const { return grad_; }

 private:
  Device& dev_;
  Tensor grad_;
  Scratch grad_mem_, row_mem_;
  std::vector<float> host_loss_;
  std::vector<int32_t> host_status_;
};

}  // namespace lpsgd::nn
