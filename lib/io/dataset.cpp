#include "io/dataset.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace lpsgd::io {

const char* sample_type_name(SampleType t) { return t == SampleType::U8 ? "uint8" : "float32"; }

// ---- reading --------------------------------------------------------------------

DatasetAttrs read_attrs(const h5::File& file, int64_t channels, bool strings) {
  DatasetAttrs a;
  if (!file.has_attr("num_classes"))
    LPSGD_USAGE_ERROR(file.file() << ": missing attribute num_classes on / (not an lpsgd "
                                  << "dataset? make one with 'lpsgd data import-idx' or 'synth')");
  a.num_classes = file.read_attr_int("num_classes");
  if (a.num_classes < 1)
    LPSGD_USAGE_ERROR(file.file() << ": attribute num_classes must be positive, got "
                                  << a.num_classes);
  if (file.has_attr("class_names")) {
    // Counted from the dataspace before any string is read.
    const size_t names = file.attr_size("class_names");
    if (static_cast<int64_t>(names) != a.num_classes)
      LPSGD_USAGE_ERROR(file.file() << ": attribute class_names has " << names
                                    << " names but num_classes is " << a.num_classes);
    if (strings) a.class_names = file.read_attr_strings("class_names");
  }
  auto per_channel = [&](const char* name, double dflt) {
    std::vector<double> v(static_cast<size_t>(channels), dflt);
    if (!file.has_attr(name)) return v;
    std::vector<double> got = file.read_attr_doubles(name);
    if (got.size() == 1) got.assign(static_cast<size_t>(channels), got[0]);
    if (static_cast<int64_t>(got.size()) != channels)
      LPSGD_USAGE_ERROR(file.file() << ": attribute " << name << " has " << got.size()
                                    << " values but x has " << channels << " channels");
    return got;
  };
  a.mean = per_channel("mean", 0.0);
  a.std = per_channel("std", 1.0);
  for (double s : a.std)
    if (!(s > 0) || !std::isfinite(s))
      LPSGD_USAGE_ERROR(file.file() << ": attribute std must be positive and finite, got " << s);
  if (strings && file.has_attr("source")) a.source = file.read_attr_string("source");
  return a;
}

void input_scaling(SampleType type, const DatasetAttrs& attrs, int64_t channels,
                   std::vector<float>& scale, std::vector<float>& shift) {
  const float unit = type == SampleType::U8 ? 1.0f / 255.0f : 1.0f;
  scale.clear();
  shift.clear();
  for (int64_t c = 0; c < channels; ++c) {
    const auto sd = static_cast<float>(attrs.std.at(static_cast<size_t>(c)));
    const auto mu = static_cast<float>(attrs.mean.at(static_cast<size_t>(c)));
    scale.push_back(unit / sd);
    shift.push_back(-mu / sd);
  }
}

std::vector<std::string> split_names(const h5::File& file) {
  std::vector<std::string> out;
  for (const char* s : {"train", "test"})
    if (file.has(s)) out.push_back(s);
  return out;
}

namespace {

// Data a dataset's dims claim, checked against the bytes the file holds for it
// before any buffer is sized from the dims: a damaged header claiming
// terabytes is refused here rather than allocated (HDF5 would read the
// missing part as fill values). Unfiltered data must be all there; filtered
// (gzip) data cannot shrink more than deflate's 1032:1.
void check_storage(const h5::Dataset& d, uint64_t claimed_bytes) {
  if (claimed_bytes == 0) return;
  const uint64_t stored = d.storage_bytes();
  constexpr uint64_t kMaxRatio = 1100;  // deflate's 1032:1, plus chunk overheads
  const bool filtered = d.filtered();
  if (filtered ? stored < claimed_bytes / kMaxRatio : stored < claimed_bytes)
    LPSGD_USAGE_ERROR(d.where() << ": its shape claims " << claimed_bytes << " bytes but the file "
                                << "holds only " << stored << (filtered ? " compressed" : "")
                                << " bytes of it (damaged file?)");
}

}  // namespace

