// Checkpoints: bitwise round trip, the checksum, keep-K pruning, the latest
// pointer, and every kind of damage a killed writer or a bad disk leaves:
// truncation, flipped data bytes, damaged metadata, missing attributes, stray
// temporaries, a missing or wrong `latest`.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <utime.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/h5.hpp"
#include "io_fixtures.hpp"

namespace lpsgd::io {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// Values no arithmetic would produce by accident: every float differs from its
// neighbours and from the same index of other tensors, with -0, denormals,
// infinities and a NaN payload in the first tensor (a bitwise round trip must
// keep them all).
CkptTensor tensor(const std::string& name, std::vector<int64_t> shape, float base) {
  CkptTensor t{name, std::move(shape), {}};
  size_t n = 1;
  for (int64_t d : t.shape) n *= static_cast<size_t>(d);
  t.data.resize(n);
  for (size_t i = 0; i < n; ++i) t.data[i] = base + static_cast<float>(i) * 1.0e-3f;
  return t;
}

Checkpoint make(int64_t step, size_t big = 1000) {
  Checkpoint c;
  c.meta.step = step;
  c.meta.epoch = step / 7;
  c.meta.samples = static_cast<uint64_t>(step) * 256 + (uint64_t{1} << 40);
  c.meta.loader_epoch = static_cast<uint64_t>(step / 7);
  c.meta.loader_cursor = 1234567890123ULL;
  c.meta.lr = 0.1 * std::pow(0.5, static_cast<double>(step % 5));
  c.meta.seed = 0xfedcba9876543210ULL;
  c.meta.rng_counter = ~uint64_t{0} - 5;
  c.meta.ranks = 3;
  c.meta.batch = 64;
  c.meta.model = "mlp:784-512-256-10";
  c.meta.config = "model = mlp:784-512-256-10\nlr = 0.1\n# comment \"quoted\"\n";
  c.meta.version = "0.1.0";
  c.meta.wall_time = 1.7e9 + 0.25;
  c.meta.precision = "bf16";
  c.params.push_back(tensor("fc1/weight", {static_cast<int64_t>(big / 10), 10}, 1.0f));
  c.params.push_back(tensor("fc1/bias", {static_cast<int64_t>(big / 10)}, -2.0f));
  c.params.push_back(tensor("scale", {}, 3.5f));      // a scalar
  c.params.push_back(tensor("empty", {0, 4}, 0.0f));  // no elements
  c.params[0].data[0] = -0.0f;
  c.params[0].data[1] = std::numeric_limits<float>::denorm_min();
  c.params[0].data[2] = std::numeric_limits<float>::infinity();
  uint32_t nan_bits = 0x7fc12345u;
  std::memcpy(&c.params[0].data[3], &nan_bits, 4);
  c.optimizer.push_back(tensor("momentum/fc1/weight", {static_cast<int64_t>(big / 10), 10}, 7.0f));
  c.optimizer.push_back(tensor("momentum/fc1/bias", {static_cast<int64_t>(big / 10)}, 8.0f));
  return c;
}

void expect_same_tensors(const std::vector<CkptTensor>& a, const std::vector<CkptTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].shape, b[i].shape);
    ASSERT_EQ(a[i].data.size(), b[i].data.size());
    if (a[i].data.empty()) continue;  // memcmp of an empty vector's null data() is UB
    EXPECT_EQ(std::memcmp(a[i].data.data(), b[i].data.data(), a[i].data.size() * sizeof(float)),
              0)
        << a[i].name << " differs bitwise";
  }
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char b = 0;
  f.read(&b, 1);
  b = static_cast<char>(b ^ 0x10);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&b, 1);
}

// Byte offset of the data of dataset `name` in the checkpoint at `path`.
uint64_t data_offset(const std::string& path, const std::string& group, const std::string& name) {
  const h5::File f = h5::File::open_read(path);
  const h5::Dataset d = h5::Dataset::open(h5::Group::open(f, group), name);
  const haddr_t off = d.file_offset();
  EXPECT_NE(off, HADDR_UNDEF);
  return off;
}

void set_mtime(const std::string& path, time_t t) {
  struct utimbuf times {t, t};
  ASSERT_EQ(utime(path.c_str(), &times), 0);
}

// The error `f` throws: a runtime error whose message has `path` and `what`.
void expect_damage(const std::function<void()>& f, const std::string& path,
                   const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "no error for " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Runtime) << e.message();
    EXPECT_NE(e.message().find("checkpoint " + path + " is damaged: "), std::string::npos)
        << e.message();
    EXPECT_NE(e.message().find(what), std::string::npos) << e.message();
  }
}

