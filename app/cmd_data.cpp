// lpsgd data: make and inspect HDF5 datasets.
//
//   lpsgd data import-idx  IDX files (MNIST, Fashion-MNIST) -> dataset
//   lpsgd data import-cifar  CIFAR-10 / CIFAR-100 binary files -> dataset
//   lpsgd data import-npz  NumPy .npz / .npy arrays -> dataset
//   lpsgd data synth       learnable synthetic dataset of any size, streamed to disk
//   lpsgd data info        splits, shapes, types, class counts and attributes
//   lpsgd data bench-loader  batches/s of the Loader alone (cached or streaming)
//
// The work is in lib/io; this file turns options into calls and prints.
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>

#include "app/commands.hpp"
#include "core/cli.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "io/augment.hpp"
#include "io/cifar.hpp"
#include "io/dataset.hpp"
#include "io/idx.hpp"
#include "io/loader.hpp"
#include "io/npz.hpp"
#include "io/synth.hpp"

namespace lpsgd::app {

namespace {

namespace po = cli::po;

constexpr const char* kDataUsage =
    "usage: lpsgd data <subcommand> [options]\n"
    "\n"
    "subcommands:\n"
    "  import-idx    convert IDX files (MNIST, Fashion-MNIST) to an HDF5 dataset\n"
    "  import-cifar  convert CIFAR-10 / CIFAR-100 binary files (*.bin) to an HDF5 dataset\n"
    "  import-npz    convert NumPy arrays (.npz, or .npy files) to an HDF5 dataset\n"
    "  synth         make a learnable synthetic dataset of any size\n"
    "  info FILE     print splits, shapes, types, class counts and attributes\n"
    "  bench-loader FILE  measure batches/s of the data loader alone\n"
    "\n"
    "  lpsgd data <subcommand> --help   options of a subcommand";

// Writing commands make one file: several ranks would race on it.
void require_one_rank(const char* what) {
  if (log::size() > 1)
    LPSGD_USAGE_ERROR("lpsgd data " << what << " writes a file: run it on one rank, not "
                                    << log::size());
}

// "T-shirt/top, Trouser,Ankle boot" -> names with inner spaces kept.
std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto b = item.find_first_not_of(' '), e = item.find_last_not_of(' ');
    if (b == std::string::npos) LPSGD_USAGE_ERROR("--class-names has an empty name: '" << text << "'");
    out.push_back(item.substr(b, e - b + 1));
  }
  return out;
}

int import_idx(int argc, char** argv) {
  io::IdxImport opt;
  std::string names;
  po::options_description desc("lpsgd data import-idx options");
  desc.add_options()
      ("train-images", po::value(&opt.train_images)->required()->value_name("F"), "train images (IDX, gzipped or not)")
      ("train-labels", po::value(&opt.train_labels)->required()->value_name("F"), "train labels (IDX)")
      ("test-images", po::value(&opt.test_images)->required()->value_name("F"), "test images (IDX)")
      ("test-labels", po::value(&opt.test_labels)->required()->value_name("F"), "test labels (IDX)")
      ("out", po::value(&opt.out)->required()->value_name("F.h5"), "output dataset (written atomically)")
      ("class-names", po::value(&names)->value_name("A,B,..."), "class names, comma-separated (default: none; classes = largest label + 1)")
      ("source", po::value(&opt.source)->default_value("IDX import"), "text for the 'source' attribute")
      ("gzip", po::value(&opt.gzip_level)->default_value(4), "gzip level of the HDF5 chunks, 0 = none");
  po::variables_map vm;
  if (!cli::parse(argc, argv, desc, vm, "usage: lpsgd data import-idx --train-images F ... --out F.h5"))
    return 0;
  require_one_rank("import-idx");
  if (!names.empty()) opt.class_names = split_names(names);
  const int64_t classes = io::import_idx(opt);
  LPSGD_INFO("wrote " << opt.out << " (" << classes << " classes)");
  return 0;
}

