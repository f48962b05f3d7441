// ModelDesc: a model as data — a directed acyclic graph of layer descriptions
// (nodes: type, attributes, which nodes they read, initial tensors) that nn's
// builder turns into layers, and what a file needs to carry the model elsewhere
// (input type and scaling, class names).
//
// The graph is kept as its nodes in one topological order: node i reads the
// outputs of nodes before it (or the model input), named by index, and the
// last node's output is the model's. A sequential model is the special case
// where every node reads the one before it (LayerDesc::inputs empty), and a
// residual join is an Add reading two earlier nodes. That order is the one nn
// runs forward in, and its reverse the one backward runs and the parameter
// arena is laid out in (nn/model.hpp).
//
// Why a library of its own, below nn: a model has several sources and one
// destination outside lpsgd. Spec strings (`mlp:784-512-10`, `cnn:lenet`, the
// explicit `layers:...` list) and ONNX graphs (model/onnx.hpp) both become a
// ModelDesc here; nn builds layers from it without knowing where it came from;
// export writes it back as ONNX. Keeping the description and its readers below
// nn (model -> core only) lets nn, train and app all use it with no arrow
// pointing back up, and keeps protobuf out of everything but this library.
//
// The canonical text form (ModelDesc::canonical()) names the architecture
// exactly, without tensors: `layers:conv(32,5x5,s1x1,p2x2)-relu-maxpool(2x2,
// s2x2,p0x0)-flatten-linear(10)` and so on; a node that reads other nodes than
// the one before it says which after `@` (node indices from 0, `in` for the
// model input, `+` between two): `...-batchnorm(0.00001,0.1)-add@5+8-relu`.
// Checkpoints of models that did not come from a spec string record it, so
// resume and export need no other file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lpsgd::model {

enum class LayerKind {
  Conv, Linear, MaxPool, Relu, Flatten, Dropout,
  BatchNorm,      ///< per channel of [C, H, W] (over N, H, W), per feature of [D]
  Add,            ///< the sum of two inputs of one shape (a residual join)
  AvgPool,        ///< 2-D average over each window
  GlobalAvgPool,  ///< [C, H, W] to [C, 1, 1]: each plane's mean
};
const char* kind_name(LayerKind k);

/// A node input that is the model's input rather than another node's output.
inline constexpr int kModelInput = -1;

/// A float32 tensor, row-major.
struct Tensor {
  std::string name;            ///< where it came from (an ONNX initializer's name), informational
  std::vector<int64_t> shape;
  std::vector<float> data;     ///< product of shape values
};

/// One layer. Unused fields keep their defaults (canonical() ignores them).
struct LayerDesc {
  LayerKind kind = LayerKind::Relu;
  /// The nodes whose outputs this node reads, by index (each before this
  /// node; kModelInput: the model's input). Empty: the node before it (the
  /// model input for node 0). Add reads two, every other kind one.
  std::vector<int> inputs;
  int64_t out = 0;                 ///< Conv: output channels; Linear: output features
  int kernel_h = 0, kernel_w = 0;  ///< Conv, MaxPool, AvgPool
  int stride_h = 1, stride_w = 1;  ///< Conv, MaxPool, AvgPool
  int pad_h = 0, pad_w = 0;        ///< Conv, MaxPool, AvgPool: the same on both sides
  bool bias = true;                ///< Conv, Linear
  float p = 0;                     ///< Dropout probability in [0, 1)
  /// BatchNorm: y = (x - mean) / sqrt(var + eps) * weight + bias; in training
  /// running = (1 - momentum) running + momentum batch (the batch's unbiased
  /// variance). PyTorch's defaults.
  float eps = 1e-5f, momentum = 0.1f;
  /// AvgPool: whether zero padding counts in a window's divisor (PyTorch's
  /// default count_include_pad; ONNX's default is not to).
  bool count_pad = true;
  /// Initial tensors: empty (drawn from the seed), or weight then bias (when
  /// bias) in lpsgd's layouts: Conv [out, C, kh, kw], Linear [out, in],
  /// BatchNorm [C] each.
  std::vector<Tensor> params;
  /// Initial state that is not trained (BatchNorm: running mean, running
  /// variance, [C] each): empty, or all of them (empty: zeros and ones).
  std::vector<Tensor> state;
  std::string origin;              ///< the source node ("node 'fc1' (Gemm)") for messages
};

