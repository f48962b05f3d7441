// Models from spec strings, ONNX files and checkpoints, checked against the
// data (see model_source.hpp).
#include "train/model_source.hpp"

#include <filesystem>
#include <map>

#include "core/error.hpp"
#include "core/log.hpp"
#include "io/h5.hpp"
#include "model/onnx.hpp"
#include "nn/builder.hpp"

namespace lpsgd::train {
namespace {

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

const char* type_name(model::InputType t) {
  return t == model::InputType::U8 ? "uint8" : t == model::InputType::F32 ? "float32" : "unknown";
}

model::InputType input_type(io::SampleType t) {
  return t == io::SampleType::U8 ? model::InputType::U8 : model::InputType::F32;
}

// The data's per-channel scaling spread over the model's input: per channel
// for [C, H, W], per value for a flat [D] (each channel's H*W values).
void expand(const DataSpec& data, const std::vector<int64_t>& input, std::vector<float>& scale,
            std::vector<float>& shift) {
  scale = data.scale;
  shift = data.shift;
  if (input.size() != 1 || data.sample.size() != 3) return;
  const auto plane = static_cast<size_t>(data.sample[1] * data.sample[2]);
  scale.clear();
  shift.clear();
  for (size_t c = 0; c < data.scale.size(); ++c) {
    scale.insert(scale.end(), plane, data.scale[c]);
    shift.insert(shift.end(), plane, data.shift[c]);
  }
}

void check_outputs(const model::ModelDesc& d, const std::string& what, const DataSpec& data) {
  const std::vector<int64_t> shape = model::output_shape(d, d.input_shape);
  if (data.classes > 0 && (shape.size() != 1 || shape[0] != data.classes))
    LPSGD_USAGE_ERROR("model '" << what << "' has " << numel(shape) << " outputs but '"
                                << data.path << "' has " << data.classes
                                << " classes; make the last layer " << data.classes << " wide");
}

}  // namespace

model::ModelDesc load_model(const std::string& source, const DataSpec& data) {
  if (!model::is_model_file(source)) {
    model::ModelDesc d = model::from_spec(source, data.sample, data.classes > 0 ? data.classes : 10);
    check_outputs(d, source, data);
    d.input_type = input_type(data.type);
    expand(data, d.input_shape, d.scale, d.shift);
    return d;
  }
  model::ModelDesc d = model::read_onnx(source);
  const std::vector<int64_t> want = model::model_input_shape(d, data.sample);
  const bool same = d.input_shape == data.sample ||
                    (d.input_shape.size() == 1 && d.input_shape[0] == numel(data.sample));
  if (!same)
    LPSGD_USAGE_ERROR(source << ": the graph's input is per-sample " << model::shape_str(d.input_shape)
                             << " but '" << data.path << "' holds samples "
                             << model::shape_str(data.sample)
                             << "; the input must be [N, C, H, W] of the samples' shape (or [N, "
                             << numel(data.sample) << "])");
  if (d.input_shape != want)
    LPSGD_USAGE_ERROR(source << ": the graph's input is per-sample " << model::shape_str(d.input_shape)
                             << " but its first layer takes " << model::shape_str(want));
  // A graph lpsgd exported scales its input itself: the data must be what it
  // was made for, or the model would see other numbers than in training.
  std::vector<float> scale, shift;
  expand(data, d.input_shape, scale, shift);
  if (!d.scale.empty()) {
    if (d.input_type != input_type(data.type))
      LPSGD_USAGE_ERROR(source << ": the graph takes " << type_name(d.input_type) << " samples but '"
                               << data.path << "' stores " << type_name(input_type(data.type)));
    if (d.scale != scale || d.shift != shift)
      LPSGD_USAGE_ERROR(source << ": the graph's input scaling (its Mul and Add) differs from the "
                               << "mean and std of '" << data.path
                               << "'; it was exported for another dataset");
  }
  d.input_type = input_type(data.type);
  d.scale = scale;
  d.shift = shift;
  check_outputs(d, source, data);
  return d;
}

model::ModelDesc checkpoint_model(const io::Checkpoint& c, const DataSpec* data) {
  const io::CkptMeta& m = c.meta;
  DataSpec rec;
  if (!m.input_shape.empty()) {
    rec.sample = m.input_shape;
    rec.type = m.input_type == "uint8" ? io::SampleType::U8 : io::SampleType::F32;
    for (double v : m.input_scale) rec.scale.push_back(static_cast<float>(v));
    for (double v : m.input_shift) rec.shift.push_back(static_cast<float>(v));
  }
  const bool have_data = data && !data->path.empty();
  if (have_data && !rec.sample.empty() && rec.sample != data->sample)
    LPSGD_USAGE_ERROR("the checkpoint's model was trained on samples " << model::shape_str(rec.sample)
                                                                     << ", '" << data->path
                                                                     << "' holds "
                                                                     << model::shape_str(data->sample));
  if (rec.sample.empty()) {
    if (!have_data)
      LPSGD_USAGE_ERROR("this checkpoint does not record its data's shape and scaling (it was "
                        "written before lpsgd recorded them); name the dataset it was trained on "
                        "with --data");
    rec = *data;
  }
  rec.path = have_data ? data->path : std::string("the checkpoint's data");
  rec.classes = have_data ? data->classes : 0;
  // The classes: the data's where named, else what the checkpoint's last
  // layer has (the built-in CNNs end in `classes` outputs).
  int64_t classes = rec.classes;
  if (classes <= 0) {
    classes = 10;
    const model::ModelDesc probe = model::from_spec(m.model, rec.sample);
    const std::string last = "layers." + std::to_string(probe.layers.size() - 1) + ".weight";
    for (const io::CkptTensor& t : c.params)
      if (t.name == last && !t.shape.empty()) classes = t.shape[0];
  }
  model::ModelDesc d = model::from_spec(m.model, rec.sample, classes);
  check_outputs(d, m.model, rec);
  d.input_type = input_type(rec.type);
  expand(rec, d.input_shape, d.scale, d.shift);

  std::map<std::string, const io::CkptTensor*> byname;
  for (const auto* group : {&c.params, &c.state})
    for (const io::CkptTensor& t : *group) byname[t.name] = &t;
  // Each layer's parameters, then its state (running statistics).
  const auto take = [&](size_t i, const std::vector<std::vector<int64_t>>& want, bool state,
                        std::vector<model::Tensor>& out) {
    for (size_t k = 0; k < want.size(); ++k) {
      const std::string name = "layers." + std::to_string(i) + "." +
                               (state ? model::state_name(k) : model::param_name(k));
      auto it = byname.find(name);
      if (it == byname.end())
        LPSGD_USAGE_ERROR("the checkpoint has no tensor " << name << " for its model " << m.model);
      if (it->second->shape != want[k])
        LPSGD_USAGE_ERROR("the checkpoint's tensor " << name << " is "
                                                     << model::shape_str(it->second->shape)
                                                     << ", its model " << m.model << " needs "
                                                     << model::shape_str(want[k]));
      out.push_back({name, want[k], it->second->data});
    }
  };
  const std::vector<std::vector<int64_t>> shapes = model::node_shapes(d, d.input_shape);
  for (size_t i = 0; i < d.layers.size(); ++i) {
    model::LayerDesc& l = d.layers[i];
    const int from = d.inputs_of(i)[0];
    const std::vector<int64_t>& in = from == model::kModelInput ? d.input_shape : shapes[static_cast<size_t>(from)];
    take(i, model::param_shapes(l, in), false, l.params);
    take(i, model::state_shapes(l, in), true, l.state);
  }
  return d;
}

model::ModelDesc initial_model(Device& dev, model::ModelDesc desc, uint64_t seed, bool given) {
  auto m = nn::build_model(dev, desc, nn::shape_of(desc.input_shape), seed, given);
  for (size_t i = 0; i < desc.layers.size(); ++i) {
    model::LayerDesc& l = desc.layers[i];
    l.params.clear();
    l.state.clear();
    for (const auto& [from, to] : {std::pair{&m->layer(i).params(), &l.params},
                                   std::pair{&m->layer(i).state(), &l.state}})
      for (const nn::Param& p : *from) {
        model::Tensor t{"layers." + std::to_string(i) + "." + p.name, nn::dims_of(p.shape),
                        std::vector<float>(static_cast<size_t>(p.shape.numel()))};
        dev.copy_to_host(t.data.data(), p.value.data(), t.data.size() * sizeof(float));
        to->push_back(std::move(t));
      }
  }
  return desc;
}

io::Checkpoint read_checkpoint_or_dir(const std::string& path, std::string* chosen) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) {
    if (chosen) *chosen = path;
    return io::read_checkpoint(path);
  }
  std::vector<std::string> warnings;
  io::Checkpoint c;
  const std::string found = io::find_resume_checkpoint(path, &warnings, &c);
  for (const std::string& w : warnings) LPSGD_WARN(w);
  if (found.empty()) LPSGD_USAGE_ERROR(path << ": no valid checkpoint (ckpt-*.h5) in this directory");
  if (chosen) *chosen = found;
  return c;
}

void record_data(const DataSpec& data, io::CkptMeta& meta) {
  meta.input_shape = data.sample;
  meta.input_type = data.type == io::SampleType::U8 ? "uint8" : "float32";
  meta.input_scale.assign(data.scale.begin(), data.scale.end());
  meta.input_shift.assign(data.shift.begin(), data.shift.end());
}

DataSpec data_spec(const std::string& path, const std::string& split) {
  const io::Split s = io::open_split(path, split, 0, /*strings=*/false);
  DataSpec d;
  d.path = path;
  d.sample = {s.shape.c, s.shape.h, s.shape.w};
  d.type = s.shape.type;
  d.classes = s.attrs.num_classes;
  io::input_scaling(s.shape.type, s.attrs, s.shape.c, d.scale, d.shift);
  return d;
}

std::vector<std::string> dataset_class_names(const std::string& path) {
  try {
    const io::h5::File f = io::h5::File::open_read(path);
    for (const std::string& split : io::split_names(f)) {
      const io::Split s = io::open_split(path, split, 0, /*strings=*/true);
      return s.attrs.class_names;
    }
  } catch (const Error&) {
  }
  return {};
}

}  // namespace lpsgd::train
