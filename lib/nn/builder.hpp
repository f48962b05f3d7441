// Builds a Model from a spec string, the form models take on the command line
// and in job configs:
//
//   mlp:784-512-256-10   Linear layers of those widths (the first number is the
//                        input size) with ReLU between them and none after the
//                        last; a Flatten first when the input is an image.
//   cnn:lenet            conv5x5-32 (pad 2), ReLU, maxpool 2, conv5x5-64 (pad 2),
//                        ReLU, maxpool 2, flatten, fc-512, ReLU, fc-10, for
//                        [C, H, W] input (1x28x28 for (Fashion-)MNIST).
//
// Hidden layers use He initialisation, the final classifier Xavier.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "nn/model.hpp"

namespace lpsgd::nn {

/// A finalized model for `spec` on `dev` (borrowed), input_shape per sample,
/// parameters drawn from `seed`. A malformed spec or one that does not fit the
/// input shape is a usage error naming the valid forms.
std::unique_ptr<Model> build_model(Device& dev, const std::string& spec, const Shape& input_shape,
                                   uint64_t seed);

}  // namespace lpsgd::nn
