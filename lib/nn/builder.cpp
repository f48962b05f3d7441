// Parses model spec strings (see builder.hpp for the grammar).
#include "nn/builder.hpp"

#include <cctype>
#include <vector>

#include "core/error.hpp"
#include "nn/layers.hpp"

namespace lpsgd::nn {
namespace {

constexpr const char* kForms =
    "use mlp:IN-H1-...-OUT (e.g. mlp:784-512-256-10), cnn:lenet or cnn:alexnet";

std::vector<int64_t> parse_widths(const std::string& spec, const std::string& body) {
  std::vector<int64_t> widths;
  size_t i = 0;
  while (true) {
    size_t j = i;
    while (j < body.size() && std::isdigit(static_cast<unsigned char>(body[j]))) ++j;
    if (j == i || j - i > 9)
      LPSGD_USAGE_ERROR("bad model spec '" << spec << "': expected a layer width at position "
                                           << 4 + i << "; " << kForms);
    const int64_t w = std::stoll(body.substr(i, j - i));
    if (w < 1) LPSGD_USAGE_ERROR("bad model spec '" << spec << "': widths must be >= 1");
    widths.push_back(w);
    if (j == body.size()) break;
    if (body[j] != '-')
      LPSGD_USAGE_ERROR("bad model spec '" << spec << "': unexpected '" << body[j] << "'; "
                                           << kForms);
    i = j + 1;
  }
  if (widths.size() < 2)
    LPSGD_USAGE_ERROR("bad model spec '" << spec << "': an mlp needs at least an input and an "
                                         << "output width; " << kForms);
  return widths;
}

void build_mlp(Model& m, const std::string& spec, const std::string& body) {
  const std::vector<int64_t> widths = parse_widths(spec, body);
  const Shape& in = m.input_shape();
  if (widths[0] != in.numel())
    LPSGD_USAGE_ERROR("model spec '" << spec << "' starts with width " << widths[0]
                                     << " but the input " << in.str() << " has " << in.numel()
                                     << " values per sample");
  if (in.rank() != 1) m.emplace<Flatten>();
  for (size_t i = 1; i < widths.size(); ++i) {
    const bool last = i + 1 == widths.size();
    m.emplace<Linear>(widths[i], last ? Init::XavierUniform : Init::HeNormal);
    if (!last) m.emplace<ReLU>();
  }
}

void build_lenet(Model& m, const std::string& spec) {
  if (m.input_shape().rank() != 3)
    LPSGD_USAGE_ERROR("model spec '" << spec << "' needs image input [C, H, W], got "
                                     << m.input_shape().str());
  m.emplace<Conv2d>(32, 5, 1, 2);
  m.emplace<ReLU>();
  m.emplace<MaxPool2d>(2);
  m.emplace<Conv2d>(64, 5, 1, 2);
  m.emplace<ReLU>();
  m.emplace<MaxPool2d>(2);
  m.emplace<Flatten>();
  m.emplace<Linear>(512);
  m.emplace<ReLU>();
  m.emplace<Linear>(10, Init::XavierUniform);
}

// AlexNet's pattern for small images (28x28 and up): five 3x3 convolutions
// (64, 192, 384, 256, 256 channels; a 2x2 max pool after the first, second
// and fifth), then fully connected layers of 4096, 4096 and the classes. On
// 1x28x28 inputs: 28.5 M parameters, 26 M of them in the fully connected
// layers, whose gradients backward produces first: their exchange can run
// while the convolutions' backward computes (the regime where communication
// and compute are both large).
void build_alexnet(Model& m, const std::string& spec) {
  if (m.input_shape().rank() != 3)
    LPSGD_USAGE_ERROR("model spec '" << spec << "' needs image input [C, H, W], got "
                                     << m.input_shape().str());
  m.emplace<Conv2d>(64, 3, 1, 1);
  m.emplace<ReLU>();
  m.emplace<MaxPool2d>(2);
  m.emplace<Conv2d>(192, 3, 1, 1);
  m.emplace<ReLU>();
  m.emplace<MaxPool2d>(2);
  m.emplace<Conv2d>(384, 3, 1, 1);
  m.emplace<ReLU>();
  m.emplace<Conv2d>(256, 3, 1, 1);
  m.emplace<ReLU>();
  m.emplace<Conv2d>(256, 3, 1, 1);
  m.emplace<ReLU>();
  m.emplace<MaxPool2d>(2);
  m.emplace<Flatten>();
  m.emplace<Linear>(4096);
  m.emplace<ReLU>();
  m.emplace<Linear>(4096);
  m.emplace<ReLU>();
  m.emplace<Linear>(10, Init::XavierUniform);
}

}  // namespace

std::unique_ptr<Model> build_model(Device& dev, const std::string& spec, const Shape& input_shape,
                                   uint64_t seed) {
  auto m = std::make_unique<Model>(dev, input_shape);
  if (spec.rfind("mlp:", 0) == 0) {
    build_mlp(*m, spec, spec.substr(4));
  } else if (spec == "cnn:lenet") {
    build_lenet(*m, spec);
  } else if (spec == "cnn:alexnet") {
    build_alexnet(*m, spec);
  } else {
    LPSGD_USAGE_ERROR("unknown model spec '" << spec << "'; " << kForms);
  }
  m->finalize(seed);
  return m;
}

}  // namespace lpsgd::nn
