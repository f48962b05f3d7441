// ModelDesc: the spec-string grammar, the canonical `layers:` form and the
// shape rules every source of a model is checked with (see desc.hpp).
#include "model/desc.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/error.hpp"

namespace lpsgd::model {
namespace {

constexpr const char* kForms =
    "use mlp:IN-H1-...-OUT (e.g. mlp:784-512-256-10), cnn:lenet, cnn:alexnet, "
    "layers:... (as `lpsgd ckpt info` shows it) or a FILE.onnx";

LayerDesc conv(int64_t out, int k, int stride, int pad) {
  LayerDesc l;
  l.kind = LayerKind::Conv;
  l.out = out;
  l.kernel_h = l.kernel_w = k;
  l.stride_h = l.stride_w = stride;
  l.pad_h = l.pad_w = pad;
  return l;
}
LayerDesc linear(int64_t out) {
  LayerDesc l;
  l.kind = LayerKind::Linear;
  l.out = out;
  return l;
}
LayerDesc pool(int k) {
  LayerDesc l;
  l.kind = LayerKind::MaxPool;
  l.kernel_h = l.kernel_w = k;
  l.stride_h = l.stride_w = k;
  return l;
}
LayerDesc simple(LayerKind k) {
  LayerDesc l;
  l.kind = k;
  return l;
}

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

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

void mlp(ModelDesc& m, const std::string& spec, const std::vector<int64_t>& in) {
  const std::vector<int64_t> widths = parse_widths(spec, spec.substr(4));
  if (widths[0] != numel(in))
    LPSGD_USAGE_ERROR("model spec '" << spec << "' starts with width " << widths[0]
                                     << " but the input " << shape_str(in) << " has " << numel(in)
                                     << " values per sample");
  if (in.size() != 1) m.layers.push_back(simple(LayerKind::Flatten));
  for (size_t i = 1; i < widths.size(); ++i) {
    m.layers.push_back(linear(widths[i]));
    if (i + 1 < widths.size()) m.layers.push_back(simple(LayerKind::Relu));
  }
}

void needs_image(const std::string& spec, const std::vector<int64_t>& in) {
  if (in.size() != 3)
    LPSGD_USAGE_ERROR("model spec '" << spec << "' needs image input [C, H, W], got "
                                     << shape_str(in));
}

// conv5x5-32 (pad 2), ReLU, maxpool 2, conv5x5-64 (pad 2), ReLU, maxpool 2,
// flatten, fc-512, ReLU, fc-10.
void lenet(ModelDesc& m, const std::string& spec, const std::vector<int64_t>& in) {
  needs_image(spec, in);
  auto& L = m.layers;
  L = {conv(32, 5, 1, 2), simple(LayerKind::Relu), pool(2),
       conv(64, 5, 1, 2), simple(LayerKind::Relu), pool(2),
       simple(LayerKind::Flatten), linear(512), simple(LayerKind::Relu), linear(10)};
}

// AlexNet's pattern for small images (28x28 and up): five 3x3 convolutions
// (64, 192, 384, 256, 256 channels; a 2x2 max pool after the first, second
// and fifth), then fully connected layers of 4096, 4096 and the classes. On
// 1x28x28 inputs: 28.5 M parameters, 26 M of them in the fully connected
// layers, whose gradients backward produces first: their exchange can run
// while the convolutions' backward computes (the regime where communication
// and compute are both large).
void alexnet(ModelDesc& m, const std::string& spec, const std::vector<int64_t>& in) {
  needs_image(spec, in);
  const LayerDesc relu = simple(LayerKind::Relu);
  m.layers = {conv(64, 3, 1, 1),  relu, pool(2), conv(192, 3, 1, 1), relu, pool(2),
              conv(384, 3, 1, 1), relu, conv(256, 3, 1, 1), relu, conv(256, 3, 1, 1), relu,
              pool(2), simple(LayerKind::Flatten), linear(4096), relu, linear(4096), relu,
              linear(10)};
}

// ---- the layers: form -------------------------------------------------------------

std::string pair(int a, int b) { return std::to_string(a) + "x" + std::to_string(b); }

// A float that reads back as itself (9 significant digits), never in
// exponent form: '-' separates a spec's layers, so "6.1e-05" would cut one
// in two (found by fuzz_onnx). Small values are written out in full.
std::string float_text(float v) {
  char buf[80];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  if (std::strchr(buf, 'e')) {
    const int exp10 = static_cast<int>(std::floor(std::log10(std::fabs(static_cast<double>(v)))));
    std::snprintf(buf, sizeof buf, "%.*f", std::max(0, 8 - exp10), static_cast<double>(v));
  }
  return buf;
}

class TokenParser {
 public:
  TokenParser(const std::string& spec, const std::string& token) : spec_(spec), t_(token) {}
  [[noreturn]] void fail(const std::string& what) const {
    LPSGD_USAGE_ERROR("bad model spec '" << spec_ << "': " << what << " in '" << t_
                                         << "' (layers: conv(OUT,KHxKW,sSHxSW,pPHxPW[,nobias]), "
                                         << "linear(OUT[,nobias]), maxpool(KHxKW,sSHxSW,pPHxPW), "
                                         << "relu, flatten, dropout(P), then softmax or logsoftmax "
                                         << "last)");
  }
  // The comma-separated arguments inside NAME(...), or none.
  std::vector<std::string> args(const std::string& name) const {
    if (t_ == name) return {};
    if (t_.size() < name.size() + 2 || t_.back() != ')' || t_[name.size()] != '(')
      fail("expected " + name + "(...)");
    std::vector<std::string> out;
    std::string cur;
    for (size_t i = name.size() + 1; i + 1 < t_.size(); ++i) {
      if (t_[i] == ',') {
        out.push_back(cur);
        cur.clear();
      } else {
        cur += t_[i];
      }
    }
    out.push_back(cur);
    return out;
  }
  int64_t number(const std::string& s, int64_t lo, int64_t hi) const {
    if (s.empty() || s.size() > 12) fail("expected a number, got '" + s + "'");
    for (char ch : s)
      if (!std::isdigit(static_cast<unsigned char>(ch))) fail("expected a number, got '" + s + "'");
    const int64_t v = std::stoll(s);
    if (v < lo || v > hi) fail(s + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return v;
  }
  // "5x3" (or "5" for both), after an optional prefix letter.
  void pair_of(std::string s, char prefix, int lo, int& a, int& b) const {
    if (prefix) {
      if (s.empty() || s[0] != prefix) fail(std::string("expected ") + prefix + "AxB, got '" + s + "'");
      s = s.substr(1);
    }
    const size_t x = s.find('x');
    a = static_cast<int>(number(s.substr(0, x), lo, 1 << 16));
    b = x == std::string::npos ? a : static_cast<int>(number(s.substr(x + 1), lo, 1 << 16));
  }
  float probability(const std::string& s) const {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !(v >= 0 && v < 1)) fail("dropout needs P in [0, 1), got '" + s + "'");
    return static_cast<float>(v);
  }
  const std::string& token() const { return t_; }

