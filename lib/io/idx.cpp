#include "io/idx.hpp"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "core/error.hpp"
#include "io/dataset.hpp"

namespace lpsgd::io {

namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using Gz = std::unique_ptr<gzFile_s, GzCloser>;

// Reads up to n bytes; returns how many were read. A stream error (a damaged
// or truncated gzip member) is a usage error naming the file.
size_t read_some(gzFile f, const std::string& path, void* out, size_t n) {
  size_t got = 0;
  auto* p = static_cast<unsigned char*>(out);
  while (got < n) {
    const auto want = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
    const int r = gzread(f, p + got, want);
    if (r < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      LPSGD_USAGE_ERROR(path << ": truncated or damaged IDX file (" << msg << ")");
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

}  // namespace

IdxArray read_idx_u8(const std::string& path, int ndims) {
  if (::access(path.c_str(), R_OK) != 0) LPSGD_USAGE_ERROR(path << ": no such file");
  Gz f(gzopen(path.c_str(), "rb"));
  if (!f) LPSGD_USAGE_ERROR(path << ": cannot open");
  unsigned char magic[4] = {};
  if (read_some(f.get(), path, magic, 4) != 4)
    LPSGD_USAGE_ERROR(path << ": truncated IDX file (no complete header)");
  const uint32_t want = 0x0800u | static_cast<uint32_t>(ndims);
  const uint32_t got = (uint32_t{magic[0]} << 24) | (uint32_t{magic[1]} << 16) |
                       (uint32_t{magic[2]} << 8) | magic[3];
  if (got != want) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "wrong magic 0x%08x, expected 0x%08x", got, want);
    LPSGD_USAGE_ERROR(path << ": " << buf << " (IDX uint8 with " << ndims << " dimension"
                           << (ndims == 1 ? "" : "s") << ")");
  }
  IdxArray a;
  constexpr size_t kMaxElements = size_t{1} << 40;
  size_t total = 1;
  bool implausible = false, empty = false;
  for (int d = 0; d < ndims; ++d) {
    unsigned char b[4];
    if (read_some(f.get(), path, b, 4) != 4)
      LPSGD_USAGE_ERROR(path << ": truncated IDX file (header ends inside the dimensions)");
    const uint32_t v = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    a.dims.push_back(v);
    // Checked before multiplying: three 32-bit sizes can wrap 64 bits around
    // to a small product.
    if (v == 0) empty = true;
    else if (total > kMaxElements / v) implausible = true;
    total *= v;
  }
  if (empty) total = 0;
  else if (implausible) LPSGD_USAGE_ERROR(path << ": implausible IDX dimensions");
  // The buffer grows with the data actually read, not to what the header
  // claims: a damaged header asking for terabytes is then a truncated file,
  // not an allocation of terabytes.
  size_t n = 0;
  for (size_t block = size_t{1} << 16; n < total; block = std::min(block * 2, size_t{1} << 26)) {
    const size_t ask = std::min(block, total - n);
    a.data.resize(n + ask);
    const size_t arrived = read_some(f.get(), path, a.data.data() + n, ask);
    n += arrived;
    if (arrived < ask) break;
  }
  a.data.resize(n);
  if (n != total)
    LPSGD_USAGE_ERROR(path << ": truncated IDX file (" << n << " of " << total
                           << " data bytes present)");
  unsigned char extra;
  if (read_some(f.get(), path, &extra, 1) != 0)
    LPSGD_USAGE_ERROR(path << ": IDX file is longer than its header says (" << total
                           << " data bytes)");
  return a;
}

int64_t import_idx(const IdxImport& opt) {
  struct Pair {
    const char* split;
    IdxArray images, labels;
    std::string images_path, labels_path;
  };
  Pair parts[2] = {{"train", read_idx_u8(opt.train_images, 3), read_idx_u8(opt.train_labels, 1),
                    opt.train_images, opt.train_labels},
                   {"test", read_idx_u8(opt.test_images, 3), read_idx_u8(opt.test_labels, 1),
                    opt.test_images, opt.test_labels}};
  int64_t max_label = -1;
  for (const Pair& p : parts) {
    if (p.images.dims[0] != p.labels.dims[0])
      LPSGD_USAGE_ERROR(p.labels_path << ": " << p.labels.dims[0] << " labels but "
                                      << p.images_path << " has " << p.images.dims[0]
                                      << " images");
    if (p.images.dims[1] != parts[0].images.dims[1] || p.images.dims[2] != parts[0].images.dims[2])
      LPSGD_USAGE_ERROR(p.images_path << ": images are " << p.images.dims[1] << "x"
                                      << p.images.dims[2] << " but the train images are "
                                      << parts[0].images.dims[1] << "x"
                                      << parts[0].images.dims[2]);
    for (uint8_t l : p.labels.data) max_label = std::max<int64_t>(max_label, l);
  }
  const int64_t classes =
      opt.class_names.empty() ? max_label + 1 : static_cast<int64_t>(opt.class_names.size());
  DatasetWriter w(opt.out, std::max<int64_t>(classes, 1), opt.class_names, opt.source,
                  opt.gzip_level);
  for (const Pair& p : parts) {
    const SplitShape shape{p.images.dims[0], 1, p.images.dims[1], p.images.dims[2],
                           SampleType::U8};
    w.begin_split(p.split, shape);
    const std::vector<int32_t> y(p.labels.data.begin(), p.labels.data.end());
    w.append(p.images.data.data(), y.data(), shape.n, p.labels_path);
    w.end_split();
  }
  w.commit();
  return classes;
}

}  // namespace lpsgd::io
