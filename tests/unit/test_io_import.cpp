// Importers beside IDX: CIFAR-10/100 binary files and NumPy arrays. The files
// are written here byte by byte (.npy headers as NumPy writes them); .npz
// archives from NumPy itself are tested end to end (tests/e2e/data.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>

#include "core/error.hpp"
#include "io/cifar.hpp"
#include "io/dataset.hpp"
#include "io/npz.hpp"
#include "io_fixtures.hpp"

namespace lpsgd::io {
namespace {

using testing::TempDir;

void expect_usage_error(const std::function<void()>& f, const std::string& file,
                        const std::string& what) {
  try {
    f();
    FAIL() << "no error for " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage) << e.message();
    EXPECT_NE(e.message().find(file), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(what), std::string::npos) << e.message();
    EXPECT_EQ(e.message().find('\n'), std::string::npos) << "not one line: " << e.message();
  }
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// x and y of one split as written, read back through the dataset reader.
struct ReadBack {
  SplitShape shape;
  std::vector<uint8_t> u8;
  std::vector<float> f32;
  std::vector<int32_t> y;
  DatasetAttrs attrs;
};
ReadBack read_back(const std::string& path, const std::string& split) {
  const Split s = open_split(path, split);
  ReadBack r;
  r.shape = s.shape;
  r.y = s.y;
  r.attrs = s.attrs;
  const auto n = static_cast<size_t>(s.shape.n * s.shape.sample_elems());
  if (s.shape.type == SampleType::U8) {
    r.u8.resize(n);
    s.x->read_rows(0, static_cast<hsize_t>(s.shape.n), h5::Type::U8, r.u8.data());
  } else {
    r.f32.resize(n);
    s.x->read_rows(0, static_cast<hsize_t>(s.shape.n), h5::Type::F32, r.f32.data());
  }
  return r;
}

// ---- CIFAR ------------------------------------------------------------------------

// A record's pixel (channel c, row y, column x) of record `i` of file `f`.
uint8_t cifar_pixel(int f, int64_t i, int c, int y, int x) {
  return static_cast<uint8_t>((f * 101 + i * 37 + c * 59 + y * 7 + x * 3) % 256);
}

// n records; label bytes given per record.
std::vector<uint8_t> cifar_file(int f, const std::vector<std::vector<uint8_t>>& labels) {
  std::vector<uint8_t> b;
  for (size_t i = 0; i < labels.size(); ++i) {
    b.insert(b.end(), labels[i].begin(), labels[i].end());
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) b.push_back(cifar_pixel(f, static_cast<int64_t>(i), c, y, x));
  }
  return b;
}

TEST(Cifar, Cifar10RecordsLandInOrderWithNamesAndStats) {
  TempDir dir;
  write_bytes(dir / "data_batch_1.bin", cifar_file(1, {{3}, {9}, {0}}));
  write_bytes(dir / "data_batch_2.bin", cifar_file(2, {{7}, {1}}));
  write_bytes(dir / "test_batch.bin", cifar_file(3, {{5}, {6}}));
  CifarImport opt;
  opt.format = CifarFormat::Cifar10;
  opt.train = {dir / "data_batch_1.bin", dir / "data_batch_2.bin"};
  opt.test = {dir / "test_batch.bin"};
  opt.out = dir / "c10.h5";
  EXPECT_EQ(import_cifar(opt), 7);
  const ReadBack tr = read_back(opt.out, "train"), te = read_back(opt.out, "test");
  EXPECT_EQ(tr.shape.n, 5);
  EXPECT_EQ(tr.shape.c, 3);
  EXPECT_EQ(tr.shape.h, 32);
  EXPECT_EQ(tr.shape.w, 32);
  EXPECT_EQ(tr.y, (std::vector<int32_t>{3, 9, 0, 7, 1}));
  EXPECT_EQ(te.y, (std::vector<int32_t>{5, 6}));
  // Sample 3 is file 2's record 0; its green plane at row 4, column 17:
  EXPECT_EQ(tr.u8[((3 * 3 + 1) * 32 + 4) * 32 + 17], cifar_pixel(2, 0, 1, 4, 17));
  for (int64_t s = 0; s < 5; ++s)
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; y += 5)
        for (int x = 0; x < 32; x += 3) {
          const int f = s < 3 ? 1 : 2;
          const int64_t i = s < 3 ? s : s - 3;
          ASSERT_EQ(tr.u8[static_cast<size_t>(((s * 3 + c) * 32 + y) * 32 + x)],
                    cifar_pixel(f, i, c, y, x)) << s << " " << c << " " << y << " " << x;
        }
  EXPECT_EQ(te.u8[((1 * 3 + 2) * 32 + 31) * 32 + 0], cifar_pixel(3, 1, 2, 31, 0));
  EXPECT_EQ(tr.attrs.num_classes, 10);
  EXPECT_EQ(tr.attrs.class_names, cifar10_class_names());
  EXPECT_EQ(tr.attrs.class_names.front(), "airplane");
  ASSERT_EQ(tr.attrs.mean.size(), 3u);
  ASSERT_EQ(tr.attrs.std.size(), 3u);
  // The red plane's mean over the train split, as the writer computes it.
  double sum = 0;
  for (int64_t s = 0; s < 5; ++s)
    for (int k = 0; k < 1024; ++k) sum += tr.u8[static_cast<size_t>(s * 3072 + k)] / 255.0;
  EXPECT_NEAR(tr.attrs.mean[0], sum / (5 * 1024), 1e-9);
}

