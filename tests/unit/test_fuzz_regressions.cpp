// Inputs found by the fuzz harnesses (tests/fuzz/fuzz_*.cpp), kept under
// tests/fuzz/regressions/HARNESS/, fed through the code path that failed on
// them: each must now end in a clear lpsgd::Error instead of a crash, an
// out-of-memory abort or a hang.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "app/train_options.hpp"
#include "core/error.hpp"
#include "io/dataset.hpp"
#include "io/h5.hpp"
#include "io/idx.hpp"
#include "io/loader.hpp"
#include "io_fixtures.hpp"
#include "model/onnx.hpp"

namespace lpsgd {
namespace {

std::string input(const std::string& harness, const std::string& name) {
  return std::string(LPSGD_FUZZ_REGRESSIONS) + "/" + harness + "/" + name;
}

// Runs f, which must throw a usage error whose message holds `what` on one line.
template <class F>
void expect_usage_error(F&& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one about '" << what << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage) << e.message();
    EXPECT_NE(e.message().find(what), std::string::npos) << e.message();
    EXPECT_EQ(e.message().find_first_of("\r\n"), std::string::npos) << e.message();
  }
}

io::LoaderOptions loader_options(const std::string& path, const char* split, double cache_mb) {
  io::LoaderOptions o;
  o.path = path;
  o.split = split;
  o.batch = 2;
  o.prefetch = 0;
  o.cache_mb = cache_mb;
  o.coverage = io::Coverage::All;
  return o;
}

// ---- IDX ------------------------------------------------------------------------

// A 16-byte file whose header claims 0xdb000000 x 2 x 2 images: the reader
// sized its buffer from the header (14 GB) before reading anything.
TEST(FuzzRegression, IdxHeaderClaimingGigabytesIsTruncatedNotAllocated) {
  const std::string path = input("idx", "oom-header-claims-14g.idx");
  expect_usage_error([&] { io::read_idx_u8(path, 3); }, "truncated IDX file (0 of 14696841216");
}

// Dimensions whose product wraps 64 bits around to 0 are implausible, not empty.
TEST(FuzzRegression, IdxDimensionsWrappingAroundAreImplausible) {
  io::testing::TempDir dir;
  const std::string path = dir / "wrap.idx";
  io::testing::write_idx(path, {0x80000000u, 0x80000000u, 4}, {}, false);
  expect_usage_error([&] { io::read_idx_u8(path, 3); }, "implausible IDX dimensions");
}

// ---- datasets -------------------------------------------------------------------

// A damaged dataset file whose x claims [2^20, 1, 1024, 1024] float32 (4 TiB)
// that was never written: the loader sized a batch (and could size a cache) from
// the claim. Made here through HDF5 rather than kept as bytes.
TEST(FuzzRegression, DatasetClaimingMoreThanItStoresIsRefused) {
  io::testing::TempDir dir;
  const std::string path = dir / "claims.h5";
  {
    io::h5::File f = io::h5::File::create(path);
    io::h5::Group g = io::h5::Group::create(f, "train");
    io::h5::Dataset::create_contiguous(g, "x", io::h5::Type::F32, {1 << 20, 1, 1024, 1024});
    const std::vector<int32_t> y(1 << 20, 0);
    io::h5::Dataset::create_contiguous(g, "y", io::h5::Type::Int, {1 << 20})
        .write_all(io::h5::Type::Int, y.data());
    f.write_attr("num_classes", int64_t{2});
  }
  for (double cache_mb : {64.0, 0.0})
    expect_usage_error([&] { io::Loader l(loader_options(path, "train", cache_mb)); },
                       "/train/x: its shape claims 4398046511104 bytes but the file holds only 0 bytes");
}

// Samples of 2 TiB: beyond any real dataset, and C*H*W products of such
// dims could overflow the 64-bit sizes the loader computes.
TEST(FuzzRegression, DatasetSampleShapeBeyondBoundsIsImplausible) {
  io::testing::TempDir dir;
  const std::string path = dir / "overflow.h5";
  {
    io::h5::File f = io::h5::File::create(path);
    io::h5::Group g = io::h5::Group::create(f, "train");
    io::h5::Dataset::create_contiguous(g, "x", io::h5::Type::U8, {1, 1 << 21, 1 << 20, 1});
    io::h5::Dataset::create_contiguous(g, "y", io::h5::Type::Int, {1});
    f.write_attr("num_classes", int64_t{2});
  }
  expect_usage_error([&] { io::open_split(path, "train"); }, "implausible sample shape");
}

// An object header claiming 0x7e0000000140 bytes: HDF5 allocates that in
// H5Fopen and fails cleanly when malloc returns NULL (under ASan's default
// allocator policy it aborted instead: see tests/fuzz/run.sh).
TEST(FuzzRegression, DatasetHugeObjectHeaderFailsToOpen) {
  const std::string path = input("dataset", "hdf5-object-header-138tb.h5");
  for (const char* split : {"train", "test"})
    EXPECT_THROW(io::open_split(path, split), Error);
}

// HDF5-internal: a global heap whose free-space object has size 0 makes HDF5
// 1.10's heap reader loop forever on the variable-length class_names. The
// loader's attributes skip the strings (only their count is checked), so it
// ends in an error about the file's other damage (its labels' gzip stream)
// instead of never returning.
TEST(FuzzRegression, LoaderDoesNotReadTheGlobalHeap) {
  const std::string path = input("dataset", "hdf5-heap-free-space-size-0.h5");
  const io::DatasetAttrs a =
      io::read_attrs(io::h5::File::open_read(path), 2, /*strings=*/false);
  EXPECT_EQ(a.num_classes, 4);
  EXPECT_TRUE(a.class_names.empty());
  EXPECT_EQ(a.mean.size(), 2u);
  for (double cache_mb : {64.0, 0.0})
    EXPECT_THROW(io::Loader l(loader_options(path, "train", cache_mb)), Error);
}

// HDF5-internal: a class name whose heap object claims more bytes than its
// collection holds; HDF5 1.10's H5HG_read copied that many (far out of
// bounds). The loader reads only the names' count, and ends in an error about
// the file's other damage (its labels' chunk index).
TEST(FuzzRegression, LoaderDoesNotCopyOutOfTheGlobalHeap) {
  const std::string path = input("dataset", "hdf5-heap-object-past-collection.h5");
  const io::DatasetAttrs a =
      io::read_attrs(io::h5::File::open_read(path), 2, /*strings=*/false);
  EXPECT_EQ(a.num_classes, 4);
  EXPECT_TRUE(a.class_names.empty());
  for (double cache_mb : {64.0, 0.0}) {
    try {
      io::Loader l(loader_options(path, "train", cache_mb));
      ADD_FAILURE() << "no error for the damaged labels";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("/train/y: H5Dread failed (wrong B-tree signature)"),
                std::string::npos)
          << e.message();
    }
  }
}

