// libFuzzer harness of the HDF5 dataset opener and loader (lib/io/dataset.*,
// loader.*, h5.*): the input is written to a file and opened as a dataset, both
// splits, in the loader's cached and streaming modes; a few batches are read
// and checked against the shape and classes the loader reports. Then each
// split is opened as `lpsgd data info` does, string attributes included —
// unless the input holds a global heap that HDF5 itself would loop on (below).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "fuzz_util.hpp"
#include "io/loader.hpp"

using namespace lpsgd;

namespace {

void load(const std::string& path, const char* split, double cache_mb) {
  io::LoaderOptions o;
  o.path = path;
  o.split = split;
  o.batch = 2;
  o.prefetch = 0;  // deterministic: no thread
  o.cache_mb = cache_mb;
  o.coverage = io::Coverage::All;
  o.window_chunks = 2;
  o.seed = 7;
  io::Loader loader(o);
  const int64_t elems = loader.shape().sample_elems();
  io::Batch b;
  for (int i = 0; i < 4 && loader.next(b); ++i) {
    if (b.size < 0 || b.size > o.batch) fuzz::finding("batch size out of [0, batch]");
    if (b.x.size() != static_cast<size_t>(b.size * elems) ||
        b.y.size() != static_cast<size_t>(b.size))
      fuzz::finding("batch buffers do not match its size and the sample shape");
    for (int32_t y : b.y)
      if (y < 0 || y >= loader.num_classes()) fuzz::finding("label out of range in a batch");
    for (int64_t idx : b.index)
      if (idx < 0 || idx >= loader.size()) fuzz::finding("sample index out of range in a batch");
  }
}

uint64_t le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

// HDF5-internal, not lpsgd's: HDF5 1.10.8 trusts the object list of a global
// heap collection ("GCOL", where variable-length strings live). A free-space
// object (index 0) of size 0 leaves its walk where it is, forever
// (H5HG__cache_heap_deserialize); an object whose size runs past the end of
// its collection is later copied out with that size (H5HG_read: memcpy far
// out of bounds). lpsgd cannot see heap collections through HDF5's API, so
// the training path reads no variable-length strings (io::read_attrs) and
// this harness reads them only from inputs whose heaps are well-formed: true
// when some collection's object list is not.
bool hdf5_heap_unsafe(const uint8_t* d, size_t n) {
  for (size_t k = 0; k + 16 <= n; ++k) {
    if (std::memcmp(d + k, "GCOL", 4) != 0 || d[k + 4] != 1) continue;
    const uint64_t size = le(d + k + 8, 8);
    if (size < 4096 || size > n - k) continue;  // HDF5 fails the read instead
    uint64_t p = 16;
    while (p < size) {
      if (p + 16 > size) break;  // the rest is taken as free space
      const uint64_t idx = le(d + k + p, 2), obj = le(d + k + p + 8, 8);
      const uint64_t need = idx > 0 ? 16 + ((obj + 7) & ~uint64_t{7}) : obj;
      if (need == 0 || need < obj || need > size - p) return true;
      p += need;
    }
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_file("input.h5", data, size);
  for (const char* split : {"train", "test"})
    for (double cache_mb : {64.0, 0.0})  // cached, then streaming
      fuzz::expect_errors([&] { load(path, split, cache_mb); });
  if (hdf5_heap_unsafe(data, size)) return 0;
  for (const char* split : {"train", "test"})
    fuzz::expect_errors([&] {
      const io::Split s = io::open_split(path, split);
      if (!s.attrs.class_names.empty() &&
          static_cast<int64_t>(s.attrs.class_names.size()) != s.attrs.num_classes)
        fuzz::finding("class_names do not match num_classes");
    });
  return 0;
}
