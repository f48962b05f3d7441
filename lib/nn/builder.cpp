// Model descriptions to layers (see builder.hpp).
#include "nn/builder.hpp"

#include <vector>

#include "core/error.hpp"
#include "nn/layers.hpp"

namespace lpsgd::nn {

std::vector<int64_t> dims_of(const Shape& shape) {
  std::vector<int64_t> d;
  for (int i = 0; i < shape.rank(); ++i) d.push_back(shape[i]);
  return d;
}

Shape shape_of(const std::vector<int64_t>& dims) {
  if (dims.empty() || dims.size() > static_cast<size_t>(Shape::kMaxRank))
    LPSGD_USAGE_ERROR("a per-sample shape needs 1 to " << Shape::kMaxRank << " extents, got "
                                                       << model::shape_str(dims));
  // with_batch prepends: from the last extent to the first.
  Shape s{dims.back()};
  for (size_t i = dims.size() - 1; i-- > 0;) s = s.with_batch(dims[i]);
  return s;
}

std::unique_ptr<Model> build_model(Device& dev, const model::ModelDesc& desc,
                                   const Shape& input_shape, uint64_t seed, bool given_params) {
  using model::LayerKind;
  // The shapes first, with the description's own messages (naming an ONNX node).
  model::node_shapes(desc, dims_of(input_shape));
  size_t last_affine = desc.layers.size();
  for (size_t i = 0; i < desc.layers.size(); ++i)
    if (desc.layers[i].kind == LayerKind::Conv || desc.layers[i].kind == LayerKind::Linear)
      last_affine = i;

  auto m = std::make_unique<Model>(dev, input_shape);
  for (size_t i = 0; i < desc.layers.size(); ++i) {
    const model::LayerDesc& l = desc.layers[i];
    const Init init = i == last_affine ? Init::XavierUniform : Init::HeNormal;
    const Window w{l.kernel_h, l.kernel_w, l.stride_h, l.stride_w, l.pad_h, l.pad_w};
    std::unique_ptr<Layer> layer;
    switch (l.kind) {
      case LayerKind::Conv: layer = std::make_unique<Conv2d>(dev, l.out, w, init, l.bias); break;
      case LayerKind::Linear: layer = std::make_unique<Linear>(dev, l.out, init, l.bias); break;
      case LayerKind::MaxPool: layer = std::make_unique<MaxPool2d>(dev, w); break;
      case LayerKind::AvgPool: layer = std::make_unique<AvgPool2d>(dev, w, l.count_pad); break;
      case LayerKind::GlobalAvgPool: layer = AvgPool2d::global(dev); break;
      case LayerKind::BatchNorm: layer = std::make_unique<BatchNorm>(dev, l.eps, l.momentum); break;
      case LayerKind::Add: layer = std::make_unique<Add>(dev); break;
      case LayerKind::Relu: layer = std::make_unique<ReLU>(dev); break;
      case LayerKind::Flatten: layer = std::make_unique<Flatten>(dev); break;
      case LayerKind::Dropout: layer = std::make_unique<Dropout>(dev, l.p); break;
    }
    static_assert(model::kModelInput == Model::kInput);
    m->add(std::move(layer), desc.inputs_of(i));
  }
  if (desc.layers.empty()) LPSGD_USAGE_ERROR("model '" << desc.spec << "' has no layers");
  m->finalize(seed);
  // State (running statistics) a description carries is taken as it is.
  for (size_t i = 0; i < desc.layers.size(); ++i) {
    const model::LayerDesc& l = desc.layers[i];
    std::vector<Param>& st = m->layer(i).state();
    if (l.state.empty() || st.empty()) continue;
    const std::string who = l.origin.empty() ? "layer " + std::to_string(i) : l.origin;
    if (l.state.size() != st.size())
      LPSGD_USAGE_ERROR(who << " carries " << l.state.size() << " state tensors, the layer has " << st.size());
    for (size_t k = 0; k < st.size(); ++k) {
      const model::Tensor& t = l.state[k];
      if (t.shape != dims_of(st[k].shape) || t.data.size() != static_cast<size_t>(st[k].shape.numel()))
        LPSGD_USAGE_ERROR(who << ": " << st[k].name << " '" << t.name << "' is " << model::shape_str(t.shape)
                              << ", the layer's is " << st[k].shape.str());
      dev.copy_from_host(st[k].value.data(), t.data.data(), t.data.size() * sizeof(float));
    }
  }
  if (!given_params) {
    dev.synchronize();
    return m;
  }

  for (size_t i = 0; i < desc.layers.size(); ++i) {
    const model::LayerDesc& l = desc.layers[i];
    std::vector<Param>& ps = m->layer(i).params();
    if (ps.empty()) continue;
    const std::string who = l.origin.empty() ? "layer " + std::to_string(i) : l.origin;
    if (l.params.size() != ps.size())
      LPSGD_USAGE_ERROR(who << " carries " << l.params.size() << " tensors, the layer has "
                            << ps.size());
    for (size_t k = 0; k < ps.size(); ++k) {
      const model::Tensor& t = l.params[k];
      if (t.shape != dims_of(ps[k].shape) ||
          t.data.size() != static_cast<size_t>(ps[k].shape.numel()))
        LPSGD_USAGE_ERROR(who << ": " << ps[k].name << " '" << t.name << "' is "
                              << model::shape_str(t.shape) << ", the layer's is "
                              << ps[k].shape.str());
      dev.copy_from_host(ps[k].value.data(), t.data.data(), t.data.size() * sizeof(float));
    }
  }
  dev.synchronize();
  return m;
}

std::unique_ptr<Model> build_model(Device& dev, const std::string& spec, const Shape& input_shape,
                                   uint64_t seed) {
  return build_model(dev, model::from_spec(spec, dims_of(input_shape)), input_shape, seed);
}

}  // namespace lpsgd::nn
