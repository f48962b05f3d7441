#include "io/npz.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#if LPSGD_HAVE_LIBZIP
#include <zip.h>
#endif

#include "core/error.hpp"
#include "io/dataset.hpp"

namespace lpsgd::io {

namespace {

constexpr int64_t kMaxElements = int64_t{1} << 40;

// Text from a file, fit for a one-line message: bytes outside printable
// ASCII as \xNN, at most 40 characters.
std::string printable(const std::string& s) {
  std::string out;
  size_t i = 0;
  for (; i < s.size() && out.size() < 40; ++i) {
    const auto u = static_cast<unsigned char>(s[i]);
    if (u >= 0x20 && u < 0x7f) {
      out += s[i];
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", u);
      out += hex;
    }
  }
  return i < s.size() ? out + "..." : out;
}

bool host_little_endian() {
  const uint16_t one = 1;
  unsigned char b;
  std::memcpy(&b, &one, 1);
  return b == 1;
}

// ---- the header: a Python dict literal ---------------------------------------

class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& where) : s_(text), where_(where) {}

  void parse(NpyArray& a, bool& fortran) {
    bool have_descr = false, have_order = false, have_shape = false;
    ws();
    expect('{');
    for (;;) {
      ws();
      if (peek() == '}') break;
      const std::string key = string_literal("a key");
      ws();
      expect(':');
      ws();
      if (key == "descr") {
        if (peek() == '[')
          fail("dtype is a structured (record) type; only plain numeric arrays are read");
        a.descr = string_literal("the descr string");
        have_descr = true;
      } else if (key == "fortran_order") {
        fortran = boolean();
        have_order = true;
      } else if (key == "shape") {
        a.shape = tuple();
        have_shape = true;
      } else {
        fail("unknown header key '" + printable(key) + "'");
      }
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      ws();
      if (peek() != '}') fail("expected ',' or '}' after the value of '" + printable(key) + "'");
    }
    if (!have_descr || !have_order || !have_shape)
      fail(std::string("header lacks '") +
           (!have_descr ? "descr" : !have_order ? "fortran_order" : "shape") + "'");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    LPSGD_USAGE_ERROR(where_ << ": malformed .npy header (" << what << ")");
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string string_literal(const char* what) {
    const char q = peek();
    if (q != '\'' && q != '"') fail(std::string("expected ") + what + " in quotes");
    const size_t end = s_.find(q, i_ + 1);
    if (end == std::string::npos) fail("unterminated string");
    std::string out = s_.substr(i_ + 1, end - i_ - 1);
    i_ = end + 1;
    return out;
  }
  bool boolean() {
    if (s_.compare(i_, 4, "True") == 0) {
      i_ += 4;
      return true;
    }
    if (s_.compare(i_, 5, "False") == 0) {
      i_ += 5;
      return false;
    }
    fail("fortran_order is neither True nor False");
  }
  std::vector<int64_t> tuple() {
    expect('(');
    std::vector<int64_t> dims;
    for (;;) {
      ws();
      if (peek() == ')') break;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("shape holds a non-integer");
      int64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (v > (int64_t{1} << 50)) fail("implausible shape");
        v = v * 10 + (s_[i_++] - '0');
      }
      if (peek() == 'L') ++i_;  // Python 2's long
      dims.push_back(v);
      if (dims.size() > 32) fail("shape of more than 32 dimensions");
      ws();
      if (peek() == ',') ++i_;
      else if (peek() != ')') fail("expected ',' or ')' in the shape");
    }
    ++i_;
    return dims;
  }

  const std::string& s_;
  const std::string& where_;
  size_t i_ = 0;
};

const char* dtype_words(char kind, int size) {
  switch (kind) {
    case 'b': return "bool";
    case 'u': return size == 1 ? "uint8" : size == 2 ? "uint16" : size == 4 ? "uint32" : "uint64";
    case 'i': return size == 1 ? "int8" : size == 2 ? "int16" : size == 4 ? "int32" : "int64";
    case 'f': return size == 2 ? "float16" : size == 4 ? "float32" : "float64";
    default: return "?";
  }
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  if (s.size() == 1) os << ",";
  os << ")";
  return os.str();
}