Split open_split(const std::string& path, const std::string& name, size_t x_cache_bytes,
                 bool strings) {
  Split s;
  s.path = path;
  s.name = name;
  s.file = std::make_unique<h5::File>(h5::File::open_read(path));
  if (!s.file->has(name))
    LPSGD_USAGE_ERROR(path << ": missing split /" << name << " (expected datasets /" << name
                           << "/x and /" << name << "/y)");
  h5::Group g = h5::Group::open(*s.file, name);
  s.x = std::make_unique<h5::Dataset>(h5::Dataset::open(g, "x", x_cache_bytes));
  h5::Dataset y = h5::Dataset::open(g, "y");

  const h5::Type xt = s.x->type();
  if (xt != h5::Type::U8 && xt != h5::Type::F32)
    LPSGD_USAGE_ERROR(s.x->where() << ": element type must be uint8 or float32, got "
                                   << h5::type_name(xt));
  const std::vector<hsize_t> xd = s.x->dims();
  if (xd.size() != 4)
    LPSGD_USAGE_ERROR(s.x->where() << ": wrong rank " << xd.size()
                                   << ", expected 4 dimensions [N,C,H,W]");
  if (xd[1] == 0 || xd[2] == 0 || xd[3] == 0)
    LPSGD_USAGE_ERROR(s.x->where() << ": wrong shape, C, H and W must be positive");
  // Sizes from the file, multiplied without wrapping around: samples up to
  // 2^40 bytes, splits up to 2^62 bytes (real ones are far below either).
  uint64_t sample_bytes = xt == h5::Type::U8 ? 1 : 4, x_bytes = 0;
  for (int k = 1; k < 4; ++k)
    if (__builtin_mul_overflow(sample_bytes, xd[k], &sample_bytes) ||
        sample_bytes > (uint64_t{1} << 40))
      LPSGD_USAGE_ERROR(s.x->where() << ": implausible sample shape " << xd[1] << "x" << xd[2]
                                     << "x" << xd[3]);
  if (__builtin_mul_overflow(sample_bytes, xd[0], &x_bytes) || x_bytes > (uint64_t{1} << 62))
    LPSGD_USAGE_ERROR(s.x->where() << ": implausible number of samples " << xd[0]);
  check_storage(*s.x, x_bytes);
  s.shape = SplitShape{static_cast<int64_t>(xd[0]), static_cast<int64_t>(xd[1]),
                       static_cast<int64_t>(xd[2]), static_cast<int64_t>(xd[3]),
                       xt == h5::Type::U8 ? SampleType::U8 : SampleType::F32};
  s.chunk_rows = static_cast<int64_t>(s.x->chunk_rows());

  if (y.type() != h5::Type::Int && y.type() != h5::Type::U8)
    LPSGD_USAGE_ERROR(y.where() << ": labels must be integers, got " << h5::type_name(y.type()));
  const std::vector<hsize_t> yd = y.dims();
  if (yd.size() != 1)
    LPSGD_USAGE_ERROR(y.where() << ": wrong rank " << yd.size() << ", expected 1 dimension [N]");
  if (yd[0] != xd[0])
    LPSGD_USAGE_ERROR(y.where() << ": length mismatch, " << yd[0] << " labels but x has " << xd[0]
                                << " samples");

  uint64_t y_bytes = 0;
  if (__builtin_mul_overflow(yd[0], uint64_t{y.element_bytes()}, &y_bytes))
    LPSGD_USAGE_ERROR(y.where() << ": implausible number of labels " << yd[0]);
  check_storage(y, y_bytes);
  s.attrs = read_attrs(*s.file, s.shape.c, strings);
  s.y.resize(static_cast<size_t>(s.shape.n));
  y.read_rows(0, yd[0], h5::Type::Int, s.y.data());
  for (size_t i = 0; i < s.y.size(); ++i)
    if (s.y[i] < 0 || s.y[i] >= s.attrs.num_classes)
      LPSGD_USAGE_ERROR(y.where() << ": label " << s.y[i] << " at index " << i
                                  << " out of range [0, " << s.attrs.num_classes << ")");
  return s;
}

// ---- writing --------------------------------------------------------------------

DatasetWriter::DatasetWriter(std::string path, int64_t num_classes,
                             std::vector<std::string> class_names, std::string source,
                             int gzip_level)
    : path_(std::move(path)),
      tmp_path_(temp_path_for(path_)),
      num_classes_(num_classes),
      class_names_(std::move(class_names)),
      source_(std::move(source)),
      gzip_(gzip_level) {
  if (num_classes_ < 1) LPSGD_USAGE_ERROR("number of classes must be positive, got " << num_classes_);
  if (!class_names_.empty() && static_cast<int64_t>(class_names_.size()) != num_classes_)
    LPSGD_USAGE_ERROR(class_names_.size() << " class names given for " << num_classes_
                                          << " classes");
  if (gzip_ < 0 || gzip_ > 9) LPSGD_USAGE_ERROR("gzip level must be in [0, 9], got " << gzip_);
  // Checked here so the message names the file asked for, not its temporary.
  const auto slash = path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash + 1);
  if (::access(dir.c_str(), W_OK) != 0)
    LPSGD_USAGE_ERROR(path_ << ": cannot create it (directory " << dir << ": "
                            << std::strerror(errno) << ")");
  file_ = std::make_unique<h5::File>(h5::File::create(tmp_path_));
}

DatasetWriter::~DatasetWriter() {
  if (committed_) return;
  x_.reset();
  y_.reset();
  group_.reset();
  file_.reset();
  std::remove(tmp_path_.c_str());
}

int64_t DatasetWriter::chunk_rows_for(size_t sample_bytes, int64_t n) {
  const int64_t rows = static_cast<int64_t>((size_t{1} << 20) / std::max<size_t>(1, sample_bytes));
  return std::max<int64_t>(1, std::min(rows, n));
}