std::vector<std::string> names_in(const TempDir& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir.path())) out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Checkpoint, RoundTripIsBitwise) {
  TempDir dir;
  Checkpoint c = make(120);
  const std::string path = write_checkpoint(dir / "run", c, 3);  // creates the directory
  EXPECT_EQ(path, dir / "run/ckpt-000000120.h5");
  EXPECT_EQ(c.checksum, checkpoint_checksum(c));
  const Checkpoint r = read_checkpoint(path);
  EXPECT_EQ(r.checksum, c.checksum);
  expect_same_tensors(r.params, c.params);
  expect_same_tensors(r.optimizer, c.optimizer);
  const CkptMeta &a = r.meta, &b = c.meta;
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.samples, b.samples);
  EXPECT_EQ(a.loader_epoch, b.loader_epoch);
  EXPECT_EQ(a.loader_cursor, b.loader_cursor);
  EXPECT_EQ(a.lr, b.lr);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.rng_counter, b.rng_counter);
  EXPECT_EQ(a.ranks, b.ranks);
  EXPECT_EQ(a.batch, b.batch);
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.config, b.config);
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.wall_time, b.wall_time);
  EXPECT_EQ(a.precision, "bf16");

  const CkptInfo info = inspect_checkpoint(path);
  EXPECT_TRUE(info.valid) << info.error;
  EXPECT_EQ(info.error, "");
  EXPECT_EQ(info.checksum, c.checksum);
  EXPECT_EQ(info.tensors, 6u);
  EXPECT_EQ(info.bytes, fs::file_size(path));
  EXPECT_EQ(info.meta.model, b.model);
}

TEST(Checkpoint, ChecksumCoversNamesShapesDataAndOrder) {
  const Checkpoint c = make(1, 60);
  const uint64_t h = checkpoint_checksum(c);
  EXPECT_EQ(checkpoint_checksum(make(1, 60)), h);
  Checkpoint d = make(99, 60);  // metadata does not count
  d.meta.wall_time = 0;
  d.meta.ranks = 7;
  EXPECT_EQ(checkpoint_checksum(d), h);
  d = c;
  d.params[1].name = "fc1/biaz";
  EXPECT_NE(checkpoint_checksum(d), h);
  d = c;
  d.params[0].shape = {10, 6};  // same elements, other shape
  EXPECT_NE(checkpoint_checksum(d), h);
  d = c;
  std::swap(d.params[0], d.params[1]);
  EXPECT_NE(checkpoint_checksum(d), h);
  d = c;
  d.optimizer.insert(d.optimizer.begin(), d.params.back());  // moved to the other group
  d.params.pop_back();
  EXPECT_NE(checkpoint_checksum(d), h);
  d = c;
  uint32_t bits = 0;
  std::memcpy(&bits, &d.optimizer[1].data[3], 4);
  bits ^= 1;  // one ulp
  std::memcpy(&d.optimizer[1].data[3], &bits, 4);
  EXPECT_NE(checkpoint_checksum(d), h);
  d = c;
  d.params[1].data.pop_back();  // data no longer matches the shape
  EXPECT_THROW(checkpoint_checksum(d), Error);
}

TEST(Checkpoint, KeepsTheNewestKAndMovesLatest) {
  TempDir dir;
  for (int64_t step : {10, 20, 30, 40, 50}) {
    Checkpoint c = make(step, 50);
    write_checkpoint(dir.path(), c, 3);
    EXPECT_EQ(read_text(dir / "latest"), checkpoint_file_name(step) + "\n");
  }
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{"ckpt-000000030.h5", "ckpt-000000040.h5",
                                                     "ckpt-000000050.h5", "latest"}));
  // An older step written after newer ones (a run resumed from an earlier
  // checkpoint) is kept even though it is the oldest; the oldest other goes.
  Checkpoint c = make(5, 50);
  write_checkpoint(dir.path(), c, 3);
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{"ckpt-000000005.h5", "ckpt-000000040.h5",
                                                     "ckpt-000000050.h5", "latest"}));
  EXPECT_EQ(read_text(dir / "latest"), "ckpt-000000005.h5\n");
  EXPECT_EQ(find_resume_checkpoint(dir.path(), nullptr), dir / "ckpt-000000005.h5");
  c = make(60, 50);
  write_checkpoint(dir.path(), c, 1);
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{"ckpt-000000060.h5", "latest"}));
  EXPECT_EQ(list_checkpoints(dir.path()), std::vector<std::string>{dir / "ckpt-000000060.h5"});

  try {
    write_checkpoint(dir.path(), c, 0);
    ADD_FAILURE() << "keep 0 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(e.message().find("--keep must be at least 1"), std::string::npos) << e.message();
  }
  std::ofstream(dir / "file") << "x";
  try {
    write_checkpoint(dir / "file", c, 2);
    ADD_FAILURE() << "a file accepted as checkpoint directory";
  } catch (const Error& e) {
    // One line in the system's words, the errno kept for the caller.
    EXPECT_EQ(e.kind(), ErrorKind::Runtime);
    EXPECT_EQ(e.message(), "checkpoint at step 60 not written: Not a directory");
    EXPECT_EQ(e.sys_errno(), ENOTDIR);
  }
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{"ckpt-000000060.h5", "file", "latest"}));
}

