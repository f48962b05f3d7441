// Evaluation of a finished model, the work behind `lpsgd eval`: a checkpoint
// or an ONNX file over one split of a dataset, on any number of ranks (each
// takes its slice of every batch, as in training; the sums are added up).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/device.hpp"

namespace lpsgd::train {

struct EvalConfig {
  std::string model;           ///< a checkpoint (.h5; a directory: its newest) or FILE.onnx
  std::string data;            ///< HDF5 dataset
  std::string split = "test";
  int64_t batch = 500;         ///< per rank
  double cache_mb = 1024;
  /// HDF5 file of the model's output per sample ("" none): /scores [N,
  /// classes] float32 (what the graph outputs: logits, or the softmax or log
  /// softmax a model from ONNX ends with) and /labels [N] int32, in the
  /// split's order; written by rank 0, atomically.
  std::string outputs;
};

/// What `lpsgd eval` reports (identical on every rank).
struct EvalResult {
  std::string model;                 ///< the architecture (spec or layer list)
  std::string source;                ///< the file evaluated (a directory's checkpoint)
  int64_t samples = 0;
  double loss = 0, accuracy = 0;     ///< mean softmax cross-entropy, arg-max accuracy
  std::vector<int64_t> per_class_samples, per_class_correct;
  std::vector<double> per_class_loss;  ///< sums
};

/// Runs the evaluation on MPI_COMM_WORLD with `dev` (borrowed). Bad input (a
/// missing split, a model that does not fit the data) is a usage error on
/// every rank, before anything is evaluated.
EvalResult evaluate_model(Device& dev, const EvalConfig& config);

}  // namespace lpsgd::train
