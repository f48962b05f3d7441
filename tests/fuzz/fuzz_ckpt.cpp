// libFuzzer harness of the checkpoint reader (lib/io/checkpoint.*): the input
// is a checkpoint file in a directory whose `latest` names it. inspect (what
// `lpsgd ckpt info` and `verify` use) must report damage in its result, never
// throw; read (load) must throw exactly when inspect says damaged; resume must
// pick the file exactly when it is valid.
#include <cstdint>
#include <vector>

#include "fuzz_util.hpp"
#include "io/checkpoint.hpp"

using namespace lpsgd;

namespace {

std::string dir() {
  static const std::string d = [] {
    const std::string latest = "ckpt-000000007.h5\n";
    fuzz::write_file("latest", latest.data(), latest.size());
    return fuzz::temp_dir();
  }();
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string d = dir();
  const std::string path = fuzz::write_file("ckpt-000000007.h5", data, size);
  io::CkptInfo info;
  try {
    info = io::inspect_checkpoint(path);
  } catch (const Error& e) {
    fuzz::finding("inspect_checkpoint threw instead of reporting damage: " + e.message());
  }
  if (!info.valid) {
    if (info.error.empty()) fuzz::finding("damaged checkpoint without a reason");
    fuzz::check_message(info.error);
  }
  const bool loaded = fuzz::expect_errors([&] {
    const io::Checkpoint c = io::read_checkpoint(path);
    if (c.checksum != io::checkpoint_checksum(c)) fuzz::finding("loaded with a wrong checksum");
    if (c.checksum != info.checksum || c.params.size() + c.optimizer.size() != info.tensors)
      fuzz::finding("read and inspect disagree about a valid checkpoint");
  });
  if (loaded != info.valid) fuzz::finding("read_checkpoint and inspect_checkpoint disagree");
  std::vector<std::string> warnings;
  io::Checkpoint resumed;
  const std::string found = io::find_resume_checkpoint(d, &warnings, &resumed);
  if (found.empty() == info.valid) fuzz::finding("resume disagrees with inspect");
  for (const std::string& w : warnings) fuzz::check_message(w);
  return 0;
}