TEST(Checkpoint, ResumeFindsNothingInAMissingOrEmptyDirectory) {
  TempDir dir;
  std::vector<std::string> warnings;
  EXPECT_EQ(find_resume_checkpoint(dir / "missing", &warnings), "");
  EXPECT_EQ(find_resume_checkpoint(dir.path(), &warnings), "");
  EXPECT_TRUE(warnings.empty());
  EXPECT_TRUE(list_checkpoints(dir / "missing").empty());
}

TEST(Checkpoint, ResumeWithoutOrWithAWrongLatestPointer) {
  TempDir dir;
  for (int64_t step : {1, 2, 3}) {
    Checkpoint c = make(step, 50);
    write_checkpoint(dir.path(), c, 5);
  }
  // Killed between the checkpoint's rename and the pointer's: no `latest`.
  fs::remove(dir / "latest");
  std::vector<std::string> warnings;
  Checkpoint loaded;
  EXPECT_EQ(find_resume_checkpoint(dir.path(), &warnings, &loaded), dir / "ckpt-000000003.h5");
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(loaded.meta.step, 3);
  EXPECT_EQ(loaded.checksum, checkpoint_checksum(make(3, 50)));

  // `latest` wins over a higher step (it names what this run wrote last).
  std::ofstream(dir / "latest") << "ckpt-000000002.h5\n";
  EXPECT_EQ(find_resume_checkpoint(dir.path(), &warnings), dir / "ckpt-000000002.h5");
  EXPECT_TRUE(warnings.empty());

  std::ofstream(dir / "latest") << "ckpt-000000009.h5\n";
  EXPECT_EQ(find_resume_checkpoint(dir.path(), &warnings), dir / "ckpt-000000003.h5");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("names ckpt-000000009.h5, which does not exist"), std::string::npos)
      << warnings[0];

  warnings.clear();
  std::ofstream(dir / "latest") << "../../etc/passwd\n";
  EXPECT_EQ(find_resume_checkpoint(dir.path(), &warnings), dir / "ckpt-000000003.h5");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("does not name a checkpoint"), std::string::npos) << warnings[0];
}

TEST(Checkpoint, StrayTemporariesAreIgnoredAndCleanedUp) {
  TempDir dir;
  Checkpoint c = make(10, 50);
  const std::string good = write_checkpoint(dir.path(), c, 3);
  // A writer killed half-way: half of a real checkpoint under a temporary name,
  // plus a killed pointer update.
  Checkpoint n = make(20, 50);
  const std::string half = write_checkpoint(dir / "other", n, 3);
  const std::string stray = dir / ".ckpt-000000020.h5.tmp.999999";
  fs::copy_file(half, stray);
  fs::resize_file(stray, fs::file_size(stray) / 2);
  std::ofstream(dir / ".latest.tmp.999999") << "ckpt-0000";
  const std::string fresh = dir / ".ckpt-000000030.h5.tmp.888888";  // another writer, just now
  std::ofstream(fresh) << "in progress";
  set_mtime(stray, time(nullptr) - 3600);
  set_mtime(dir / ".latest.tmp.999999", time(nullptr) - 3600);
  set_mtime(fresh, time(nullptr) + 3600);

  std::vector<std::string> warnings;
  EXPECT_EQ(find_resume_checkpoint(dir.path(), &warnings), good);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(list_checkpoints(dir.path()), std::vector<std::string>{good});

  c = make(11, 50);
  write_checkpoint(dir.path(), c, 3);
  EXPECT_EQ(names_in(dir),
            (std::vector<std::string>{".ckpt-000000030.h5.tmp.888888", "ckpt-000000010.h5",
                                      "ckpt-000000011.h5", "latest", "other"}));
}

