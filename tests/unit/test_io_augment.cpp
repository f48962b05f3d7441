// Training-time augmentation (io/augment.hpp) and the Loader that applies it.
// The expected output of every augmented sample is computed here from the
// stored pixels and the sample's draw, independently of the loader's code;
// the draws are checked to be a function of (seed, epoch, index) alone.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "core/error.hpp"
#include "io/augment.hpp"
#include "io/loader.hpp"
#include "io_fixtures.hpp"

namespace lpsgd::io {
namespace {

using testing::TempDir;

void expect_usage_error(const std::function<void()>& f, const std::string& what) {
  try {
    f();
    FAIL() << "no error for " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage) << e.message();
    EXPECT_NE(e.message().find(what), std::string::npos) << e.message();
    EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
  }
}

TEST(Augment, ParsesSpecsAndRefusesBadOnes) {
  Augment a = parse_augment("crop:4,flip");
  EXPECT_TRUE(a.crop);
  EXPECT_EQ(a.pad, 4);
  EXPECT_TRUE(a.flip);
  EXPECT_EQ(augment_text(a), "crop:4,flip");
  EXPECT_EQ(parse_augment(" flip , crop:2 "), parse_augment("crop:2,flip"));
  EXPECT_EQ(augment_text(parse_augment("crop:3")), "crop:3");
  EXPECT_EQ(augment_text(parse_augment("flip")), "flip");
  EXPECT_FALSE(parse_augment("").any());
  EXPECT_FALSE(parse_augment("none").any());
  EXPECT_EQ(augment_text(parse_augment("none")), "none");
  for (const char* bad : {"crop:-1", "crop:x", "crop:", "crop", "crop:2.5", "crop:99999999999"})
    expect_usage_error([&] { parse_augment(bad); },
                       std::string("--augment '") + bad + "': '" + bad +
                           "' needs its padding as a whole number of pixels >= 0");
  expect_usage_error([] { parse_augment("blur"); },
                     "--augment 'blur': unknown augmentation 'blur' (use crop:PAD, flip or both");
  expect_usage_error([] { parse_augment("flip,flip"); }, "flip given twice");
  expect_usage_error([] { parse_augment("crop:1,crop:2"); }, "crop given twice");
  expect_usage_error([] { parse_augment("crop:1,"); }, "an empty part");
  expect_usage_error([] { parse_augment("none,flip"); }, "none goes alone");
}

TEST(Augment, NeedsImagesAndAPaddingBelowTheirSize) {
  check_augment(parse_augment("crop:4,flip"), 32, 32, "f.h5: /train");
  check_augment(parse_augment("crop:4"), 5, 6, "f.h5: /train");
  expect_usage_error([] { check_augment(parse_augment("crop:2"), 1, 784, "f.h5: /train"); },
                     "f.h5: /train: --augment crop:2 needs images, but the samples are 1x784");
  expect_usage_error([] { check_augment(parse_augment("flip"), 1, 1, "f.h5: /train"); },
                     "needs images");
  expect_usage_error([] { check_augment(parse_augment("crop:28"), 28, 28, "f.h5: /train"); },
                     "f.h5: /train: --augment crop:28 pads by at least the image size 28x28 (use a "
                     "padding below 28)");
  check_augment(parse_augment(""), 1, 1, "no augmentation: anything goes");
}

TEST(Augment, DrawsArePureFunctionsOfSeedEpochAndIndex) {
  const Augment a = parse_augment("crop:2,flip");
  std::set<int64_t> dys, dxs;
  int flips = 0, moved = 0;
  const int n = 2000;
  for (int i = 0; i < n; ++i) {
    const AugmentDraw d = augment_draw(a, 7, 3, i), again = augment_draw(a, 7, 3, i);
    EXPECT_EQ(d.dy, again.dy);
    EXPECT_EQ(d.dx, again.dx);
    EXPECT_EQ(d.flip, again.flip);
    ASSERT_GE(d.dy, 0);
    ASSERT_LE(d.dy, 4);
    ASSERT_GE(d.dx, 0);
    ASSERT_LE(d.dx, 4);
    dys.insert(d.dy);
    dxs.insert(d.dx);
    flips += d.flip;
    const AugmentDraw e = augment_draw(a, 7, 4, i), s = augment_draw(a, 8, 3, i);
    moved += (e.dy != d.dy || e.dx != d.dx || e.flip != d.flip);
    moved += (s.dy != d.dy || s.dx != d.dx || s.flip != d.flip);
  }
  EXPECT_EQ(dys.size(), 5u);
  EXPECT_EQ(dxs.size(), 5u);
  EXPECT_NEAR(flips, n / 2, 150);
  // 50 outcomes: another epoch or seed changes about 98% of the draws.
  EXPECT_GT(moved, 2 * n * 9 / 10);
  const AugmentDraw none = augment_draw(parse_augment("flip"), 7, 3, 5);
  EXPECT_EQ(none.dy, 0);
  EXPECT_EQ(none.dx, 0);
}

TEST(Augment, FlipMirrorsAndCropShiftsWithTheFill) {
  // Two channels of 3 rows x 4 columns: value 100*c + 10*y + x.
  const int64_t C = 2, H = 3, W = 4;
  std::vector<float> src(static_cast<size_t>(C * H * W)), dst(src.size());
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x) src[static_cast<size_t>((c * H + y) * W + x)] = 100.f * c + 10.f * y + x;
  const float fill[2] = {-1.f, -2.f};
  const auto at = [&](int64_t c, int64_t y, int64_t x) { return dst[static_cast<size_t>((c * H + y) * W + x)]; };