 private:
  const std::string& spec_;
  const std::string& t_;
};

void window(const TokenParser& p, const std::vector<std::string>& a, size_t first, LayerDesc& l) {
  if (a.size() > first) p.pair_of(a[first], 's', 1, l.stride_h, l.stride_w);
  if (a.size() > first + 1) p.pair_of(a[first + 1], 'p', 0, l.pad_h, l.pad_w);
}

void layers(ModelDesc& m, const std::string& spec) {
  const std::string body = spec.substr(7);
  std::vector<std::string> tokens;
  std::string cur;
  for (char ch : body) {
    if (ch == '-') {
      tokens.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  tokens.push_back(cur);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const TokenParser p(spec, tokens[i]);
    const std::string& t = tokens[i];
    const std::string name = t.substr(0, t.find('('));
    LayerDesc l;
    if (name == "softmax" || name == "logsoftmax") {
      if (t != name || i + 1 != tokens.size()) p.fail(name + " only as the last item");
      m.output = name == "softmax" ? Output::Softmax : Output::LogSoftmax;
      break;
    } else if (name == "conv") {
      auto a = p.args("conv");
      l.kind = LayerKind::Conv;
      if (!a.empty() && a.back() == "nobias") {
        l.bias = false;
        a.pop_back();
      }
      if (a.size() < 2 || a.size() > 4) p.fail("conv needs OUT and KHxKW");
      l.out = p.number(a[0], 1, int64_t{1} << 24);
      p.pair_of(a[1], 0, 1, l.kernel_h, l.kernel_w);
      window(p, a, 2, l);
    } else if (name == "linear") {
      auto a = p.args("linear");
      l.kind = LayerKind::Linear;
      if (a.size() == 2 && a[1] == "nobias") {
        l.bias = false;
        a.pop_back();
      }
      if (a.size() != 1) p.fail("linear needs OUT");
      l.out = p.number(a[0], 1, int64_t{1} << 30);
    } else if (name == "maxpool") {
      const auto a = p.args("maxpool");
      l.kind = LayerKind::MaxPool;
      if (a.empty() || a.size() > 3) p.fail("maxpool needs KHxKW");
      p.pair_of(a[0], 0, 1, l.kernel_h, l.kernel_w);
      l.stride_h = l.kernel_h;
      l.stride_w = l.kernel_w;
      window(p, a, 1, l);
    } else if (name == "dropout") {
      const auto a = p.args("dropout");
      if (a.size() != 1) p.fail("dropout needs P");
      l.kind = LayerKind::Dropout;
      l.p = p.probability(a[0]);
    } else if (t == "relu") {
      l.kind = LayerKind::Relu;
    } else if (t == "flatten") {
      l.kind = LayerKind::Flatten;
    } else {
      p.fail("unknown layer");
    }
    m.layers.push_back(l);
  }
  if (m.layers.empty())
    LPSGD_USAGE_ERROR("bad model spec '" << spec << "': no layers; " << kForms);
}

}  // namespace

const char* kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::Conv: return "conv";
    case LayerKind::Linear: return "linear";
    case LayerKind::MaxPool: return "maxpool";
    case LayerKind::Relu: return "relu";
    case LayerKind::Flatten: return "flatten";
    case LayerKind::Dropout: return "dropout";
  }
  return "?";
}

