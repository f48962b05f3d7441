// The sharded, shuffling, prefetching data loader of lpsgd.
//
// Order. Every epoch has one global order of the split's N samples, a pure
// function of (seed, epoch, N) — and, in streaming mode, of the chunking —
// computed identically on every rank, so no rank talks to another about data.
// The global batch size is G = B·P (B per rank, P ranks). Global batch g of an
// epoch is order[g·G, (g+1)·G) and rank r takes order[g·G + r·B, g·G + (r+1)·B).
//
// The end of an epoch (the N mod G samples that do not fill a global batch):
//   Coverage::DropLast (training) skips them, so every rank makes the same
//     number of steps, N / G per epoch, each of exactly B samples.
//   Coverage::All (evaluation) covers every sample exactly once across ranks:
//     the last global batch holds the R = N mod G remaining samples and rank r
//     takes [r·B, (r+1)·B) of them clamped to R, so early ranks get B, one rank
//     may get fewer and later ranks get empty batches (size 0 — still
//     returned, so every rank makes ceil(N / G) calls). Sizes summed over ranks
//     equal N.
//
// Modes. When x fits in `cache_mb` it is read into memory once ("cached") and
// an epoch's order is a full Fisher-Yates permutation. Otherwise x is streamed
// from the file: the samples are cut into chunks (the HDF5 chunks of x), the
// chunk order is shuffled, consecutive runs of `window_chunks` chunks form
// windows, and the samples within each window are shuffled. That order is a
// different permutation from the cached one but just as seed-determined, and a
// batch only needs the chunks of one or two windows, which HDF5's chunk cache
// (sized for two windows) keeps while they are used. Without shuffle the order
// is 0..N-1 in both modes.
//
// State. LoaderState {epoch, cursor} is the position of the next batch that
// next() returns; cursor counts samples of the epoch's global order already
// consumed by all ranks together (not per-rank steps). restore() continues at
// that sample, so a run resumed with another P (or B) sees the same global
// sample sequence; only where it is cut into batches changes when G changes.
//
// Normalisation: see dataset.hpp (uint8 / 255, then (v - mean[c]) / std[c]).
//
// Augmentation (LoaderOptions::augment, see augment.hpp): random crop after
// zero padding and random horizontal flip, done in fill() after the
// normalisation, on the prefetch thread. Each sample's draw is a function of
// (seed, epoch, its index in the split) alone, so it does not depend on P, B
// or where a run resumed. Only training loaders (Coverage::DropLast) augment:
// an evaluation loader (Coverage::All) ignores the option, so one built from a
// copy of the training options still sees every sample as stored.
//
// Threads. With prefetch > 0 a thread prepares up to `prefetch` batches ahead
// while the caller works on the current one; batches' buffers are recycled, so
// a steady state allocates nothing. The thread-safe HDF5 build serialises the
// thread's reads with any other HDF5 use in the process; with an HDF5 built
// otherwise (e.g. parallel HDF5), streaming mode reads inline (prefetch 0)
// and says so. Splits of 2^32 samples or more are refused.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "io/augment.hpp"
#include "io/dataset.hpp"

namespace lpsgd::io {

/// What happens to the samples of an epoch that do not fill a global batch.
enum class Coverage {
  DropLast,  ///< training: whole global batches only (N / G steps per epoch)
  All,       ///< evaluation: every sample exactly once; last batches may be short or empty
};

struct LoaderOptions {
  std::string path;              ///< HDF5 dataset file
  std::string split = "train";   ///< "train" or "test"
  int64_t batch = 128;           ///< per-rank batch size B
  int rank = 0;                  ///< this rank r in [0, world)
  int world = 1;                 ///< number of ranks P
  uint64_t seed = 0;             ///< order seed; an epoch's order depends on (seed, epoch)
  double cache_mb = 1024;        ///< hold x in memory when it is at most this many MiB
  bool shuffle = true;           ///< false: the order is 0..N-1
  int prefetch = 2;              ///< batches prepared ahead by a thread; 0: no thread
  Coverage coverage = Coverage::DropLast;
  int64_t window_chunks = 16;    ///< streaming mode: chunks per shuffle window
  Augment augment;               ///< training (DropLast) only; ignored under Coverage::All
};

/// Position of the next batch: `cursor` samples of epoch `epoch` are consumed.
struct LoaderState {
  uint64_t epoch = 0;
  uint64_t cursor = 0;
  bool operator==(const LoaderState& o) const { return epoch == o.epoch && cursor == o.cursor; }
};

/// One rank's share of a global batch.
struct Batch {
  int64_t size = 0;             ///< samples here: B, or fewer/0 at the end of an All epoch
  std::vector<float> x;         ///< [size, C, H, W], normalised
  std::vector<int32_t> y;       ///< [size] labels
  std::vector<int64_t> index;   ///< [size] sample indices in the split (for checks, logs)
  uint64_t epoch = 0;
  uint64_t cursor = 0;          ///< epoch position at which this global batch starts
};

class Loader {
 public:
  /// Opens and validates the split (usage errors name the file and the
  /// problem); in cached mode reads x. Positioned at {epoch 0, cursor 0}.
  explicit Loader(LoaderOptions opt);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// Fills `out` with this rank's part of the next global batch and returns
  /// true; at the end of an epoch returns false once and moves to the next
  /// epoch (the following call starts it). Buffers of `out` are recycled.
  bool next(Batch& out);