TEST(Cifar, Cifar100FineOrCoarseAndNamesFromAFile) {
  TempDir dir;
  write_bytes(dir / "train.bin", cifar_file(1, {{4, 30}, {19, 99}, {0, 0}}));
  std::ofstream(dir / "coarse.txt") << "c0\r\nc1\n\n";
  CifarImport opt;
  opt.format = CifarFormat::Cifar100;
  opt.train = {dir / "train.bin"};
  opt.out = dir / "fine.h5";
  import_cifar(opt);
  ReadBack r = read_back(opt.out, "train");
  EXPECT_EQ(r.y, (std::vector<int32_t>{30, 99, 0}));
  EXPECT_EQ(r.attrs.num_classes, 100);
  EXPECT_TRUE(r.attrs.class_names.empty());
  EXPECT_EQ(r.u8[3072 + 5], cifar_pixel(1, 1, 0, 0, 5));  // label bytes skipped
  EXPECT_THROW(open_split(opt.out, "test"), Error);         // no --test: no test split

  opt.coarse = true;
  opt.out = dir / "coarse.h5";
  std::vector<std::string> names(20);
  for (int k = 0; k < 20; ++k) names[static_cast<size_t>(k)] = "super" + std::to_string(k);
  opt.class_names = names;
  import_cifar(opt);
  r = read_back(opt.out, "train");
  EXPECT_EQ(r.y, (std::vector<int32_t>{4, 19, 0}));
  EXPECT_EQ(r.attrs.num_classes, 20);
  EXPECT_EQ(r.attrs.class_names, names);

  EXPECT_EQ(read_class_names(dir / "coarse.txt"), (std::vector<std::string>{"c0", "c1"}));
  opt.class_names = read_class_names(dir / "coarse.txt");
  opt.names_from = dir / "coarse.txt";
  expect_usage_error([&] { import_cifar(opt); }, "coarse.txt",
                     "2 class names, but CIFAR-100 coarse labels have 20 classes");
}

TEST(Cifar, GzippedFilesReadLikePlainOnes) {
  TempDir dir;
  const std::vector<uint8_t> b = cifar_file(4, {{2}, {8}});
  gzFile f = gzopen((dir / "b.bin.gz").c_str(), "wb");
  ASSERT_TRUE(f != nullptr);
  gzwrite(f, b.data(), static_cast<unsigned>(b.size()));
  gzclose(f);
  const CifarRecords r = read_cifar(dir / "b.bin.gz", CifarFormat::Cifar10, false);
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.y, (std::vector<int32_t>{2, 8}));
  EXPECT_EQ(r.x[3072 + 100], cifar_pixel(4, 1, 0, 3, 4));
}