std::string ModelDesc::canonical() const {
  std::string s = "layers:";
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerDesc& l = layers[i];
    if (i) s += '-';
    s += kind_name(l.kind);
    switch (l.kind) {
      case LayerKind::Conv:
        s += "(" + std::to_string(l.out) + "," + pair(l.kernel_h, l.kernel_w) + ",s" +
             pair(l.stride_h, l.stride_w) + ",p" + pair(l.pad_h, l.pad_w) +
             (l.bias ? ")" : ",nobias)");
        break;
      case LayerKind::Linear:
        s += "(" + std::to_string(l.out) + (l.bias ? ")" : ",nobias)");
        break;
      case LayerKind::MaxPool:
        s += "(" + pair(l.kernel_h, l.kernel_w) + ",s" + pair(l.stride_h, l.stride_w) + ",p" +
             pair(l.pad_h, l.pad_w) + ")";
        break;
      case LayerKind::Dropout:
        s += "(" + float_text(l.p) + ")";
        break;
      default:
        break;
    }
  }
  if (output == Output::Softmax) s += "-softmax";
  if (output == Output::LogSoftmax) s += "-logsoftmax";
  return s;
}

bool ModelDesc::has_params() const {
  bool any = false;
  for (const LayerDesc& l : layers) {
    if (l.kind != LayerKind::Conv && l.kind != LayerKind::Linear) continue;
    if (l.params.empty()) return false;
    any = true;
  }
  return any;
}