  augment_sample(parse_augment("flip"), {0, 0, true}, src.data(), dst.data(), C, H, W, fill);
  EXPECT_EQ(at(0, 0, 0), 3.f);
  EXPECT_EQ(at(0, 0, 3), 0.f);
  EXPECT_EQ(at(1, 2, 1), 122.f);
  augment_sample(parse_augment("flip"), {0, 0, false}, src.data(), dst.data(), C, H, W, fill);
  EXPECT_EQ(dst, src);

  // crop:2 at offset (dy, dx) = (2, 2) is the identity; (0, 4): the window
  // starts 2 rows above and 2 columns right of the image.
  const Augment crop = parse_augment("crop:2");
  augment_sample(crop, {2, 2, false}, src.data(), dst.data(), C, H, W, fill);
  EXPECT_EQ(dst, src);
  augment_sample(crop, {0, 4, false}, src.data(), dst.data(), C, H, W, fill);
  EXPECT_EQ(at(0, 0, 0), -1.f);  // rows 0, 1: padding
  EXPECT_EQ(at(1, 1, 3), -2.f);
  EXPECT_EQ(at(0, 2, 0), 2.f);   // row 2 = input row 0 from column 2
  EXPECT_EQ(at(0, 2, 1), 3.f);
  EXPECT_EQ(at(0, 2, 2), -1.f);  // columns 2, 3: padding
  EXPECT_EQ(at(1, 2, 1), 103.f);
  // With the flip: output column x reads input column (3 - x) + 2.
  augment_sample(parse_augment("crop:2,flip"), {3, 1, true}, src.data(), dst.data(), C, H, W, fill);
  EXPECT_EQ(at(0, 0, 0), 11.f + 1.f);  // row 0 = input row 1; x=0 -> 3-0-1 = 2
  EXPECT_EQ(at(0, 0, 3), -1.f);        // x=3 -> -1: padding
  EXPECT_EQ(at(1, 1, 0), 122.f);
  EXPECT_EQ(at(1, 2, 0), -2.f);        // input row 3: padding
}

// A dataset whose every pixel differs: v = (i*13 + c*61 + y*7 + x*3) % 251.
constexpr int64_t kC = 2, kH = 6, kW = 5;
float stored(int64_t i, int64_t c, int64_t y, int64_t x) {
  return static_cast<float>((i * 13 + c * 61 + y * 7 + x * 3) % 251);
}
void write_pixels(const std::string& path, int64_t n, SampleType type, int64_t chunk_rows = 0) {
  DatasetWriter w(path, 10, {}, "augment fixture", 0);
  for (const char* split : {"train", "test"}) {
    w.begin_split(split, SplitShape{n, kC, kH, kW, type}, chunk_rows);
    std::vector<uint8_t> u;
    std::vector<float> f;
    std::vector<int32_t> y;
    for (int64_t i = 0; i < n; ++i) {
      y.push_back(static_cast<int32_t>(i % 10));
      for (int64_t c = 0; c < kC; ++c)
        for (int64_t r = 0; r < kH; ++r)
          for (int64_t x = 0; x < kW; ++x) {
            u.push_back(static_cast<uint8_t>(stored(i, c, r, x)));
            f.push_back(stored(i, c, r, x) * 0.5f - 3.f);
          }
    }
    w.append(type == SampleType::U8 ? static_cast<const void*>(u.data()) : f.data(), y.data(), n);
    w.end_split();
  }
  w.commit();
}