void DatasetWriter::begin_split(const std::string& name, const SplitShape& shape,
                                int64_t chunk_rows) {
  LPSGD_CHECK(!x_, "begin_split('" << name << "') while split '" << split_ << "' is open");
  if (shape.c < 1 || shape.h < 1 || shape.w < 1)
    LPSGD_USAGE_ERROR("sample shape must be positive, got " << shape.c << "," << shape.h << ","
                                                             << shape.w);
  if (channels_ == 0) channels_ = shape.c;
  if (channels_ != shape.c)
    LPSGD_USAGE_ERROR("split " << name << " has " << shape.c << " channels, an earlier one "
                               << channels_);
  split_ = name;
  shape_ = shape;
  written_ = 0;
  const auto n = static_cast<hsize_t>(shape.n);
  group_ = std::make_unique<h5::Group>(h5::Group::create(*file_, name));
  const auto rows = static_cast<hsize_t>(
      chunk_rows > 0 ? chunk_rows : chunk_rows_for(shape.sample_bytes(), shape.n));
  x_ = std::make_unique<h5::Dataset>(h5::Dataset::create(
      *group_, "x", shape.type == SampleType::U8 ? h5::Type::U8 : h5::Type::F32,
      {n, static_cast<hsize_t>(shape.c), static_cast<hsize_t>(shape.h),
       static_cast<hsize_t>(shape.w)},
      rows, gzip_));
  y_ = std::make_unique<h5::Dataset>(
      h5::Dataset::create(*group_, "y", h5::Type::Int, {n}, hsize_t{1} << 16, gzip_));
  if (name == "train") {
    sum_.assign(static_cast<size_t>(shape.c), 0.0);
    sumsq_.assign(static_cast<size_t>(shape.c), 0.0);
    count_per_channel_ = 0;
  }
}

void DatasetWriter::append(const void* x, const int32_t* y, int64_t count,
                           const std::string& what) {
  LPSGD_CHECK(x_, "append() outside a split");
  if (written_ + count > shape_.n)
    LPSGD_THROW("split " << split_ << ": appending " << count << " samples after " << written_
                         << " exceeds its " << shape_.n);
  for (int64_t i = 0; i < count; ++i)
    if (y[i] < 0 || y[i] >= num_classes_)
      LPSGD_USAGE_ERROR((what.empty() ? split_ : what)
                        << ": label " << y[i] << " at index " << written_ + i
                        << " out of range [0, " << num_classes_ << ")");
  const h5::Type t = shape_.type == SampleType::U8 ? h5::Type::U8 : h5::Type::F32;
  x_->write_rows(static_cast<hsize_t>(written_), static_cast<hsize_t>(count), t, x);
  y_->write_rows(static_cast<hsize_t>(written_), static_cast<hsize_t>(count), h5::Type::Int, y);
  if (split_ == "train") {  // per-channel statistics of the normalised-to-[0,1] values
    const int64_t plane = shape_.h * shape_.w;
    for (int64_t i = 0; i < count; ++i)
      for (int64_t c = 0; c < shape_.c; ++c) {
        double s = 0, s2 = 0;
        const int64_t base = (i * shape_.c + c) * plane;
        for (int64_t k = 0; k < plane; ++k) {
          const double v = shape_.type == SampleType::U8
                               ? static_cast<const uint8_t*>(x)[base + k] / 255.0
                               : static_cast<double>(static_cast<const float*>(x)[base + k]);
          s += v;
          s2 += v * v;
        }
        sum_[static_cast<size_t>(c)] += s;
        sumsq_[static_cast<size_t>(c)] += s2;
      }
    count_per_channel_ += static_cast<double>(count * plane);
  }
  written_ += count;
}

void DatasetWriter::end_split() {
  LPSGD_CHECK(x_, "end_split() outside a split");
  LPSGD_CHECK(written_ == shape_.n, "split " << split_ << ": " << written_ << " of " << shape_.n
                                             << " samples written");
  x_.reset();
  y_.reset();
  group_.reset();
}

void DatasetWriter::commit() {
  LPSGD_CHECK(!x_, "commit() while split '" << split_ << "' is open");
  std::vector<double> mean(static_cast<size_t>(channels_), 0.0), std(mean.size(), 1.0);
  if (count_per_channel_ > 0)
    for (size_t c = 0; c < mean.size(); ++c) {
      mean[c] = sum_[c] / count_per_channel_;
      const double var = sumsq_[c] / count_per_channel_ - mean[c] * mean[c];
      std[c] = var > 1e-12 ? std::sqrt(var) : 1.0;
    }
  file_->write_attr("num_classes", num_classes_);
  if (!class_names_.empty()) file_->write_attr("class_names", class_names_);
  file_->write_attr("mean", mean);
  file_->write_attr("std", std);
  file_->write_attr("source", source_);
  file_->flush();
  file_.reset();
  commit_file(tmp_path_, path_);
  committed_ = true;
}

}  // namespace lpsgd::io