// The whole of a plain file.
std::vector<uint8_t> read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) LPSGD_USAGE_ERROR(path << ": cannot open (" << std::strerror(errno) << ")");
  std::vector<uint8_t> data;
  size_t n = 0;
  for (size_t block = size_t{1} << 16;; block = std::min(block * 2, size_t{1} << 27)) {
    data.resize(n + block);
    const size_t got = std::fread(data.data() + n, 1, block, f);
    n += got;
    if (got < block) break;
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) LPSGD_USAGE_ERROR(path << ": read error");
  data.resize(n);
  return data;
}

}  // namespace

// ---- NpyArray ---------------------------------------------------------------------

int64_t NpyArray::count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string NpyArray::shape_text() const { return io::shape_text(shape); }

int64_t NpyArray::int_at(int64_t i) const {
  const uint8_t* p = data.data() + static_cast<size_t>(i) * static_cast<size_t>(itemsize);
  switch (itemsize) {
    case 1: return kind == 'i' ? int64_t{static_cast<int8_t>(*p)} : int64_t{*p};
    case 2: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return kind == 'i' ? int64_t{static_cast<int16_t>(v)} : int64_t{v};
    }
    case 4: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return kind == 'i' ? int64_t{static_cast<int32_t>(v)} : int64_t{v};
    }
    default: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      // uint64 beyond int64: reported as out of range by the caller, as -1.
      return kind == 'i' || v <= static_cast<uint64_t>(INT64_MAX) ? static_cast<int64_t>(v) : -1;
    }
  }
}

NpyArray parse_npy(const uint8_t* bytes, size_t size, const std::string& where) {
  static const unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (size < 6 || std::memcmp(bytes, kMagic, 6) != 0)
    LPSGD_USAGE_ERROR(where << ": not a .npy array (no \\x93NUMPY magic)");
  if (size < 10) LPSGD_USAGE_ERROR(where << ": truncated .npy (no complete header)");
  const int major = bytes[6], minor = bytes[7];
  size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = size_t{bytes[8]} | (size_t{bytes[9]} << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) LPSGD_USAGE_ERROR(where << ": truncated .npy (no complete header)");
    header_len = size_t{bytes[8]} | (size_t{bytes[9]} << 8) | (size_t{bytes[10]} << 16) |
                 (size_t{bytes[11]} << 24);
    start = 12;
  } else {
    LPSGD_USAGE_ERROR(where << ": unsupported .npy format version " << major << "." << minor
                            << " (1.0, 2.0 and 3.0 are read)");
  }
  if (header_len > size - start)
    LPSGD_USAGE_ERROR(where << ": truncated .npy (the header of " << header_len
                            << " bytes ends past the end of the " << size << "-byte array)");
  const std::string header(reinterpret_cast<const char*>(bytes + start), header_len);
  NpyArray a;
  bool fortran = false;
  HeaderParser(header, where).parse(a, fortran);

  // descr: byte order, kind, item size ("<f4", "|u1", ">i8", "=i4").
  const std::string& d = a.descr;
  const char order = d.empty() ? '\0' : d[0];
  int size_digits = 0;
  bool bad = d.size() < 3 || (order != '<' && order != '>' && order != '|' && order != '=');
  if (!bad) {
    for (size_t k = 2; k < d.size(); ++k) {
      if (!std::isdigit(static_cast<unsigned char>(d[k])) || size_digits > 100) {
        bad = true;
        break;
      }
      size_digits = size_digits * 10 + (d[k] - '0');
    }
  }
  a.kind = bad ? '\0' : d[1];
  a.itemsize = size_digits;
  const bool supported =
      !bad && ((a.kind == 'b' && a.itemsize == 1) ||
               ((a.kind == 'i' || a.kind == 'u') &&
                (a.itemsize == 1 || a.itemsize == 2 || a.itemsize == 4 || a.itemsize == 8)) ||
               (a.kind == 'f' && (a.itemsize == 4 || a.itemsize == 8)));
  if (!supported)
    LPSGD_USAGE_ERROR(where << ": unsupported dtype '" << printable(d)
                            << "' (numeric arrays are read: bool, int8..int64, uint8..uint64, "
                               "float32, float64)");
  if (fortran)
    LPSGD_USAGE_ERROR(where << ": array is stored in Fortran order (fortran_order: True), "
                               "which lpsgd does not transpose; save np.ascontiguousarray(a)");
  int64_t n = 1;
  bool empty = false;
  for (int64_t dim : a.shape) {
    if (dim == 0) empty = true;
    else if (n > kMaxElements / dim) LPSGD_USAGE_ERROR(where << ": implausible shape " << a.shape_text());
    else n *= dim;
  }
  if (empty) n = 0;
  const auto want = static_cast<size_t>(n) * static_cast<size_t>(a.itemsize);
  const size_t have = size - start - header_len;
  if (have != want)
    LPSGD_USAGE_ERROR(where << ": the header says shape " << a.shape_text() << " of " << d << " ("
                            << want << " bytes of data) but " << have << " bytes follow; the array is "
                            << (have < want ? "truncated" : "longer than its header says"));
  a.data.assign(bytes + start + header_len, bytes + size);
  const bool big = order == '>';
  if (a.itemsize > 1 && big == host_little_endian()) {
    for (size_t i = 0; i < a.data.size(); i += static_cast<size_t>(a.itemsize))
      std::reverse(a.data.begin() + static_cast<std::ptrdiff_t>(i),
                   a.data.begin() + static_cast<std::ptrdiff_t>(i) + a.itemsize);
  }
  return a;
}

