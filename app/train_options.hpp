// The options of `lpsgd train` (command line or --config INI) and their
// conversion to a train::TrainConfig, apart from running anything: the train
// command and the INI fuzz harness (tests/fuzz/fuzz_config.cpp) share them.
#pragma once

#include <string>

#include "train/trainer.hpp"

namespace lpsgd::app {

/// What `lpsgd train`'s options describe.
struct TrainOptions {
  train::TrainConfig config;  ///< config_text included
  int threads = 1;            ///< compute threads per rank
  std::string device = "cpu"; ///< cpu or cuda
};

/// Parses argv (argv[0] = "train") and any --config INI file into `out`.
/// Returns false when --help was given (usage printed on rank 0); a bad
/// option, value or file is a usage error.
bool parse_train_options(int argc, char** argv, TrainOptions& out);

}  // namespace lpsgd::app
