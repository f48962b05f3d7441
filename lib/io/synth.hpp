// Learnable synthetic datasets of any size, for tests and large-scale benchmarks.
//
// Class k has a smooth per-channel pattern (a sum of a horizontal and a vertical
// sinusoid whose frequencies and phases come from the seed); a sample is its
// class pattern plus Gaussian noise of standard deviation `noise`, clamped to
// [0, 1] (stored as round(255 v) for uint8). Labels are uniform over the classes.
// Sample i of a split is a pure function of (seed, split, i), and the file is
// written a block at a time, so a dataset larger than memory can be made.
#pragma once

#include <cstdint>
#include <string>

#include "io/dataset.hpp"

namespace lpsgd::io {

struct SynthOptions {
  std::string out;
  int64_t train_samples = 0, test_samples = 0;
  int64_t c = 1, h = 28, w = 28;
  int64_t classes = 10;
  uint64_t seed = 0;
  double noise = 0.5;
  SampleType type = SampleType::U8;
  int gzip_level = 0;
};

/// Writes the dataset atomically (see DatasetWriter).
void make_synthetic(const SynthOptions& opt);

}  // namespace lpsgd::io