// ---- config files ---------------------------------------------------------------

void expect_config_error(const std::string& path, const std::string& what) {
  std::string a0 = "train", a1 = "--config", a2 = path;
  char* argv[] = {a0.data(), a1.data(), a2.data(), nullptr};
  app::TrainOptions o;
  expect_usage_error([&] { app::parse_train_options(3, argv, o); }, what);
}

// Boost.Program_options expanded '%value%' in its own message forever.
TEST(FuzzRegression, ConfigPlaceholderIsRefusedNotExpandedForever) {
  expect_config_error(input("config", "boost-placeholder-loop.ini"),
                      "'%value%' is not allowed in options");
}

// The same on the command line.
TEST(FuzzRegression, CommandLinePlaceholderIsRefused) {
  std::string a0 = "train", a1 = "--epochs", a2 = "%value%";
  char* argv[] = {a0.data(), a1.data(), a2.data(), nullptr};
  app::TrainOptions o;
  expect_usage_error([&] { app::parse_train_options(3, argv, o); },
                     "'%value%' is not allowed in options");
}

// NULs and a CR inside a value ended up in a two-line error message.
TEST(FuzzRegression, ConfigControlCharactersAreRefused) {
  expect_config_error(input("config", "nul-and-cr-in-value.ini"), "control character 0x00");
}

// 1e300 MiB was converted to size_t bytes: undefined behaviour.
TEST(FuzzRegression, ConfigBucketSizeIsBounded) {
  expect_config_error(input("config", "bucket-mb-1e300.ini"), "--bucket-mb must be in [0, 1048576]");
}

// The fix for control characters keeps Windows line ends working.
TEST(FuzzRegression, ConfigWithWindowsLineEndsParses) {
  io::testing::TempDir dir;
  const std::string path = dir / "crlf.ini";
  std::ofstream(path) << "epochs = 3\r\nlinks = mpi\r\n";
  std::string a0 = "train", a1 = "--config", a2 = path;
  char* argv[] = {a0.data(), a1.data(), a2.data(), nullptr};
  app::TrainOptions o;
  ASSERT_TRUE(app::parse_train_options(3, argv, o));
  EXPECT_EQ(o.config.epochs, 3);
  EXPECT_EQ(o.config.links, comm::LinksMode::Mpi);
}

// ---- ONNX -----------------------------------------------------------------------

// An input-shift initializer whose shape says 520,076,286 values (2 GB) over
// 8 bytes of data: the reader sized its buffer from the shape first.
TEST(FuzzRegression, OnnxTensorClaimingMoreValuesThanItHoldsIsRefused) {
  if (!model::onnx_available()) GTEST_SKIP() << "built without ONNX";
  expect_usage_error(
      [] { model::read_onnx(input("onnx", "oom-scaling-tensor-claims-2g-values.onnx")); },
      "holds 8 bytes for its shape [520076286] of 520076286 float32 values");
}

// A graph with a Dropout of ratio 6.10351562e-05: its canonical layer list
// wrote the ratio in exponent form, whose '-' cut the list, so it did not
// parse back.
TEST(FuzzRegression, OnnxDropoutRatioCanonicalListParsesBack) {
  if (!model::onnx_available()) GTEST_SKIP() << "built without ONNX";
  const model::ModelDesc d = model::read_onnx(input("onnx", "dropout-exponent-in-canonical-text.onnx"));
  const model::ModelDesc back = model::from_spec(d.canonical(), d.input_shape);
  EXPECT_EQ(back.canonical(), d.canonical());
}

}  // namespace
}  // namespace lpsgd
