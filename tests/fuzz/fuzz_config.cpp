// libFuzzer harness of the INI config parser: the input is a --config file
// for `lpsgd train`, parsed by the same code the command uses
// (app/train_options.cpp: Boost.Program_options' INI reader through
// cli::parse, then every value's conversion and range check).
#include <cstdint>

#include "app/train_options.hpp"
#include "fuzz_util.hpp"

using namespace lpsgd;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_file("train.ini", data, size);
  std::string a0 = "train", a1 = "--config", a2 = path;
  char* argv[] = {a0.data(), a1.data(), a2.data(), nullptr};
  fuzz::expect_errors([&] {
    app::TrainOptions o;
    if (!app::parse_train_options(3, argv, o)) fuzz::finding("--help seen in a config file");
    // Every option that was set is recorded (a checkpoint stores this text).
    if (o.config.config_text.empty()) fuzz::finding("empty config_text");
  });
  return 0;
}
