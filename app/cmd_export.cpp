// lpsgd export: a trained model as an ONNX inference graph that takes the
// samples as the dataset stores them (uint8 or float32, [N, C, H, W]), applies
// lpsgd's input scaling first and outputs the class scores; class names in its
// metadata. Written atomically; model/onnx.hpp says what the graph holds.
//
//   lpsgd export --onnx OUT.onnx CHECKPOINT|DIR [--data F.h5]
//       the checkpoint's model (DIR: its newest valid checkpoint; one written before issue 34 does not
//       record its data's shape and scaling: --data names the dataset)
//   lpsgd export --onnx OUT.onnx --model SPEC|FILE.onnx --data F.h5 [--seed S] [--init fresh]
//       the model as `lpsgd train` would start it (parameters from --seed, or
//       the file's own), e.g. to train it elsewhere from the same start
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "app/commands.hpp"
#include "core/cli.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/checkpoint.hpp"
#include "model/onnx.hpp"
#include "train/model_source.hpp"

namespace lpsgd::app {
namespace {

// The `data = PATH` line of a checkpoint's config, or "".
std::string config_data(const std::string& config) {
  std::istringstream in(config);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("data = ", 0) == 0) return line.substr(7);
  return "";
}

}  // namespace

int run_export(int argc, char** argv) {
  namespace po = cli::po;
  std::string out, checkpoint, data, model, init = "file";
  uint64_t seed = 1;
  po::options_description desc("lpsgd export options");
  desc.add_options()
    ("onnx", po::value(&out)->value_name("OUT.onnx"), "write the model as an ONNX inference graph here")
    ("checkpoint", po::value(&checkpoint)->value_name("CHECKPOINT|DIR"), "a checkpoint file (.h5), or a checkpoint directory (its newest valid checkpoint)")
    ("data", po::value(&data), "the dataset (input shape, type, scaling, class names): needed with --model, and for checkpoints written before lpsgd recorded them")
    ("model", po::value(&model)->value_name("SPEC|FILE.onnx"), "instead of a checkpoint: the model as lpsgd train would start it")
    ("seed", po::value(&seed)->default_value(seed), "with --model: the seed of the initial parameters")
    ("init", po::value(&init)->default_value(init), "with --model FILE.onnx: file (its own tensors) or fresh (drawn from --seed)");
  po::positional_options_description pos;
  pos.add("checkpoint", 1);
  po::variables_map vm;
  const char* usage =
      "usage: lpsgd export --onnx OUT.onnx CHECKPOINT|DIR [--data F.h5]\n"
      "       lpsgd export --onnx OUT.onnx --model SPEC|FILE.onnx --data F.h5 [--seed S]";
  if (!cli::parse(argc, argv, desc, vm, usage, &pos)) return 0;
  if (out.empty()) LPSGD_USAGE_ERROR("--onnx OUT.onnx is required (where to write the model)");
  if (checkpoint.empty() == model.empty())
    LPSGD_USAGE_ERROR("name either a CHECKPOINT or --model SPEC|FILE.onnx (" << usage << ")");
  if (init != "file" && init != "fresh") LPSGD_USAGE_ERROR("--init must be file or fresh, got '" << init << "'");
  if (!model::onnx_available())
    LPSGD_USAGE_ERROR(out << ": this lpsgd was built without ONNX support (install Debian's "
                          << "libonnx-dev and libprotobuf-dev, e.g. with tools/setup.sh, and rebuild)");

  model::ModelDesc d;
  std::string names_from = data;
  if (!model.empty()) {
    if (data.empty()) LPSGD_USAGE_ERROR("--model needs --data (the dataset the model is for)");
    const train::DataSpec ds = train::data_spec(data, "train");
    d = train::load_model(model, ds);
    const bool given = model::is_model_file(model) && init == "file" && d.has_params();
    auto dev = make_device(DeviceKind::Cpu, 0);
    d = train::initial_model(*dev, d, seed, given);
  } else {
    const io::Checkpoint c = train::read_checkpoint_or_dir(checkpoint);
    train::DataSpec ds;
    if (!data.empty()) ds = train::data_spec(data, "train");
    d = train::checkpoint_model(c, &ds);
    if (names_from.empty()) {
      // The class names come from the dataset the run was trained on, when it is still there.
      const std::string trained_on = config_data(c.meta.config);
      std::error_code ec;
      if (!trained_on.empty() && std::filesystem::exists(trained_on, ec)) names_from = trained_on;
    }
  }
  if (!names_from.empty()) d.class_names = train::dataset_class_names(names_from);
  if (d.class_names.empty() && log::rank() == 0)
    LPSGD_WARN("no class names to write into " << out << " (the dataset has none"
                                               << (names_from.empty() ? " or is not known: name it with --data)" : ")"));
  if (log::rank() == 0) {
    model::write_onnx(out, d);
    const std::vector<int64_t> shape = model::output_shape(d, d.input_shape);
    std::string in;
    for (size_t i = 0; i < d.input_shape.size(); ++i) in += (i ? ", " : "") + std::to_string(d.input_shape[i]);
    std::printf("lpsgd: exported %s (%s) to %s: input [batch, %s] %s, output scores [batch, %lld]\n",
                checkpoint.empty() ? model.c_str() : checkpoint.c_str(), d.spec.c_str(), out.c_str(),
                in.c_str(), d.input_type == model::InputType::U8 ? "uint8" : "float32",
                static_cast<long long>(shape.at(0)));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace lpsgd::app
