// Dataset files: IDX reading and import (Fashion-MNIST when installed, a
// fixture otherwise), synthetic data, the writer's atomicity.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <iostream>
#include <map>

#include "core/error.hpp"
#include "io/dataset.hpp"
#include "io/idx.hpp"
#include "io/synth.hpp"
#include "io_fixtures.hpp"

namespace lpsgd::io {
namespace {

using testing::TempDir;
using testing::write_idx;

std::vector<uint8_t> ramp(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 7) % 256);
  return v;
}

void expect_usage_error(const std::function<void()>& f, const std::string& file,
                        const std::string& what) {
  try {
    f();
    FAIL() << "no error for " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage) << e.message();
    EXPECT_NE(e.message().find(file), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(what), std::string::npos) << e.message();
  }
}

TEST(Idx, ReadsPlainAndGzipped) {
  TempDir dir;
  const std::vector<uint8_t> data = ramp(5 * 3 * 4);
  for (bool gz : {false, true}) {
    const std::string path = dir / (gz ? "a.idx.gz" : "a.idx");
    write_idx(path, {5, 3, 4}, data, gz);
    const IdxArray a = read_idx_u8(path, 3);
    EXPECT_EQ(a.dims, (std::vector<uint32_t>{5, 3, 4}));
    EXPECT_EQ(a.data, data);
  }
}

TEST(Idx, BadFilesAreUsageErrors) {
  TempDir dir;
  const std::vector<uint8_t> data = ramp(5 * 3 * 4);
  for (bool gz : {false, true}) {
    SCOPED_TRACE(gz ? "gzipped" : "plain");
    const std::string p = dir / (gz ? "t.gz" : "t");
    write_idx(p, {5, 3, 4}, data, gz, 0, 3);
    expect_usage_error([&] { read_idx_u8(p, 3); }, p, "truncated IDX file (57 of 60");
    write_idx(p, {5, 3, 4}, data, gz, 0, data.size() + 6);  // cut inside the sizes
    expect_usage_error([&] { read_idx_u8(p, 3); }, p, "header ends inside the dimensions");
    write_idx(p, {5, 3, 4}, data, gz, 0x00000801);
    expect_usage_error([&] { read_idx_u8(p, 3); }, p, "wrong magic 0x00000801, expected 0x00000803");
    write_idx(p, {5, 3, 4}, data, gz, 0x12340803);
    expect_usage_error([&] { read_idx_u8(p, 3); }, p, "wrong magic");
    write_idx(p, {4, 3, 4}, data, gz);  // 12 bytes more than the header says
    expect_usage_error([&] { read_idx_u8(p, 3); }, p, "longer than its header says");
  }
  expect_usage_error([&] { read_idx_u8(dir / "none", 1); }, dir / "none", "no such file");
  // A gzip stream cut short (not just short data inside it).
  const std::string whole = dir / "w.gz", cut = dir / "cut.gz";
  write_idx(whole, {5, 3, 4}, ramp(60), true);
  std::filesystem::copy_file(whole, cut);
  std::filesystem::resize_file(cut, std::filesystem::file_size(whole) - 10);
  expect_usage_error([&] { read_idx_u8(cut, 3); }, cut, "truncated");
}

// Imports four IDX files and checks what the dataset says about them.
struct Expect {
  int64_t train, test, h, w, per_class_train;
};

void check_import(const IdxImport& opt, const Expect& want) {
  import_idx(opt);
  const Split tr = open_split(opt.out, "train"), te = open_split(opt.out, "test");
  EXPECT_EQ(tr.shape.n, want.train);
  EXPECT_EQ(te.shape.n, want.test);
  for (const Split* s : {&tr, &te}) {
    EXPECT_EQ(s->shape.c, 1);
    EXPECT_EQ(s->shape.h, want.h);
    EXPECT_EQ(s->shape.w, want.w);
    EXPECT_EQ(s->shape.type, SampleType::U8);
  }
  EXPECT_EQ(tr.attrs.num_classes, 10);
  EXPECT_EQ(tr.attrs.class_names, opt.class_names);
  std::map<int32_t, int64_t> counts;
  for (int32_t y : tr.y) ++counts[y];
  ASSERT_EQ(counts.size(), 10u);
  for (const auto& [label, count] : counts) {
    EXPECT_GE(label, 0);
    EXPECT_LE(label, 9);
    EXPECT_EQ(count, want.per_class_train) << "class " << label;
  }
  // Pixels and labels are those of the IDX files.
  const IdxArray img = read_idx_u8(opt.test_images, 3), lab = read_idx_u8(opt.test_labels, 1);
  std::vector<uint8_t> x(img.data.size());
  te.x->read_rows(0, static_cast<hsize_t>(te.shape.n), h5::Type::U8, x.data());
  EXPECT_EQ(x, img.data);
  EXPECT_EQ(std::vector<int32_t>(lab.data.begin(), lab.data.end()), te.y);
  EXPECT_GT(tr.attrs.mean[0], 0.0);
  EXPECT_GT(tr.attrs.std[0], 0.0);
}

