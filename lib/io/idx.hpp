// IDX files (the format of MNIST and Fashion-MNIST) and their import into the
// lpsgd dataset layout.
//
// An IDX file is a 4-byte magic number 0x00 0x00 TYPE NDIMS, NDIMS big-endian
// uint32 sizes, then the elements in row-major order. lpsgd reads the uint8
// kind (TYPE 0x08): images [N,H,W] (magic 0x00000803) and labels [N]
// (0x00000801). Files may be gzipped or plain: zlib's gzread reads both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lpsgd::io {

/// A uint8 IDX array: its dimensions and its elements.
struct IdxArray {
  std::vector<uint32_t> dims;
  std::vector<uint8_t> data;
};

/// Reads an IDX file of uint8 elements with `ndims` dimensions. A missing,
/// truncated or over-long file, or a wrong magic number, is a usage error
/// naming the file.
IdxArray read_idx_u8(const std::string& path, int ndims);

struct IdxImport {
  std::string train_images, train_labels, test_images, test_labels;
  std::string out;
  /// Class names; when empty num_classes is the largest label + 1.
  std::vector<std::string> class_names;
  std::string source;
  int gzip_level = 4;
};

/// Writes the four IDX files as an lpsgd dataset ([N,1,H,W] uint8 x, int32 y),
/// atomically (see DatasetWriter). Returns the number of classes.
int64_t import_idx(const IdxImport& opt);

}  // namespace lpsgd::io
