// Small files for the io tests, written by the tests themselves.
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "io/dataset.hpp"

namespace lpsgd::io::testing {

/// A fresh directory removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "lpsgd-io-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// A dataset whose samples say who they are: every element of sample i is
/// i % 256 (uint8) or i (float32), and its label is i % classes. So a batch
/// can be checked against its own index list without trusting the loader.
inline void write_index_dataset(const std::string& path, int64_t n_train, int64_t n_test,
                                SampleType type, int64_t classes = 10, int64_t chunk_rows = 0,
                                int64_t c = 1, int64_t h = 3, int64_t w = 2) {
  DatasetWriter wr(path, classes, {}, "index fixture", 0);
  const struct {
    const char* name;
    int64_t n;
  } splits[] = {{"train", n_train}, {"test", n_test}};
  for (const auto& sp : splits) {
    if (sp.n == 0) continue;
    const SplitShape shape{sp.n, c, h, w, type};
    wr.begin_split(sp.name, shape, chunk_rows);
    const int64_t e = shape.sample_elems();
    std::vector<uint8_t> xu(static_cast<size_t>(sp.n * e));
    std::vector<float> xf(static_cast<size_t>(sp.n * e));
    std::vector<int32_t> y(static_cast<size_t>(sp.n));
    for (int64_t i = 0; i < sp.n; ++i) {
      y[static_cast<size_t>(i)] = static_cast<int32_t>(i % classes);
      for (int64_t k = 0; k < e; ++k) {
        xu[static_cast<size_t>(i * e + k)] = static_cast<uint8_t>(i % 256);
        xf[static_cast<size_t>(i * e + k)] = static_cast<float>(i);
      }
    }
    wr.append(type == SampleType::U8 ? static_cast<const void*>(xu.data()) : xf.data(), y.data(),
              sp.n);
    wr.end_split();
  }
  wr.commit();
}

/// An IDX file of uint8: magic 0x0000 08 ndims, big-endian sizes, data;
/// gzipped when gz. `magic` overrides the magic number when non-zero;
/// `cut` drops that many bytes from the end.
inline void write_idx(const std::string& path, const std::vector<uint32_t>& dims,
                      const std::vector<uint8_t>& data, bool gz, uint32_t magic = 0,
                      size_t cut = 0) {
  std::vector<uint8_t> bytes;
  auto be32 = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(static_cast<uint8_t>(v >> s));
  };
  be32(magic ? magic : 0x0800u | static_cast<uint32_t>(dims.size()));
  for (uint32_t d : dims) be32(d);
  bytes.insert(bytes.end(), data.begin(), data.end());
  bytes.resize(bytes.size() - cut);
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_TRUE(f != nullptr);
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
    gzclose(f);
  } else {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_TRUE(f != nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }
}

}  // namespace lpsgd::io::testing
