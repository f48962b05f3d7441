// Writes the seed corpora of the fuzz harnesses (tests/fuzz/run.sh runs it at
// build time, so no binary seeds are committed): valid files of each format,
// small, through the library's own writers, like the unit tests' fixtures
// (tests/unit/io_fixtures.hpp, tests/tools/make_ckpt.cpp).
//
//   make_seeds OUTDIR   writes OUTDIR/idx/*, OUTDIR/dataset/*, OUTDIR/ckpt/* and, built
//                       with ONNX, OUTDIR/onnx/* (graphs lpsgd export writes, chains
//                       and residual graphs, and one in PyTorch's training form)
// The config harness's seeds are text, committed under tests/fuzz/corpus/config.
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/dataset.hpp"
#include "lpsgd/config.hpp"
#include "model/desc.hpp"
#include "model/onnx.hpp"
#if LPSGD_HAVE_ONNX
#include <onnx/onnx_pb.h>
#endif

using namespace lpsgd;
namespace fs = std::filesystem;

namespace {

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes, bool gz) {
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb9");
    LPSGD_CHECK(f && gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
                         static_cast<int>(bytes.size()),
                "cannot write " << path);
    gzclose(f);
    return;
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  LPSGD_CHECK(f && std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size(),
              "cannot write " << path);
  std::fclose(f);
}

std::vector<uint8_t> idx(const std::vector<uint32_t>& dims) {
  std::vector<uint8_t> b;
  auto be32 = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
  };
  be32(0x0800u | static_cast<uint32_t>(dims.size()));
  size_t n = 1;
  for (uint32_t d : dims) {
    be32(d);
    n *= d;
  }
  for (size_t i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(i * 37 % 251));
  return b;
}

void idx_seeds(const std::string& dir) {
  write_bytes(dir + "/images.idx", idx({3, 4, 5}), false);
  write_bytes(dir + "/images.idx.gz", idx({2, 28, 28}), true);
  write_bytes(dir + "/labels.idx", idx({10}), false);
  write_bytes(dir + "/labels.idx.gz", idx({7}), true);
  write_bytes(dir + "/empty-images.idx", idx({0, 2, 2}), false);
}

// Sample i is filled with i (as io_fixtures' write_index_dataset); label i % classes.
void dataset(const std::string& path, int64_t n_train, int64_t n_test, io::SampleType type,
             int64_t c, int64_t h, int64_t w, int64_t chunk_rows, int gzip,
             std::vector<std::string> names) {
  const int64_t classes = names.empty() ? 3 : static_cast<int64_t>(names.size());
  io::DatasetWriter wr(path, classes, names, "fuzz seed", gzip);
  for (auto [split, n] : {std::pair<const char*, int64_t>{"train", n_train}, {"test", n_test}}) {
    if (n == 0) continue;
    const io::SplitShape shape{n, c, h, w, type};
    wr.begin_split(split, shape, chunk_rows);
    const int64_t e = shape.sample_elems();
    std::vector<uint8_t> xu(static_cast<size_t>(n * e));
    std::vector<float> xf(xu.size());
    std::vector<int32_t> y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      y[static_cast<size_t>(i)] = static_cast<int32_t>(i % classes);
      for (int64_t k = 0; k < e; ++k) {
        xu[static_cast<size_t>(i * e + k)] = static_cast<uint8_t>(i);
        xf[static_cast<size_t>(i * e + k)] = static_cast<float>(i) * 0.5f;
      }
    }
    wr.append(type == io::SampleType::U8 ? static_cast<const void*>(xu.data()) : xf.data(),
              y.data(), n);
    wr.end_split();
  }
  wr.commit();
}

void dataset_seeds(const std::string& dir) {
  dataset(dir + "/u8-plain.h5", 6, 3, io::SampleType::U8, 1, 3, 2, 2, 0, {});
  dataset(dir + "/f32-gzip.h5", 5, 0, io::SampleType::F32, 2, 2, 2, 2, 4, {"a", "b", "c", "d"});
  dataset(dir + "/u8-test-only.h5", 0, 4, io::SampleType::U8, 1, 2, 2, 0, 1, {});
}

