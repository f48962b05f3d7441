// Where a run's model comes from, decided in one place for train, eval and
// export: a spec string or an ONNX file (model/), or a checkpoint (io/), each
// turned into a model::ModelDesc and checked against the data it will see.
// The trainer only ever gets the description.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint.hpp"
#include "io/dataset.hpp"
#include "model/desc.hpp"
#include "device/device.hpp"

namespace lpsgd::train {

/// The samples a model is fed, as the loader delivers them.
struct DataSpec {
  std::string path;                  ///< for messages
  std::vector<int64_t> sample;       ///< [C, H, W]
  io::SampleType type = io::SampleType::F32;
  std::vector<float> scale, shift;   ///< per channel (io::Loader::input_scale/shift)
  int64_t classes = 0;
};

/// The model `source` names (a spec string or FILE.onnx), checked against
/// `data`: its input shape (a file's [C, H, W] must equal the samples', a
/// flat [D] their size), its outputs (= classes), and, for a graph lpsgd
/// exported, that its input scaling and type are the data's. Usage errors.
/// Fills desc.input_shape (model::model_input_shape), input_type, scale and shift
/// from the data.
model::ModelDesc load_model(const std::string& source, const DataSpec& data);

/// The model a checkpoint holds: its description (spec or layer list) with
/// the tensors of its parameters and the data facts it records. `data`, when
/// given (non-empty path), supplies or must match them; a checkpoint written
/// before they were recorded needs it. Usage errors name what is missing.
model::ModelDesc checkpoint_model(const io::Checkpoint& c, const DataSpec* data);

/// desc with the parameters a run starts from: built on `dev` from `seed` as
/// `lpsgd train` draws them, or (given) the description's own tensors.
model::ModelDesc initial_model(Device& dev, model::ModelDesc desc, uint64_t seed, bool given);

/// The checkpoint at `path`, or for a directory the newest valid one in it
/// (what --resume auto takes; damaged ones skipped with a warning). Usage
/// error when there is none; damage in a named file is a runtime error.
io::Checkpoint read_checkpoint_or_dir(const std::string& path, std::string* chosen = nullptr);

/// The checkpoint fields describing the data (io::CkptMeta::input_*).
void record_data(const DataSpec& data, io::CkptMeta& meta);

/// The DataSpec of a dataset split, opened for that (and checked) only.
DataSpec data_spec(const std::string& path, const std::string& split);

/// The class names a dataset stores, or none (also when it cannot be read:
/// they are informational). Reads HDF5 variable-length strings, which training
/// never does (see io::read_attrs): for eval's table and export's metadata.
std::vector<std::string> dataset_class_names(const std::string& path);

}  // namespace lpsgd::train