// What the loader must deliver for sample i of `epoch`: computed from the
// stored values, the draw and the loader's per-channel scaling.
std::vector<float> expected(const Loader& l, int64_t i, uint64_t epoch, bool augmented) {
  const Augment& a = l.options().augment;
  const AugmentDraw d = augmented ? augment_draw(a, l.options().seed, epoch, i) : AugmentDraw{};
  const int64_t pad = augmented && a.crop ? a.pad : 0;
  const bool f32 = l.shape().type == SampleType::F32;
  std::vector<float> out;
  for (int64_t c = 0; c < kC; ++c) {
    const float sc = l.input_scale()[static_cast<size_t>(c)], sh = l.input_shift()[static_cast<size_t>(c)];
    for (int64_t y = 0; y < kH; ++y)
      for (int64_t x = 0; x < kW; ++x) {
        const int64_t sy = y + d.dy - pad, sx = (d.flip ? kW - 1 - x : x) + d.dx - pad;
        const bool in = sy >= 0 && sy < kH && sx >= 0 && sx < kW;
        const float v = in ? (f32 ? stored(i, c, sy, sx) * 0.5f - 3.f : stored(i, c, sy, sx)) : 0.f;
        out.push_back(v * sc + sh);
      }
  }
  return out;
}

LoaderOptions aug_options(const std::string& path, const std::string& spec) {
  LoaderOptions o;
  o.path = path;
  o.seed = 99;
  o.augment = parse_augment(spec);
  return o;
}

// Every sample of one epoch, by index, checked against expected().
std::map<int64_t, std::vector<float>> one_epoch(LoaderOptions base, int world, int64_t batch,
                                                uint64_t epoch = 0) {
  std::map<int64_t, std::vector<float>> out;
  for (int r = 0; r < world; ++r) {
    LoaderOptions o = base;
    o.rank = r;
    o.world = world;
    o.batch = batch;
    o.prefetch = r % 2 == 0 ? 2 : 0;
    Loader l(o);
    EXPECT_TRUE(l.augmenting());
    if (epoch > 0) l.restore({epoch, 0});
    Batch b;
    const int64_t e = l.shape().sample_elems();
    while (l.next(b)) {
      EXPECT_EQ(b.epoch, epoch);
      for (int64_t j = 0; j < b.size; ++j) {
        const int64_t i = b.index[static_cast<size_t>(j)];
        std::vector<float> got(b.x.begin() + j * e, b.x.begin() + (j + 1) * e);
        const std::vector<float> want = expected(l, i, epoch, true);
        for (size_t k = 0; k < got.size(); ++k)
          EXPECT_NEAR(got[k], want[k], 1e-5f * (1.f + std::fabs(want[k])))
              << "sample " << i << " element " << k;
        EXPECT_TRUE(out.emplace(i, std::move(got)).second) << "sample " << i << " twice";
      }
    }
  }
  return out;
}

TEST(LoaderAugment, EachSampleTheSameWhateverRanksBatchAndMode) {
  TempDir dir;
  for (SampleType type : {SampleType::U8, SampleType::F32}) {
    SCOPED_TRACE(sample_type_name(type));
    const std::string path = dir / (type == SampleType::U8 ? "u8.h5" : "f32.h5");
    write_pixels(path, 60, type, /*chunk_rows=*/7);
    const LoaderOptions base = aug_options(path, "crop:2,flip");
    const auto p1 = one_epoch(base, 1, 10);
    ASSERT_EQ(p1.size(), 60u);
    EXPECT_EQ(one_epoch(base, 2, 6), p1);
    EXPECT_EQ(one_epoch(base, 3, 4), p1);
    LoaderOptions streaming = base;
    streaming.cache_mb = 0;  // another order, the same per-sample draws
    EXPECT_EQ(one_epoch(streaming, 2, 5), p1);
    // Another epoch draws again: most samples change.
    const auto e1 = one_epoch(base, 2, 6, 1);
    int changed = 0;
    for (const auto& [i, x] : e1) changed += x != p1.at(i);
    EXPECT_GT(changed, 50);
    // Padding is visible: some sample has a pixel equal to a channel's shift.
    LoaderOptions small = base;
    small.batch = 10;
    Loader l(small);
    bool padded = false;
    for (const auto& [i, x] : p1)
      for (size_t k = 0; k < x.size(); ++k)
        padded = padded || x[k] == l.input_shift()[k / static_cast<size_t>(kH * kW)];
    EXPECT_TRUE(padded);
  }
}

