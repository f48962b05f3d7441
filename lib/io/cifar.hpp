// CIFAR-10 and CIFAR-100 (the "binary version" of
// https://www.cs.toronto.edu/~kriz/cifar.html) and their import into the lpsgd
// dataset layout.
//
// A file is a sequence of records, nothing else: CIFAR-10's are 1 label byte
// (0..9) then 3072 pixel bytes, CIFAR-100's 2 label bytes (coarse 0..19, then
// fine 0..99) then the 3072 pixel bytes. The pixels are three 32x32 planes,
// red then green then blue, each row-major: a record's image is already
// [3,32,32], the layout of /split/x. CIFAR-10 ships data_batch_1..5.bin and
// test_batch.bin, CIFAR-100 train.bin and test.bin. Files may be gzipped or
// plain (zlib's gzread reads both).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lpsgd::io {

enum class CifarFormat { Cifar10, Cifar100 };

/// "cifar10" / "cifar100" (also "10" / "100"); anything else is a usage error.
CifarFormat parse_cifar_format(const std::string& text);

/// The records of one file: x [n,3,32,32] uint8 and the chosen labels.
struct CifarRecords {
  int64_t n = 0;
  std::vector<uint8_t> x;
  std::vector<int32_t> y;
};

/// Reads a CIFAR binary file of `format`; for CIFAR-100 `coarse` picks the
/// coarse label (else the fine one). A missing, empty or damaged file, a size
/// that is not a whole number of records, or a label byte out of range for
/// the format (either of CIFAR-100's two) is a usage error naming the file.
CifarRecords read_cifar(const std::string& path, CifarFormat format, bool coarse);

/// Class names from a text file, one per line (CIFAR-10's batches.meta.txt,
/// CIFAR-100's fine_label_names.txt / coarse_label_names.txt); blank lines
/// are skipped and a trailing '\r' dropped.
std::vector<std::string> read_class_names(const std::string& path);

/// CIFAR-10's ten class names, in label order.
const std::vector<std::string>& cifar10_class_names();

struct CifarImport {
  CifarFormat format = CifarFormat::Cifar10;
  std::vector<std::string> train, test;  ///< the files of each split, in order (test may be empty)
  std::string out;
  bool coarse = false;                   ///< CIFAR-100: the 20 coarse classes, not the 100 fine ones
  /// Class names; empty: CIFAR-10's own for CIFAR-10, none for CIFAR-100.
  std::vector<std::string> class_names;
  std::string names_from;                ///< where class_names came from (for messages)
  std::string source;                    ///< empty: "CIFAR-10 binary import" etc.
  int gzip_level = 4;
};

/// Writes the files as an lpsgd dataset ([N,3,32,32] uint8 x, int32 y), the
/// train files' records in order then the test files', atomically (see
/// DatasetWriter). Returns the number of samples written.
int64_t import_cifar(const CifarImport& opt);

}  // namespace lpsgd::io
