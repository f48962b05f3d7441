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
    "use mlp:IN-H1-...-OUT (e.g. mlp:784-512-256-10), cnn:lenet, cnn:alexnet, cnn:resnet20 "
    "(or resnet32, 44, 56, 110: 6n+2 layers), cnn:resnet18, cnn:resnet34, "
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
LayerDesc conv_nobias(int64_t out, int k, int stride, int pad) {
  LayerDesc l = conv(out, k, stride, pad);
  l.bias = false;
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
void lenet(ModelDesc& m, const std::string& spec, const std::vector<int64_t>& in, int64_t classes) {
  needs_image(spec, in);
  auto& L = m.layers;
  L = {conv(32, 5, 1, 2), simple(LayerKind::Relu), pool(2),
       conv(64, 5, 1, 2), simple(LayerKind::Relu), pool(2),
       simple(LayerKind::Flatten), linear(512), simple(LayerKind::Relu), linear(classes)};
}

// AlexNet's pattern for small images (28x28 and up): five 3x3 convolutions
// (64, 192, 384, 256, 256 channels; a 2x2 max pool after the first, second
// and fifth), then fully connected layers of 4096, 4096 and the classes. On
// 1x28x28 inputs: 28.5 M parameters, 26 M of them in the fully connected
// layers, whose gradients backward produces first: their exchange can run
// while the convolutions' backward computes (the regime where communication
// and compute are both large).
void alexnet(ModelDesc& m, const std::string& spec, const std::vector<int64_t>& in, int64_t classes) {
  needs_image(spec, in);
  const LayerDesc relu = simple(LayerKind::Relu);
  m.layers = {conv(64, 3, 1, 1),  relu, pool(2), conv(192, 3, 1, 1), relu, pool(2),
              conv(384, 3, 1, 1), relu, conv(256, 3, 1, 1), relu, conv(256, 3, 1, 1), relu,
              pool(2), simple(LayerKind::Flatten), linear(4096), relu, linear(4096), relu,
              linear(classes)};
}

// ---- residual networks ------------------------------------------------------------

// Appends nodes to a graph: each reads the node before it unless told which.
class Graph {
 public:
  explicit Graph(ModelDesc& m) : m_(m) {}
  /// The index of the node added, reading `from` (default: the last node).
  int add(LayerDesc l, std::vector<int> from = {}) {
    const int prev = last();
    if (!from.empty() && !(from.size() == 1 && from[0] == prev)) l.inputs = std::move(from);
    m_.layers.push_back(std::move(l));
    return last();
  }
  int last() const { return m_.layers.empty() ? kModelInput : static_cast<int>(m_.layers.size()) - 1; }

  // conv (no bias: the batch norm after it shifts) - batchnorm [- relu].
  int conv_bn(int from, int64_t out, int k, int stride, bool relu) {
    add(conv_nobias(out, k, stride, k / 2), {from});
    add(simple(LayerKind::BatchNorm));
    if (relu) add(simple(LayerKind::Relu));
    return last();
  }

  // He et al.'s basic block: two 3x3 convolutions with batch norm, the first
  // with `stride`, and the block's input added back before the last ReLU:
  // as it is, or through a 1x1 convolution with batch norm (a projection)
  // where the stride or the channels change.
  int basic_block(int from, int64_t in_channels, int64_t out, int stride) {
    conv_bn(from, out, 3, stride, true);
    const int main = conv_bn(last(), out, 3, 1, false);
    int shortcut = from;
    if (stride != 1 || in_channels != out) shortcut = conv_bn(from, out, 1, stride, false);
    add(simple(LayerKind::Add), {main, shortcut});
    return add(simple(LayerKind::Relu));
  }

  // Stages of basic blocks (the first block of every stage but the first
  // halves the plane), then global average pooling and the classifier.
  void stages(int from, int64_t channels, const std::vector<int64_t>& widths,
              const std::vector<int>& blocks, int64_t classes) {
    for (size_t s = 0; s < widths.size(); ++s)
      for (int b = 0; b < blocks[s]; ++b) {
        from = basic_block(from, channels, widths[s], s > 0 && b == 0 ? 2 : 1);
        channels = widths[s];
      }
    add(simple(LayerKind::GlobalAvgPool));
    add(simple(LayerKind::Flatten));
    add(linear(classes));
  }

 private:
  ModelDesc& m_;
};

// The CIFAR ResNets of He et al. 2016, section 4.2: a 3x3 convolution of 16
// channels, three stages of n basic blocks at 16, 32 and 64 channels, global
// average pooling and the classifier (6n + 2 layers with weights). Where a
// stage halves the plane the shortcut is a 1x1 projection (the paper's
// option B). ResNet-20: n = 3, 0.27 M parameters.
void resnet_cifar(ModelDesc& m, const std::string& spec, const std::vector<int64_t>& in,
                  int depth, int64_t classes) {
  needs_image(spec, in);
  if (depth < 8 || (depth - 2) % 6 != 0)
    LPSGD_USAGE_ERROR("bad model spec '" << spec << "': a CIFAR ResNet has 6n+2 layers (20, 32, 44, "
                                         << "56, 110); " << kForms);
  const int n = (depth - 2) / 6;
  Graph g(m);
  const int stem = g.conv_bn(kModelInput, 16, 3, 1, true);
  g.stages(stem, 16, {16, 32, 64}, {n, n, n}, classes);
}

// The ImageNet ResNets of basic blocks (18: two blocks per stage, 34: 3, 4,
// 6, 3) at 64, 128, 256 and 512 channels. Inputs of up to 64 pixels get a 3x3
// stride-1 stem of 64 channels and no max pool (the usual form for 28-32
// pixel images); larger ones ImageNet's 7x7 stride-2 stem and 3x3 stride-2
// max pool. ResNet-18 on 32x32: 11.2 M parameters.
void resnet_imagenet(ModelDesc& m, const std::string& spec, const std::vector<int64_t>& in,
                     const std::vector<int>& blocks, int64_t classes) {
  needs_image(spec, in);
  Graph g(m);
  int stem;
  if (in[1] <= 64 && in[2] <= 64) {
    stem = g.conv_bn(kModelInput, 64, 3, 1, true);
  } else {
    g.conv_bn(kModelInput, 64, 7, 2, true);
    LayerDesc mp = pool(3);
    mp.stride_h = mp.stride_w = 2;
    mp.pad_h = mp.pad_w = 1;
    stem = g.add(mp);
  }
  g.stages(stem, 64, {64, 128, 256, 512}, blocks, classes);
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
                                         << "avgpool(KHxKW,sSHxSW,pPHxPW[,nopadcount]), gavgpool, "
                                         << "batchnorm[(EPS,MOMENTUM)], add, relu, flatten, "
                                         << "dropout(P), each optionally @I or @I+J to read nodes I "
                                         << "(and J) or the input (in) rather than the node before, "
                                         << "then softmax or logsoftmax last)");
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
  // A float in (lo, hi], written without an exponent (see float_text).
  float in_range(const std::string& s, double lo, double hi, const char* what) const {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !(v > lo && v <= hi))
      fail(std::string(what) + " must be in (" + float_text(static_cast<float>(lo)) + ", " +
           float_text(static_cast<float>(hi)) + "], got '" + s + "'");
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

// "I" or "I+J" after a node's '@': node indices before `node`, or "in".
std::vector<int> input_list(const TokenParser& p, const std::string& s, size_t node) {
  std::vector<int> out;
  size_t i = 0;
  while (true) {
    const size_t j = std::min(s.find('+', i), s.size());
    const std::string item = s.substr(i, j - i);
    if (item == "in") out.push_back(kModelInput);
    else if (node == 0) p.fail("the first node can only read the input (@in)");
    else out.push_back(static_cast<int>(p.number(item, 0, static_cast<int64_t>(node) - 1)));
    if (j == s.size()) break;
    i = j + 1;
  }
  return out;
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
    // NAME(ARGS)@INPUTS: the parser reads NAME(ARGS); INPUTS come after.
    const size_t at = tokens[i].find('@');
    const std::string t = tokens[i].substr(0, at);
    const TokenParser p(spec, t);
    const std::string name = t.substr(0, t.find('('));
    LayerDesc l;
    if (at != std::string::npos) l.inputs = input_list(p, tokens[i].substr(at + 1), m.layers.size());
    if (name == "softmax" || name == "logsoftmax") {
      if (t != name || i + 1 != tokens.size() || !l.inputs.empty()) p.fail(name + " only as the last item");
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
    } else if (name == "avgpool") {
      auto a = p.args("avgpool");
      l.kind = LayerKind::AvgPool;
      if (!a.empty() && a.back() == "nopadcount") {
        l.count_pad = false;
        a.pop_back();
      }
      if (a.empty() || a.size() > 3) p.fail("avgpool needs KHxKW");
      p.pair_of(a[0], 0, 1, l.kernel_h, l.kernel_w);
      l.stride_h = l.kernel_h;
      l.stride_w = l.kernel_w;
      window(p, a, 1, l);
    } else if (name == "batchnorm") {
      const auto a = p.args("batchnorm");
      l.kind = LayerKind::BatchNorm;
      if (a.size() != 0 && a.size() != 2) p.fail("batchnorm takes EPS and MOMENTUM, or nothing");
      if (a.size() == 2) {
        l.eps = p.in_range(a[0], 0, 1, "EPS");
        l.momentum = p.in_range(a[1], 0, 1, "MOMENTUM");
      }
    } else if (t == "add") {
      l.kind = LayerKind::Add;
    } else if (t == "gavgpool") {
      l.kind = LayerKind::GlobalAvgPool;
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
    case LayerKind::BatchNorm: return "batchnorm";
    case LayerKind::Add: return "add";
    case LayerKind::AvgPool: return "avgpool";
    case LayerKind::GlobalAvgPool: return "gavgpool";
  }
  return "?";
}

std::vector<int> ModelDesc::inputs_of(size_t i) const {
  if (!layers.at(i).inputs.empty()) return layers[i].inputs;
  return {static_cast<int>(i) - 1};  // node 0: -1, the model input
}

bool ModelDesc::sequential() const {
  for (size_t i = 0; i < layers.size(); ++i)
    if (inputs_of(i) != std::vector<int>{static_cast<int>(i) - 1}) return false;
  return true;
}

const char* param_name(size_t k) { return k == 0 ? "weight" : "bias"; }
const char* state_name(size_t k) { return k == 0 ? "running_mean" : "running_var"; }

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
      case LayerKind::AvgPool:
        s += "(" + pair(l.kernel_h, l.kernel_w) + ",s" + pair(l.stride_h, l.stride_w) + ",p" +
             pair(l.pad_h, l.pad_w) + (l.count_pad ? ")" : ",nopadcount)");
        break;
      case LayerKind::BatchNorm:
        if (l.eps != LayerDesc{}.eps || l.momentum != LayerDesc{}.momentum)
          s += "(" + float_text(l.eps) + "," + float_text(l.momentum) + ")";
        break;
      default:
        break;
    }
    const std::vector<int> ins = inputs_of(i);
    if (ins != std::vector<int>{static_cast<int>(i) - 1}) {
      s += '@';
      for (size_t k = 0; k < ins.size(); ++k)
        s += (k ? "+" : "") + (ins[k] == kModelInput ? std::string("in") : std::to_string(ins[k]));
    }
  }
  if (output == Output::Softmax) s += "-softmax";
  if (output == Output::LogSoftmax) s += "-logsoftmax";
  return s;
}

