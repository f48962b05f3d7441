// libFuzzer harness of the IDX importer (lib/io/idx.*): the input is an IDX
// file (plain or gzipped), read as 3-D images and as 1-D labels. When it reads
// as images of a modest size, it is also imported (with zero labels) as both
// splits of a dataset, and the dataset's x must hold exactly the IDX bytes.
#include <cstdint>
#include <vector>

#include "fuzz_util.hpp"
#include "io/dataset.hpp"
#include "io/idx.hpp"

using namespace lpsgd;

namespace {

// Every element of a read array is there: the dims' product is data.size().
void check_array(const io::IdxArray& a, int ndims) {
  if (static_cast<int>(a.dims.size()) != ndims) fuzz::finding("IDX dims count differs from ndims");
  unsigned __int128 total = 1;  // no wrap-around: 3 x 32 bits fit
  for (uint32_t d : a.dims) total *= d;
  if (total != a.data.size()) fuzz::finding("IDX data size differs from the product of its dims");
}

void import_round_trip(const io::IdxArray& images, const std::string& images_path) {
  const std::string labels_path = fuzz::temp_dir() + "/labels.idx";
  std::vector<uint8_t> labels;
  auto be32 = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) labels.push_back(static_cast<uint8_t>(v >> s));
  };
  be32(0x00000801);
  be32(images.dims[0]);
  labels.resize(labels.size() + images.dims[0], 0);
  fuzz::write_file("labels.idx", labels.data(), labels.size());

  io::IdxImport opt;
  opt.train_images = opt.test_images = images_path;
  opt.train_labels = opt.test_labels = labels_path;
  opt.out = fuzz::temp_dir() + "/imported.h5";
  opt.gzip_level = 0;
  fuzz::expect_errors([&] {
    const int64_t classes = io::import_idx(opt);
    if (classes != 1) fuzz::finding("zero labels imported as more than one class");
    const io::Split s = io::open_split(opt.out, "train");
    if (s.shape.n != images.dims[0] || s.shape.c != 1 || s.shape.h != images.dims[1] ||
        s.shape.w != images.dims[2])
      fuzz::finding("imported shape differs from the IDX dims");
    std::vector<uint8_t> x(images.data.size());
    s.x->read_rows(0, static_cast<hsize_t>(s.shape.n), io::h5::Type::U8, x.data());
    if (x != images.data) fuzz::finding("imported samples differ from the IDX bytes");
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_file("input.idx", data, size);
  fuzz::expect_errors([&] { check_array(io::read_idx_u8(path, 1), 1); });
  io::IdxArray images;
  if (fuzz::expect_errors([&] { images = io::read_idx_u8(path, 3); })) {
    check_array(images, 3);
    // Zero-sized splits, or big ones, are the writer's business, not the importer's.
    if (images.dims[0] > 0 && images.dims[1] > 0 && images.dims[2] > 0 &&
        images.data.size() <= (1u << 16))
      import_round_trip(images, path);
  }
  return 0;
}