TEST(Cifar, LyingFilesAreOneLineUsageErrors) {
  TempDir dir;
  const std::string p = dir / "bad.bin";
  std::vector<uint8_t> b = cifar_file(1, {{1}, {2}, {3}});
  b.resize(b.size() - 5);
  write_bytes(p, b);
  expect_usage_error([&] { read_cifar(p, CifarFormat::Cifar10, false); }, p,
                     "9214 bytes is not a whole number of CIFAR-10 records of 3073 bytes (2 "
                     "records and 3068 bytes over); the file is truncated");
  write_bytes(p, cifar_file(1, {{1}, {10}}));
  expect_usage_error([&] { read_cifar(p, CifarFormat::Cifar10, false); }, p,
                     "record 1 has label 10, out of range [0, 10) for CIFAR-10");
  write_bytes(p, cifar_file(1, {{1, 5}, {20, 5}}));
  expect_usage_error([&] { read_cifar(p, CifarFormat::Cifar100, false); }, p,
                     "record 1 has coarse label 20, out of range [0, 20)");
  write_bytes(p, cifar_file(1, {{1, 5}, {2, 100}}));
  expect_usage_error([&] { read_cifar(p, CifarFormat::Cifar100, true); }, p,
                     "record 1 has fine label 100, out of range [0, 100)");
  // A CIFAR-100 file read as CIFAR-10 (2 x 3074 = 6148 bytes, not 3073 x k).
  write_bytes(p, cifar_file(1, {{1, 5}, {2, 7}}));
  expect_usage_error([&] { read_cifar(p, CifarFormat::Cifar10, false); }, p,
                     "a whole number of CIFAR-100 records: use --format cifar100");
  write_bytes(p, {});
  expect_usage_error([&] { read_cifar(p, CifarFormat::Cifar10, false); }, p, "empty file");
  expect_usage_error([&] { read_cifar(dir / "nosuch.bin", CifarFormat::Cifar10, false); },
                     "nosuch.bin", "no such file");
  // An import that fails leaves no output behind.
  CifarImport opt;
  opt.train = {p};
  opt.out = dir / "out.h5";
  EXPECT_THROW(import_cifar(opt), Error);
  EXPECT_FALSE(std::filesystem::exists(opt.out));
  expect_usage_error([] { parse_cifar_format("cifar1000"); }, "cifar1000",
                     "--format must be cifar10 or cifar100");
}

// ---- .npy ---------------------------------------------------------------------------

