// ONNX models in and out: the one reader that turns an ONNX graph into a
// ModelDesc, and the writer that turns a ModelDesc back into an ONNX
// inference graph.
//
// Read (opsets 11 to 17 of the default domain): a sequential graph — every
// value feeds exactly one node — from one input [N, C, H, W] or [N, D] (N
// symbolic or fixed) to one output, of these operations, mapped onto lpsgd's
// layers:
//   Conv (2-D, group 1, dilation 1, symmetric pads, with or without bias) -> conv
//   Gemm (alpha = beta = 1, transA = 0, either transB)          -> linear
//   MatMul by an initializer [in, out], and an Add of a bias after it -> linear
//   MaxPool (2-D, ceil_mode 0, dilation 1, pads <= half the window) -> maxpool
//   Relu -> relu; Flatten (axis 1) and Reshape to [N, features] -> flatten
//   Dropout (inference form: no training_mode, or false) -> dropout(ratio)
//   Identity -> nothing; Constant -> a tensor the nodes read
//   Softmax / LogSoftmax over the classes as the last node -> folds into the loss
// and, as the first nodes only, the input scaling lpsgd export writes: a Cast
// of a uint8 input to float, a Mul by per-channel scales and an Add of
// per-channel shifts (ModelDesc::scale/shift). Initializers must be float32
// (int64 for Reshape's shape, bool for Dropout's training_mode) and stored in
// the file. Anything else — an operation, attribute, data type, shape, a
// branch, a cycle, a damaged file — is one usage error line:
//   "FILE: node 'NAME' (OP): WHAT; lpsgd supports ...".
//
// Written: opset 13, the input named "input" ([batch, C, H, W] of the dataset's
// type), the scaling nodes, one node per layer (Gemm with transB = 1 for
// linear), the final Softmax/LogSoftmax when the model had one, the output
// "scores" [batch, classes]; initializers named like the checkpoint's tensors
// (layers.L.weight, layers.L.bias); metadata lpsgd.model (the canonical layer
// list) and lpsgd.class_names (a JSON array).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "model/desc.hpp"

namespace lpsgd::model {

/// The opsets read, and the one written.
inline constexpr int64_t kOnnxOpsetMin = 11, kOnnxOpsetMax = 17, kOnnxOpsetWritten = 13;

/// Whether this lpsgd was built with ONNX (Debian libonnx-dev); without it
/// the functions below throw a usage error saying so.
bool onnx_available();

/// Reads the ONNX model at `path` (see the header comment). desc.spec is the
/// canonical layer list, desc.input_shape the graph's per-sample input shape,
/// every layer with parameters carries its initializers.
ModelDesc read_onnx(const std::string& path);
/// The same for a file's bytes; `name` starts the error messages.
ModelDesc read_onnx_bytes(const void* data, size_t size, const std::string& name);

/// The ONNX inference graph of desc, which needs input_shape and every
/// layer's tensors; input_type Unknown writes a float input.
std::string onnx_bytes(const ModelDesc& desc);
/// Writes onnx_bytes(desc) to `path` atomically (core/atomic_file).
void write_onnx(const std::string& path, const ModelDesc& desc);

}  // namespace lpsgd::model