  /// The position of the batch the next call to next() returns.
  LoaderState state() const { return state_; }
  /// Continues at `s` (discarding prefetched batches). A cursor beyond N is a
  /// usage error.
  void restore(const LoaderState& s);

  /// The global order of epoch `epoch` (what the ranks' batches slice).
  std::vector<int64_t> epoch_order(uint64_t epoch) const;
  /// Calls of next() returning true in a whole epoch: N / G (DropLast) or ceil(N / G) (All).
  int64_t batches_per_epoch() const;

  int64_t size() const { return split_.shape.n; }
  const SplitShape& shape() const { return split_.shape; }
  /// num_classes, mean and std; class_names and source are not read (see read_attrs).
  const DatasetAttrs& attrs() const { return split_.attrs; }
  int64_t num_classes() const { return split_.attrs.num_classes; }
  /// The scaling every sample gets, per channel: x = float(v) * scale + shift
  /// (float(v) = v / 255 for uint8 folded into scale; see dataset.hpp).
  const std::vector<float>& input_scale() const { return scale_; }
  const std::vector<float>& input_shift() const { return shift_; }
  bool streaming() const { return streaming_; }
  /// Whether batches are augmented (options.augment set and Coverage::DropLast).
  bool augmenting() const { return augmenting_; }
  /// Rows per streaming chunk (the unit of the chunk-level shuffle).
  int64_t chunk_rows() const { return chunk_rows_; }
  const LoaderOptions& options() const { return opt_; }

 private:
  struct Item {
    bool end = false;  // the epoch ended: next() returns false
    Batch batch;
    LoaderState after;
    std::exception_ptr error;
  };

  Item produce(const LoaderState& pos, Batch&& reuse);
  void fill(Batch& b, const int64_t* indices, int64_t count, uint64_t epoch);
  /// Reads samples [first, first + count) of x as stored; a failure (a
  /// damaged chunk) is an error naming the file and the samples.
  void read_samples(int64_t first, int64_t count, unsigned char* out);
  /// The stored bytes of sample `index` (streaming: via the chunk cache).
  const unsigned char* stored_sample(int64_t index);
  const std::vector<int64_t>& order_for(uint64_t epoch);
  void start_thread();
  void stop_thread();
  void run_thread();

  LoaderOptions opt_;
  Split split_;
  bool streaming_ = false;
  bool augmenting_ = false;
  std::vector<float> scratch_;               // augmenting: one normalised sample
  int64_t chunk_rows_ = 0;
  std::vector<unsigned char> raw_;           // cached mode: all of x as stored
  std::vector<float> scale_, shift_;         // per channel: x = v * scale + shift
  struct ChunkSlot {  // streaming mode: one chunk of x as stored
    int64_t chunk = -1;
    uint64_t used = 0;
    std::vector<unsigned char> data;
  };
  std::vector<ChunkSlot> slots_;             // LRU cache of two windows of chunks
  uint64_t tick_ = 0;

  uint64_t order_epoch_ = ~uint64_t{0};      // epoch whose order_ is computed
  std::vector<int64_t> order_;

  LoaderState state_;  // consumer position
  LoaderState pos_;    // producer position (owned by the thread while it runs)

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  std::vector<Batch> free_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace lpsgd::io
