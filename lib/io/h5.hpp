// Small RAII wrappers over the HDF5 C API, just what lpsgd's datasets and
// checkpoints need.
//
// Every handle closes itself; every failing call becomes an lpsgd::Error that
// names the file and the object ("data.h5: /train/x: ..."), with HDF5's own
// description of the failure appended. HDF5's habit of printing its error stack
// to stderr is switched off once, the first time any wrapper is used, so a
// failure prints lpsgd's one line and nothing else.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lpsgd::io::h5 {

/// Turns off HDF5's automatic error-stack printing for the calling thread
/// (HDF5 keeps one per thread); cheap to call again.
void silence_errors();

/// The innermost message of HDF5's current error stack on one line, or ""
/// when empty. A failed system call reads "file write failed: No space left
/// on device", not HDF5's multi-line record of it.
std::string last_error();

/// The errno of the failed system call on HDF5's current error stack, or 0.
int last_errno();

/// A move-only owner of one hid_t, closed with the matching H5?close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t id() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

/// Element type of a dataset as lpsgd sees it.
enum class Type { U8, F32, Int, Other };
const char* type_name(Type t);

class Dataspace;
class Attribute;

/// A file or a group: something that holds datasets, groups and attributes.
class Location {
 public:
  /// `file` is the path on disk, `path` the object inside it ("/" or "/train").
  Location(Handle h, std::string file, std::string path)
      : h_(std::move(h)), file_(std::move(file)), path_(std::move(path)) {}
  hid_t id() const { return h_.id(); }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  /// "file: /path" for messages.
  std::string where(const std::string& child = "") const;
  /// Opens the object `name` here (group or dataset) to read or write its attributes.
  Location object(const std::string& name) const;

  /// True when a link called `name` exists here (relative, no slashes needed).
  bool has(const std::string& name) const;
  bool has_attr(const std::string& name) const;

  void write_attr(const std::string& name, const std::string& value);
  /// A fixed-length string: stored with the attribute itself, so the 1.8+
  /// format's metadata checksums cover it (a variable-length string lives in
  /// HDF5's global heap, which has no checksum). Read back by read_attr_string.
  void write_attr_fixed(const std::string& name, const std::string& value);
  void write_attr(const std::string& name, const std::vector<std::string>& values);
  void write_attr(const std::string& name, const std::vector<double>& values);
  void write_attr(const std::string& name, int64_t value);
  void write_attr(const std::string& name, uint64_t value);
  void write_attr(const std::string& name, double value);
  /// Number of elements of attribute `name`, read from its dataspace alone
  /// (the values, e.g. strings in HDF5's global heap, are not touched).
  size_t attr_size(const std::string& name) const;
  std::string read_attr_string(const std::string& name) const;
  /// Like read_attr_string, but a variable-length string (kept in HDF5's
  /// global heap, outside the metadata checksums) is an error: for files whose
  /// format stores fixed-length strings (checkpoints).
  std::string read_attr_fixed_string(const std::string& name) const;
  std::vector<std::string> read_attr_strings(const std::string& name) const;
  std::vector<double> read_attr_doubles(const std::string& name) const;
  int64_t read_attr_int(const std::string& name) const;
  /// One unsigned 64-bit integer (stored as uint64, or as a non-negative signed integer).
  uint64_t read_attr_uint64(const std::string& name) const;
  /// One number (float or integer), as double.
  double read_attr_double(const std::string& name) const;
  /// Names of all attributes here, in creation order.
  std::vector<std::string> attr_names() const;
  /// Names of all links (groups, datasets) here, in name order.
  std::vector<std::string> link_names() const;

 private:
  Handle h_;
  std::string file_, path_;
};

