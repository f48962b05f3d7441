// The lpsgd dataset layout in HDF5, its validating reader and its streaming writer.
//
// Layout:
//   /train/x  [N, C, H, W]  uint8 or float32, chunked along N (optionally gzip)
//   /train/y  [N]           integer labels in [0, num_classes)
//   /test/x, /test/y        the same for the test split (either split may be absent)
// Attributes of "/":
//   num_classes  int64         number of classes K (required)
//   class_names  string[K]     optional
//   mean, std    double[C]     per-channel normalisation (default 0 and 1)
//   source       string        where the data came from
//
// Normalisation convention: a uint8 value v is first scaled to v/255 in [0, 1];
// a float32 value is taken as it is. Then x = (value - mean[c]) / std[c]. So
// mean and std of a uint8 dataset are in [0, 1] units (Fashion-MNIST: about
// 0.286 and 0.353), which is what the writer computes from the train split.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/h5.hpp"

namespace lpsgd::io {

enum class SampleType { U8, F32 };
const char* sample_type_name(SampleType t);

/// Shape and element type of one split's x.
struct SplitShape {
  int64_t n = 0, c = 0, h = 0, w = 0;
  SampleType type = SampleType::U8;
  int64_t sample_elems() const { return c * h * w; }
  size_t sample_bytes() const {
    return static_cast<size_t>(sample_elems()) * (type == SampleType::U8 ? 1 : 4);
  }
};

/// The attributes of "/" as the layout defines them.
struct DatasetAttrs {
  int64_t num_classes = 0;
  std::vector<std::string> class_names;  ///< empty when the file has none
  std::vector<double> mean, std;         ///< one per channel
  std::string source;
};

/// One split of a dataset file, opened and validated: x and y exist, x is
/// [N,C,H,W] uint8/float32, y is [N] integer with every label in range. Every
/// problem is a usage error "FILE: /split/obj: what is wrong".
struct Split {
  std::string path, name;
  std::unique_ptr<h5::File> file;
  std::unique_ptr<h5::Dataset> x;
  SplitShape shape;
  std::vector<int32_t> y;  ///< all labels, validated
  DatasetAttrs attrs;
  int64_t chunk_rows = 0;  ///< rows per HDF5 chunk of x (0: contiguous)
};

/// Opens `split` ("train" or "test") of the dataset at `path`. `x_cache_bytes`
/// sizes HDF5's chunk cache for x (0: HDF5's default). With `strings` false
/// the string attributes (class_names, source) are not read, only class_names'
/// count checked: see read_attrs.
Split open_split(const std::string& path, const std::string& split, size_t x_cache_bytes = 0,
                 bool strings = true);

/// Reads and checks the attributes of "/" (num_classes required; mean/std
/// default to 0/1 per channel when absent). With `strings` false class_names
/// and source are left empty: they are only informational, and variable-length
/// strings live in HDF5's global heap, whose reader in HDF5 1.10 trusts the
/// heap's object list — on a damaged one it loops forever or copies out of
/// bounds (found by tests/fuzz/fuzz_dataset) — training never needs to take
/// that risk. `lpsgd data info` still reads them.
DatasetAttrs read_attrs(const h5::File& file, int64_t channels, bool strings = true);

/// The per-channel scaling of the normalisation convention above, as float
/// operations: x = float(v) * scale[c] + shift[c], scale = unit / std, shift =
/// -mean / std (unit 1/255 for uint8, 1 for float32). The loader applies it;
/// ONNX export writes the same numbers as its first nodes.
void input_scaling(SampleType type, const DatasetAttrs& attrs, int64_t channels,
                   std::vector<float>& scale, std::vector<float>& shift);

/// Names of the splits ("train", "test") present in the file, in that order.
std::vector<std::string> split_names(const h5::File& file);

/// Writes a dataset file split by split, streaming: append() takes samples in
/// order a block at a time, so a dataset larger than memory can be written.
/// The file is written under a temporary name, which commit() fsyncs and
/// renames onto `path`; a writer destroyed without commit() removes it, so no
/// partial file is left looking valid. Mean and std are computed from the samples
/// appended to the "train" split.
class DatasetWriter {
 public:
  /// `gzip_level` 0 = no compression, 1..9 = gzip.
  DatasetWriter(std::string path, int64_t num_classes, std::vector<std::string> class_names,
                std::string source, int gzip_level);
  ~DatasetWriter();
  DatasetWriter(const DatasetWriter&) = delete;
  DatasetWriter& operator=(const DatasetWriter&) = delete;

  /// Starts a split of shape.n samples in chunks of `chunk_rows` samples
  /// (0: about 1 MiB of samples, see chunk_rows_for).
  void begin_split(const std::string& name, const SplitShape& shape, int64_t chunk_rows = 0);
  /// Appends `count` samples: x holds count*C*H*W elements of the split's type
  /// (uint8_t or float), y holds count labels in [0, num_classes). `what`
  /// names the source of the data for error messages.
  void append(const void* x, const int32_t* y, int64_t count, const std::string& what = "");
  /// Ends the current split; all of its shape.n samples must have been appended.
  void end_split();
  /// Writes the attributes, flushes, closes and renames onto the final path.
  void commit();

  /// Rows per chunk the writer uses for a sample of `sample_bytes` bytes.
  static int64_t chunk_rows_for(size_t sample_bytes, int64_t n);

 private:
  std::string path_, tmp_path_;
  int64_t num_classes_;
  std::vector<std::string> class_names_;
  std::string source_;
  int gzip_;
  std::unique_ptr<h5::File> file_;
  std::unique_ptr<h5::Group> group_;
  std::unique_ptr<h5::Dataset> x_, y_;
  std::string split_;
  SplitShape shape_;
  int64_t written_ = 0;
  int64_t channels_ = 0;
  std::vector<double> sum_, sumsq_;  // per channel, over the train split
  double count_per_channel_ = 0;
  bool committed_ = false;
};

}  // namespace lpsgd::io