ModelDesc from_spec(const std::string& spec, const std::vector<int64_t>& input_shape) {
  ModelDesc m;
  m.spec = spec;
  m.input_shape = input_shape;
  if (spec.rfind("mlp:", 0) == 0) {
    mlp(m, spec, input_shape);
  } else if (spec == "cnn:lenet") {
    lenet(m, spec, input_shape);
  } else if (spec == "cnn:alexnet") {
    alexnet(m, spec, input_shape);
  } else if (spec.rfind("layers:", 0) == 0) {
    layers(m, spec);
  } else {
    LPSGD_USAGE_ERROR("unknown model spec '" << spec << "'; " << kForms);
  }
  // Checked now, so a spec that does not fit the data is one line before anything runs.
  if (spec.rfind("layers:", 0) == 0) m.input_shape = model_input_shape(m, input_shape);
  if (!m.input_shape.empty()) {
    std::vector<int64_t> shape = m.input_shape;
    for (const LayerDesc& l : m.layers) shape = output_shape(l, shape);
  }
  return m;
}

std::vector<int64_t> model_input_shape(const ModelDesc& desc, const std::vector<int64_t>& sample) {
  for (const LayerDesc& l : desc.layers) {
    if (l.kind == LayerKind::Linear) return {numel(sample)};
    if (l.kind == LayerKind::Conv || l.kind == LayerKind::MaxPool || l.kind == LayerKind::Flatten)
      break;
  }
  return sample;
}

bool is_model_file(const std::string& s) {
  return s.size() > 5 && s.compare(s.size() - 5, 5, ".onnx") == 0;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<int64_t> output_shape(const LayerDesc& l, const std::vector<int64_t>& in) {
  const std::string who = l.origin.empty() ? std::string(kind_name(l.kind)) : l.origin;
  switch (l.kind) {
    case LayerKind::Relu:
    case LayerKind::Dropout:
      return in;
    case LayerKind::Flatten:
      return {numel(in)};
    case LayerKind::Linear:
      if (in.size() != 1)
        LPSGD_USAGE_ERROR(who << " needs a flat input, got per-sample shape " << shape_str(in)
                              << "; put a Flatten in front of it");
      return {l.out};
    case LayerKind::Conv:
    case LayerKind::MaxPool: {
      if (in.size() != 3)
        LPSGD_USAGE_ERROR(who << " needs a per-sample input [C, H, W], got " << shape_str(in));
      if (l.kernel_h < 1 || l.kernel_w < 1 || l.stride_h < 1 || l.stride_w < 1 || l.pad_h < 0 ||
          l.pad_w < 0)
        LPSGD_USAGE_ERROR(who << ": kernel and stride must be >= 1 and padding >= 0");
      if (l.kind == LayerKind::MaxPool && (2 * l.pad_h > l.kernel_h || 2 * l.pad_w > l.kernel_w))
        LPSGD_USAGE_ERROR(who << ": max-pool padding must be at most half the window, got pads "
                              << l.pad_h << "x" << l.pad_w << " for a " << l.kernel_h << "x"
                              << l.kernel_w << " window");
      const int64_t oh = (in[1] + 2 * l.pad_h - l.kernel_h) / l.stride_h + 1;
      const int64_t ow = (in[2] + 2 * l.pad_w - l.kernel_w) / l.stride_w + 1;
      if (in[1] + 2 * l.pad_h < l.kernel_h || in[2] + 2 * l.pad_w < l.kernel_w || oh < 1 || ow < 1)
        LPSGD_USAGE_ERROR(who << ": a " << l.kernel_h << "x" << l.kernel_w
                              << " window does not fit input " << shape_str(in) << " with padding "
                              << l.pad_h << "x" << l.pad_w);
      return {l.kind == LayerKind::Conv ? l.out : in[0], oh, ow};
    }
  }
  return in;
}

std::vector<std::vector<int64_t>> param_shapes(const LayerDesc& l, const std::vector<int64_t>& in) {
  std::vector<std::vector<int64_t>> out;
  if (l.kind == LayerKind::Conv) out.push_back({l.out, in.at(0), l.kernel_h, l.kernel_w});
  else if (l.kind == LayerKind::Linear) out.push_back({l.out, in.at(0)});
  else return out;
  if (l.bias) out.push_back({l.out});
  return out;
}

}  // namespace lpsgd::model
