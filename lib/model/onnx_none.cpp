// The ONNX functions of a build without ONNX (Debian libonnx-dev missing when
// CMake ran): each says so and how to get it.
#include "core/error.hpp"
#include "model/onnx.hpp"

namespace lpsgd::model {
namespace {

[[noreturn]] void missing(const std::string& path) {
  LPSGD_USAGE_ERROR(path << ": this lpsgd was built without ONNX support (install Debian's "
                         << "libonnx-dev and libprotobuf-dev, e.g. with tools/setup.sh, and "
                         << "rebuild)");
}

}  // namespace

bool onnx_available() { return false; }
ModelDesc read_onnx(const std::string& path) { missing(path); }
ModelDesc read_onnx_bytes(const void*, size_t, const std::string& name, std::string*) { missing(name); }
std::string onnx_bytes(const ModelDesc&) { missing("ONNX export"); }
void write_onnx(const std::string& path, const ModelDesc&) { missing(path); }

}  // namespace lpsgd::model