void ckpt_seeds(const std::string& dir) {
  const std::vector<std::vector<int64_t>> shapes[] = {{{4, 3}, {3}}, {{2, 1, 2}, {}}, {}};
  int64_t step = 1;
  for (const auto& list : shapes) {
    io::Checkpoint c;
    c.meta.step = step;
    c.meta.epoch = 1;
    c.meta.samples = 128;
    c.meta.lr = 0.05;
    c.meta.seed = 42;
    c.meta.ranks = 2;
    c.meta.batch = 64;
    c.meta.model = "mlp:4-3";
    c.meta.config = "model = mlp:4-3\nlr = 0.05\n";
    c.meta.version = "seed";
    for (size_t i = 0; i < list.size(); ++i) {
      io::CkptTensor t;
      t.name = "layer0/" + std::string(i ? "bias" : "weight");
      t.shape = list[i];
      size_t n = 1;
      for (int64_t d : t.shape) n *= static_cast<size_t>(d);
      for (size_t k = 0; k < n; ++k) t.data.push_back(static_cast<float>(k) * 0.25f);
      c.params.push_back(t);
      t.name = "momentum/" + t.name;
      c.optimizer.push_back(t);
    }
    if (step == 2) {  // the data attributes export needs (optional in the format)
      c.meta.input_shape = {1, 2, 2};
      c.meta.input_type = "uint8";
      c.meta.input_scale = {0.0125};
      c.meta.input_shift = {-0.75};
    }
    const std::string tmp = dir + "/tmp";
    const std::string p = io::write_checkpoint(tmp, c, 1);
    fs::rename(p, dir + "/ckpt-" + std::to_string(step) + ".h5");
    fs::remove_all(tmp);
    ++step;
  }
}

#if LPSGD_HAVE_ONNX
// A graph lpsgd wrote, rewritten the way PyTorch writes a training-mode
// export: every batch norm with its statistics as two more (unused)
// outputs, the first one's scale read through an Identity of the
// initializer (PyTorch's shared initializers), residual Adds as Sum.
std::string pytorch_form(const std::string& bytes) {
  onnx::ModelProto mp;
  LPSGD_CHECK(mp.ParseFromString(bytes), "cannot parse a seed graph");
  mp.set_producer_name("pytorch");
  onnx::GraphProto& g = *mp.mutable_graph();
  bool aliased = false;
  for (onnx::NodeProto& n : *g.mutable_node()) {
    if (n.op_type() == "BatchNormalization") {
      n.add_output(n.name() + ".running_mean");
      n.add_output(n.name() + ".running_var");
      if (!aliased) {
        onnx::NodeProto* id = g.add_node();
        id->set_op_type("Identity");
        id->set_name("shared_scale");
        id->add_input(n.input(1));
        id->add_output(n.input(1) + ".alias");
        n.set_input(1, n.input(1) + ".alias");
        aliased = true;
      }
    }
    if (n.op_type() == "Add" && n.name() != "input_shift") n.set_op_type("Sum");
  }
  // The Identity reads an initializer only: first, as a topological order has it.
  for (int i = g.node_size() - 1; aliased && i > 0; --i) g.mutable_node()->SwapElements(i, i - 1);
  std::string out;
  LPSGD_CHECK(mp.SerializeToString(&out), "cannot write a seed graph");
  return out;
}
#endif

