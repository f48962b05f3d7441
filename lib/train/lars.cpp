// LARS over flat arenas: validation and the tensor table here, the arithmetic
// in kernels/common/nn.hpp (lars_ratio, LarsUpdate) and the devices' sums.
#include "train/lars.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace lpsgd::train {

void check_lars(const LarsConfig& c) {
  if (!(c.momentum >= 0.0f && c.momentum < 1.0f))
    LPSGD_USAGE_ERROR("--momentum must be in [0, 1), got " << c.momentum);
  if (!(c.weight_decay >= 0.0f) || !std::isfinite(c.weight_decay))
    LPSGD_USAGE_ERROR("--weight-decay must be >= 0, got " << c.weight_decay);
  if (!(c.eta > 0.0f) || !std::isfinite(c.eta))
    LPSGD_USAGE_ERROR("--lars-eta must be a positive number, got " << c.eta);
}

std::vector<kernels::LarsTensor> lars_tensors(const nn::Model& model) {
  std::vector<kernels::LarsTensor> out;
  for (const nn::ParamSlot& s : model.slots()) {
    const nn::Param& p = model.layer(s.layer).params()[s.param];
    out.push_back({s.offset, s.count, p.shape.rank() > 1});
  }
  std::sort(out.begin(), out.end(),
            [](const kernels::LarsTensor& a, const kernels::LarsTensor& b) { return a.offset < b.offset; });
  return out;
}

namespace {

size_t total(const std::vector<kernels::LarsTensor>& tensors) {
  size_t n = 0;
  for (const auto& t : tensors) {
    LPSGD_CHECK(t.offset == n, "LARS: a tensor at " << t.offset << " where " << n << " was expected");
    n += t.count;
  }
  return n;
}

}  // namespace

Lars::Lars(Device& dev, std::vector<kernels::LarsTensor> tensors, const LarsConfig& config)
    : Optimizer(dev, total(tensors), 1), config_(config), tensors_(std::move(tensors)) {
  check_lars(config);
  const size_t nt = tensors_.size();
  table_ = DeviceBuffer(dev, std::max<size_t>(1, nt) * sizeof(kernels::LarsTensor));
  if (nt) dev.copy_from_host(table_.data(), tensors_.data(), nt * sizeof(kernels::LarsTensor));
  sums_ = DeviceBuffer(dev, std::max<size_t>(1, nt) * 2 * kernels::kLarsParts * sizeof(double));
  ratio_ = DeviceBuffer(dev, std::max<size_t>(1, nt) * sizeof(float));
  dev.synchronize();
}

void Lars::step(const nn::Tensor& params, DType g_type, const void* g, float lr, size_t offset,
                size_t n) {
  check_step(params, lr, offset, n);
  if (n == 0) return;
  const auto by_offset = [](const kernels::LarsTensor& t, size_t at) { return t.offset < at; };
  const auto first = std::lower_bound(tensors_.begin(), tensors_.end(), offset, by_offset);
  const auto last = std::lower_bound(first, tensors_.end(), offset + n, by_offset);
  LPSGD_CHECK(first != tensors_.end() && first->offset == offset &&
                  (last == tensors_.end() ? count_ : last->offset) == offset + n,
              "LARS updates whole tensors: [" << offset << ", " << offset + n
                                              << ") cuts one");
  const size_t t0 = static_cast<size_t>(first - tensors_.begin());
  kernels::LarsBucket b{};
  b.tensors = table_.as<kernels::LarsTensor>() + t0;
  b.count = static_cast<size_t>(last - first);
  b.first = offset;
  for (auto it = first; it != last; ++it) b.largest = std::max(b.largest, it->count);
  b.sums = sums_.as<double>() + 2 * kernels::kLarsParts * t0;
  b.ratio = ratio_.as<float>() + t0;
  const kernels::LarsHyper h{lr, config_.momentum, config_.weight_decay, config_.eta};
  dev_.lars_update(g_type, params.data() + offset, array(0) + offset, g, b, h);
}

const std::vector<std::string>& Lars::state_names() const {
  static const std::vector<std::string> names{"momentum"};
  return names;
}

}  // namespace lpsgd::train
