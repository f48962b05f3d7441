// Test helper (not installed, not a user command): writes checkpoints with
// known contents through io::write_checkpoint, for the e2e tests of
// `lpsgd ckpt`, and times writing and reading them.
//
//   make_ckpt --dir DIR [--steps 10,20,30] [--shapes 784x512,512,...] [--keep K]
//             [--model SPEC] [--time REPS]
//   make_ckpt --damage FILE   flips one bit in the middle of the first parameter
//                             tensor's data (as a bad disk or a torn write would)
//
// Each shape gives one parameter tensor "layerI/weight|bias" and an optimizer
// tensor of the same shape ("momentum/..."); values depend on step and index,
// so every checkpoint has its own checksum. The last line printed is the
// checksum of the last checkpoint (16 hex digits). With --time it also prints
// the median write and read time over REPS rounds (fsyncs included) and those
// of the first round.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "core/checksum.hpp"
#include "core/cli.hpp"
#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/h5.hpp"

using namespace lpsgd;

namespace {

std::vector<int64_t> parse_shape(const std::string& text) {
  std::vector<int64_t> shape;
  for (const std::string& d : cli::split_list(text, 'x')) shape.push_back(std::stoll(d));
  return shape;
}

io::Checkpoint make(int64_t step, const std::vector<std::string>& shapes, const std::string& model) {
  io::Checkpoint c;
  c.meta.step = step;
  c.meta.epoch = step / 10;
  c.meta.samples = static_cast<uint64_t>(step) * 128;
  c.meta.loader_epoch = static_cast<uint64_t>(step / 10);
  c.meta.loader_cursor = static_cast<uint64_t>(step % 10) * 128;
  c.meta.lr = 0.05;
  c.meta.seed = 42;
  c.meta.rng_counter = static_cast<uint64_t>(step) * 3;
  c.meta.ranks = 2;
  c.meta.batch = 64;
  c.meta.model = model;
  c.meta.config = "model = " + model + "\nlr = 0.05\nbatch = 64\nseed = 42\n";
  c.meta.version = "test";
  c.meta.wall_time = 1700000000.0 + static_cast<double>(step);
  for (size_t i = 0; i < shapes.size(); ++i) {
    io::CkptTensor t;
    t.name = "layer" + std::to_string(i / 2) + (i % 2 ? "/bias" : "/weight");
    t.shape = parse_shape(shapes[i]);
    size_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<size_t>(d);
    t.data.resize(n);
    for (size_t k = 0; k < n; ++k)
      t.data[k] = static_cast<float>(step) + static_cast<float>((k * 7 + i) % 1000) * 1e-3f;
    io::CkptTensor m = t;
    m.name = "momentum/" + t.name;
    for (float& v : m.data) v = -v;
    c.params.push_back(std::move(t));
    c.optimizer.push_back(std::move(m));
  }
  return c;
}

void damage(const std::string& path) {
  uint64_t at = 0;
  {
    const io::h5::File f = io::h5::File::open_read(path);
    const io::h5::Group g = io::h5::Group::open(f, "params");
    const std::vector<std::string> links = g.link_names();
    LPSGD_CHECK(!links.empty(), path << ": no parameter tensors");
    const io::h5::Dataset d = io::h5::Dataset::open(g, links[0]);
    LPSGD_CHECK(d.file_offset() != HADDR_UNDEF && d.size() > 0, path << ": no data to damage");
    at = d.file_offset() + d.size() * sizeof(float) / 2;
  }
  std::FILE* file = std::fopen(path.c_str(), "r+b");
  LPSGD_CHECK(file, "cannot open " << path);
  std::fseek(file, static_cast<long>(at), SEEK_SET);
  const int b = std::fgetc(file);
  std::fseek(file, static_cast<long>(at), SEEK_SET);
  std::fputc(b ^ 0x04, file);
  std::fclose(file);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string dir, steps = "10", shapes = "8x4,8", model = "mlp:4-8";
    int keep = 3, reps = 0;
    if (argc % 2 == 0) LPSGD_USAGE_ERROR("options come in pairs: --name value");
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string opt = argv[i], val = argv[i + 1];
      if (opt == "--damage") {
        damage(val);
        return 0;
      }
      if (opt == "--dir") dir = val;
      else if (opt == "--steps") steps = val;
      else if (opt == "--shapes") shapes = val;
      else if (opt == "--keep") keep = std::stoi(val);
      else if (opt == "--model") model = val;
      else if (opt == "--time") reps = std::stoi(val);
      else LPSGD_USAGE_ERROR("unknown option " << opt);
    }
    if (dir.empty())
      LPSGD_USAGE_ERROR("usage: make_ckpt --dir DIR [--steps S,..] [--shapes AxB,..] [--keep K] "
                        "[--model SPEC] [--time REPS] | make_ckpt --damage FILE");
    const std::vector<std::string> shape_list = cli::split_list(shapes);
    uint64_t checksum = 0;
    for (const std::string& s : cli::split_list(steps)) {
      io::Checkpoint c = make(std::stoll(s), shape_list, model);
      io::write_checkpoint(dir, c, keep);
      checksum = c.checksum;
    }
    if (reps > 0) {
      io::Checkpoint c = make(1000000, shape_list, model);
      size_t floats = 0;
      for (const auto& t : c.params) floats += t.data.size();
      for (const auto& t : c.optimizer) floats += t.data.size();
      std::vector<double> w, r;
      std::string path;
      for (int i = 0; i < reps; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        path = io::write_checkpoint(dir, c, keep);
        w.push_back(seconds_since(t0));
        t0 = std::chrono::steady_clock::now();
        const io::Checkpoint back = io::read_checkpoint(path);
        r.push_back(seconds_since(t0));
        LPSGD_CHECK(back.checksum == c.checksum, "read back another checkpoint");
      }
      // The first round runs in fresh memory (page faults), as a resume does.
      std::printf("%zu floats (%.2f MB): write %.2f ms, read %.2f ms (median of %d; first: "
                  "write %.2f ms, read %.2f ms)\n",
                  floats, static_cast<double>(floats) * 4e-6, median(w) * 1e3, median(r) * 1e3,
                  reps, w[0] * 1e3, r[0] * 1e3);
    }
    std::printf("%s\n", checksum_hex(checksum).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_ckpt: %s\n", e.what());
    return 1;
  }
}
