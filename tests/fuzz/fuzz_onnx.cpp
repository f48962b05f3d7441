// libFuzzer harness of the ONNX reader (lib/model/onnx.*): the input is the
// bytes of an .onnx file. Reading must end in a model or in an lpsgd::Error
// with a one-line message, never a crash, a hang or another exception (and a
// note, if any, is one line too). A model read must be writable, and read
// back from what was written to the same description: the same graph (each
// node's inputs), tensors and batch norm state (the writer and the reader
// agree on every graph the reader accepts), and its canonical layer list must
// parse as a spec to the same list.
#include <cstdint>
#include <string>

#include "fuzz_util.hpp"
#include "model/desc.hpp"
#include "model/onnx.hpp"

using namespace lpsgd;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  model::ModelDesc d;
  std::string note;
  const bool read = fuzz::expect_errors([&] { d = model::read_onnx_bytes(data, size, "fuzz.onnx", &note); });
  if (!read) return 0;
  if (note.find_first_of("\r\n") != std::string::npos) fuzz::finding("a note of more than one line: " + note);
  if (d.layers.empty() || d.input_shape.empty()) fuzz::finding("a model without layers or input shape was read");
  if (d.spec != d.canonical()) fuzz::finding("spec is not the canonical layer list");
  // The writer takes what the reader gave (the export path), unless the
  // graph's scaling was partial (a shift alone): then it is written as read.
  std::string bytes;
  if (!fuzz::expect_errors([&] { bytes = model::onnx_bytes(d); }))
    fuzz::finding("a model read cannot be written");
  model::ModelDesc back;
  if (!fuzz::expect_errors([&] { back = model::read_onnx_bytes(bytes.data(), bytes.size(), "again.onnx"); }))
    fuzz::finding("a model written cannot be read back");
  if (back.canonical() != d.canonical() || back.input_shape != d.input_shape ||
      back.scale != d.scale || back.shift != d.shift || back.input_type != d.input_type)
    fuzz::finding("read -> write -> read changed the model: " + d.canonical() + " / " + back.canonical());
  for (size_t i = 0; i < d.layers.size(); ++i) {
    if (back.inputs_of(i) != d.inputs_of(i)) fuzz::finding("read -> write -> read changed a node's inputs");
    if (back.layers[i].eps != d.layers[i].eps || back.layers[i].momentum != d.layers[i].momentum)
      fuzz::finding("read -> write -> read changed a batch norm's epsilon or momentum");
    for (auto member : {&model::LayerDesc::params, &model::LayerDesc::state}) {
      const auto& a = d.layers[i].*member;
      const auto& b = back.layers[i].*member;
      if (a.size() != b.size()) fuzz::finding("read -> write -> read changed a layer's tensor count");
      for (size_t k = 0; k < a.size(); ++k)
        if (b[k].data != a[k].data || b[k].shape != a[k].shape)
          fuzz::finding("read -> write -> read changed a tensor");
    }
  }
  model::ModelDesc spec;
  if (!fuzz::expect_errors([&] { spec = model::from_spec(d.canonical(), d.input_shape); }))
    fuzz::finding("the canonical layer list does not parse: " + d.canonical());
  if (spec.canonical() != d.canonical()) fuzz::finding("the canonical layer list parses to another list");
  return 0;
}
