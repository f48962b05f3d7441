#include "io/h5.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"

namespace lpsgd::io::h5 {

namespace {

hid_t mem_type(Type t) {
  switch (t) {
    case Type::U8: return H5T_NATIVE_UINT8;
    case Type::F32: return H5T_NATIVE_FLOAT;
    case Type::Int: return H5T_NATIVE_INT32;
    case Type::Other: break;
  }
  LPSGD_THROW("no memory type for an 'other' HDF5 type");
}

// Little-endian on disk whatever the host.
hid_t file_type(Type t) {
  switch (t) {
    case Type::U8: return H5T_STD_U8LE;
    case Type::F32: return H5T_IEEE_F32LE;
    case Type::Int: return H5T_STD_I32LE;
    case Type::Other: break;
  }
  LPSGD_THROW("no file type for an 'other' HDF5 type");
}

std::string failure(const char* what) {
  std::string msg = std::string(what) + " failed";
  const std::string detail = last_error();
  if (!detail.empty()) msg += " (" + detail + ")";
  return msg;
}

// Walking downward ends at the function that first saw the failure, whose
// description is the specific one ("incorrect metadata checksum ...", "truncated
// file: eof = ..."), not the API's ("unable to read attribute").
herr_t keep_innermost(unsigned, const H5E_error2_t* err, void* data) {
  if (err->desc && *err->desc) *static_cast<std::string*>(data) = err->desc;
  return 0;
}

// The errno in a description of a failed system call ("file write failed:
// time = ..., errno = 28, error message = ..."), 0 when there is none.
int errno_in(const std::string& desc) {
  const auto at = desc.find("errno = ");
  if (at == std::string::npos) return 0;
  return std::atoi(desc.c_str() + at + 8);
}

// One line in the library's own words. A failed system call's description is
// long and multi-line (ctime()'s newline, buffer addresses, offsets): it
// becomes its first phrase and the errno's text, "file write failed: No space
// left on device".
std::string condense(const std::string& desc) {
  if (const int err = errno_in(desc); err > 0) {
    const auto colon = desc.find(':');
    const std::string head = colon == std::string::npos ? std::string() : desc.substr(0, colon);
    return (head.empty() ? "" : head + ": ") + std::strerror(err);
  }
  std::string out;
  for (char c : desc) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
    out += c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string innermost() {
  std::string out;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, keep_innermost, &out);
  return out;
}

herr_t collect_name(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

herr_t collect_link(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

// Throws a runtime error naming `where` unless rc >= 0 (with the errno of a
// failed system call, when HDF5 reports one).
#define H5_CHECK(rc, where, what)                                        \
  do {                                                                   \
    if ((rc) < 0) {                                                      \
      const int h5_errno_ = last_errno();                                \
      LPSGD_THROW_ERRNO(h5_errno_, (where) << ": " << failure(what));    \
    }                                                                    \
  } while (0)

}  // namespace

void silence_errors() {
  // The thread-safe HDF5 build keeps one error stack (and print setting) per thread.
  thread_local bool silenced = false;
  if (!silenced) H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  silenced = true;
}

std::string last_error() { return condense(innermost()); }

int last_errno() { return errno_in(innermost()); }

const char* type_name(Type t) {
  switch (t) {
    case Type::U8: return "uint8";
    case Type::F32: return "float32";
    case Type::Int: return "integer";
    case Type::Other: return "other";
  }
  return "?";
}

// ---- Location -------------------------------------------------------------------

std::string Location::where(const std::string& child) const {
  std::string p = path_;
  if (!child.empty()) p = (p == "/" ? "/" : p + "/") + child;
  return file_ + ": " + p;
}

Location Location::object(const std::string& name) const {
  Handle h(H5Oopen(id(), name.c_str(), H5P_DEFAULT), H5Oclose);
  if (!h.valid()) LPSGD_USAGE_ERROR(where(name) << ": no such object");
  return Location(std::move(h), file_, path_ == "/" ? "/" + name : path_ + "/" + name);
}

// A failed lookup (damaged metadata) is an error, not "absent".
bool Location::has(const std::string& name) const {
  const htri_t rc = H5Lexists(id(), name.c_str(), H5P_DEFAULT);
  H5_CHECK(rc, where(name), "H5Lexists");
  return rc > 0;
}

bool Location::has_attr(const std::string& name) const {
  const htri_t rc = H5Aexists(id(), name.c_str());
  H5_CHECK(rc, where() + " attribute " + name, "H5Aexists");
  return rc > 0;
}

namespace {

// Creates attribute `name` (replacing one of that name) and writes `data`.
void put_attr(Location& loc, const std::string& name, hid_t type, const Dataspace& space,
              const void* data) {
  if (loc.has_attr(name)) H5Adelete(loc.id(), name.c_str());
  Handle a(H5Acreate2(loc.id(), name.c_str(), type, space.id(), H5P_DEFAULT, H5P_DEFAULT),
           H5Aclose);
  H5_CHECK(a.id(), loc.where() + " attribute " + name, "H5Acreate2");
  H5_CHECK(H5Awrite(a.id(), type, data), loc.where() + " attribute " + name, "H5Awrite");
}

Handle open_attr(const Location& loc, const std::string& name) {
  if (!loc.has_attr(name))
    LPSGD_USAGE_ERROR(loc.where() << " has no attribute '" << name << "'");
  Handle a(H5Aopen(loc.id(), name.c_str(), H5P_DEFAULT), H5Aclose);
  H5_CHECK(a.id(), loc.where() + " attribute " + name, "H5Aopen");
  return a;
}

// Attributes lpsgd reads are small (names, per-channel statistics, scalars);
// a count or size beyond these is damage, refused before any buffer is sized
// from it.
constexpr hssize_t kMaxAttrElements = hssize_t{1} << 24;
constexpr size_t kMaxAttrBytes = size_t{1} << 28;

// Elements of attribute `a` (named `what` in messages), checked against the limits above.
size_t attr_count(const Handle& a, const std::string& what) {
  Handle space(H5Aget_space(a.id()), H5Sclose);
  H5_CHECK(space.id(), what, "H5Aget_space");
  const hssize_t n = H5Sget_simple_extent_npoints(space.id());
  H5_CHECK(n, what, "H5Sget_simple_extent_npoints");
  Handle type(H5Aget_type(a.id()), H5Tclose);
  H5_CHECK(type.id(), what, "H5Aget_type");
  const size_t size = H5Tget_size(type.id());
  if (n > kMaxAttrElements || size == 0 || static_cast<size_t>(n) > kMaxAttrBytes / size)
    LPSGD_USAGE_ERROR(what << " has " << n << " elements of " << size
                           << " bytes, more than lpsgd reads from an attribute (damaged file?)");
  return static_cast<size_t>(n);
}

Handle vlen_string_type() {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.id(), H5T_VARIABLE);
  H5Tset_cset(t.id(), H5T_CSET_UTF8);
  return t;
}

}  // namespace

void Location::write_attr(const std::string& name, const std::string& value) {
  Handle t = vlen_string_type();
  Dataspace space(Handle(H5Screate(H5S_SCALAR), H5Sclose));
  const char* p = value.c_str();
  put_attr(*this, name, t.id(), space, &p);
}

void Location::write_attr_fixed(const std::string& name, const std::string& value) {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.id(), std::max<size_t>(1, value.size()));  // HDF5 has no zero-size strings
  H5Tset_strpad(t.id(), H5T_STR_NULLPAD);
  H5Tset_cset(t.id(), H5T_CSET_UTF8);
  Dataspace space(Handle(H5Screate(H5S_SCALAR), H5Sclose));
  std::string padded = value;
  padded.resize(std::max<size_t>(1, value.size()), '\0');
  put_attr(*this, name, t.id(), space, padded.data());
}

void Location::write_attr(const std::string& name, const std::vector<std::string>& values) {
  Handle t = vlen_string_type();
  std::vector<const char*> ptrs;
  for (const auto& v : values) ptrs.push_back(v.c_str());
  put_attr(*this, name, t.id(), Dataspace::simple({values.size()}), ptrs.data());
}

void Location::write_attr(const std::string& name, const std::vector<double>& values) {
  put_attr(*this, name, H5T_NATIVE_DOUBLE, Dataspace::simple({values.size()}), values.data());
}

void Location::write_attr(const std::string& name, int64_t value) {
  Dataspace space(Handle(H5Screate(H5S_SCALAR), H5Sclose));
  put_attr(*this, name, H5T_NATIVE_INT64, space, &value);
}

void Location::write_attr(const std::string& name, uint64_t value) {
  Dataspace space(Handle(H5Screate(H5S_SCALAR), H5Sclose));
  put_attr(*this, name, H5T_NATIVE_UINT64, space, &value);
}

void Location::write_attr(const std::string& name, double value) {
  Dataspace space(Handle(H5Screate(H5S_SCALAR), H5Sclose));
  put_attr(*this, name, H5T_NATIVE_DOUBLE, space, &value);
}

std::vector<std::string> Location::read_attr_strings(const std::string& name) const {
  Handle a = open_attr(*this, name);
  const std::string what = where() + " attribute " + name;
  Handle ftype(H5Aget_type(a.id()), H5Tclose);
  if (H5Tget_class(ftype.id()) != H5T_STRING)
    LPSGD_USAGE_ERROR(what << " is not a string attribute");
  const size_t n = attr_count(a, what);
  std::vector<std::string> out;
  if (H5Tis_variable_str(ftype.id()) > 0) {
    Handle mtype = vlen_string_type();
    std::vector<char*> ptrs(n, nullptr);
    H5_CHECK(H5Aread(a.id(), mtype.id(), ptrs.data()), what, "H5Aread");
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    Handle space(H5Aget_space(a.id()), H5Sclose);
    H5Dvlen_reclaim(mtype.id(), space.id(), H5P_DEFAULT, ptrs.data());
  } else {  // fixed-length strings, e.g. numpy 'S' arrays written by h5py
    const size_t len = H5Tget_size(ftype.id());
    // Same size, padding and character set in memory: HDF5 converts neither
    // between character sets nor, without losing the last byte, to NULLTERM.
    Handle mtype(H5Tcopy(ftype.id()), H5Tclose);
    std::vector<char> buf(n * len);
    H5_CHECK(H5Aread(a.id(), mtype.id(), buf.data()), what, "H5Aread");
    for (size_t i = 0; i < n; ++i) {
      std::string s(buf.data() + i * len, len);
      s.resize(s.find('\0') == std::string::npos ? len : s.find('\0'));
      out.push_back(s);
    }
  }
  return out;
}

size_t Location::attr_size(const std::string& name) const {
  return attr_count(open_attr(*this, name), where() + " attribute " + name);
}

std::string Location::read_attr_fixed_string(const std::string& name) const {
  {
    Handle a = open_attr(*this, name);
    Handle ftype(H5Aget_type(a.id()), H5Tclose);
    H5_CHECK(ftype.id(), where() + " attribute " + name, "H5Aget_type");
    if (H5Tget_class(ftype.id()) == H5T_STRING && H5Tis_variable_str(ftype.id()) > 0)
      LPSGD_USAGE_ERROR(where() << " attribute " << name
                                << " is a variable-length string, expected a fixed-length one");
  }
  return read_attr_string(name);
}

std::string Location::read_attr_string(const std::string& name) const {
  auto v = read_attr_strings(name);
  if (v.size() != 1) LPSGD_USAGE_ERROR(where() << " attribute " << name << " is not one string");
  return v[0];
}

std::vector<double> Location::read_attr_doubles(const std::string& name) const {
  Handle a = open_attr(*this, name);
  Handle ftype(H5Aget_type(a.id()), H5Tclose);
  const H5T_class_t cls = H5Tget_class(ftype.id());
  if (cls != H5T_FLOAT && cls != H5T_INTEGER)
    LPSGD_USAGE_ERROR(where() << " attribute " << name << " is not numeric");
  std::vector<double> out(attr_count(a, where() + " attribute " + name));
  H5_CHECK(H5Aread(a.id(), H5T_NATIVE_DOUBLE, out.data()), where() + " attribute " + name,
           "H5Aread");
  return out;
}

int64_t Location::read_attr_int(const std::string& name) const {
  Handle a = open_attr(*this, name);
  Handle ftype(H5Aget_type(a.id()), H5Tclose);
  if (H5Tget_class(ftype.id()) != H5T_INTEGER || attr_count(a, where() + " attribute " + name) != 1)
    LPSGD_USAGE_ERROR(where() << " attribute " << name << " is not one integer");
  int64_t v = 0;
  H5_CHECK(H5Aread(a.id(), H5T_NATIVE_INT64, &v), where() + " attribute " + name, "H5Aread");
  return v;
}

uint64_t Location::read_attr_uint64(const std::string& name) const {
  Handle a = open_attr(*this, name);
  Handle ftype(H5Aget_type(a.id()), H5Tclose);
  if (H5Tget_class(ftype.id()) != H5T_INTEGER || attr_count(a, where() + " attribute " + name) != 1)
    LPSGD_USAGE_ERROR(where() << " attribute " << name << " is not one integer");
  if (H5Tget_sign(ftype.id()) != H5T_SGN_NONE) {
    const int64_t v = read_attr_int(name);
    if (v < 0) LPSGD_USAGE_ERROR(where() << " attribute " << name << " is negative: " << v);
    return static_cast<uint64_t>(v);
  }
  uint64_t v = 0;
  H5_CHECK(H5Aread(a.id(), H5T_NATIVE_UINT64, &v), where() + " attribute " + name, "H5Aread");
  return v;
}

double Location::read_attr_double(const std::string& name) const {
  const std::vector<double> v = read_attr_doubles(name);
  if (v.size() != 1) LPSGD_USAGE_ERROR(where() << " attribute " << name << " is not one number");
  return v[0];
}

std::vector<std::string> Location::attr_names() const {
  std::vector<std::string> names;
  H5_CHECK(H5Aiterate2(id(), H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_name, &names), where(),
           "H5Aiterate2");
  return names;
}

std::vector<std::string> Location::link_names() const {
  std::vector<std::string> names;
  H5_CHECK(H5Literate(id(), H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_link, &names), where(),
           "H5Literate");
  return names;
}

// ---- File, Group ----------------------------------------------------------------

File File::open_read(const std::string& path) {
  silence_errors();
  if (::access(path.c_str(), F_OK) != 0) LPSGD_USAGE_ERROR(path << ": no such file");
  if (::access(path.c_str(), R_OK) != 0) LPSGD_USAGE_ERROR(path << ": not readable");
  if (H5Fis_hdf5(path.c_str()) <= 0) LPSGD_USAGE_ERROR(path << ": not an HDF5 file");
  Handle h(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!h.valid()) LPSGD_USAGE_ERROR(path << ": cannot open HDF5 file (" << last_error() << ")");
  return File(std::move(h), path, "/");
}

File File::create(const std::string& path, bool checksummed_metadata) {
  silence_errors();
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (checksummed_metadata)
    H5_CHECK(H5Pset_libver_bounds(fapl.id(), H5F_LIBVER_V18, H5F_LIBVER_LATEST), path,
             "H5Pset_libver_bounds");
  Handle h(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id()), H5Fclose);
  if (!h.valid())
    ::lpsgd::detail::throw_error(path + ": cannot create HDF5 file (" + last_error() + ")",
                                 __FILE__, __LINE__, ErrorKind::Usage, last_errno());
  return File(std::move(h), path, "/");
}

