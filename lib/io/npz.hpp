// NumPy arrays (.npy, and .npz: a zip archive of .npy files, stored or
// deflated as np.savez / np.savez_compressed write them) and their import
// into the lpsgd dataset layout.
//
// A .npy file is the magic "\x93NUMPY", a version (1.0: a 2-byte header
// length; 2.0 and 3.0: 4 bytes), a header that is a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (N, ...), } padded with
// spaces, then the elements. lpsgd parses the header itself and reads
// numeric arrays of kinds b (bool), i, u (1, 2, 4, 8 bytes) and f (4, 8) in
// either byte order, in C order; an array in Fortran order is refused (save
// np.ascontiguousarray(x)), not transposed. The zip container is read with
// libzip (Debian libzip-dev); a build without it reads .npy files only.
//
// Import: x is [N,C,H,W] or [N,H,W,C] (--layout nchw|nhwc; auto decides by
// the channel counts 1, 3 and 4, see resolve_layout), [N,H,W] (grey, C = 1)
// or [N,D] (vectors, [N,1,1,D]), of uint8 or float32; y is [N] (or [N,1])
// of any integer type. An .npz names them x and y (or x_train and y_train),
// its test split x_test and y_test; a separate test .npz may name them
// either way.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lpsgd::io {

/// One array: its element type, shape and elements (C order, native byte order).
struct NpyArray {
  std::string descr;        ///< as the header wrote it, e.g. "<f4", "|u1"
  char kind = 0;            ///< 'b' bool, 'i' signed, 'u' unsigned integer, 'f' float
  int itemsize = 0;         ///< bytes per element
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
  int64_t count() const;    ///< elements (product of shape)
  std::string shape_text() const;  ///< "(6, 28, 28)" as NumPy writes it
  /// Element i as an integer (kinds b, i, u only).
  int64_t int_at(int64_t i) const;
};

/// Parses a whole .npy image of `size` bytes. Every fault (no magic, an
/// unknown version, a header that is not the dict above, an unsupported or
/// structured dtype, Fortran order, data shorter or longer than the shape
/// says) is a usage error starting with `where`.
NpyArray parse_npy(const uint8_t* bytes, size_t size, const std::string& where);

/// Whether this build reads .npz archives (libzip found).
bool npz_supported();

/// The arrays of one .npy or .npz file. Opening checks the container (an
/// .npz that libzip cannot open is a usage error naming the file); read()
/// parses one array. A .npy holds one array, named "" here.
class NpyFile {
 public:
  explicit NpyFile(const std::string& path);
  ~NpyFile();
  NpyFile(const NpyFile&) = delete;
  NpyFile& operator=(const NpyFile&) = delete;

  bool is_npz() const { return npz_; }
  const std::string& path() const { return path_; }
  /// The arrays' names (entry names without ".npy"), in archive order.
  const std::vector<std::string>& names() const { return names_; }
  bool has(const std::string& name) const;
  /// Reads array `name` ("" for a .npy); errors name the file and the entry.
  NpyArray read(const std::string& name) const;

 private:
  struct Zip;
  std::string path_;
  bool npz_ = false;
  std::vector<std::string> names_;
  std::unique_ptr<Zip> zip_;
};

enum class NpzLayout { Auto, NCHW, NHWC };
/// "auto", "nchw", "nhwc"; anything else is a usage error.
NpzLayout parse_npz_layout(const std::string& text);
const char* npz_layout_name(NpzLayout l);

/// The layout of a rank-4 x of `shape` under `asked`: itself unless Auto;
/// Auto takes NHWC when the last dimension is 1, 3 or 4 and the second is
/// not, NCHW when the second is and the last is not, and otherwise is a usage
/// error (starting with `where`) asking for --layout.
NpzLayout resolve_layout(const std::vector<int64_t>& shape, NpzLayout asked,
                         const std::string& where);

struct NpzImport {
  std::string train, test;        ///< .npz files (see above); test optional
  std::string train_x, train_y;   ///< or .npy files, one array each
  std::string test_x, test_y;
  NpzLayout layout = NpzLayout::Auto;
  std::string out;
  std::vector<std::string> class_names;
  int64_t classes = 0;            ///< 0: the class names' count, else the largest label + 1
  std::string source = "NumPy import";
  int gzip_level = 4;
};

struct NpzImportResult {
  int64_t classes = 0;
  int64_t train = 0, test = 0;     ///< samples per split
  int64_t c = 0, h = 0, w = 0;
  bool float32 = false;
  NpzLayout layout = NpzLayout::NCHW;  ///< as resolved (rank-4 x), NCHW otherwise
};

/// Writes the arrays as an lpsgd dataset ([N,C,H,W], NHWC transposed),
/// atomically (see DatasetWriter). Shapes, types, counts and labels are all
/// checked before anything is written.
NpzImportResult import_npz(const NpzImport& opt);

}  // namespace lpsgd::io