TEST(LoaderAugment, FlipAloneMirrorsExactly) {
  TempDir dir;
  const std::string path = dir / "d.h5";
  write_pixels(path, 40, SampleType::U8);
  LoaderOptions o = aug_options(path, "flip");
  o.batch = 40;
  Loader l(o), plain([&] {
    LoaderOptions p = o;
    p.augment = {};
    return p;
  }());
  Batch b, q;
  ASSERT_TRUE(l.next(b));
  ASSERT_TRUE(plain.next(q));
  ASSERT_EQ(b.index, q.index);
  int flipped = 0;
  for (int64_t j = 0; j < b.size; ++j) {
    const bool f = augment_draw(o.augment, o.seed, 0, b.index[static_cast<size_t>(j)]).flip;
    flipped += f;
    for (int64_t c = 0; c < kC; ++c)
      for (int64_t y = 0; y < kH; ++y)
        for (int64_t x = 0; x < kW; ++x) {
          const size_t base = static_cast<size_t>(j * kC * kH * kW + (c * kH + y) * kW);
          ASSERT_EQ(b.x[base + static_cast<size_t>(x)],
                    q.x[base + static_cast<size_t>(f ? kW - 1 - x : x)]);
        }
  }
  EXPECT_GT(flipped, 5);
  EXPECT_LT(flipped, 35);
}

TEST(LoaderAugment, RestoreContinuesWithTheSameDraws) {
  TempDir dir;
  const std::string path = dir / "d.h5";
  write_pixels(path, 48, SampleType::U8);
  LoaderOptions o = aug_options(path, "crop:3,flip");
  o.batch = 8;
  Loader a(o);
  Batch b;
  for (int k = 0; k < 6 + 2; ++k)  // epoch 0 (6 batches + the end), 1 batch of epoch 1
    a.next(b);
  const LoaderState s = a.state();
  EXPECT_EQ(s.epoch, 1u);
  std::vector<Batch> rest;
  while (a.next(b)) rest.push_back(b);
  for (int prefetch : {0, 2}) {
    LoaderOptions r = o;
    r.prefetch = prefetch;
    Loader resumed(r);
    resumed.restore(s);
    for (const Batch& want : rest) {
      ASSERT_TRUE(resumed.next(b));
      EXPECT_EQ(b.index, want.index);
      EXPECT_EQ(b.x, want.x);  // bitwise
    }
    EXPECT_FALSE(resumed.next(b));
  }
}

TEST(LoaderAugment, EvaluationIsNeverAugmented) {
  TempDir dir;
  const std::string path = dir / "d.h5";
  write_pixels(path, 30, SampleType::U8);
  for (const char* split : {"train", "test"}) {
    LoaderOptions o = aug_options(path, "crop:2,flip");
    o.split = split;
    o.batch = 7;
    o.shuffle = false;
    o.coverage = Coverage::All;  // what the trainer's test loader is
    Loader l(o);
    EXPECT_FALSE(l.augmenting());
    Batch b;
    int64_t seen = 0;
    while (l.next(b))
      for (int64_t j = 0; j < b.size; ++j, ++seen) {
        const std::vector<float> want = expected(l, b.index[static_cast<size_t>(j)], 0, false);
        for (size_t k = 0; k < want.size(); ++k)
          ASSERT_NEAR(b.x[static_cast<size_t>(j) * want.size() + k], want[k], 1e-5f);
      }
    EXPECT_EQ(seen, 30);
  }
}

TEST(LoaderAugment, NonImageDataIsAUsageError) {
  TempDir dir;
  const std::string path = dir / "v.h5";
  testing::write_index_dataset(path, 20, 0, SampleType::F32, 10, 0, 1, 1, 16);  // [N,1,1,16]
  LoaderOptions o = aug_options(path, "crop:2");
  o.batch = 4;
  expect_usage_error([&] { Loader l(o); },
                     "v.h5: /train: --augment crop:2 needs images, but the samples are 1x16");
  o.augment = parse_augment("");
  Loader fine(o);
  EXPECT_FALSE(fine.augmenting());
  const std::string img = dir / "i.h5";
  write_pixels(img, 20, SampleType::U8);
  LoaderOptions big = aug_options(img, "crop:5");
  big.batch = 4;
  expect_usage_error([&] { Loader l(big); }, "pads by at least the image size 6x5");
}

}  // namespace
}  // namespace lpsgd::io
