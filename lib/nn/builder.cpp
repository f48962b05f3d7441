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
  std::vector<int64_t> shape = dims_of(input_shape);
  for (const model::LayerDesc& l : desc.layers) shape = model::output_shape(l, shape);
  size_t last_affine = desc.layers.size();
  for (size_t i = 0; i < desc.layers.size(); ++i)
    if (desc.layers[i].kind == LayerKind::Conv || desc.layers[i].kind == LayerKind::Linear)
      last_affine = i;

  auto m = std::make_unique<Model>(dev, input_shape);
  for (size_t i = 0; i < desc.layers.size(); ++i) {
    const model::LayerDesc& l = desc.layers[i];
    const Init init = i == last_affine ? Init::XavierUniform : Init::HeNormal;
    const Window w{l.kernel_h, l.kernel_w, l.stride_h, l.stride_w, l.pad_h, l.pad_w};
    switch (l.kind) {
      case LayerKind::Conv: m->emplace<Conv2d>(l.out, w, init, l.bias); break;
      case LayerKind::Linear: m->emplace<Linear>(l.out, init, l.bias); break;
      case LayerKind::MaxPool: m->emplace<MaxPool2d>(w); break;
      case LayerKind::Relu: m->emplace<ReLU>(); break;
      case LayerKind::Flatten: m->emplace<Flatten>(); break;
      case LayerKind::Dropout: m->emplace<Dropout>(l.p); break;
    }
  }
  if (desc.layers.empty()) LPSGD_USAGE_ERROR("model '" << desc.spec << "' has no layers");
  m->finalize(seed);
  if (!given_params) return m;

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