// ---- files ------------------------------------------------------------------------

#if LPSGD_HAVE_LIBZIP
struct NpyFile::Zip {
  zip_t* z = nullptr;
  ~Zip() {
    if (z) zip_discard(z);
  }
};
bool npz_supported() { return true; }
#else
struct NpyFile::Zip {};
bool npz_supported() { return false; }
#endif

NpyFile::NpyFile(const std::string& path) : path_(path) {
  if (::access(path.c_str(), R_OK) != 0) LPSGD_USAGE_ERROR(path << ": no such file");
  unsigned char head[6] = {};
  {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) LPSGD_USAGE_ERROR(path << ": cannot open (" << std::strerror(errno) << ")");
    const size_t got = std::fread(head, 1, sizeof head, f);
    std::fclose(f);
    if (got == 0) LPSGD_USAGE_ERROR(path << ": empty file (not a .npy or .npz)");
  }
  if (head[0] == 0x93 && std::memcmp(head + 1, "NUMPY", 5) == 0) {
    names_ = {""};
    return;
  }
  if (head[0] != 'P' || head[1] != 'K')
    LPSGD_USAGE_ERROR(path << ": neither a .npy array nor an .npz archive (it starts with "
                              "neither \\x93NUMPY nor PK)");
  npz_ = true;
#if LPSGD_HAVE_LIBZIP
  int err = 0;
  zip_ = std::make_unique<Zip>();
  zip_->z = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &err);
  if (!zip_->z) {
    zip_error_t e;
    zip_error_init_with_code(&e, err);
    const std::string msg = zip_error_strerror(&e);
    zip_error_fini(&e);
    LPSGD_USAGE_ERROR(path << ": not a readable .npz (zip) archive: " << msg
                           << "; truncated or damaged?");
  }
  const zip_int64_t n = zip_get_num_entries(zip_->z, 0);
  for (zip_int64_t i = 0; i < n; ++i) {
    const char* name = zip_get_name(zip_->z, static_cast<zip_uint64_t>(i), 0);
    if (!name) continue;
    std::string s = name;
    if (s.size() > 4 && s.compare(s.size() - 4, 4, ".npy") == 0) names_.push_back(s.substr(0, s.size() - 4));
  }
  if (names_.empty()) LPSGD_USAGE_ERROR(path << ": an archive without .npy arrays (not an .npz?)");
#else
  LPSGD_USAGE_ERROR(path << ": reading .npz archives needs libzip, which this lpsgd was built "
                            "without (tools/setup.sh installs libzip-dev); or save each array "
                            "with np.save and give --train-x/--train-y");
#endif
}

NpyFile::~NpyFile() = default;

bool NpyFile::has(const std::string& name) const {
  return std::find(names_.begin(), names_.end(), name) != names_.end();
}

