// Builds a Model from a spec string, the form models take on the command line
// and in job configs:
//
//   mlp:784-512-256-10   Linear layers of those widths (the first number is the
//                        input size) with ReLU between them and none after the
//                        last; a Flatten first when the input is an image.
//   cnn:lenet            conv5x5-32 (pad 2), ReLU, maxpool 2, conv5x5-64 (pad 2),
//                        ReLU, maxpool 2, flatten, fc-512, ReLU, fc-10, for
//                        [C, H, W] input (1x28x28 for (Fashion-)MNIST).
//   cnn:alexnet          AlexNet's pattern for small images: conv3x3 (pad 1) of
//                        64, 192, 384, 256, 256 channels with ReLU, maxpool 2
//                        after the 1st, 2nd and 5th; flatten, fc-4096, ReLU,
//                        fc-4096, ReLU, fc-10 (28.5 M parameters on 1x28x28).
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