int import_cifar(int argc, char** argv) {
  io::CifarImport opt;
  std::string format, label = "fine", names_file;
  po::options_description desc("lpsgd data import-cifar options");
  desc.add_options()
      ("format", po::value(&format)->required()->value_name("cifar10|cifar100"), "CIFAR-10 (records of 1 label byte + 3072 pixels) or CIFAR-100 (2 label bytes, coarse then fine)")
      ("train", po::value<std::vector<std::string>>()->required()->multitoken()->value_name("F [F ...]"), "train files in order (CIFAR-10: data_batch_1.bin .. data_batch_5.bin; CIFAR-100: train.bin), gzipped or not")
      ("test", po::value<std::vector<std::string>>()->multitoken()->value_name("F [F ...]"), "test files (test_batch.bin; test.bin); none: no test split")
      ("out", po::value(&opt.out)->required()->value_name("F.h5"), "output dataset (written atomically)")
      ("label", po::value(&label)->default_value(label)->value_name("fine|coarse"), "CIFAR-100: the 100 fine classes or the 20 coarse ones")
      ("names", po::value(&names_file)->value_name("F"), "class names, one per line (batches.meta.txt, fine_label_names.txt, coarse_label_names.txt); default: CIFAR-10's own, none for CIFAR-100")
      ("source", po::value(&opt.source), "text for the 'source' attribute (default: the format's name)")
      ("gzip", po::value(&opt.gzip_level)->default_value(4), "gzip level of the HDF5 chunks, 0 = none");
  po::variables_map vm;
  if (!cli::parse(argc, argv, desc, vm,
                  "usage: lpsgd data import-cifar --format cifar10|cifar100 --train F [F ...] "
                  "[--test F] --out F.h5"))
    return 0;
  require_one_rank("import-cifar");
  // Read here rather than stored through a pointer: Boost's vector notify()
  // trips GCC's -Wnull-dereference.
  opt.train = vm["train"].as<std::vector<std::string>>();
  if (vm.count("test")) opt.test = vm["test"].as<std::vector<std::string>>();
  opt.format = io::parse_cifar_format(format);
  if (label != "fine" && label != "coarse")
    LPSGD_USAGE_ERROR("--label must be fine or coarse, got '" << label << "'");
  if (label == "coarse" && opt.format == io::CifarFormat::Cifar10)
    LPSGD_USAGE_ERROR("--label coarse is for CIFAR-100; CIFAR-10 has one label");
  opt.coarse = label == "coarse";
  if (!names_file.empty()) {
    opt.class_names = io::read_class_names(names_file);
    opt.names_from = names_file;
  }
  const int64_t n = io::import_cifar(opt);
  LPSGD_INFO("wrote " << opt.out << " (" << n << " samples)");
  return 0;
}

int import_npz(int argc, char** argv) {
  io::NpzImport opt;
  std::string names, layout = "auto";
  po::options_description desc("lpsgd data import-npz options");
  desc.add_options()
      ("train", po::value(&opt.train)->value_name("F.npz"), "arrays x [N,...] and y [N] (or x_train, y_train), and x_test, y_test for a test split")
      ("test", po::value(&opt.test)->value_name("F.npz"), "the test split from another .npz (x_test, y_test or x, y)")
      ("train-x", po::value(&opt.train_x)->value_name("F.npy"), "or the train samples as a .npy file ...")
      ("train-y", po::value(&opt.train_y)->value_name("F.npy"), "... and the train labels")
      ("test-x", po::value(&opt.test_x)->value_name("F.npy"), "test samples as a .npy file")
      ("test-y", po::value(&opt.test_y)->value_name("F.npy"), "test labels as a .npy file")
      ("out", po::value(&opt.out)->required()->value_name("F.h5"), "output dataset (written atomically)")
      ("layout", po::value(&layout)->default_value(layout)->value_name("auto|nchw|nhwc"), "of a 4-d x: [N,C,H,W] or [N,H,W,C] (stored transposed to [N,C,H,W]); auto: NHWC where the last dimension is 1, 3 or 4 and the second is not, NCHW the other way round, else asks. [N,H,W] is grey, [N,D] vectors")
      ("classes", po::value(&opt.classes)->default_value(0)->value_name("K"), "number of classes (0: the class names' count, else the largest label + 1)")
      ("class-names", po::value(&names)->value_name("A,B,..."), "class names, comma-separated (default: none)")
      ("source", po::value(&opt.source)->default_value(opt.source), "text for the 'source' attribute")
      ("gzip", po::value(&opt.gzip_level)->default_value(4), "gzip level of the HDF5 chunks, 0 = none");
  po::variables_map vm;
  if (!cli::parse(argc, argv, desc, vm,
                  "usage: lpsgd data import-npz --train F.npz [--test F.npz] --out F.h5\n"
                  "       lpsgd data import-npz --train-x X.npy --train-y Y.npy [--test-x X.npy "
                  "--test-y Y.npy] --out F.h5"))
    return 0;
  require_one_rank("import-npz");
  opt.layout = io::parse_npz_layout(layout);
  if (opt.classes < 0) LPSGD_USAGE_ERROR("--classes must be >= 0, got " << opt.classes);
  if (!names.empty()) opt.class_names = split_names(names);
  const io::NpzImportResult r = io::import_npz(opt);
  LPSGD_INFO("wrote " << opt.out << " (" << r.train << " train, " << r.test << " test samples of ["
                      << r.c << "," << r.h << "," << r.w << "] " << (r.float32 ? "float32" : "uint8")
                      << ", x as " << io::npz_layout_name(r.layout) << ", " << r.classes << " classes)");
  return 0;
}