NpyArray NpyFile::read(const std::string& name) const {
  if (!npz_) {
    const std::vector<uint8_t> bytes = read_file(path_);
    return parse_npy(bytes.data(), bytes.size(), path_);
  }
  const std::string entry = name + ".npy", where = path_ + ": " + entry;
  if (!has(name)) LPSGD_USAGE_ERROR(path_ << ": no array '" << name << "'");
#if LPSGD_HAVE_LIBZIP
  const zip_int64_t index = zip_name_locate(zip_->z, entry.c_str(), 0);
  if (index < 0) LPSGD_USAGE_ERROR(path_ << ": no entry " << entry);
  zip_file_t* f = zip_fopen_index(zip_->z, static_cast<zip_uint64_t>(index), 0);
  if (!f)
    LPSGD_USAGE_ERROR(where << ": cannot be read (" << zip_strerror(zip_->z)
                            << "); damaged archive?");
  std::vector<uint8_t> bytes;
  size_t n = 0;
  std::string failure;
  for (size_t block = size_t{1} << 16;; block = std::min(block * 2, size_t{1} << 27)) {
    bytes.resize(n + block);
    const zip_int64_t got = zip_fread(f, bytes.data() + n, block);
    if (got < 0) {
      failure = zip_file_strerror(f);
      break;
    }
    n += static_cast<size_t>(got);
    if (got == 0) break;
  }
  zip_fclose(f);
  if (!failure.empty())
    LPSGD_USAGE_ERROR(where << ": cannot be read (" << failure << "); truncated or damaged archive?");
  return parse_npy(bytes.data(), n, where);
#else
  return {};
#endif
}

// ---- import -----------------------------------------------------------------------

NpzLayout parse_npz_layout(const std::string& text) {
  if (text == "auto") return NpzLayout::Auto;
  if (text == "nchw") return NpzLayout::NCHW;
  if (text == "nhwc") return NpzLayout::NHWC;
  LPSGD_USAGE_ERROR("--layout must be auto, nchw or nhwc, got '" << text << "'");
}

const char* npz_layout_name(NpzLayout l) {
  return l == NpzLayout::Auto ? "auto" : l == NpzLayout::NCHW ? "nchw" : "nhwc";
}

NpzLayout resolve_layout(const std::vector<int64_t>& shape, NpzLayout asked,
                         const std::string& where) {
  if (asked != NpzLayout::Auto) return asked;
  const auto channels = [](int64_t d) { return d == 1 || d == 3 || d == 4; };
  const bool first = channels(shape[1]), last = channels(shape[3]);
  if (last && !first) return NpzLayout::NHWC;
  if (first && !last) return NpzLayout::NCHW;
  LPSGD_USAGE_ERROR(where << ": cannot tell whether x of shape " << shape_text(shape)
                          << " is [N,C,H,W] or [N,H,W,C]; give --layout nchw or nhwc");
}

