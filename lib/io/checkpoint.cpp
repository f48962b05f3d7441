#include "io/checkpoint.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>

#include "core/atomic_file.hpp"
#include "core/checksum.hpp"
#include "core/error.hpp"
#include "io/h5.hpp"

namespace lpsgd::io {

namespace fs = std::filesystem;

namespace {

constexpr const char* kGroups[] = {"params", "optimizer", "state"};

// The group's tensors in c. "state" (layer state that is not learned, batch
// norm's running statistics) is optional: written and summed into the
// checksum only where a model has some, so checkpoints of models without it
// read and verify as before.
std::vector<CkptTensor>& tensors_of(Checkpoint& c, const std::string& group) {
  return group == kGroups[0] ? c.params : group == kGroups[1] ? c.optimizer : c.state;
}
const std::vector<CkptTensor>& tensors_of(const Checkpoint& c, const std::string& group) {
  return tensors_of(const_cast<Checkpoint&>(c), group);
}
bool optional_group(const std::string& group) { return group == kGroups[2]; }

/// What is wrong with a checkpoint file; turned into an Error or a CkptInfo.
struct Damaged {
  std::string reason;
};

// ---- checksum -------------------------------------------------------------------

class Hasher {
 public:
  void bytes(const void* p, size_t n) { h_ = checksum64(p, n, h_); }
  void word(uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    bytes(b, 8);
  }
  void text(const std::string& s) {
    word(s.size());
    bytes(s.data(), s.size());
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0;
};

// Elements a shape holds, or a runtime error naming the tensor.
uint64_t elements(const CkptTensor& t) {
  uint64_t n = 1;
  for (int64_t d : t.shape) {
    LPSGD_CHECK(d >= 0, "checkpoint tensor " << t.name << " has a negative dimension " << d);
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

// ---- file names -----------------------------------------------------------------

// Step of "ckpt-<digits>.h5", or -1 for any other name.
int64_t step_of(const std::string& name) {
  const std::string pre = "ckpt-", post = ".h5";
  if (name.size() <= pre.size() + post.size() || name.compare(0, pre.size(), pre) != 0 ||
      name.compare(name.size() - post.size(), post.size(), post) != 0)
    return -1;
  const std::string digits = name.substr(pre.size(), name.size() - pre.size() - post.size());
  if (digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
    return -1;
  return std::stoll(digits);
}

// Temporaries of write_checkpoint: ".ckpt-<step>.h5.tmp.PID" and ".latest.tmp.PID".
bool is_temp_name(const std::string& name) {
  return (name.rfind(".ckpt-", 0) == 0 || name.rfind(".latest.tmp.", 0) == 0) &&
         name.find(".tmp.") != std::string::npos;
}

std::string join(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

// ---- writing --------------------------------------------------------------------

// "00003_" for tensor 3: zero-padded so HDF5's name order is tensor order.
std::string index_prefix(size_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%05zu_", i);
  return buf;
}

std::string index_name(size_t i, const std::string& name) {
  std::string link = index_prefix(i) + name;
  std::replace(link.begin(), link.end(), '/', '_');
  return link;
}

void write_group(h5::File& f, const char* group, const std::vector<CkptTensor>& tensors) {
  h5::Group g = h5::Group::create(f, group);
  g.write_attr("count", static_cast<int64_t>(tensors.size()));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const CkptTensor& t = tensors[i];
    std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
    const std::string link = index_name(i, t.name);
    h5::Dataset::create_contiguous(g, link, h5::Type::F32, dims)
        .write_all(h5::Type::F32, t.data.data());
    g.object(link).write_attr_fixed("name", t.name);
  }
}

void write_file(const std::string& path, const Checkpoint& c) {
  const CkptMeta& m = c.meta;
  h5::File f = h5::File::create(path, /*checksummed_metadata=*/true);
  f.write_attr_fixed("format", std::string(kCheckpointFormat));
  f.write_attr("format_version", kCheckpointFormatVersion);
  f.write_attr("step", m.step);
  f.write_attr("epoch", m.epoch);
  f.write_attr("samples", m.samples);
  f.write_attr("loader_epoch", m.loader_epoch);
  f.write_attr("loader_cursor", m.loader_cursor);
  f.write_attr("lr", m.lr);
  f.write_attr("seed", m.seed);
  f.write_attr("rng_counter", m.rng_counter);
  f.write_attr("ranks", static_cast<int64_t>(m.ranks));
  f.write_attr("batch", m.batch);
  f.write_attr_fixed("model", m.model);
  f.write_attr_fixed("config", m.config);
  f.write_attr_fixed("version", m.version);
  f.write_attr("wall_time", m.wall_time);
  if (!m.input_shape.empty()) {
    f.write_attr("input_shape", std::vector<double>(m.input_shape.begin(), m.input_shape.end()));
    f.write_attr_fixed("input_type", m.input_type);
    f.write_attr("input_scale", m.input_scale);
    f.write_attr("input_shift", m.input_shift);
  }
  if (!m.precision.empty()) f.write_attr_fixed("precision", m.precision);
  if (!m.wire.empty()) f.write_attr_fixed("wire", m.wire);
  if (!m.algos.empty()) f.write_attr_fixed("algos", m.algos);
  if (!m.auto_check.empty()) f.write_attr_fixed("auto_check", m.auto_check);
  if (!m.optimizer.empty()) f.write_attr_fixed("optimizer", m.optimizer);
  f.write_attr("optimizer_steps", m.optimizer_steps);
  if (m.accumulate > 1) f.write_attr("accumulate", m.accumulate);
  f.write_attr("checksum", c.checksum);
  for (const char* group : kGroups)
    if (!optional_group(group) || !tensors_of(c, group).empty()) write_group(f, group, tensors_of(c, group));
  f.flush();
}

// Removes checkpoints beyond the newest `keep` (never `written`) and
// temporaries last modified before `written_mtime` (left by killed writers).
void prune(const std::string& dir, int keep, const std::string& written,
           const struct timespec& written_mtime) {
  std::vector<std::string> ckpts = list_checkpoints(dir);
  const auto k = static_cast<size_t>(keep);
  size_t excess = ckpts.size() > k ? ckpts.size() - k : 0;
  for (const std::string& p : ckpts) {
    if (excess == 0) break;
    if (fs::path(p).filename() == written) continue;
    std::remove(p.c_str());
    --excess;
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    struct stat st {};
    if (!is_temp_name(name) || ::stat(e.path().c_str(), &st) != 0) continue;
    const auto& t = st.st_mtim;
    if (t.tv_sec < written_mtime.tv_sec ||
        (t.tv_sec == written_mtime.tv_sec && t.tv_nsec < written_mtime.tv_nsec))
      std::remove(e.path().c_str());
  }
}

// ---- reading --------------------------------------------------------------------

// Messages of the h5 wrappers start with "PATH: "; the reason does not need it twice.
std::string strip_path(const std::string& msg, const std::string& path) {
  const std::string pre = path + ": ";
  return msg.compare(0, pre.size(), pre) == 0 ? msg.substr(pre.size()) : msg;
}

void require_attr(const h5::File& f, const char* name) {
  if (!f.has_attr(name)) throw Damaged{std::string("missing attribute ") + name};
}

void read_meta(const h5::File& f, Checkpoint& c) {
  require_attr(f, "format");
  const std::string format = f.read_attr_fixed_string("format");
  if (format != kCheckpointFormat)
    throw Damaged{"not an lpsgd checkpoint (format '" + format + "')"};
  require_attr(f, "format_version");
  const int64_t version = f.read_attr_int("format_version");
  if (version != kCheckpointFormatVersion)
    throw Damaged{"checkpoint format version " + std::to_string(version) +
                  " is not supported (this lpsgd reads version " +
                  std::to_string(kCheckpointFormatVersion) + ")"};
  for (const char* name : {"step", "epoch", "samples", "loader_epoch", "loader_cursor", "lr",
                           "seed", "rng_counter", "ranks", "batch", "model", "config", "version",
                           "wall_time", "checksum"})
    require_attr(f, name);
  CkptMeta& m = c.meta;
  m.step = f.read_attr_int("step");
  m.epoch = f.read_attr_int("epoch");
  m.samples = f.read_attr_uint64("samples");
  m.loader_epoch = f.read_attr_uint64("loader_epoch");
  m.loader_cursor = f.read_attr_uint64("loader_cursor");
  m.lr = f.read_attr_double("lr");
  m.seed = f.read_attr_uint64("seed");
  m.rng_counter = f.read_attr_uint64("rng_counter");
  const int64_t ranks = f.read_attr_int("ranks");
  if (ranks < 0 || ranks > std::numeric_limits<int>::max())
    throw Damaged{"attribute ranks out of range: " + std::to_string(ranks)};
  m.ranks = static_cast<int>(ranks);
  m.batch = f.read_attr_int("batch");
  m.model = f.read_attr_fixed_string("model");
  m.config = f.read_attr_fixed_string("config");
  m.version = f.read_attr_fixed_string("version");
  m.wall_time = f.read_attr_double("wall_time");
  c.checksum = f.read_attr_uint64("checksum");
  // Checkpoints from before --precision and --wire were fp32 in both.
  m.precision = f.has_attr("precision") ? f.read_attr_fixed_string("precision") : "fp32";
  if (f.has_attr("input_shape")) {
    for (const char* name : {"input_type", "input_scale", "input_shift"}) require_attr(f, name);
    for (double d : f.read_attr_doubles("input_shape")) {
      if (!(d >= 1 && d <= double(1 << 30)) || d != static_cast<double>(static_cast<int64_t>(d)))
        throw Damaged{"attribute input_shape holds " + std::to_string(d)};
      m.input_shape.push_back(static_cast<int64_t>(d));
    }
    m.input_type = f.read_attr_fixed_string("input_type");
    m.input_scale = f.read_attr_doubles("input_scale");
    m.input_shift = f.read_attr_doubles("input_shift");
    if (m.input_shape.size() != 3 || (m.input_type != "uint8" && m.input_type != "float32") ||
        m.input_scale.size() != static_cast<size_t>(m.input_shape[0]) ||
        m.input_shift.size() != m.input_scale.size())
      throw Damaged{"attributes input_shape, input_type, input_scale and input_shift do not fit together"};
  }
  m.wire = f.has_attr("wire") ? f.read_attr_fixed_string("wire") : "fp32";
  if (m.wire != "fp32" && m.wire != "bf16" && m.wire != "fp16")
    throw Damaged{"attribute wire holds '" + m.wire + "'"};
  if (f.has_attr("algos")) {
    m.algos = f.read_attr_fixed_string("algos");
    const bool names_only = std::all_of(m.algos.begin(), m.algos.end(), [](char ch) {
      return (ch >= 'a' && ch <= 'z') || ch == ',';
    });
    if (m.algos.empty() || !names_only) throw Damaged{"attribute algos holds '" + m.algos + "'"};
  }
  if (f.has_attr("auto_check")) {
    m.auto_check = f.read_attr_fixed_string("auto_check");
    const bool plain = std::all_of(m.auto_check.begin(), m.auto_check.end(), [](char ch) {
      return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == ',' || ch == ':' ||
             ch == '.' || ch == '-' || ch == '+';
    });
    if (m.auto_check.empty() || !plain) throw Damaged{"attribute auto_check holds '" + m.auto_check + "'"};
  }
  // Checkpoints from before --optimizer were SGD's, their steps its steps.
  m.optimizer = f.has_attr("optimizer") ? f.read_attr_fixed_string("optimizer") : "sgd";
  const bool name_only = std::all_of(m.optimizer.begin(), m.optimizer.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
  });
  if (m.optimizer.empty() || !name_only) throw Damaged{"attribute optimizer holds '" + m.optimizer + "'"};
  m.optimizer_steps = f.has_attr("optimizer_steps") ? f.read_attr_int("optimizer_steps") : m.step;
  if (m.optimizer_steps < 0)
    throw Damaged{"attribute optimizer_steps holds " + std::to_string(m.optimizer_steps)};
  m.accumulate = f.has_attr("accumulate") ? f.read_attr_int("accumulate") : 1;
  if (m.accumulate < 1 || m.accumulate > (int64_t{1} << 20))
    throw Damaged{"attribute accumulate holds " + std::to_string(m.accumulate)};
}

void read_group(const h5::File& f, const char* group, std::vector<CkptTensor>& out) {
  const std::string gp = std::string("/") + group;
  if (!f.has(group)) throw Damaged{"missing group " + gp};
  const h5::Group g = h5::Group::open(f, group);
  if (!g.has_attr("count")) throw Damaged{"missing attribute count on " + gp};
  const int64_t count = g.read_attr_int("count");
  const std::vector<std::string> links = g.link_names();
  if (count < 0 || static_cast<size_t>(count) != links.size())
    throw Damaged{gp + " holds " + std::to_string(links.size()) + " tensors, its count says " +
                  std::to_string(count)};
  for (size_t i = 0; i < links.size(); ++i) {
    if (links[i].rfind(index_prefix(i), 0) != 0)
      throw Damaged{gp + ": tensor " + std::to_string(i) + " is missing (found '" + links[i] +
                    "')"};
    const h5::Dataset d = h5::Dataset::open(g, links[i]);
    if (d.type() != h5::Type::F32)
      throw Damaged{d.where().substr(f.file().size() + 2) + " is " + h5::type_name(d.type()) +
                    ", not float32"};
    CkptTensor t;
    const h5::Location loc = g.object(links[i]);
    if (!loc.has_attr("name")) throw Damaged{"missing attribute name on " + loc.path()};
    t.name = loc.read_attr_fixed_string("name");
    for (hsize_t dim : d.dims()) t.shape.push_back(static_cast<int64_t>(dim));
    // Tensors are written contiguous and unfiltered, so the file holds exactly
    // their bytes; checked before sizing the buffer from a (damaged) shape.
    const hsize_t n = d.size();
    if (n > (hsize_t{1} << 60) || (n > 0 && d.storage_bytes() != n * sizeof(float)))
      throw Damaged{d.where().substr(f.file().size() + 2) + " stores " +
                    std::to_string(d.storage_bytes()) + " bytes for " + std::to_string(n) +
                    " float32 values"};
    t.data.resize(static_cast<size_t>(n));
    d.read_all(h5::Type::F32, t.data.data());
    out.push_back(std::move(t));
  }
}

// Fills c as far as the file allows; throws Damaged at the first problem.
void read_into(const std::string& path, Checkpoint& c) {
  std::unique_ptr<h5::File> file;
  try {
    file = std::make_unique<h5::File>(h5::File::open_read(path));
  } catch (const Error& e) {
    throw Damaged{"truncated or not an HDF5 file (" + strip_path(e.message(), path) + ")"};
  }
  try {
    const h5::File& f = *file;
    read_meta(f, c);
    for (const char* group : kGroups)
      if (!optional_group(group) || f.has(group)) read_group(f, group, tensors_of(c, group));
  } catch (const Error& e) {
    throw Damaged{strip_path(e.message(), path)};
  }
  const uint64_t computed = checkpoint_checksum(c);
  if (computed != c.checksum)
    throw Damaged{"checksum mismatch (stored " + checksum_hex(c.checksum) + ", computed " +
                  checksum_hex(computed) + ")"};
}

void require_file(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) LPSGD_USAGE_ERROR(path << ": no such checkpoint file");
  if (fs::is_directory(st))
    LPSGD_USAGE_ERROR(path << ": is a directory, not a checkpoint file");
}

// The file `latest` names, "" when there is no usable one (with a warning when
// there is a pointer but it is unusable).
std::string read_latest(const std::string& dir, std::vector<std::string>* warnings) {
  const std::string p = join(dir, "latest");
  std::error_code ec;
  if (!fs::exists(p, ec)) return "";
  std::ifstream in(p);
  std::string name;
  std::getline(in, name);
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  if (!in && !in.eof()) name.clear();
  if (step_of(name) < 0) {
    if (warnings) warnings->push_back(p + " does not name a checkpoint; ignoring it");
    return "";
  }
  if (!fs::exists(join(dir, name), ec)) {
    if (warnings) warnings->push_back(p + " names " + name + ", which does not exist; ignoring it");
    return "";
  }
  return name;
}

}  // namespace

// ---- public ---------------------------------------------------------------------

std::string checkpoint_file_name(int64_t step) {
  LPSGD_CHECK(step >= 0, "checkpoint step must not be negative, got " << step);
  char buf[32];
  std::snprintf(buf, sizeof buf, "ckpt-%09lld.h5", static_cast<long long>(step));
  return buf;
}

uint64_t checkpoint_checksum(const Checkpoint& c) {
  Hasher h;
  for (const char* group : kGroups) {
    const auto& tensors = tensors_of(c, group);
    if (optional_group(group) && tensors.empty()) continue;
    h.text(group);
    h.word(tensors.size());
    for (const CkptTensor& t : tensors) {
      const uint64_t n = elements(t);
      LPSGD_CHECK(n == t.data.size(), "checkpoint tensor " << t.name << " has " << t.data.size()
                                                           << " values for " << n
                                                           << " elements of its shape");
      h.text(t.name);
      h.word(t.shape.size());
      for (int64_t d : t.shape) h.word(static_cast<uint64_t>(d));
      h.word(n);
      h.bytes(t.data.data(), t.data.size() * sizeof(float));
    }
  }
  return h.value();
}

std::string write_checkpoint(const std::string& dir, Checkpoint& c, int keep) {
  if (keep < 1) LPSGD_USAGE_ERROR("--keep must be at least 1, got " << keep);
  c.checksum = checkpoint_checksum(c);
  const std::string name = checkpoint_file_name(c.meta.step);
  const std::string path = join(dir, name);
  const std::string tmp = temp_path_for(path);
  struct stat st {};
  bool committed = false;
  try {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (!fs::is_directory(dir)) {
      const int err = fs::exists(dir) || !ec ? ENOTDIR : ec.value();
      LPSGD_THROW_ERRNO(err, "cannot create checkpoint directory " << dir << ": "
                                                                   << std::strerror(err));
    }
    write_file(tmp, c);
    if (::stat(tmp.c_str(), &st) != 0) {
      const int err = errno;
      LPSGD_THROW_ERRNO(err, "cannot stat " << tmp << ": " << std::strerror(err));
    }
    commit_file(tmp, path);
    committed = true;
    write_file_atomic(join(dir, "latest"), name + "\n");
  } catch (const Error& e) {
    // Nothing of this attempt stays: `latest` and the checkpoints before it
    // are as they were, so resuming takes the last complete one.
    std::remove(tmp.c_str());
    if (committed) std::remove(path.c_str());
    const int err = e.sys_errno();
    LPSGD_THROW_ERRNO(err, "checkpoint at step " << c.meta.step << " not written: "
                                                 << (err > 0 ? std::strerror(err) : e.message()));
  }
  prune(dir, keep, name, st.st_mtim);
  return path;
}

Checkpoint read_checkpoint(const std::string& path) {
  require_file(path);
  Checkpoint c;
  try {
    read_into(path, c);
  } catch (const Damaged& d) {
    LPSGD_THROW("checkpoint " << path << " is damaged: " << d.reason);
  }
  return c;
}

CkptInfo inspect_checkpoint(const std::string& path) {
  require_file(path);
  CkptInfo info;
  info.path = path;
  std::error_code ec;
  info.bytes = static_cast<size_t>(fs::file_size(path, ec));
  Checkpoint c;
  try {
    read_into(path, c);
    info.valid = true;
  } catch (const Damaged& d) {
    info.error = d.reason;
  }
  info.meta = c.meta;
  info.checksum = c.checksum;
  info.tensors = c.params.size() + c.optimizer.size() + c.state.size();
  return info;
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const int64_t step = step_of(name);
    if (step >= 0 && !e.is_directory(ec)) found.emplace_back(step, e.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::string find_resume_checkpoint(const std::string& dir, std::vector<std::string>* warnings,
                                   Checkpoint* loaded) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  std::vector<std::string> order;
  const std::string latest = read_latest(dir, warnings);
  if (!latest.empty()) order.push_back(join(dir, latest));
  std::vector<std::string> all = list_checkpoints(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if (order.empty() || *it != order.front()) order.push_back(*it);

  for (size_t i = 0; i < order.size(); ++i) {
    Checkpoint c;
    std::string reason;
    try {
      read_into(order[i], c);
    } catch (const Damaged& d) {
      reason = d.reason;
    }
    if (reason.empty()) {
      if (loaded) *loaded = std::move(c);
      return order[i];
    }
    if (warnings)
      warnings->push_back("checkpoint " + order[i] + " is damaged (" + reason + "); " +
                          (i + 1 < order.size() ? "falling back to the previous one"
                                                : "no earlier checkpoint to fall back to"));
  }
  return "";
}

}  // namespace lpsgd::io