// A .npy image as NumPy writes it: magic, version, header padded with
// spaces to a multiple of 64 bytes ending in '\n', then `data`.
std::vector<uint8_t> npy(const std::string& descr, const std::string& shape,
                         const std::vector<uint8_t>& data, const std::string& fortran = "False",
                         int major = 1) {
  std::string h = "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape +
                  ", }";
  const size_t pre = major == 1 ? 10 : 12;
  while ((pre + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  std::vector<uint8_t> b = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  const size_t len = h.size();
  b.push_back(static_cast<uint8_t>(len));
  b.push_back(static_cast<uint8_t>(len >> 8));
  if (major != 1) {
    b.push_back(static_cast<uint8_t>(len >> 16));
    b.push_back(static_cast<uint8_t>(len >> 24));
  }
  b.insert(b.end(), h.begin(), h.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

template <class T>
std::vector<uint8_t> raw(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

NpyArray parse(const std::vector<uint8_t>& b, const std::string& where = "t.npy") {
  return parse_npy(b.data(), b.size(), where);
}

TEST(Npy, ReadsHeaderShapeTypeAndData) {
  const NpyArray a = parse(npy("|u1", "(2, 3)", {1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(a.kind, 'u');
  EXPECT_EQ(a.itemsize, 1);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.data, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(a.shape_text(), "(2, 3)");

  const NpyArray y = parse(npy("<i8", "(3,)", raw(std::vector<int64_t>{7, -1, 1LL << 40})));
  EXPECT_EQ(y.shape_text(), "(3,)");
  EXPECT_EQ(y.int_at(0), 7);
  EXPECT_EQ(y.int_at(1), -1);
  EXPECT_EQ(y.int_at(2), 1LL << 40);
  // Big-endian int32 {1, 258} and version 2.0.
  const NpyArray be = parse(npy(">i4", "(2,)", {0, 0, 0, 1, 0, 0, 1, 2}, "False", 2));
  EXPECT_EQ(be.int_at(0), 1);
  EXPECT_EQ(be.int_at(1), 258);
  // Python 2's long dimensions, double quotes, a uint8 label array.
  std::vector<uint8_t> b = npy("|u1", "(2L,)", {250, 3});
  const NpyArray u = parse(b);
  EXPECT_EQ(u.int_at(0), 250);
  const NpyArray f = parse(npy("<f4", "(1, 2)", raw(std::vector<float>{1.5f, -2.0f})));
  EXPECT_EQ(f.kind, 'f');
  EXPECT_EQ(f.count(), 2);
}

TEST(Npy, LyingHeadersAreOneLineUsageErrors) {
  const std::vector<uint8_t> six = {1, 2, 3, 4, 5, 6};
  std::vector<uint8_t> b = npy("|u1", "(2, 3)", six);
  b[1] = 'X';
  expect_usage_error([&] { parse(b); }, "t.npy", "not a .npy array (no \\x93NUMPY magic)");
  b = npy("|u1", "(2, 3)", six);
  b.resize(9);
  expect_usage_error([&] { parse(b); }, "t.npy", "truncated .npy (no complete header)");
  b = npy("|u1", "(2, 3)", six);
  b.resize(40);
  expect_usage_error([&] { parse(b); }, "t.npy", "truncated .npy (the header of 118 bytes ends");
  expect_usage_error([&] { parse(npy("|u1", "(2, 3)", {1, 2, 3, 4, 5})); }, "t.npy",
                     "the header says shape (2, 3) of |u1 (6 bytes of data) but 5 bytes follow; "
                     "the array is truncated");
  expect_usage_error([&] { parse(npy("<i4", "(2,)", std::vector<uint8_t>(12))); }, "t.npy",
                     "(8 bytes of data) but 12 bytes follow; the array is longer than its header says");
  expect_usage_error([&] { parse(npy("|u1", "(2, 3)", six, "True")); }, "t.npy",
                     "stored in Fortran order");
  expect_usage_error([&] { parse(npy("<c8", "(1,)", std::vector<uint8_t>(8))); }, "t.npy",
                     "unsupported dtype '<c8'");
  expect_usage_error([&] { parse(npy("<U3", "(1,)", std::vector<uint8_t>(12))); }, "t.npy",
                     "unsupported dtype '<U3'");
  expect_usage_error([&] { parse(npy("|O", "(1,)", std::vector<uint8_t>(8))); }, "t.npy",
                     "unsupported dtype '|O'");
  b = npy("|u1", "(2, 3)", six, "False", 4);
  expect_usage_error([&] { parse(b); }, "t.npy", "unsupported .npy format version 4.0");
  // A structured dtype and a header that is not the dict.
  std::string h = "{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (1,), }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  b = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<uint8_t>(h.size()), 0};
  b.insert(b.end(), h.begin(), h.end());
  expect_usage_error([&] { parse(b); }, "t.npy", "structured (record) type");
  expect_usage_error([&] { parse(npy("|u1", "(2, x)", six)); }, "t.npy",
                     "malformed .npy header (shape holds a non-integer)");
  expect_usage_error([&] { parse(npy("|u1", "(99999999999, 99999999999)", six)); }, "t.npy",
                     "implausible shape");
}

// ---- import ----------------------------------------------------------------------------

uint8_t px(int64_t n, int64_t c, int64_t y, int64_t x) {
  return static_cast<uint8_t>((n * 41 + c * 67 + y * 11 + x) % 256);
}

TEST(NpzImport, NhwcIsTransposedToNchw) {
  TempDir dir;
  const int64_t N = 4, H = 5, W = 6, C = 3;
  std::vector<uint8_t> x;  // [N,H,W,C]
  for (int64_t n = 0; n < N; ++n)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t xx = 0; xx < W; ++xx)
        for (int64_t c = 0; c < C; ++c) x.push_back(px(n, c, y, xx));
  write_bytes(dir / "x.npy", npy("|u1", "(4, 5, 6, 3)", x));
  write_bytes(dir / "y.npy", npy("<i8", "(4,)", raw(std::vector<int64_t>{2, 0, 1, 2})));
  NpzImport opt;
  opt.train_x = dir / "x.npy";
  opt.train_y = dir / "y.npy";
  opt.out = dir / "o.h5";
  const NpzImportResult res = import_npz(opt);  // auto: the last dimension is 3
  EXPECT_EQ(res.layout, NpzLayout::NHWC);
  EXPECT_EQ(res.classes, 3);
  const ReadBack r = read_back(opt.out, "train");
  ASSERT_EQ(r.shape.n, N);
  EXPECT_EQ(r.shape.c, C);
  EXPECT_EQ(r.shape.h, H);
  EXPECT_EQ(r.shape.w, W);
  EXPECT_EQ(r.y, (std::vector<int32_t>{2, 0, 1, 2}));
  EXPECT_EQ(r.u8[((2 * C + 1) * H + 3) * W + 4], px(2, 1, 3, 4));  // [2,1,3,4]
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < H; ++y)
        for (int64_t xx = 0; xx < W; ++xx)
          ASSERT_EQ(r.u8[static_cast<size_t>(((n * C + c) * H + y) * W + xx)], px(n, c, y, xx));

  // The same bytes said to be NCHW [4,5,6,3]: stored as they are.
  opt.layout = NpzLayout::NCHW;
  opt.out = dir / "o2.h5";
  import_npz(opt);
  const ReadBack r2 = read_back(opt.out, "train");
  EXPECT_EQ(r2.shape.c, 5);
  EXPECT_EQ(r2.u8, x);
}

TEST(NpzImport, FloatGreyVectorsAndTestSplit) {
  TempDir dir;
  std::vector<float> xf(3 * 2 * 4);
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = 0.25f * static_cast<float>(i) - 1.0f;
  write_bytes(dir / "x.npy", npy("<f4", "(3, 2, 4)", raw(xf)));  // grey [N,H,W]
  write_bytes(dir / "y.npy", npy("|u1", "(3, 1)", {1, 0, 4}));   // [N,1] as Keras writes
  write_bytes(dir / "tx.npy", npy("<f4", "(1, 2, 4)", raw(std::vector<float>(8, 0.5f))));
  write_bytes(dir / "ty.npy", npy("<i4", "(1,)", raw(std::vector<int32_t>{3})));
  NpzImport opt;
  opt.train_x = dir / "x.npy";
  opt.train_y = dir / "y.npy";
  opt.test_x = dir / "tx.npy";
  opt.test_y = dir / "ty.npy";
  opt.out = dir / "f.h5";
  opt.class_names = {"a", "b", "c", "d", "e"};
  const NpzImportResult res = import_npz(opt);
  EXPECT_EQ(res.classes, 5);
  EXPECT_EQ(res.test, 1);
  const ReadBack r = read_back(opt.out, "train");
  EXPECT_EQ(r.shape.type, SampleType::F32);
  EXPECT_EQ(r.shape.c, 1);
  EXPECT_EQ(r.shape.h, 2);
  EXPECT_EQ(r.shape.w, 4);
  EXPECT_EQ(r.f32, xf);
  EXPECT_EQ(r.y, (std::vector<int32_t>{1, 0, 4}));
  EXPECT_EQ(r.attrs.class_names[4], "e");
  EXPECT_EQ(read_back(opt.out, "test").y, (std::vector<int32_t>{3}));

  // [N,D] vectors: [N,1,1,D].
  write_bytes(dir / "v.npy", npy("<f4", "(3, 8)", raw(xf)));
  opt = NpzImport{};
  opt.train_x = dir / "v.npy";
  opt.train_y = dir / "y.npy";
  opt.out = dir / "v.h5";
  import_npz(opt);
  const ReadBack v = read_back(opt.out, "train");
  EXPECT_EQ(v.shape.c, 1);
  EXPECT_EQ(v.shape.h, 1);
  EXPECT_EQ(v.shape.w, 8);
}

TEST(NpzImport, LayoutAutoDecidesOnlyWhenClear) {
  EXPECT_EQ(resolve_layout({9, 1, 28, 28}, NpzLayout::Auto, "f"), NpzLayout::NCHW);
  EXPECT_EQ(resolve_layout({9, 28, 28, 1}, NpzLayout::Auto, "f"), NpzLayout::NHWC);
  EXPECT_EQ(resolve_layout({9, 3, 32, 32}, NpzLayout::Auto, "f"), NpzLayout::NCHW);
  EXPECT_EQ(resolve_layout({9, 32, 32, 3}, NpzLayout::Auto, "f"), NpzLayout::NHWC);
  EXPECT_EQ(resolve_layout({9, 3, 4, 4}, NpzLayout::NHWC, "f"), NpzLayout::NHWC);
  expect_usage_error([] { resolve_layout({9, 3, 4, 4}, NpzLayout::Auto, "f.npz: x.npy"); },
                     "f.npz: x.npy", "cannot tell whether x of shape (9, 3, 4, 4) is [N,C,H,W] or "
                                     "[N,H,W,C]; give --layout nchw or nhwc");
  expect_usage_error([] { resolve_layout({9, 16, 8, 8}, NpzLayout::Auto, "f"); }, "f",
                     "give --layout");
  expect_usage_error([] { parse_npz_layout("hwc"); }, "hwc", "--layout must be auto, nchw or nhwc");
}

TEST(NpzImport, BadArraysAreOneLineUsageErrorsAndWriteNothing) {
  TempDir dir;
  const std::vector<uint8_t> x12(2 * 2 * 3, 7);
  write_bytes(dir / "x.npy", npy("|u1", "(2, 2, 3)", x12));
  write_bytes(dir / "y.npy", npy("<i8", "(2,)", raw(std::vector<int64_t>{0, 1})));
  write_bytes(dir / "y3.npy", npy("<i8", "(3,)", raw(std::vector<int64_t>{0, 1, 1})));
  write_bytes(dir / "yneg.npy", npy("<i8", "(2,)", raw(std::vector<int64_t>{0, -1})));
  write_bytes(dir / "yf.npy", npy("<f4", "(2,)", raw(std::vector<float>{0, 1})));
  write_bytes(dir / "y2d.npy", npy("<i8", "(1, 2)", raw(std::vector<int64_t>{0, 1})));
  write_bytes(dir / "x64.npy", npy("<f8", "(2, 2, 3)", std::vector<uint8_t>(96)));
  write_bytes(dir / "x1.npy", npy("|u1", "(12,)", x12));
  write_bytes(dir / "x5.npy", npy("|u1", "(2, 1, 1, 2, 3)", x12));
  write_bytes(dir / "x0.npy", npy("|u1", "(0, 2, 3)", {}));
  std::vector<float> nan(12, 0.0f);
  nan[7] = std::nanf("");
  write_bytes(dir / "xnan.npy", npy("<f4", "(2, 2, 3)", raw(nan)));
  write_bytes(dir / "tx.npy", npy("|u1", "(1, 3, 2)", std::vector<uint8_t>(6)));
  write_bytes(dir / "ty.npy", npy("|u1", "(1,)", {0}));
  write_bytes(dir / "text.npy", {'h', 'e', 'l', 'l', 'o'});
  const auto run = [&](const std::string& x, const std::string& y, int64_t classes = 0,
                       const std::string& tx = "", const std::string& ty = "") {
    NpzImport o;
    o.train_x = dir / x;
    o.train_y = dir / y;
    if (!tx.empty()) o.test_x = dir / tx, o.test_y = dir / ty;
    o.classes = classes;
    o.out = dir / "bad.h5";
    import_npz(o);
  };
  expect_usage_error([&] { run("x.npy", "y3.npy"); }, "y3.npy", "y has 3 labels but x has 2 samples");
  expect_usage_error([&] { run("x.npy", "yneg.npy"); }, "yneg.npy", "y holds label -1 at index 1");
  expect_usage_error([&] { run("x.npy", "y.npy", 1); }, "y.npy", "label 1 at index 1 out of range [0, 1)");
  expect_usage_error([&] { run("x.npy", "yf.npy"); }, "yf.npy",
                     "y has dtype <f4 (float32); labels must be integers");
  expect_usage_error([&] { run("x.npy", "y2d.npy"); }, "y2d.npy", "y has shape (1, 2); labels must be [N]");
  expect_usage_error([&] { run("x64.npy", "y.npy"); }, "x64.npy",
                     "x has dtype <f8 (float64); lpsgd stores uint8 or float32");
  expect_usage_error([&] { run("x1.npy", "y.npy"); }, "x1.npy", "x has rank 1 (shape (12,))");
  expect_usage_error([&] { run("x5.npy", "y.npy"); }, "x5.npy", "x has rank 5");
  expect_usage_error([&] { run("x0.npy", "y.npy"); }, "x0.npy", "holds no samples");
  expect_usage_error([&] { run("xnan.npy", "y.npy"); }, "xnan.npy", "x holds nan in sample 1");
  expect_usage_error([&] { run("x.npy", "y.npy", 0, "tx.npy", "ty.npy"); }, "tx.npy",
                     "test samples are 1x3x2 uint8 but the train samples");
  expect_usage_error([&] { run("text.npy", "y.npy"); }, "text.npy",
                     "neither a .npy array nor an .npz archive");
  expect_usage_error([&] { run("nosuch.npy", "y.npy"); }, "nosuch.npy", "no such file");
  EXPECT_FALSE(std::filesystem::exists(dir / "bad.h5"));
  NpzImport o;
  o.out = dir / "bad.h5";
  expect_usage_error([&] { import_npz(o); }, "", "give the train split as --train F.npz or as");
  o.train_x = dir / "x.npy";
  expect_usage_error([&] { import_npz(o); }, "", "--train-x and --train-y go together");
}

}  // namespace
}  // namespace lpsgd::io
