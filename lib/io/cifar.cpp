#include "io/cifar.hpp"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <fstream>
#include <memory>

#include "core/error.hpp"
#include "io/dataset.hpp"

namespace lpsgd::io {

namespace {

constexpr int64_t kPixels = 3 * 32 * 32;

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using Gz = std::unique_ptr<gzFile_s, GzCloser>;

struct Spec {
  const char* name;
  int64_t label_bytes;
  int64_t classes[2];  // per label byte
  const char* label_names[2];
};

Spec spec_of(CifarFormat f) {
  if (f == CifarFormat::Cifar10) return {"CIFAR-10", 1, {10, 0}, {"label", ""}};
  return {"CIFAR-100", 2, {20, 100}, {"coarse label", "fine label"}};
}

// The whole file, plain or gzipped, in a buffer that grows with the data
// actually read. A damaged gzip stream is a usage error naming the file.
std::vector<uint8_t> read_all(const std::string& path) {
  if (::access(path.c_str(), R_OK) != 0) LPSGD_USAGE_ERROR(path << ": no such file");
  Gz f(gzopen(path.c_str(), "rb"));
  if (!f) LPSGD_USAGE_ERROR(path << ": cannot open");
  std::vector<uint8_t> data;
  size_t n = 0;
  for (size_t block = size_t{1} << 20;; block = std::min(block * 2, size_t{1} << 27)) {
    data.resize(n + block);
    const int r = gzread(f.get(), data.data() + n, static_cast<unsigned>(block));
    if (r < 0) {
      int errnum = 0;
      const char* msg = gzerror(f.get(), &errnum);
      LPSGD_USAGE_ERROR(path << ": truncated or damaged gzip stream (" << msg << ")");
    }
    n += static_cast<size_t>(r);
    if (r == 0) break;
  }
  data.resize(n);
  return data;
}

}  // namespace

CifarFormat parse_cifar_format(const std::string& text) {
  if (text == "cifar10" || text == "10") return CifarFormat::Cifar10;
  if (text == "cifar100" || text == "100") return CifarFormat::Cifar100;
  LPSGD_USAGE_ERROR("--format must be cifar10 or cifar100, got '" << text << "'");
}

CifarRecords read_cifar(const std::string& path, CifarFormat format, bool coarse) {
  const Spec s = spec_of(format);
  const int64_t rec = s.label_bytes + kPixels;
  const std::vector<uint8_t> data = read_all(path);
  const auto size = static_cast<int64_t>(data.size());
  if (size == 0) LPSGD_USAGE_ERROR(path << ": empty file (no " << s.name << " records)");
  if (size % rec != 0) {
    const Spec other = spec_of(format == CifarFormat::Cifar10 ? CifarFormat::Cifar100
                                                              : CifarFormat::Cifar10);
    const int64_t other_rec = other.label_bytes + kPixels;
    LPSGD_USAGE_ERROR(path << ": " << size << " bytes is not a whole number of " << s.name
                           << " records of " << rec << " bytes (" << size / rec
                           << (size / rec == 1 ? " record and " : " records and ") << size % rec
                           << " bytes over); the file is "
                           << (size % other_rec == 0
                                   ? std::string("a whole number of ") + other.name +
                                         " records: use --format " +
                                         (format == CifarFormat::Cifar10 ? "cifar100" : "cifar10")
                                   : std::string("truncated or not ") + s.name +
                                         "'s binary version (*.bin)"));
  }
  CifarRecords out;
  out.n = size / rec;
  out.x.resize(static_cast<size_t>(out.n * kPixels));
  out.y.resize(static_cast<size_t>(out.n));
  for (int64_t i = 0; i < out.n; ++i) {
    const uint8_t* r = data.data() + i * rec;
    for (int64_t b = 0; b < s.label_bytes; ++b)
      if (r[b] >= s.classes[b])
        LPSGD_USAGE_ERROR(path << ": record " << i << " has " << s.label_names[b] << " "
                               << int{r[b]} << ", out of range [0, " << s.classes[b] << ") for "
                               << s.name << " (a file of another format"
                               << (format == CifarFormat::Cifar10 ? ", or --format cifar100?"
                                                                  : ", or --format cifar10?")
                               << ")");
    const int64_t pick = format == CifarFormat::Cifar100 && !coarse ? 1 : 0;
    out.y[static_cast<size_t>(i)] = r[pick];
    std::copy(r + s.label_bytes, r + rec, out.x.begin() + i * kPixels);
  }
  return out;
}

std::vector<std::string> read_class_names(const std::string& path) {
  if (::access(path.c_str(), R_OK) != 0) LPSGD_USAGE_ERROR(path << ": no such file");
  std::ifstream in(path);
  if (!in) LPSGD_USAGE_ERROR(path << ": cannot open");
  std::vector<std::string> names;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto b = line.find_first_not_of(" \t"), e = line.find_last_not_of(" \t");
    if (b == std::string::npos) continue;
    names.push_back(line.substr(b, e - b + 1));
  }
  if (names.empty()) LPSGD_USAGE_ERROR(path << ": no class names (one per line expected)");
  return names;
}