TEST(Checkpoint, TruncatedNewestFallsBackToThePreviousOne) {
  TempDir dir;
  for (int64_t step : {100, 110, 120}) {
    Checkpoint c = make(step, 5000);
    write_checkpoint(dir.path(), c, 3);
  }
  const std::string newest = dir / "ckpt-000000120.h5";
  for (uintmax_t keep_bytes : {fs::file_size(newest) - 1, fs::file_size(newest) / 2,
                               uintmax_t{100}, uintmax_t{0}}) {
    SCOPED_TRACE(keep_bytes);
    fs::resize_file(newest, keep_bytes);
    expect_damage([&] { read_checkpoint(newest); }, newest, "truncated or not an HDF5 file");
    const CkptInfo info = inspect_checkpoint(newest);
    EXPECT_FALSE(info.valid);
    EXPECT_NE(info.error.find("truncated or not an HDF5 file"), std::string::npos) << info.error;
    std::vector<std::string> warnings;
    Checkpoint loaded;
    EXPECT_EQ(find_resume_checkpoint(dir.path(), &warnings, &loaded), dir / "ckpt-000000110.h5");
    EXPECT_EQ(loaded.meta.step, 110);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("checkpoint " + newest + " is damaged (truncated or not an HDF5 "
                               "file"),
              std::string::npos)
        << warnings[0];
    EXPECT_NE(warnings[0].find("; falling back to the previous one"), std::string::npos)
        << warnings[0];
  }
}

TEST(Checkpoint, FlippedDataByteIsAChecksumMismatch) {
  TempDir dir;
  Checkpoint c = make(7, 5000);
  const std::string path = write_checkpoint(dir.path(), c, 3);
  // Middle of the first optimizer tensor's 4000 float32 values.
  flip_byte(path, data_offset(path, "optimizer", "00000_momentum_fc1_weight") + 4000 * 2 + 1);
  expect_damage([&] { read_checkpoint(path); }, path, "checksum mismatch (stored ");
  const CkptInfo info = inspect_checkpoint(path);
  EXPECT_FALSE(info.valid);
  EXPECT_NE(info.error.find("checksum mismatch"), std::string::npos) << info.error;
  EXPECT_EQ(info.meta.step, 7);  // what could be read is still shown
  EXPECT_EQ(info.checksum, c.checksum);

  std::vector<std::string> warnings;
  EXPECT_EQ(find_resume_checkpoint(dir.path(), &warnings), "");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("checksum mismatch"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("no earlier checkpoint to fall back to"), std::string::npos)
      << warnings[0];
}

// Damage outside the tensor data: the metadata lives in HDF5 structures with
// their own checksums. A byte of a string attribute, of a number attribute and
// of a tensor name is flipped here, each found by its unique value.
TEST(Checkpoint, DamagedMetadataIsDetected) {
  TempDir dir;
  Checkpoint c = make(8, 50);
  c.meta.model = "mlp:marker-7777-for-the-test";
  c.meta.loader_cursor = 0x0123456789abcdefULL;
  c.params[2].name = "scale/marker-4242";  // the link name has "_" for "/"
  const std::string path = write_checkpoint(dir.path(), c, 3);
  const std::string bytes = read_text(path);
  uint64_t cursor = c.meta.loader_cursor;
  for (const std::string& marker : {c.meta.model, std::string(reinterpret_cast<char*>(&cursor), 8),
                                    c.params[2].name}) {
    const size_t at = bytes.find(marker);
    ASSERT_NE(at, std::string::npos);
    ASSERT_EQ(bytes.find(marker, at + 1), std::string::npos);
    const std::string damaged = dir / "damaged.h5";
    fs::copy_file(path, damaged, fs::copy_options::overwrite_existing);
    flip_byte(damaged, at + 3);
    const CkptInfo info = inspect_checkpoint(damaged);
    EXPECT_FALSE(info.valid);
    EXPECT_NE(info.error.find("incorrect metadata checksum"), std::string::npos) << info.error;
    expect_damage([&] { read_checkpoint(damaged); }, damaged, "incorrect metadata checksum");
  }
}