class File : public Location {
 public:
  /// Opens an existing HDF5 file read-only. A missing file or one that is not
  /// HDF5 is a usage error naming the file.
  static File open_read(const std::string& path);
  /// Creates (truncates) a file for writing. With `checksummed_metadata` the
  /// file uses the HDF5 1.8+ object format, whose superblock, object headers
  /// (attributes included) and indexes carry checksums, so damage to them is
  /// reported on reading rather than read as garbage (files stay readable by
  /// h5py and HDF5 1.8 and later).
  static File create(const std::string& path, bool checksummed_metadata = false);
  /// Flushes everything written so far to disk.
  void flush();

 private:
  using Location::Location;
};

class Group : public Location {
 public:
  static Group create(Location& parent, const std::string& name);
  static Group open(const Location& parent, const std::string& name);

 private:
  using Location::Location;
};

class Dataspace {
 public:
  explicit Dataspace(Handle h) : h_(std::move(h)) {}
  /// A simple dataspace of the given extent.
  static Dataspace simple(const std::vector<hsize_t>& dims);
  hid_t id() const { return h_.id(); }
  std::vector<hsize_t> dims() const;
  /// Selects the block [start, start+count) along every axis (replacing).
  void select(const std::vector<hsize_t>& start, const std::vector<hsize_t>& count);
  /// Adds the block [start, start+count) along axis 0 (all of the other axes)
  /// to the selection; `first` replaces the selection instead.
  void select_rows(hsize_t start, hsize_t count, bool first);

 private:
  Handle h_;
};

/// An N-dimensional dataset; rows are along axis 0.
class Dataset {
 public:
  Dataset(Handle h, std::string where) : h_(std::move(h)), where_(std::move(where)) {}
  /// Creates a dataset chunked by `chunk_rows` rows along axis 0, optionally
  /// gzip-compressed (gzip_level 1..9, 0 = off).
  static Dataset create(Location& parent, const std::string& name, Type type,
                        const std::vector<hsize_t>& dims, hsize_t chunk_rows, int gzip_level);
  /// Creates an unchunked, uncompressed dataset (fastest to write and read
  /// whole); empty `dims` makes a scalar.
  static Dataset create_contiguous(Location& parent, const std::string& name, Type type,
                                   const std::vector<hsize_t>& dims);
  /// Opens a dataset; a missing one is a usage error naming file and path.
  /// `cache_bytes` > 0 sets the dataset's chunk cache size.
  static Dataset open(const Location& parent, const std::string& name, size_t cache_bytes = 0);

  hid_t id() const { return h_.id(); }
  const std::string& where() const { return where_; }
  std::vector<hsize_t> dims() const;
  Type type() const;
  /// Rows per chunk along axis 0, or 0 when the dataset is not chunked.
  hsize_t chunk_rows() const;
  Dataspace space() const;

  /// Reads rows [start, start+count) into `out` as `mem` (converting if needed).
  void read_rows(hsize_t start, hsize_t count, Type mem, void* out) const;
  /// Reads the rows selected in `file_space` into a contiguous buffer of `rows` rows.
  void read_selection(const Dataspace& file_space, hsize_t rows, Type mem, void* out) const;
  /// Writes rows [start, start+count) from `in`, which holds elements of type `mem`.
  void write_rows(hsize_t start, hsize_t count, Type mem, const void* in);
  /// Reads / writes the whole dataset (any rank, scalars included).
  void read_all(Type mem, void* out) const;
  void write_all(Type mem, const void* in);
  /// Number of elements (1 for a scalar).
  hsize_t size() const;
  /// Bytes of one element as stored.
  size_t element_bytes() const;
  /// Bytes of data the file holds for this dataset (compressed, if filtered).
  hsize_t storage_bytes() const;
  /// True when the dataset has a filter pipeline (compression, shuffle, ...).
  bool filtered() const;
  /// Byte offset of a contiguous dataset's data in the file (HADDR_UNDEF when
  /// chunked or not yet written): lets tests damage exactly the data.
  haddr_t file_offset() const;

 private:
  Handle h_;
  std::string where_;
};

}  // namespace lpsgd::io::h5
