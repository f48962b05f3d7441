#include "io/augment.hpp"

#include <algorithm>
#include <charconv>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace lpsgd::io {

namespace {

// "AUGM": one block per sample at counter = its index, stream + epoch.
constexpr uint64_t kAugmentStream = 0x4155474D00000000ull;
constexpr int64_t kMaxPad = int64_t{1} << 20;
constexpr const char* kForms = "use crop:PAD, flip or both, e.g. crop:4,flip; none for nothing";

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

}  // namespace

Augment parse_augment(const std::string& spec) {
  Augment a;
  const std::string all = trim(spec);
  if (all.empty() || all == "none") return a;
  size_t start = 0;
  for (;;) {
    const size_t comma = all.find(',', start);
    const std::string part =
        trim(all.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (part.empty())
      LPSGD_USAGE_ERROR("--augment '" << spec << "': an empty part (" << kForms << ")");
    if (part == "flip") {
      if (a.flip) LPSGD_USAGE_ERROR("--augment '" << spec << "': flip given twice");
      a.flip = true;
    } else if (part == "crop" || part.rfind("crop:", 0) == 0) {
      if (a.crop) LPSGD_USAGE_ERROR("--augment '" << spec << "': crop given twice");
      const std::string num = part.size() > 5 ? part.substr(5) : "";
      int64_t pad = -1;
      const auto r = std::from_chars(num.data(), num.data() + num.size(), pad);
      if (num.empty() || r.ec != std::errc() || r.ptr != num.data() + num.size() || pad < 0 ||
          pad > kMaxPad)
        LPSGD_USAGE_ERROR("--augment '" << spec << "': '" << part
                                        << "' needs its padding as a whole number of pixels "
                                           ">= 0, e.g. crop:4 ("
                                        << kForms << ")");
      a.crop = true;
      a.pad = pad;
    } else if (part == "none") {
      LPSGD_USAGE_ERROR("--augment '" << spec << "': none goes alone");
    } else {
      LPSGD_USAGE_ERROR("--augment '" << spec << "': unknown augmentation '" << part << "' ("
                                      << kForms << ")");
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return a;
}

std::string augment_text(const Augment& a) {
  std::string s;
  if (a.crop) s = "crop:" + std::to_string(a.pad);
  if (a.flip) s += s.empty() ? "flip" : ",flip";
  return s.empty() ? "none" : s;
}

void check_augment(const Augment& a, int64_t h, int64_t w, const std::string& where) {
  if (!a.any()) return;
  if (h < 2 || w < 2)
    LPSGD_USAGE_ERROR(where << ": --augment " << augment_text(a) << " needs images, but the samples are "
                            << h << "x" << w
                            << " (not an image dataset: leave --augment out)");
  if (a.crop && (a.pad >= h || a.pad >= w))
    LPSGD_USAGE_ERROR(where << ": --augment crop:" << a.pad << " pads by at least the image size "
                            << h << "x" << w << " (use a padding below " << std::min(h, w)
                            << ")");
}

AugmentDraw augment_draw(const Augment& a, uint64_t seed, uint64_t epoch, int64_t index) {
  AugmentDraw d;
  if (!a.any()) return d;
  const Philox4x32 b = Rng(seed, kAugmentStream + epoch).block(static_cast<uint64_t>(index));
  if (a.crop) {
    // Uniform in [0, 2·pad] by a 32-bit multiply-shift (bias below 2^-11 for pad < 2^20).
    const auto span = static_cast<uint64_t>(2 * a.pad + 1);
    d.dy = static_cast<int64_t>((static_cast<uint64_t>(b.v[0]) * span) >> 32);
    d.dx = static_cast<int64_t>((static_cast<uint64_t>(b.v[1]) * span) >> 32);
  }
  d.flip = a.flip && (b.v[2] >> 31) != 0;
  return d;
}

void augment_sample(const Augment& a, const AugmentDraw& d, const float* src, float* dst,
                    int64_t c, int64_t h, int64_t w, const float* fill) {
  const int64_t pad = a.crop ? a.pad : 0;
  const int64_t oy = d.dy - pad, ox = d.dx - pad;  // input = output + offset (before the flip)
  // The output columns whose input column lies inside: unflipped sx = x + ox,
  // flipped sx = w-1-x + ox; both in [0, w) for x in [x0, x1).
  const int64_t x0 = d.flip ? std::max<int64_t>(0, ox) : std::max<int64_t>(0, -ox);
  const int64_t x1 = d.flip ? std::min<int64_t>(w, w + ox) : std::min<int64_t>(w, w - ox);
  for (int64_t ch = 0; ch < c; ++ch) {
    const float f = fill[ch];
    const float* in = src + ch * h * w;
    float* out = dst + ch * h * w;
    for (int64_t y = 0; y < h; ++y, out += w) {
      const int64_t sy = y + oy;
      if (sy < 0 || sy >= h || x0 >= x1) {
        std::fill(out, out + w, f);
        continue;
      }
      const float* row = in + sy * w;
      std::fill(out, out + x0, f);
      if (d.flip) {
        for (int64_t x = x0; x < x1; ++x) out[x] = row[w - 1 - x + ox];
      } else {
        std::copy(row + x0 + ox, row + x1 + ox, out + x0);
      }
      std::fill(out + x1, out + w, f);
    }
  }
}

}  // namespace lpsgd::io