TEST(Checkpoint, MissingOrWrongAttributesAreNamed) {
  TempDir dir;
  Checkpoint c = make(9, 50);
  const std::string path = write_checkpoint(dir.path(), c, 3);
  const auto edit = [&](const std::function<void(hid_t)>& change) {
    fs::copy_file(path, dir / "edit.h5", fs::copy_options::overwrite_existing);
    const hid_t f = H5Fopen((dir / "edit.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    change(f);
    H5Fclose(f);
  };
  const std::string edited = dir / "edit.h5";
  edit([](hid_t f) { H5Adelete(f, "step"); });
  expect_damage([&] { read_checkpoint(edited); }, edited, "missing attribute step");
  edit([](hid_t f) { H5Adelete(f, "format"); });
  expect_damage([&] { read_checkpoint(edited); }, edited, "missing attribute format");
  edit([](hid_t f) { H5Ldelete(f, "optimizer", H5P_DEFAULT); });
  expect_damage([&] { read_checkpoint(edited); }, edited, "missing group /optimizer");
  edit([](hid_t f) { H5Ldelete(f, "params/00001_fc1_bias", H5P_DEFAULT); });
  expect_damage([&] { read_checkpoint(edited); }, edited, "/params holds 3 tensors, its count says 4");
  edit([&](hid_t f) {
    h5::silence_errors();
    H5Adelete(f, "format_version");
    const int64_t v = 2;
    const hid_t s = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(f, "format_version", H5T_NATIVE_INT64, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    H5Sclose(s);
  });
  expect_damage([&] { read_checkpoint(edited); }, edited, "format version 2 is not supported");

  // Not an HDF5 file at all, and not a checkpoint.
  std::ofstream(dir / "text.h5") << "hello\n";
  expect_damage([&] { read_checkpoint(dir / "text.h5"); }, dir / "text.h5",
                "truncated or not an HDF5 file");
  testing::write_index_dataset(dir / "data.h5", 4, 0, SampleType::U8);
  expect_damage([&] { read_checkpoint(dir / "data.h5"); }, dir / "data.h5",
                "missing attribute format");

  // A missing file is the user's mistake, not damage.
  for (const auto& f : std::vector<std::function<void()>>{
           [&] { read_checkpoint(dir / "nope.h5"); }, [&] { inspect_checkpoint(dir / "nope.h5"); }}) {
    try {
      f();
      ADD_FAILURE() << "no error for a missing file";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Usage);
      EXPECT_NE(e.message().find("nope.h5: no such checkpoint file"), std::string::npos)
          << e.message();
    }
  }
}

// The optimizer and its step count (issue 46): written and read back; a
// checkpoint from before them (no such attributes) reads as SGD's, its steps
// the optimizer's; a name that is no optimizer's is damage.
TEST(Checkpoint, OptimizerAndItsStepsRoundTripAndDefault) {
  TempDir dir;
  Checkpoint c = make(9, 50);
  c.meta.optimizer = "adamw";
  c.meta.optimizer_steps = 123456789012LL;
  const std::string path = write_checkpoint(dir.path(), c, 3);
  const Checkpoint r = read_checkpoint(path);
  EXPECT_EQ(r.meta.optimizer, "adamw");
  EXPECT_EQ(r.meta.optimizer_steps, 123456789012LL);
  EXPECT_EQ(inspect_checkpoint(path).meta.optimizer, "adamw");
  const auto edit = [&](const std::function<void(hid_t)>& change) {
    fs::copy_file(path, dir / "edit.h5", fs::copy_options::overwrite_existing);
    const hid_t f = H5Fopen((dir / "edit.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    change(f);
    H5Fclose(f);
  };
  const std::string edited = dir / "edit.h5";
  edit([](hid_t f) {
    H5Adelete(f, "optimizer");
    H5Adelete(f, "optimizer_steps");
  });
  const Checkpoint old = read_checkpoint(edited);
  EXPECT_EQ(old.meta.optimizer, "sgd");
  EXPECT_EQ(old.meta.optimizer_steps, 9);
  edit([](hid_t f) {
    H5Adelete(f, "optimizer");
    const char bad[8] = "ad am";
    const hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, 8);
    const hid_t sp = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(f, "optimizer", t, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, bad);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
  });
  expect_damage([&] { read_checkpoint(edited); }, edited, "attribute optimizer holds 'ad am'");
}

// HDF5 describes a failed system call over several lines (ctime's newline,
// buffer addresses, offsets); lpsgd passes on one line and the errno.
TEST(Checkpoint, SystemErrorsAreOneLineWithTheErrno) {
  TempDir dir;
  try {
    h5::File::create(dir / "missing/x.h5");
    ADD_FAILURE() << "created a file in a missing directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.sys_errno(), ENOENT);
    EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(std::strerror(ENOENT)), std::string::npos) << e.message();
    EXPECT_EQ(e.message().find("errno ="), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace lpsgd::io
