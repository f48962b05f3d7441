// Builds a Model from a model description (model/desc.hpp): one nn layer per
// description layer, in order, so layer i of the Model is layer i of the
// description and its tensors are "layers.i.weight" / "layers.i.bias" in
// checkpoints and exports.
//
// The spec strings (mlp:784-512-256-10, cnn:lenet, cnn:alexnet, layers:...)
// become descriptions in model::from_spec; ONNX graphs in model::read_onnx.
// This builder does not know which one a description came from.
//
// Parameters drawn from the seed: He initialisation for the layers with
// weights, Xavier for the last of them (the classifier); each tensor from its
// own Philox stream (Model::finalize), so a description built twice with one
// seed gives the same values whatever its source.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "model/desc.hpp"
#include "nn/model.hpp"

namespace lpsgd::nn {

/// A finalized model of `desc` on `dev` (borrowed) for per-sample input
/// `input_shape`, parameters drawn from `seed`; with `given_params` the
/// description's tensors (which every layer with weights must carry) replace
/// them. A description that does not fit the input, or tensors of the wrong
/// shape, are usage errors naming the layer.
std::unique_ptr<Model> build_model(Device& dev, const model::ModelDesc& desc,
                                   const Shape& input_shape, uint64_t seed,
                                   bool given_params = false);

/// The same for a spec string (see model::from_spec).
std::unique_ptr<Model> build_model(Device& dev, const std::string& spec, const Shape& input_shape,
                                   uint64_t seed);

/// `shape` as a list of extents, and back.
std::vector<int64_t> dims_of(const Shape& shape);
Shape shape_of(const std::vector<int64_t>& dims);

}  // namespace lpsgd::nn