bool ModelDesc::has_params() const {
  bool any = false;
  for (const LayerDesc& l : layers) {
    if (l.kind != LayerKind::Conv && l.kind != LayerKind::Linear && l.kind != LayerKind::BatchNorm) continue;
    if (l.params.empty()) return false;
    any = true;
  }
  return any;
}

ModelDesc from_spec(const std::string& spec, const std::vector<int64_t>& input_shape,
                    int64_t classes) {
  ModelDesc m;
  m.spec = spec;
  m.input_shape = input_shape;
  if (classes < 1) LPSGD_USAGE_ERROR("model '" << spec << "' needs at least one class, got " << classes);
  if (spec.rfind("mlp:", 0) == 0) {
    mlp(m, spec, input_shape);
  } else if (spec == "cnn:lenet") {
    lenet(m, spec, input_shape, classes);
  } else if (spec == "cnn:alexnet") {
    alexnet(m, spec, input_shape, classes);
  } else if (spec == "cnn:resnet18") {
    resnet_imagenet(m, spec, input_shape, {2, 2, 2, 2}, classes);
  } else if (spec == "cnn:resnet34") {
    resnet_imagenet(m, spec, input_shape, {3, 4, 6, 3}, classes);
  } else if (spec.rfind("cnn:resnet", 0) == 0 && spec.size() > 10 && spec.size() <= 13 &&
             spec.find_first_not_of("0123456789", 10) == std::string::npos) {
    resnet_cifar(m, spec, input_shape, std::stoi(spec.substr(10)), classes);
  } else if (spec.rfind("layers:", 0) == 0) {
    layers(m, spec);
  } else {
    LPSGD_USAGE_ERROR("unknown model spec '" << spec << "'; " << kForms);
  }
  // Checked now, so a spec that does not fit the data is one line before anything runs.
  if (spec.rfind("layers:", 0) == 0) m.input_shape = model_input_shape(m, input_shape);
  if (!m.input_shape.empty()) node_shapes(m, m.input_shape);
  return m;
}