namespace {

// One split's arrays, checked and converted: x as stored in the dataset.
struct SplitData {
  std::string x_where, y_where;
  SplitShape shape;
  std::vector<uint8_t> x;  // [n,c,h,w] of uint8 or float32
  std::vector<int32_t> y;
};

// x to [N,C,H,W] uint8/float32.
void take_x(NpyArray&& a, const std::string& where, NpzLayout& layout, SplitData& out) {
  SplitShape& s = out.shape;
  if (a.kind == 'u' && a.itemsize == 1) s.type = SampleType::U8;
  else if (a.kind == 'f' && a.itemsize == 4) s.type = SampleType::F32;
  else
    LPSGD_USAGE_ERROR(where << ": x has dtype " << a.descr << " (" << dtype_words(a.kind, a.itemsize)
                            << "); lpsgd stores uint8 or float32: save x.astype(np.uint8) or "
                               "x.astype(np.float32)");
  const std::vector<int64_t>& d = a.shape;
  if (d.size() < 2 || d.size() > 4)
    LPSGD_USAGE_ERROR(where << ": x has rank " << d.size() << " (shape " << a.shape_text()
                            << "); expected [N,C,H,W], [N,H,W,C], [N,H,W] or [N,D]");
  for (int64_t v : d)
    if (v == 0)
      LPSGD_USAGE_ERROR(where << ": x of shape " << a.shape_text() << " holds no samples");
  s.n = d[0];
  bool nhwc = false;
  if (d.size() == 2) {
    s.c = 1, s.h = 1, s.w = d[1];
  } else if (d.size() == 3) {
    s.c = 1, s.h = d[1], s.w = d[2];
  } else {
    layout = resolve_layout(d, layout, where);
    nhwc = layout == NpzLayout::NHWC;
    if (nhwc) s.c = d[3], s.h = d[1], s.w = d[2];
    else s.c = d[1], s.h = d[2], s.w = d[3];
  }
  const size_t esize = static_cast<size_t>(a.itemsize);
  if (s.type == SampleType::F32) {
    for (int64_t i = 0; i < a.count(); ++i) {
      float v;
      std::memcpy(&v, a.data.data() + 4 * i, 4);
      if (!std::isfinite(v))
        LPSGD_USAGE_ERROR(where << ": x holds " << v << " in sample " << i / (s.c * s.h * s.w)
                                << "; the values must be finite");
    }
  }
  if (!nhwc) {
    out.x = std::move(a.data);
    return;
  }
  // [N,H,W,C] -> [N,C,H,W]
  out.x.resize(a.data.size());
  const int64_t plane = s.h * s.w;
  for (int64_t n = 0; n < s.n; ++n) {
    const uint8_t* in = a.data.data() + static_cast<size_t>(n * plane * s.c) * esize;
    uint8_t* o = out.x.data() + static_cast<size_t>(n * plane * s.c) * esize;
    for (int64_t p = 0; p < plane; ++p)
      for (int64_t c = 0; c < s.c; ++c)
        std::memcpy(o + static_cast<size_t>(c * plane + p) * esize,
                    in + static_cast<size_t>(p * s.c + c) * esize, esize);
  }
}

// y to int32 labels >= 0 (the upper bound is checked once the class count is known).
void take_y(const NpyArray& a, const std::string& where, int64_t n, SplitData& out) {
  if (a.kind != 'i' && a.kind != 'u')
    LPSGD_USAGE_ERROR(where << ": y has dtype " << a.descr << " (" << dtype_words(a.kind, a.itemsize)
                            << "); labels must be integers (int64, int32, uint8, ...)");
  const std::vector<int64_t>& d = a.shape;
  if (!(d.size() == 1 || (d.size() == 2 && d[1] == 1)))
    LPSGD_USAGE_ERROR(where << ": y has shape " << a.shape_text() << "; labels must be [N] (or [N, 1])");
  if (d[0] != n)
    LPSGD_USAGE_ERROR(where << ": y has " << d[0] << " labels but x has " << n << " samples ("
                            << out.x_where << ")");
  out.y.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = a.int_at(i);
    if (v < 0 || v > INT32_MAX)
      LPSGD_USAGE_ERROR(where << ": y holds label " << v << " at index " << i
                              << "; labels must be class numbers 0, 1, ...");
    out.y[static_cast<size_t>(i)] = static_cast<int32_t>(v);
  }
}

}  // namespace