/// What the graph computes after the last layer: lpsgd trains on logits with
/// softmax cross-entropy, so a final Softmax or LogSoftmax folds into the loss
/// and export writes it back.
enum class Output { Logits, Softmax, LogSoftmax };

/// How the samples a file's graph takes are stored (export: the dataset's type).
enum class InputType { Unknown, U8, F32 };

struct ModelDesc {
  std::vector<LayerDesc> layers;
  Output output = Output::Logits;
  /// Per-sample input shape [C, H, W] or [D] the layers were checked against
  /// (empty: not known yet, e.g. a `layers:` string before building).
  std::vector<int64_t> input_shape;
  /// Input scaling as the first nodes of an exported graph: x * scale[c] +
  /// shift[c] per channel after converting to float (lpsgd's loader does the
  /// same, lib/io/loader.cpp). Empty: none (the graph takes scaled input).
  InputType input_type = InputType::Unknown;
  std::vector<float> scale, shift;
  std::vector<std::string> class_names;  ///< export: the model's metadata
  /// The string that names this architecture: the spec as given for spec
  /// strings, canonical() for others. Checkpoints record it.
  std::string spec;

  /// `layers:...` (see the header comment); never holds tensors.
  std::string canonical() const;
  /// Whether every layer with parameters carries initial tensors.
  bool has_params() const;
  /// Node i's inputs with the default spelled out (node indices or kModelInput).
  std::vector<int> inputs_of(size_t i) const;
  /// Whether every node reads the one before it (a chain of layers).
  bool sequential() const;
};

/// The forms `--model` takes besides a file: mlp:IN-H1-...-OUT, cnn:lenet,
/// cnn:alexnet, cnn:resnet20, cnn:resnet18 and layers:... For [C, H, W] or [D]
/// per-sample input (mlp checks its first width against it and flattens an
/// image first); the cnn: models end in `classes` outputs. A malformed spec,
/// or one that does not fit the input, is a usage error naming the valid
/// forms. desc.spec = spec; desc.input_shape = what the first layer takes
/// (model_input_shape for layers:, else input_shape).
ModelDesc from_spec(const std::string& spec, const std::vector<int64_t>& input_shape,
                    int64_t classes = 10);

/// The per-sample shape the layers take for samples `sample` ([C, H, W]):
/// flat [C*H*W] when the first layer with a shape rule is fully connected,
/// else `sample` (a model that starts with a Flatten flattens itself).
std::vector<int64_t> model_input_shape(const ModelDesc& desc, const std::vector<int64_t>& sample);

/// Whether `s` names a model file rather than a spec (ends in .onnx).
bool is_model_file(const std::string& s);

/// "[1, 28, 28]".
std::string shape_str(const std::vector<int64_t>& shape);

/// Per-sample output shape of `layer` for per-sample input `in` (the first
/// input's, for Add), checking that it fits (usage error naming the layer's
/// origin otherwise). Linear needs a flat input; Conv and the pools [C, H, W].
std::vector<int64_t> output_shape(const LayerDesc& layer, const std::vector<int64_t>& in);

/// Per-sample output shape of every node of `desc` for model input `in`,
/// checking the graph: each node reads earlier nodes (or the input), Add two
/// of one shape, every other kind one, and every node's output is read by a
/// later node but the last's. Usage errors name the node.
std::vector<std::vector<int64_t>> node_shapes(const ModelDesc& desc, const std::vector<int64_t>& in);
/// The model's per-sample output shape (the last node's).
std::vector<int64_t> output_shape(const ModelDesc& desc, const std::vector<int64_t>& in);

/// The shapes layer `l`'s parameters have for input `in`: weight, then bias
/// (BatchNorm: scale, then shift).
std::vector<std::vector<int64_t>> param_shapes(const LayerDesc& layer,
                                               const std::vector<int64_t>& in);
/// The shapes of layer `l`'s state that is not trained (BatchNorm: running
/// mean, running variance); none for other kinds.
std::vector<std::vector<int64_t>> state_shapes(const LayerDesc& layer,
                                               const std::vector<int64_t>& in);
/// Names of the parameter and state tensors, as checkpoints and exports call
/// them after "layers.I.": {"weight", "bias"} and {"running_mean", "running_var"}.
const char* param_name(size_t k);
const char* state_name(size_t k);

}  // namespace lpsgd::model
