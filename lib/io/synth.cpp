#include "io/synth.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace lpsgd::io {

namespace {

constexpr uint64_t kPatternStream = 0x53594E5400000000ull;  // "SYNT": class patterns
constexpr uint64_t kSampleStream = 0x53594E5300000000ull;   // "SYNS": per-sample draws

// Separable class patterns: value(k, c, y, x) = 0.5 + 0.25 (row[k,c,y] + col[k,c,x]).
struct Patterns {
  int64_t c, h, w;
  std::vector<float> row, col;  // [K, C, H] and [K, C, W]
  Patterns(const SynthOptions& o) : c(o.c), h(o.h), w(o.w) {
    row.resize(static_cast<size_t>(o.classes * c * h));
    col.resize(static_cast<size_t>(o.classes * c * w));
    constexpr double two_pi = 6.283185307179586;
    for (int64_t k = 0; k < o.classes; ++k)
      for (int64_t ch = 0; ch < c; ++ch) {
        Rng r(o.seed, kPatternStream + static_cast<uint64_t>(k * c + ch));
        const double fy = 0.5 + 2.5 * r.uniform_double(), py = two_pi * r.uniform_double();
        const double fx = 0.5 + 2.5 * r.uniform_double(), px = two_pi * r.uniform_double();
        for (int64_t y = 0; y < h; ++y)
          row[static_cast<size_t>((k * c + ch) * h + y)] =
              static_cast<float>(std::sin(two_pi * fy * static_cast<double>(y) / static_cast<double>(h) + py));
        for (int64_t x = 0; x < w; ++x)
          col[static_cast<size_t>((k * c + ch) * w + x)] =
              static_cast<float>(std::sin(two_pi * fx * static_cast<double>(x) / static_cast<double>(w) + px));
      }
  }
};

// Four standard normals from one Philox block (Box-Muller, both outputs).
void normals4(const Rng& r, uint64_t i, float out[4]) {
  const Philox4x32 b = r.block(i);
  for (int p = 0; p < 2; ++p) {
    const float u1 = (static_cast<float>(b.v[2 * p] >> 8) + 1.0f) * (1.0f / 16777216.0f);
    const float u2 = static_cast<float>(b.v[2 * p + 1] >> 8) * (1.0f / 16777216.0f);
    const float rad = std::sqrt(-2.0f * std::log(u1));
    out[2 * p] = rad * std::cos(6.2831853f * u2);
    out[2 * p + 1] = rad * std::sin(6.2831853f * u2);
  }
}

// Fills sample `index` of split `split_id` into x (C*H*W elements) and returns its label.
template <class T>
int32_t make_sample(const SynthOptions& o, const Patterns& pat, uint64_t split_id, int64_t index,
                    T* x) {
  const Rng r(o.seed, kSampleStream + (split_id << 40) + static_cast<uint64_t>(index));
  const auto label = static_cast<int32_t>(r.block(0).v[0] % static_cast<uint32_t>(o.classes));
  const auto noise = static_cast<float>(o.noise);
  const int64_t n = o.c * o.h * o.w;
  float z[4];
  for (int64_t e = 0; e < n; ++e) {
    if (e % 4 == 0) normals4(r, 1 + static_cast<uint64_t>(e / 4), z);
    const int64_t ch = e / (o.h * o.w), y = (e / o.w) % o.h, xx = e % o.w;
    const size_t kc = static_cast<size_t>(label * o.c + ch);
    const float v = 0.5f + 0.25f * (pat.row[kc * static_cast<size_t>(o.h) + static_cast<size_t>(y)] +
                                    pat.col[kc * static_cast<size_t>(o.w) + static_cast<size_t>(xx)]) +
                    noise * z[e % 4];
    const float clamped = std::min(1.0f, std::max(0.0f, v));
    if constexpr (std::is_same_v<T, uint8_t>)
      x[e] = static_cast<uint8_t>(std::lround(clamped * 255.0f));
    else
      x[e] = clamped;
  }
  return label;
}

template <class T>
void write_split(DatasetWriter& w, const SynthOptions& o, const Patterns& pat, const char* name,
                 uint64_t split_id, int64_t n) {
  SplitShape shape{n, o.c, o.h, o.w, o.type};
  w.begin_split(name, shape);
  // Blocks of about 16 MiB, a whole number of HDF5 chunks, bound the memory.
  const int64_t chunk = DatasetWriter::chunk_rows_for(shape.sample_bytes(), n);
  const int64_t block =
      std::max<int64_t>(1, static_cast<int64_t>((size_t{16} << 20) / shape.sample_bytes()) / chunk) * chunk;
  std::vector<T> x(static_cast<size_t>(std::min(block, n) * shape.sample_elems()));
  std::vector<int32_t> y(static_cast<size_t>(std::min(block, n)));
  for (int64_t start = 0; start < n; start += block) {
    const int64_t count = std::min(block, n - start);
    for (int64_t i = 0; i < count; ++i)
      y[static_cast<size_t>(i)] =
          make_sample(o, pat, split_id, start + i, x.data() + i * shape.sample_elems());
    w.append(x.data(), y.data(), count);
  }
  w.end_split();
}

}  // namespace

void make_synthetic(const SynthOptions& o) {
  if (o.train_samples < 1) LPSGD_USAGE_ERROR("--samples must be positive, got " << o.train_samples);
  if (o.test_samples < 0) LPSGD_USAGE_ERROR("--test-samples must be >= 0, got " << o.test_samples);
  if (o.c < 1 || o.h < 1 || o.w < 1)
    LPSGD_USAGE_ERROR("--shape must be three positive sizes C,H,W, got " << o.c << "," << o.h
                                                                          << "," << o.w);
  if (o.classes < 1 || o.classes > (int64_t{1} << 31))
    LPSGD_USAGE_ERROR("--classes must be positive, got " << o.classes);
  if (!(o.noise >= 0) || !std::isfinite(o.noise))
    LPSGD_USAGE_ERROR("--noise must be non-negative, got " << o.noise);
  const Patterns pat(o);
  DatasetWriter w(o.out, o.classes, {},
                  "lpsgd synthetic: seed " + std::to_string(o.seed) + ", noise " +
                      std::to_string(o.noise),
                  o.gzip_level);
  if (o.type == SampleType::U8) {
    write_split<uint8_t>(w, o, pat, "train", 0, o.train_samples);
    if (o.test_samples > 0) write_split<uint8_t>(w, o, pat, "test", 1, o.test_samples);
  } else {
    write_split<float>(w, o, pat, "train", 0, o.train_samples);
    if (o.test_samples > 0) write_split<float>(w, o, pat, "test", 1, o.test_samples);
  }
  w.commit();
}

}  // namespace lpsgd::io