// Graphs as lpsgd export writes them: every operation, uint8 and float input,
// softmax outputs, flat input, residual joins (of two nodes, of the input, of
// a node with itself) with batch norms on planes and on features, both
// average pools; tensors small so the fuzzer's mutations reach the structure.
void onnx_seeds(const std::string& dir) {
  const std::pair<const char*, std::vector<int64_t>> models[] = {
      {"layers:conv(2,3x3,s1x1,p1x1)-relu-maxpool(2x2,s2x2,p0x0)-flatten-linear(3)", {1, 4, 4}},
      {"layers:conv(2,3x2,s2x1,p1x0,nobias)-relu-maxpool(3x2,s1x2,p1x1)-flatten-dropout(0.25)-"
       "linear(2,nobias)-softmax",
       {2, 5, 4}},
      {"layers:linear(3)-relu-linear(2)-logsoftmax", {1, 2, 2}},
      {"layers:conv(2,3x3,s1x1,p1x1,nobias)-batchnorm-relu-conv(2,3x3,s1x1,p1x1,nobias)-"
       "batchnorm(0.001,0.2)-add@4+2-relu-avgpool(2x2,s2x2,p1x1)-gavgpool-flatten-linear(3)",
       {1, 4, 4}},
      {"layers:relu-add@in+0-avgpool(3x3,s1x1,p1x1,nopadcount)-add@2+2-flatten-batchnorm-linear(2)-"
       "softmax",
       {2, 3, 3}},
  };
  int i = 0;
  for (const auto& [spec, shape] : models) {
    model::ModelDesc d = model::from_spec(spec, shape);
    const auto shapes = model::node_shapes(d, d.input_shape);
    float v = 0.125f;
    for (size_t n = 0; n < d.layers.size(); ++n) {
      model::LayerDesc& l = d.layers[n];
      const int from = d.inputs_of(n)[0];
      const std::vector<int64_t>& s = from == model::kModelInput ? d.input_shape : shapes[static_cast<size_t>(from)];
      for (const auto& ps : model::param_shapes(l, s)) {
        int64_t count = 1;
        for (int64_t x : ps) count *= x;
        model::Tensor t{"", ps, {}};
        for (int64_t k = 0; k < count; ++k) t.data.push_back(v = -v * 1.5f + 0.25f);
        l.params.push_back(t);
      }
      for (const auto& ss : model::state_shapes(l, s)) {  // means around 0, variances around 1
        model::Tensor t{"", ss, {}};
        const bool mean = l.state.empty();
        for (int64_t k = 0; k < ss[0]; ++k)
          t.data.push_back((mean ? 0.0f : 1.0f) + (mean ? 0.125f : 0.25f) * static_cast<float>(k));
        l.state.push_back(t);
      }
    }
    d.input_type = i == 0 ? model::InputType::U8 : model::InputType::F32;
    // Per channel for [C, H, W], per value for a flat [D]: both d.input_shape[0].
    const auto scales = static_cast<size_t>(d.input_shape[0]);
    d.scale.assign(scales, i == 0 ? 1.0f / 255 : 1.0f);
    d.shift.assign(scales, i == 0 ? -0.5f : 0.0f);
    if (i == 2) d.scale.clear(), d.shift.clear();  // no scaling: the graph takes scaled input
    const std::string bytes = model::onnx_bytes(d);
    write_bytes(dir + "/model" + std::to_string(i) + ".onnx",
                std::vector<uint8_t>(bytes.begin(), bytes.end()), false);
#if LPSGD_HAVE_ONNX
    if (i == 3) {  // the residual graph with batch norms
      const std::string torch = pytorch_form(bytes);
      write_bytes(dir + "/pytorch-training-form.onnx", std::vector<uint8_t>(torch.begin(), torch.end()), false);
    }
#endif
    ++i;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds OUTDIR\n");
    return 2;
  }
  try {
    const std::string out = argv[1];
    for (const char* h : {"idx", "dataset", "ckpt"}) fs::create_directories(out + "/" + h);
    idx_seeds(out + "/idx");
    dataset_seeds(out + "/dataset");
    ckpt_seeds(out + "/ckpt");
    if (model::onnx_available()) {
      fs::create_directories(out + "/onnx");
      onnx_seeds(out + "/onnx");
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_seeds: %s\n", e.what());
    return 1;
  }
}