int64_t parse_int(const std::string& text, const char* option) {
  size_t pos = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos == 0 || pos != text.size())
    LPSGD_USAGE_ERROR("--" << option << ": '" << text << "' is not an integer");
  return v;
}

int synth(int argc, char** argv) {
  io::SynthOptions opt;
  std::string shape = "1,28,28", dtype = "uint8";
  po::options_description desc("lpsgd data synth options");
  desc.add_options()
      ("out", po::value(&opt.out)->required()->value_name("F.h5"), "output dataset (written atomically)")
      ("samples", po::value(&opt.train_samples)->required()->value_name("N"), "train samples")
      ("test-samples", po::value(&opt.test_samples)->default_value(0)->value_name("M"), "test samples (0: no test split)")
      ("shape", po::value(&shape)->default_value(shape)->value_name("C,H,W"), "sample shape")
      ("classes", po::value(&opt.classes)->default_value(10)->value_name("K"), "number of classes")
      ("seed", po::value(&opt.seed)->default_value(0)->value_name("S"), "seed of patterns, labels and noise")
      ("noise", cli::value_with_default(&opt.noise)->value_name("X"), "standard deviation of the noise added to the class pattern (values in [0,1])")
      ("dtype", po::value(&dtype)->default_value(dtype), "uint8 or float32")
      ("gzip", po::value(&opt.gzip_level)->default_value(0), "gzip level of the HDF5 chunks, 0 = none");
  po::variables_map vm;
  if (!cli::parse(argc, argv, desc, vm,
                  "usage: lpsgd data synth --out F.h5 --samples N --shape C,H,W --classes K "
                  "--seed S [--test-samples M] [--noise X]"))
    return 0;
  require_one_rank("synth");
  const std::vector<std::string> dims = cli::split_list(shape);
  if (dims.size() != 3) LPSGD_USAGE_ERROR("--shape must be C,H,W, got '" << shape << "'");
  opt.c = parse_int(dims[0], "shape");
  opt.h = parse_int(dims[1], "shape");
  opt.w = parse_int(dims[2], "shape");
  if (dtype == "uint8") opt.type = io::SampleType::U8;
  else if (dtype == "float32") opt.type = io::SampleType::F32;
  else LPSGD_USAGE_ERROR("--dtype must be uint8 or float32, got '" << dtype << "'");
  io::make_synthetic(opt);
  LPSGD_INFO("wrote " << opt.out);
  return 0;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

template <class T>
std::string join_num(const std::vector<T>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return os.str();
}

int info(int argc, char** argv) {
  std::string path;
  po::options_description desc("lpsgd data info options");
  desc.add_options()("file", po::value(&path)->required()->value_name("F.h5"), "dataset file");
  po::positional_options_description pos;
  pos.add("file", 1);
  po::variables_map vm;
  if (!cli::parse(argc, argv, desc, vm, "usage: lpsgd data info F.h5", &pos)) return 0;

  const io::h5::File file = io::h5::File::open_read(path);
  const std::vector<std::string> splits = io::split_names(file);
  if (splits.empty()) LPSGD_USAGE_ERROR(path << ": no /train or /test split");
  std::ostringstream out;
  out << "file: " << path << "\n";
  for (const std::string& name : splits) {
    const io::Split s = io::open_split(path, name);
    if (name == splits.front()) {
      out << "source: " << s.attrs.source << "\n"
          << "classes: " << s.attrs.num_classes;
      if (!s.attrs.class_names.empty()) out << " (" << join(s.attrs.class_names) << ")";
      out << "\nmean: " << join_num(s.attrs.mean) << "\nstd: " << join_num(s.attrs.std)
          << "\nattributes: " << join(file.attr_names()) << "\n";
    }
    out << name << ": x [" << s.shape.n << "," << s.shape.c << "," << s.shape.h << ","
        << s.shape.w << "] " << io::sample_type_name(s.shape.type);
    if (s.chunk_rows > 0) out << " (chunks of " << s.chunk_rows << " samples)";
    out << ", y [" << s.shape.n << "] int\n";
    std::vector<int64_t> counts(static_cast<size_t>(s.attrs.num_classes), 0);
    for (int32_t label : s.y) ++counts[static_cast<size_t>(label)];
    out << "  class counts:";
    for (size_t k = 0; k < counts.size(); ++k) out << " " << k << ":" << counts[k];
    out << "\n";
  }
  if (log::rank() == 0) std::cout << out.str() << std::flush;
  return 0;
}

int bench_loader(int argc, char** argv) {
  io::LoaderOptions opt;
  int64_t batches = 0;
  std::string augment;
  po::options_description desc("lpsgd data bench-loader options");
  desc.add_options()
      ("file", po::value(&opt.path)->required()->value_name("F.h5"), "dataset file")
      ("split", po::value(&opt.split)->default_value("train"), "train or test")
      ("batch", po::value(&opt.batch)->default_value(128), "per-rank batch size")
      ("data-cache-mb", cli::value_with_default(&opt.cache_mb), "hold x in memory up to this size, else stream it")
      ("prefetch", po::value(&opt.prefetch)->default_value(2), "batches prepared ahead (0: no thread)")
      ("shuffle-window", po::value(&opt.window_chunks)->default_value(16), "streaming: chunks per shuffle window")
      ("seed", po::value(&opt.seed)->default_value(0), "order seed")
      ("batches", po::value(&batches)->default_value(0), "batches to time (0: two epochs)")
      ("augment", po::value(&augment)->value_name("SPEC"), "augment as lpsgd train does: crop:PAD, flip or crop:PAD,flip");
  po::positional_options_description pos;
  pos.add("file", 1);
  po::variables_map vm;
  if (!cli::parse(argc, argv, desc, vm, "usage: lpsgd data bench-loader F.h5 [options]", &pos))
    return 0;
  opt.rank = log::rank();
  opt.world = log::size();
  opt.augment = io::parse_augment(augment);
  io::Loader loader(opt);
  if (batches <= 0) batches = 2 * loader.batches_per_epoch();
  io::Batch b;
  double checksum = 0;
  const double t0 = now_s();
  for (int64_t i = 0; i < batches;) {
    if (!loader.next(b)) continue;
    checksum += static_cast<double>(b.x[0]);  // touch the data
    ++i;
  }
  const double dt = now_s() - t0;
  if (log::rank() == 0)
    std::printf("loader %s mode %s batch %lld ranks %d prefetch %d augment %s: %lld batches in "
                "%.3f s, %.1f batches/s, %.0f samples/s (checksum %.3g)\n",
                opt.path.c_str(), loader.streaming() ? "streaming" : "cached",
                static_cast<long long>(opt.batch), opt.world, opt.prefetch,
                io::augment_text(opt.augment).c_str(),
                static_cast<long long>(batches), dt, static_cast<double>(batches) / dt,
                static_cast<double>(batches * opt.batch) / dt, checksum);
  return 0;
}

}  // namespace

int run_data(int argc, char** argv) {
  const std::string sub = argc >= 2 ? argv[1] : "";
  if (sub == "import-idx") return import_idx(argc - 1, argv + 1);
  if (sub == "import-cifar") return import_cifar(argc - 1, argv + 1);
  if (sub == "import-npz") return import_npz(argc - 1, argv + 1);
  if (sub == "synth") return synth(argc - 1, argv + 1);
  if (sub == "info") return info(argc - 1, argv + 1);
  if (sub == "bench-loader") return bench_loader(argc - 1, argv + 1);
  if (sub == "--help" || sub == "-h") {
    if (log::rank() == 0) std::cout << kDataUsage << "\n";
    return 0;
  }
  if (sub.empty()) {
    if (log::rank() == 0) std::cerr << kDataUsage << "\n";
    return 2;
  }
  LPSGD_USAGE_ERROR("unknown data subcommand '" << sub
                                                << "' (use import-idx, import-cifar, import-npz, synth, info or bench-loader)");
}

}  // namespace lpsgd::app