std::vector<int64_t> model_input_shape(const ModelDesc& desc, const std::vector<int64_t>& sample) {
  for (const LayerDesc& l : desc.layers) {
    if (l.kind == LayerKind::Linear) return {numel(sample)};
    if (l.kind == LayerKind::Conv || l.kind == LayerKind::MaxPool || l.kind == LayerKind::Flatten ||
        l.kind == LayerKind::AvgPool || l.kind == LayerKind::GlobalAvgPool)
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
    case LayerKind::Add:
      return in;
    case LayerKind::BatchNorm:
      if (in.size() != 1 && in.size() != 3)
        LPSGD_USAGE_ERROR(who << " needs a per-sample input [C, H, W] or [D], got " << shape_str(in));
      return in;
    case LayerKind::GlobalAvgPool:
      if (in.size() != 3)
        LPSGD_USAGE_ERROR(who << " needs a per-sample input [C, H, W], got " << shape_str(in));
      return {in[0], 1, 1};
    case LayerKind::Flatten:
      return {numel(in)};
    case LayerKind::Linear:
      if (in.size() != 1)
        LPSGD_USAGE_ERROR(who << " needs a flat input, got per-sample shape " << shape_str(in)
                              << "; put a Flatten in front of it");
      return {l.out};
    case LayerKind::Conv:
    case LayerKind::MaxPool:
    case LayerKind::AvgPool: {
      if (in.size() != 3)
        LPSGD_USAGE_ERROR(who << " needs a per-sample input [C, H, W], got " << shape_str(in));
      if (l.kernel_h < 1 || l.kernel_w < 1 || l.stride_h < 1 || l.stride_w < 1 || l.pad_h < 0 ||
          l.pad_w < 0)
        LPSGD_USAGE_ERROR(who << ": kernel and stride must be >= 1 and padding >= 0");
      if (l.kind != LayerKind::Conv && (2 * l.pad_h > l.kernel_h || 2 * l.pad_w > l.kernel_w))
        LPSGD_USAGE_ERROR(who << ": pooling padding must be at most half the window, got pads "
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

std::vector<std::vector<int64_t>> node_shapes(const ModelDesc& d, const std::vector<int64_t>& in) {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<bool> read(d.layers.size(), false);
  for (size_t i = 0; i < d.layers.size(); ++i) {
    const LayerDesc& l = d.layers[i];
    const std::string who = l.origin.empty() ? "node " + std::to_string(i) + " (" + kind_name(l.kind) + ")" : l.origin;
    const std::vector<int> ins = d.inputs_of(i);
    const size_t arity = l.kind == LayerKind::Add ? 2 : 1;
    if (ins.size() != arity)
      LPSGD_USAGE_ERROR(who << " reads " << ins.size() << " inputs; " << kind_name(l.kind) << " takes "
                            << arity);
    for (int j : ins) {
      if (j != kModelInput && (j < 0 || static_cast<size_t>(j) >= i))
        LPSGD_USAGE_ERROR(who << " reads node " << j << ", which does not come before it");
      if (j != kModelInput) read[static_cast<size_t>(j)] = true;
    }
    const auto shape_of = [&](int j) -> const std::vector<int64_t>& {
      return j == kModelInput ? in : shapes[static_cast<size_t>(j)];
    };
    if (arity == 2 && shape_of(ins[0]) != shape_of(ins[1]))
      LPSGD_USAGE_ERROR(who << " adds per-sample shapes " << shape_str(shape_of(ins[0])) << " and "
                            << shape_str(shape_of(ins[1])) << "; they must be the same");
    shapes.push_back(output_shape(l, shape_of(ins[0])));
  }
  for (size_t i = 0; i + 1 < d.layers.size(); ++i)
    if (!read[i]) {
      const LayerDesc& l = d.layers[i];
      LPSGD_USAGE_ERROR((l.origin.empty() ? "node " + std::to_string(i) + " (" + kind_name(l.kind) + ")" : l.origin)
                        << ": no node reads its output, and only the last node's is the model's");
    }
  return shapes;
}

std::vector<int64_t> output_shape(const ModelDesc& d, const std::vector<int64_t>& in) {
  if (d.layers.empty()) return in;
  return node_shapes(d, in).back();
}

std::vector<std::vector<int64_t>> state_shapes(const LayerDesc& l, const std::vector<int64_t>& in) {
  if (l.kind != LayerKind::BatchNorm) return {};
  return {{in.at(0)}, {in.at(0)}};
}

std::vector<std::vector<int64_t>> param_shapes(const LayerDesc& l, const std::vector<int64_t>& in) {
  std::vector<std::vector<int64_t>> out;
  if (l.kind == LayerKind::BatchNorm) return {{in.at(0)}, {in.at(0)}};
  if (l.kind == LayerKind::Conv) out.push_back({l.out, in.at(0), l.kernel_h, l.kernel_w});
  else if (l.kind == LayerKind::Linear) out.push_back({l.out, in.at(0)});
  else return out;
  if (l.bias) out.push_back({l.out});
  return out;
}

}  // namespace lpsgd::model
