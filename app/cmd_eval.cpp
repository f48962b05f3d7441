// lpsgd eval: loss, accuracy and a per-class table of a trained model (a
// checkpoint, or an ONNX file) over one split of a dataset, on any number of
// ranks. The work is train::evaluate_model; this file parses and prints.
//
//   lpsgd eval CHECKPOINT|DIR|FILE.onnx --data F.h5 [--split test] [--batch B]
//              [--outputs OUT.h5]
//
// The last line (rank 0) is for scripts:
//   lpsgd: eval samples=N loss=L acc=A
#include <cstdio>
#include <iostream>
#include <sstream>

#include "app/commands.hpp"
#include "core/cli.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "train/evaluate.hpp"
#include "train/model_source.hpp"

namespace lpsgd::app {

int run_eval(int argc, char** argv) {
  namespace po = cli::po;
  train::EvalConfig c;
  int threads = 1;
  std::string device = "cpu";
  po::options_description desc("lpsgd eval options");
  desc.add_options()
    ("model", po::value(&c.model)->value_name("CHECKPOINT|DIR|FILE.onnx"), "a checkpoint (.h5; a --checkpoint-dir: its newest valid one) or an ONNX model")
    ("data", po::value(&c.data), "HDF5 dataset to evaluate on")
    ("split", po::value(&c.split)->default_value(c.split), "test or train")
    ("batch", po::value(&c.batch)->default_value(c.batch), "samples per rank per batch")
    ("outputs", po::value(&c.outputs)->value_name("OUT.h5"), "write the model's output for every sample (/scores [N, classes], /labels [N]) to OUT.h5")
    ("cache-mb", cli::value_with_default(&c.cache_mb), "hold the split in memory up to this size")
    ("device", po::value(&device)->default_value(device), "cpu or cuda")
    ("threads", po::value(&threads)->default_value(threads), "compute threads per rank");
  po::positional_options_description pos;
  pos.add("model", 1);
  po::variables_map vm;
  if (!cli::parse(argc, argv, desc, vm,
                  "usage: lpsgd eval CHECKPOINT|DIR|FILE.onnx --data F.h5 [--split test] [options]", &pos))
    return 0;
  if (device != "cpu" && device != "cuda")
    LPSGD_USAGE_ERROR("--device must be cpu or cuda, got '" << device << "'");
  cli::require_range("threads", threads, 1, 1024);
  set_host_threads(threads);
  auto dev = make_device(device == "cuda" ? DeviceKind::Cuda : DeviceKind::Cpu, 0);
  const train::EvalResult r = train::evaluate_model(*dev, c);
  if (log::rank() != 0) return 0;

  std::vector<std::string> names = train::dataset_class_names(c.data);
  std::ostringstream o;
  char line[256];
  o << "model: " << r.source << " (" << r.model << ")\n";
  o << "data: " << c.data << " /" << c.split << ", " << r.samples << " samples\n";
  std::snprintf(line, sizeof line, "%-24s %9s %9s %9s %9s\n", "class", "samples", "correct",
                "accuracy", "loss");
  o << line;
  for (size_t k = 0; k < r.per_class_samples.size(); ++k) {
    std::string label = std::to_string(k);
    if (k < names.size()) label += " " + names[k].substr(0, 21);
    const double n = static_cast<double>(r.per_class_samples[k]);
    std::snprintf(line, sizeof line, "%-24s %9lld %9lld %9.4f %9.4f\n", label.c_str(),
                  static_cast<long long>(r.per_class_samples[k]),
                  static_cast<long long>(r.per_class_correct[k]),
                  n > 0 ? static_cast<double>(r.per_class_correct[k]) / n : 0.0,
                  n > 0 ? r.per_class_loss[k] / n : 0.0);
    o << line;
  }
  int64_t correct = 0;
  for (int64_t v : r.per_class_correct) correct += v;
  std::snprintf(line, sizeof line, "%-24s %9lld %9lld %9.4f %9.4f\n", "all",
                static_cast<long long>(r.samples), static_cast<long long>(correct), r.accuracy,
                r.loss);
  o << line;
  if (!c.outputs.empty()) o << "outputs: " << c.outputs << "\n";
  std::snprintf(line, sizeof line, "lpsgd: eval samples=%lld loss=%.6f acc=%.6f\n",
                static_cast<long long>(r.samples), r.loss, r.accuracy);
  o << line;
  std::cout << o.str() << std::flush;
  return 0;
}

}  // namespace lpsgd::app
