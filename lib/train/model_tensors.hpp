// A model's tensors in a checkpoint and back: the parameters, each optimizer
// state array and the layer state that is not learned (batch norm's running
// statistics), named "layers.I.NAME" after the model's layer I, shaped like
// the layer's tensors.
//
// Why a file of its own: the trainer (writing and resuming), `lpsgd eval` and
// `lpsgd export` (reading a checkpoint's model) all need the same names and
// the same checks, and none of them should know how a graph's layers lay
// their tensors out in the arenas.
#pragma once

#include <string>
#include <vector>

#include "io/checkpoint.hpp"
#include "nn/model.hpp"

namespace lpsgd::train {

/// Host copies of a model's arenas, laid out as the device's.
struct ArenaCopies {
  std::vector<float> params;     ///< [param_count]
  std::vector<float> optimizer;  ///< [arrays * param_count]: each optimizer array in turn
  std::vector<float> state;      ///< [state_count]
};

/// "layers.I.NAME" for a parameter or state slot of model m.
std::string tensor_name(const nn::Model& m, const nn::ParamSlot& s, bool state = false);

/// Fills c.params, c.optimizer ("NAME.SUFFIX" per parameter for each
/// optimizer array, all of the first array's, then the second's: suffixes
/// name them, e.g. {"momentum"}) and c.state from h.
void put_tensors(const nn::Model& m, const std::vector<std::string>& suffixes, const ArenaCopies& h,
                 io::Checkpoint& c);

/// The reverse: h from c, after checking that c's tensors are the model's
/// (names, shapes, counts); a mismatch is a usage error naming the tensor.
void take_tensors(const nn::Model& m, const std::vector<std::string>& suffixes,
                  const io::Checkpoint& c, ArenaCopies& h);

}  // namespace lpsgd::train