void File::flush() { H5_CHECK(H5Fflush(id(), H5F_SCOPE_GLOBAL), where(), "H5Fflush"); }

Group Group::create(Location& parent, const std::string& name) {
  Handle h(H5Gcreate2(parent.id(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
           H5Gclose);
  H5_CHECK(h.id(), parent.where(name), "H5Gcreate2");
  const std::string p = parent.path() == "/" ? "/" + name : parent.path() + "/" + name;
  return Group(std::move(h), parent.file(), p);
}

Group Group::open(const Location& parent, const std::string& name) {
  if (!parent.has(name)) LPSGD_USAGE_ERROR(parent.where(name) << ": no such group");
  Handle h(H5Gopen2(parent.id(), name.c_str(), H5P_DEFAULT), H5Gclose);
  if (!h.valid()) {
    const std::string detail = last_error();
    LPSGD_USAGE_ERROR(parent.where(name) << ": not a group"
                                         << (detail.empty() ? "" : " (" + detail + ")"));
  }
  const std::string p = parent.path() == "/" ? "/" + name : parent.path() + "/" + name;
  return Group(std::move(h), parent.file(), p);
}

// ---- Dataspace ------------------------------------------------------------------

Dataspace Dataspace::simple(const std::vector<hsize_t>& dims) {
  Handle h(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  if (!h.valid()) LPSGD_THROW("H5Screate_simple failed");
  return Dataspace(std::move(h));
}

std::vector<hsize_t> Dataspace::dims() const {
  const int rank = H5Sget_simple_extent_ndims(id());
  if (rank < 0) LPSGD_THROW(failure("H5Sget_simple_extent_ndims"));
  std::vector<hsize_t> d(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(id(), d.data(), nullptr);
  return d;
}

void Dataspace::select(const std::vector<hsize_t>& start, const std::vector<hsize_t>& count) {
  if (H5Sselect_hyperslab(id(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0)
    LPSGD_THROW(failure("H5Sselect_hyperslab"));
}

void Dataspace::select_rows(hsize_t start, hsize_t count, bool first) {
  std::vector<hsize_t> s = dims(), c = s;
  std::fill(s.begin(), s.end(), 0);
  s[0] = start;
  c[0] = count;
  if (H5Sselect_hyperslab(id(), first ? H5S_SELECT_SET : H5S_SELECT_OR, s.data(), nullptr,
                          c.data(), nullptr) < 0)
    LPSGD_THROW(failure("H5Sselect_hyperslab"));
}

// ---- Dataset --------------------------------------------------------------------

Dataset Dataset::create(Location& parent, const std::string& name, Type type,
                        const std::vector<hsize_t>& dims, hsize_t chunk_rows, int gzip_level) {
  const std::string where = parent.where(name);
  Dataspace space = Dataspace::simple(dims);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  std::vector<hsize_t> chunk = dims;
  chunk[0] = std::max<hsize_t>(1, std::min(chunk_rows, dims[0]));
  for (hsize_t& c : chunk) c = std::max<hsize_t>(c, 1);
  H5_CHECK(H5Pset_chunk(dcpl.id(), static_cast<int>(chunk.size()), chunk.data()), where,
           "H5Pset_chunk");
  if (gzip_level > 0) H5_CHECK(H5Pset_deflate(dcpl.id(), static_cast<unsigned>(gzip_level)),
                               where, "H5Pset_deflate");
  Handle h(H5Dcreate2(parent.id(), name.c_str(), file_type(type), space.id(), H5P_DEFAULT,
                      dcpl.id(), H5P_DEFAULT),
           H5Dclose);
  H5_CHECK(h.id(), where, "H5Dcreate2");
  return Dataset(std::move(h), where);
}

Dataset Dataset::create_contiguous(Location& parent, const std::string& name, Type type,
                                   const std::vector<hsize_t>& dims) {
  const std::string where = parent.where(name);
  Dataspace space = dims.empty() ? Dataspace(Handle(H5Screate(H5S_SCALAR), H5Sclose))
                                 : Dataspace::simple(dims);
  Handle h(H5Dcreate2(parent.id(), name.c_str(), file_type(type), space.id(), H5P_DEFAULT,
                      H5P_DEFAULT, H5P_DEFAULT),
           H5Dclose);
  H5_CHECK(h.id(), where, "H5Dcreate2");
  return Dataset(std::move(h), where);
}

Dataset Dataset::open(const Location& parent, const std::string& name, size_t cache_bytes) {
  const std::string where = parent.where(name);
  if (!parent.has(name)) LPSGD_USAGE_ERROR(where << ": missing dataset");
  Handle dapl(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
  if (cache_bytes > 0)
    H5Pset_chunk_cache(dapl.id(), 12421 /* prime, many slots */, cache_bytes, 1.0);
  Handle h(H5Dopen2(parent.id(), name.c_str(), dapl.id()), H5Dclose);
  if (!h.valid()) {
    const std::string detail = last_error();
    LPSGD_USAGE_ERROR(where << ": not a dataset" << (detail.empty() ? "" : " (" + detail + ")"));
  }
  return Dataset(std::move(h), where);
}

Dataspace Dataset::space() const {
  Handle s(H5Dget_space(id()), H5Sclose);
  H5_CHECK(s.id(), where_, "H5Dget_space");
  return Dataspace(std::move(s));
}

std::vector<hsize_t> Dataset::dims() const { return space().dims(); }

Type Dataset::type() const {
  Handle t(H5Dget_type(id()), H5Tclose);
  H5_CHECK(t.id(), where_, "H5Dget_type");
  const H5T_class_t cls = H5Tget_class(t.id());
  const size_t size = H5Tget_size(t.id());
  if (cls == H5T_INTEGER && size == 1 && H5Tget_sign(t.id()) == H5T_SGN_NONE) return Type::U8;
  if (cls == H5T_INTEGER) return Type::Int;
  if (cls == H5T_FLOAT && size == 4) return Type::F32;
  return Type::Other;
}

hsize_t Dataset::chunk_rows() const {
  Handle dcpl(H5Dget_create_plist(id()), H5Pclose);
  if (H5Pget_layout(dcpl.id()) != H5D_CHUNKED) return 0;
  std::vector<hsize_t> chunk(dims().size());
  H5_CHECK(H5Pget_chunk(dcpl.id(), static_cast<int>(chunk.size()), chunk.data()), where_,
           "H5Pget_chunk");
  return chunk.empty() ? 0 : chunk[0];
}

void Dataset::read_selection(const Dataspace& file_space, hsize_t rows, Type mem,
                             void* out) const {
  std::vector<hsize_t> d = file_space.dims();
  d[0] = rows;
  Dataspace mspace = Dataspace::simple(d);
  H5_CHECK(H5Dread(id(), mem_type(mem), mspace.id(), file_space.id(), H5P_DEFAULT, out), where_,
           "H5Dread");
}

void Dataset::read_rows(hsize_t start, hsize_t count, Type mem, void* out) const {
  if (count == 0) return;
  Dataspace fspace = space();
  fspace.select_rows(start, count, true);
  read_selection(fspace, count, mem, out);
}

void Dataset::write_rows(hsize_t start, hsize_t count, Type mem, const void* in) {
  if (count == 0) return;
  Dataspace fspace = space();
  fspace.select_rows(start, count, true);
  std::vector<hsize_t> d = fspace.dims();
  d[0] = count;
  Dataspace mspace = Dataspace::simple(d);
  H5_CHECK(H5Dwrite(id(), mem_type(mem), mspace.id(), fspace.id(), H5P_DEFAULT, in), where_,
           "H5Dwrite");
}

void Dataset::read_all(Type mem, void* out) const {
  if (size() == 0) return;
  H5_CHECK(H5Dread(id(), mem_type(mem), H5S_ALL, H5S_ALL, H5P_DEFAULT, out), where_, "H5Dread");
}

void Dataset::write_all(Type mem, const void* in) {
  if (size() == 0) return;
  H5_CHECK(H5Dwrite(id(), mem_type(mem), H5S_ALL, H5S_ALL, H5P_DEFAULT, in), where_, "H5Dwrite");
}

hsize_t Dataset::size() const {
  const hssize_t n = H5Sget_simple_extent_npoints(space().id());
  H5_CHECK(n, where_, "H5Sget_simple_extent_npoints");
  return static_cast<hsize_t>(n);
}

size_t Dataset::element_bytes() const {
  Handle t(H5Dget_type(id()), H5Tclose);
  H5_CHECK(t.id(), where_, "H5Dget_type");
  return H5Tget_size(t.id());
}

hsize_t Dataset::storage_bytes() const { return H5Dget_storage_size(id()); }

bool Dataset::filtered() const {
  Handle dcpl(H5Dget_create_plist(id()), H5Pclose);
  H5_CHECK(dcpl.id(), where_, "H5Dget_create_plist");
  const int n = H5Pget_nfilters(dcpl.id());
  H5_CHECK(n, where_, "H5Pget_nfilters");
  return n > 0;
}

haddr_t Dataset::file_offset() const { return H5Dget_offset(id()); }

}  // namespace lpsgd::io::h5