NpzImportResult import_npz(const NpzImport& opt) {
  const bool train_npz = !opt.train.empty(), train_npy = !opt.train_x.empty() || !opt.train_y.empty();
  const bool test_npz = !opt.test.empty(), test_npy = !opt.test_x.empty() || !opt.test_y.empty();
  if (train_npz == train_npy)
    LPSGD_USAGE_ERROR("give the train split as --train F.npz or as --train-x X.npy --train-y Y.npy");
  if (train_npy && (opt.train_x.empty() || opt.train_y.empty()))
    LPSGD_USAGE_ERROR("--train-x and --train-y go together");
  if (test_npz && test_npy) LPSGD_USAGE_ERROR("give the test split as --test F.npz or as --test-x/--test-y, not both");
  if (test_npy && (opt.test_x.empty() || opt.test_y.empty()))
    LPSGD_USAGE_ERROR("--test-x and --test-y go together");

  NpzLayout layout = opt.layout;
  NpzImportResult res;
  // Reads a split's x and y from `xfile`/`yfile` (the same .npz, or two .npy).
  const auto load = [&](const std::string& xpath, const std::string& ypath,
                        const std::vector<std::vector<std::string>>& names, bool npz,
                        SplitData& out) {
    std::unique_ptr<NpyFile> xf = std::make_unique<NpyFile>(xpath);
    std::unique_ptr<NpyFile> yf;
    std::string xname, yname;
    if (npz) {
      if (!xf->is_npz())
        LPSGD_USAGE_ERROR(xpath << ": a .npy file (one array), not an .npz; give x and y as "
                                   "--train-x/--train-y (or --test-x/--test-y)");
      for (size_t k = 0; k < names.size() && xname.empty(); ++k)
        if (xf->has(names[k][0]) && xf->has(names[k][1])) xname = names[k][0], yname = names[k][1];
      if (xname.empty()) {
        std::string want, have;
        for (const auto& p : names) want += (want.empty() ? "" : " or ") + p[0] + "/" + p[1];
        for (const std::string& s : xf->names()) have += (have.empty() ? "" : ", ") + printable(s);
        LPSGD_USAGE_ERROR(xpath << ": no arrays " << want << " (it holds " << have << ")");
      }
    } else {
      if (xf->is_npz())
        LPSGD_USAGE_ERROR(xpath << ": an .npz archive, not a .npy array; give it as --train (or --test)");
      yf = std::make_unique<NpyFile>(ypath);
      if (yf->is_npz())
        LPSGD_USAGE_ERROR(ypath << ": an .npz archive, not a .npy array; give it as --train (or --test)");
    }
    out.x_where = npz ? xpath + ": " + xname + ".npy" : xpath;
    out.y_where = npz ? xpath + ": " + yname + ".npy" : ypath;
    take_x(xf->read(xname), out.x_where, layout, out);
    const NpyArray y = npz ? xf->read(yname) : yf->read("");
    take_y(y, out.y_where, out.shape.n, out);
  };

  SplitData train, test;
  bool have_test = false;
  if (train_npz) load(opt.train, "", {{"x", "y"}, {"x_train", "y_train"}}, true, train);
  else load(opt.train_x, opt.train_y, {}, false, train);
  res.layout = layout == NpzLayout::Auto ? NpzLayout::NCHW : layout;
  if (test_npz) {
    load(opt.test, "", {{"x_test", "y_test"}, {"x", "y"}}, true, test);
    have_test = true;
  } else if (test_npy) {
    load(opt.test_x, opt.test_y, {}, false, test);
    have_test = true;
  } else if (train_npz) {
    const NpyFile f(opt.train);
    const bool xt = f.has("x_test"), yt = f.has("y_test");
    if (xt != yt)
      LPSGD_USAGE_ERROR(opt.train << ": holds " << (xt ? "x_test but no y_test" : "y_test but no x_test")
                                  << "; a test split needs both");
    if (xt) {
      load(opt.train, "", {{"x_test", "y_test"}}, true, test);
      have_test = true;
    }
  }
  if (have_test) {
    const SplitShape &a = train.shape, &b = test.shape;
    if (a.c != b.c || a.h != b.h || a.w != b.w || a.type != b.type)
      LPSGD_USAGE_ERROR(test.x_where << ": test samples are " << b.c << "x" << b.h << "x" << b.w
                                     << " " << sample_type_name(b.type) << " but the train samples ("
                                     << train.x_where << ") are " << a.c << "x" << a.h << "x" << a.w
                                     << " " << sample_type_name(a.type));
  }

  // Classes: given, or the names' count, or the largest label + 1.
  int64_t max_label = -1;
  for (const SplitData* s : {&train, &test})
    for (int32_t v : s->y) max_label = std::max<int64_t>(max_label, v);
  int64_t classes = opt.classes;
  if (!opt.class_names.empty()) {
    if (classes > 0 && classes != static_cast<int64_t>(opt.class_names.size()))
      LPSGD_USAGE_ERROR(opt.class_names.size() << " class names given for --classes " << classes);
    classes = static_cast<int64_t>(opt.class_names.size());
  }
  if (classes <= 0) classes = max_label + 1;
  for (const SplitData* s : {&train, &test})
    for (size_t i = 0; i < s->y.size(); ++i)
      if (s->y[i] >= classes)
        LPSGD_USAGE_ERROR(s->y_where << ": label " << s->y[i] << " at index " << i
                                     << " out of range [0, " << classes << ")");

  DatasetWriter w(opt.out, classes, opt.class_names, opt.source, opt.gzip_level);
  for (SplitData* s : {&train, &test}) {
    if (s == &test && !have_test) break;
    w.begin_split(s == &train ? "train" : "test", s->shape);
    w.append(s->x.data(), s->y.data(), s->shape.n, s->y_where);
    w.end_split();
  }
  w.commit();
  res.classes = classes;
  res.train = train.shape.n;
  res.test = have_test ? test.shape.n : 0;
  res.c = train.shape.c, res.h = train.shape.h, res.w = train.shape.w;
  res.float32 = train.shape.type == SampleType::F32;
  return res;
}

}  // namespace lpsgd::io
