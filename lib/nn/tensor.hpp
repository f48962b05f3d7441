// Tensor: a float32 array on a Device with a shape, the currency of lib/nn.
//
// A Tensor is a cheap, copyable handle. Most tensors are *views* that borrow
// memory owned by someone else (a model's parameter or gradient arena, a
// layer's activation Scratch); Tensor::empty() makes one that owns its memory
// (shared by its copies, freed with the last). Shapes are row-major with at
// most four dimensions ([N, C, H, W]); a batch dimension, when present, is
// first. Nothing here allocates except Tensor::empty() and Scratch growing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "device/device.hpp"

namespace lpsgd::nn {

/// Up to four extents, stored inline (no heap allocation).
class Shape {
 public:
  static constexpr int kMaxRank = 4;
  Shape() = default;
  /// Throws when more than kMaxRank extents are given or one is negative.
  Shape(std::initializer_list<int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  /// Product of the extents (1 for rank 0).
  int64_t numel() const;
  /// This shape with `n` put in front: the batch shape of a per-sample shape.
  Shape with_batch(int64_t n) const;
  /// This shape without its first extent: the per-sample shape of a batch.
  Shape drop_batch() const;
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  /// "[3, 5, 7]".
  std::string str() const;

 private:
  int64_t dims_[kMaxRank] = {0, 0, 0, 0};
  int rank_ = 0;
};

class Tensor {
 public:
  /// An undefined tensor (defined() is false).
  Tensor() = default;
  /// A view of `shape.numel()` floats at `data` on `dev`; the caller keeps the
  /// memory alive for as long as the view is used.
  Tensor(Device& dev, float* data, const Shape& shape);
  /// A new zeroed tensor owning its memory.
  static Tensor empty(Device& dev, const Shape& shape);

  bool defined() const { return dev_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * sizeof(float); }
  float* data() const { return data_; }
  Device& device() const { return *dev_; }

  /// The same memory with another shape of equal numel (throws otherwise).
  Tensor reshape(const Shape& shape) const;

  /// Copies to / from host memory (count must equal numel).
  std::vector<float> to_host() const;
  void copy_from_host(const std::vector<float>& host) const;
  void copy_from_host(const float* host, size_t count) const;

 private:
  Device* dev_ = nullptr;
  float* data_ = nullptr;
  Shape shape_;
  std::shared_ptr<DeviceBuffer> owned_;  // set only for Tensor::empty()
};

/// Grow-only device memory for activations and workspaces: reuses its buffer
/// while requests fit and reallocates (losing the contents) only when a request
/// is larger than any before, so steady-state training allocates nothing.
class Scratch {
 public:
  explicit Scratch(Device& dev) : dev_(&dev) {}
  /// At least `bytes` bytes; valid until the next larger request.
  void* reserve(size_t bytes);
  /// A float tensor of `shape` over this scratch memory.
  Tensor tensor(const Shape& shape);

 private:
  Device* dev_;
  DeviceBuffer buf_;
};

}  // namespace lpsgd::nn