const std::vector<std::string>& cifar10_class_names() {
  static const std::vector<std::string> names = {"airplane", "automobile", "bird",  "cat",  "deer",
                                                 "dog",      "frog",       "horse", "ship", "truck"};
  return names;
}

int64_t import_cifar(const CifarImport& opt) {
  const Spec s = spec_of(opt.format);
  const bool coarse = opt.format == CifarFormat::Cifar100 && opt.coarse;
  const int64_t classes = opt.format == CifarFormat::Cifar10 ? 10 : coarse ? 20 : 100;
  std::vector<std::string> names = opt.class_names;
  if (names.empty() && opt.format == CifarFormat::Cifar10) names = cifar10_class_names();
  if (!names.empty() && static_cast<int64_t>(names.size()) != classes)
    LPSGD_USAGE_ERROR((opt.names_from.empty() ? std::string("class names") : opt.names_from)
                      << ": " << names.size() << " class names, but " << s.name
                      << (opt.format == CifarFormat::Cifar10 ? ""
                          : coarse                           ? " coarse labels"
                                                             : " fine labels")
                      << " have " << classes << " classes"
                      << (opt.format == CifarFormat::Cifar100
                              ? coarse ? " (coarse_label_names.txt)" : " (fine_label_names.txt)"
                              : ""));
  if (opt.train.empty()) LPSGD_USAGE_ERROR("no train files given (--train F [F ...])");
  std::string source = opt.source;
  if (source.empty())
    source = std::string(s.name) + " binary import" +
             (opt.format == CifarFormat::Cifar100 ? coarse ? " (coarse labels)" : " (fine labels)"
                                                  : "");
  DatasetWriter w(opt.out, classes, names, source, opt.gzip_level);
  const struct {
    const char* split;
    const std::vector<std::string>& files;
  } splits[] = {{"train", opt.train}, {"test", opt.test}};
  int64_t total = 0;
  for (const auto& sp : splits) {
    if (sp.files.empty()) continue;
    // Read and checked first, whole: begin_split needs the count.
    std::vector<CifarRecords> parts;
    int64_t n = 0;
    for (const std::string& f : sp.files) {
      parts.push_back(read_cifar(f, opt.format, coarse));
      n += parts.back().n;
    }
    w.begin_split(sp.split, SplitShape{n, 3, 32, 32, SampleType::U8});
    for (size_t k = 0; k < parts.size(); ++k) {
      w.append(parts[k].x.data(), parts[k].y.data(), parts[k].n, sp.files[k]);
      parts[k] = CifarRecords{};  // free as we go
    }
    w.end_split();
    total += n;
  }
  w.commit();
  return total;
}

}  // namespace lpsgd::io