const std::vector<std::string> kFashionNames = {"T-shirt/top", "Trouser", "Pullover", "Dress",
                                                "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                                                "Ankle boot"};

TEST(ImportIdx, FashionMnistOrAFixture) {
  TempDir dir;
  const std::string real = "/usr/share/datasets/fashion-mnist/";
  IdxImport opt;
  opt.class_names = kFashionNames;
  opt.out = dir / "fm.h5";
  if (std::filesystem::exists(real + "train-images-idx3-ubyte.gz")) {
    opt.train_images = real + "train-images-idx3-ubyte.gz";
    opt.train_labels = real + "train-labels-idx1-ubyte.gz";
    opt.test_images = real + "t10k-images-idx3-ubyte.gz";
    opt.test_labels = real + "t10k-labels-idx1-ubyte.gz";
    check_import(opt, {60000, 10000, 28, 28, 6000});
    const Split tr = open_split(opt.out, "train");
    EXPECT_NEAR(tr.attrs.mean[0], 0.2860, 1e-3);  // the known Fashion-MNIST statistics
    EXPECT_NEAR(tr.attrs.std[0], 0.3530, 1e-3);
  } else {
    std::cout << "[ NOTE ] Fashion-MNIST not installed: importing a fixture\n";
  }
  // A fixture shaped like Fashion-MNIST, small, with gzipped and plain files mixed.
  std::vector<uint8_t> ytr(600), yte(100);
  for (size_t i = 0; i < ytr.size(); ++i) ytr[i] = static_cast<uint8_t>((i * 3) % 10);
  for (size_t i = 0; i < yte.size(); ++i) yte[i] = static_cast<uint8_t>(i % 10);
  write_idx(opt.train_images = dir / "tri.gz", {600, 28, 28}, ramp(600 * 784), true);
  write_idx(opt.train_labels = dir / "trl", {600}, ytr, false);
  write_idx(opt.test_images = dir / "tei", {100, 28, 28}, ramp(100 * 784), false);
  write_idx(opt.test_labels = dir / "tel.gz", {100}, yte, true);
  opt.out = dir / "fixture.h5";
  check_import(opt, {600, 100, 28, 28, 60});
}

TEST(ImportIdx, MismatchesAndBadLabelsAreUsageErrors) {
  TempDir dir;
  IdxImport opt;
  write_idx(opt.train_images = dir / "tri", {6, 2, 2}, ramp(24), false);
  write_idx(opt.train_labels = dir / "trl", {6}, {0, 1, 2, 0, 1, 2}, false);
  write_idx(opt.test_images = dir / "tei", {2, 2, 2}, ramp(8), false);
  write_idx(opt.test_labels = dir / "tel", {3}, {0, 1, 2}, false);
  opt.out = dir / "o.h5";
  expect_usage_error([&] { import_idx(opt); }, dir / "tel", "3 labels but");
  write_idx(opt.test_labels, {2}, {0, 2}, false);
  opt.class_names = {"a", "b"};
  expect_usage_error([&] { import_idx(opt); }, dir / "trl", "label 2 at index 2 out of range [0, 2)");
  EXPECT_FALSE(std::filesystem::exists(opt.out));
  opt.class_names.clear();  // classes = largest label + 1
  EXPECT_EQ(import_idx(opt), 3);
  // Images of another size in the test split.
  write_idx(opt.test_images, {2, 2, 3}, ramp(12), false);
  expect_usage_error([&] { import_idx(opt); }, dir / "tei", "images are 2x3");
}

TEST(DatasetWriter, LeavesNothingWithoutCommit) {
  TempDir dir;
  {
    DatasetWriter w(dir / "x.h5", 2, {}, "", 0);
    w.begin_split("train", SplitShape{4, 1, 1, 1, SampleType::U8});
    const uint8_t x[2] = {1, 2};
    const int32_t y[2] = {0, 1};
    w.append(x, y, 2);
  }  // abandoned half-way, as an exception would
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

std::vector<uint8_t> read_x(const Split& s) {
  std::vector<uint8_t> x(static_cast<size_t>(s.shape.n) * s.shape.sample_bytes());
  s.x->read_rows(0, static_cast<hsize_t>(s.shape.n), h5::Type::U8, x.data());
  return x;
}

TEST(Synth, DeterministicPerSampleAndLearnable) {
  TempDir dir;
  SynthOptions o;
  o.c = 2;
  o.h = 6;
  o.w = 5;
  o.classes = 4;
  o.seed = 7;
  o.train_samples = 400;
  o.test_samples = 200;
  o.out = dir / "a.h5";
  make_synthetic(o);
  o.out = dir / "b.h5";
  o.train_samples = 50;  // sample i depends on (seed, split, i) only
  make_synthetic(o);
  o.out = dir / "c.h5";
  o.seed = 8;
  make_synthetic(o);

  const Split a = open_split(dir / "a.h5", "train"), b = open_split(dir / "b.h5", "train"),
              c = open_split(dir / "c.h5", "train"), at = open_split(dir / "a.h5", "test");
  EXPECT_EQ(a.shape.n, 400);
  EXPECT_EQ(at.shape.n, 200);
  EXPECT_EQ(a.shape.c, 2);
  EXPECT_EQ(a.attrs.num_classes, 4);
  const std::vector<uint8_t> xa = read_x(a), xb = read_x(b), xc = read_x(c);
  EXPECT_TRUE(std::equal(xb.begin(), xb.end(), xa.begin()));
  EXPECT_EQ(std::vector<int32_t>(a.y.begin(), a.y.begin() + 50), b.y);
  EXPECT_NE(std::vector<uint8_t>(xc.begin(), xc.begin() + static_cast<long>(xb.size())), xb);
  std::vector<int64_t> counts(4, 0);
  for (int32_t y : a.y) ++counts[static_cast<size_t>(y)];
  for (int64_t n : counts) EXPECT_GT(n, 60);  // about 100 each

  // Learnable: nearest class mean (from train) classifies test well.
  const auto e = static_cast<size_t>(a.shape.sample_elems());
  std::vector<double> mean(4 * e, 0.0);
  for (size_t i = 0; i < a.y.size(); ++i)
    for (size_t k = 0; k < e; ++k)
      mean[static_cast<size_t>(a.y[i]) * e + k] += xa[i * e + k] / static_cast<double>(counts[static_cast<size_t>(a.y[i])]);
  const std::vector<uint8_t> xt = read_x(at);
  int correct = 0;
  for (size_t i = 0; i < at.y.size(); ++i) {
    int best = -1;
    double best_d = 1e300;
    for (int k = 0; k < 4; ++k) {
      double d = 0;
      for (size_t j = 0; j < e; ++j) {
        const double diff = xt[i * e + j] - mean[static_cast<size_t>(k) * e + j];
        d += diff * diff;
      }
      if (d < best_d) best_d = d, best = k;
    }
    correct += best == at.y[i];
  }
  EXPECT_GT(correct, 180) << "nearest-mean accuracy " << correct << "/200";
}

TEST(Synth, StreamsSeveralBlocks) {
  TempDir dir;
  SynthOptions o;
  o.c = 1;
  o.h = 32;
  o.w = 32;
  o.train_samples = 20000;  // 1 KiB samples: 16 MiB blocks hold 16384
  o.out = dir / "big.h5";
  make_synthetic(o);
  o.train_samples = 100;
  o.out = dir / "small.h5";
  make_synthetic(o);
  const Split big = open_split(dir / "big.h5", "train"), small = open_split(dir / "small.h5", "train");
  EXPECT_EQ(big.shape.n, 20000);
  EXPECT_EQ(std::vector<int32_t>(big.y.begin(), big.y.begin() + 100), small.y);
  EXPECT_NE(big.y[19999], -1);  // every label written (open_split checked their range)
  EXPECT_NEAR(big.attrs.mean[0], small.attrs.mean[0], 0.02);
}

TEST(Synth, BadOptionsAreUsageErrors) {
  SynthOptions o;
  o.out = "/nonexistent-dir/x.h5";
  o.train_samples = 0;
  EXPECT_THROW(make_synthetic(o), Error);
  o.train_samples = 10;
  o.c = 0;
  EXPECT_THROW(make_synthetic(o), Error);
  o.c = 1;
  expect_usage_error([&] { make_synthetic(o); }, o.out, "cannot create");
}

}  // namespace
}  // namespace lpsgd::io
