// ONNX models in and out: the one reader that turns an ONNX graph into a
// ModelDesc, and the writer that turns a ModelDesc back into an ONNX
// inference graph.
//
// Read (opsets 11 to 17 of the default domain): a directed acyclic graph from
// one input [N, C, H, W] or [N, D] (N symbolic or fixed) to one output, whose
// every node leads to the output, of these operations, mapped onto lpsgd's
// nodes in a topological order (the file's, where it is one):
//   Conv (2-D, group 1, dilation 1, symmetric pads, with or without bias) -> conv
//   Gemm (alpha = beta = 1, transA = 0, either transB)          -> linear
//   MatMul by an initializer [in, out], and an Add of a bias after it -> linear
//   BatchNormalization (X, scale, B, input_mean, input_var; [N, C, H, W] or
//     [N, C]) -> batchnorm: scale and B its parameters, the mean and variance
//     its state; epsilon as it is, momentum m as lpsgd's 1 - m (ONNX keeps m
//     of the running statistics, lpsgd and PyTorch take momentum of the
//     batch's: PyTorch's 0.1 is exported as 0.9); spatial 1 only
//   MaxPool (2-D, ceil_mode 0, dilation 1, pads <= half the window) -> maxpool
//   AveragePool (the same; count_include_pad, 0 when absent as in ONNX) -> avgpool
//   GlobalAveragePool -> gavgpool; Relu -> relu
//   Add of two values the graph computes -> add (a residual join; of one
//     value with itself too); Sum of values the graph computes -> a chain of
//     adds (of one value: nothing)
//   Flatten (axis 1) and Reshape to [N, features] -> flatten
//   Dropout (inference form: no training_mode, or false) -> dropout(ratio)
//   Identity -> nothing; Constant -> a tensor the nodes read (and an Identity
//     of a constant that constant: PyTorch writes equal initializers so)
//   Softmax / LogSoftmax over the classes as the last node -> folds into the loss
// and, as the first nodes only, the input scaling lpsgd export writes: a Cast
// of a uint8 input to float, a Mul by per-channel scales and an Add of
// per-channel shifts (ModelDesc::scale/shift). Every other node reads one
// value the graph computes, as its first input. Initializers must be float32
// (int64 for Reshape's shape, bool for Dropout's training_mode) and stored in
// the file. Anything else — an operation, attribute, data type, shape, an
// operation other than Add/Sum reading two computed values, a value that is
// the output and is read by a node, a node that does not lead to the output,
// several inputs or outputs, a cycle, a damaged file — is one usage error line:
//   "FILE: node 'NAME' (OP): WHAT; lpsgd supports ...".
//
// Graphs PyTorch exports in its three training modes:
//   - TRAINING (or PRESERVE of a model in train()): batch norms in training
//     mode (training_mode 1 from opset 14; the running and saved statistics as
//     extra outputs before). They read as lpsgd batch norms, which use the
//     batch's statistics in training and the running ones in evaluation
//     whatever the graph says; the extra outputs must be unused (as graph
//     outputs they are refused with the one-output rule, saying why). A
//     Dropout in training mode stays refused, as before (the graph's outputs
//     would be random): a model with dropout is exported with PRESERVE of the
//     model in eval().
//   - PRESERVE of a model in eval(): batch norms in inference form.
//   - EVAL (the default): each batch norm folded into the convolution before
//     it. That graph reads as convolutions with a bias and trains without
//     batch normalization; read_onnx logs a line saying so (info, rank 0),
//     read_onnx_bytes hands it to its caller.
//
// Written: opset 13, the input named "input" ([batch, C, H, W] of the dataset's
// type), the scaling nodes, one node per layer (Gemm with transB = 1 for
// linear; BatchNormalization in inference form with epsilon and momentum = 1 -
// lpsgd's; AveragePool with count_include_pad written out; Add of the two
// nodes it reads), node I's output named "layers.I.out" but the last's
// "scores" [batch, classes] (after the final Softmax/LogSoftmax when the model
// had one); initializers named like the checkpoint's tensors (layers.I.weight,
// layers.I.bias, layers.I.running_mean, layers.I.running_var: a layer's state,
// zeros and ones when it has none); metadata lpsgd.model (the canonical layer
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
/// every layer with parameters carries its initializers, every batch norm
/// its running statistics. Logs the note read_onnx_bytes gives, if any.
ModelDesc read_onnx(const std::string& path);
/// The same for a file's bytes; `name` starts the error messages. `note`, if
/// given, is set to a line worth a log that is not an error (e.g. that the
/// graph's batch norms look folded into its convolutions), or empty.
ModelDesc read_onnx_bytes(const void* data, size_t size, const std::string& name,
                          std::string* note = nullptr);

/// The ONNX inference graph of desc, which needs input_shape and every
/// layer's tensors; input_type Unknown writes a float input.
std::string onnx_bytes(const ModelDesc& desc);
/// Writes onnx_bytes(desc) to `path` atomically (core/atomic_file).
void write_onnx(const std::string& path, const ModelDesc& desc);

}  // namespace lpsgd::model
