// Shape arithmetic, tensor views and the grow-only Scratch (see tensor.hpp).
#include "nn/tensor.hpp"

#include <sstream>

#include "core/error.hpp"

namespace lpsgd::nn {

Shape::Shape(std::initializer_list<int64_t> dims) {
  LPSGD_CHECK(dims.size() <= kMaxRank,
              "a shape has at most " << kMaxRank << " dimensions, got " << dims.size());
  for (int64_t d : dims) {
    LPSGD_CHECK(d >= 0, "negative extent " << d << " in a shape");
    dims_[rank_++] = d;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

Shape Shape::with_batch(int64_t n) const {
  LPSGD_CHECK(rank_ < kMaxRank, "cannot add a batch dimension to " << str());
  Shape s;
  s.rank_ = rank_ + 1;
  s.dims_[0] = n;
  for (int i = 0; i < rank_; ++i) s.dims_[i + 1] = dims_[i];
  return s;
}

Shape Shape::drop_batch() const {
  LPSGD_CHECK(rank_ > 0, "a rank-0 shape has no batch dimension");
  Shape s;
  s.rank_ = rank_ - 1;
  for (int i = 1; i < rank_; ++i) s.dims_[i - 1] = dims_[i];
  return s;
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < rank_; ++i) os << (i ? ", " : "") << dims_[i];
  os << ']';
  return os.str();
}

Tensor::Tensor(Device& dev, float* data, const Shape& shape)
    : dev_(&dev), data_(data), shape_(shape) {}

Tensor Tensor::empty(Device& dev, const Shape& shape) {
  auto buf = std::make_shared<DeviceBuffer>(dev, static_cast<size_t>(shape.numel()) * sizeof(float));
  Tensor t(dev, buf->as<float>(), shape);
  t.owned_ = std::move(buf);
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  LPSGD_CHECK(shape.numel() == numel(),
              "cannot reshape " << shape_.str() << " to " << shape.str() << ": sizes differ");
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

std::vector<float> Tensor::to_host() const {
  std::vector<float> host(static_cast<size_t>(numel()));
  if (!host.empty()) dev_->copy_to_host(host.data(), data_, bytes());
  return host;
}

void Tensor::copy_from_host(const std::vector<float>& host) const {
  copy_from_host(host.data(), host.size());
}

void Tensor::copy_from_host(const float* host, size_t count) const {
  LPSGD_CHECK(count == static_cast<size_t>(numel()),
              "copying " << count << " floats into a tensor of shape " << shape_.str());
  if (count) dev_->copy_from_host(data_, host, bytes());
}

void* Scratch::reserve(size_t bytes) {
  if (bytes > buf_.bytes()) buf_ = DeviceBuffer(*dev_, bytes);
  return buf_.data();
}

Tensor Scratch::tensor(const Shape& shape) {
  return Tensor(*dev_, static_cast<float*>(reserve(static_cast<size_t>(shape.numel()) * sizeof(float))),
                shape);
}

}  // namespace lpsgd::nn
