#include "io/loader.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/rng.hpp"

namespace lpsgd::io {

namespace {

constexpr uint64_t kOrderStream = 0x4C4F414400000000ull;   // "LOAD": cached-mode orders
constexpr uint64_t kStreamStream = 0x4C4F415300000000ull;  // "LOAS": streaming-mode orders

// Fisher-Yates shuffle of v[0, n) drawing from r.
void shuffle(int64_t* v, int64_t n, Rng& r) {
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(r.below(static_cast<uint32_t>(i + 1)));
    std::swap(v[i], v[j]);
  }
}

}  // namespace

Loader::Loader(LoaderOptions opt) : opt_(std::move(opt)) {
  if (opt_.split != "train" && opt_.split != "test")
    LPSGD_USAGE_ERROR("split must be 'train' or 'test', got '" << opt_.split << "'");
  if (opt_.batch < 1) LPSGD_USAGE_ERROR("batch size must be positive, got " << opt_.batch);
  if (opt_.world < 1 || opt_.rank < 0 || opt_.rank >= opt_.world)
    LPSGD_USAGE_ERROR("rank " << opt_.rank << " is not in [0, " << opt_.world << ")");
  if (opt_.prefetch < 0) LPSGD_USAGE_ERROR("prefetch depth must be >= 0, got " << opt_.prefetch);
  if (opt_.window_chunks < 1)
    LPSGD_USAGE_ERROR("shuffle window must be at least one chunk, got " << opt_.window_chunks);
  if (!(opt_.cache_mb >= 0)) LPSGD_USAGE_ERROR("data cache size must be >= 0 MiB");

  // Without the informational strings: see read_attrs.
  split_ = open_split(opt_.path, opt_.split, 0, /*strings=*/false);
  const SplitShape& s = split_.shape;
  const size_t sample_bytes = s.sample_bytes();
  const double x_mb = static_cast<double>(sample_bytes) * static_cast<double>(s.n) / (1 << 20);
  streaming_ = x_mb > opt_.cache_mb;
  chunk_rows_ = split_.chunk_rows > 0 ? split_.chunk_rows
                                      : DatasetWriter::chunk_rows_for(sample_bytes, s.n);
  chunk_rows_ = std::max<int64_t>(1, std::min(chunk_rows_, s.n));  // a chunk may overhang N

  if (s.n >= (int64_t{1} << 32))  // the shuffles draw 32-bit indices (Rng::below)
    LPSGD_USAGE_ERROR(opt_.path << ": /" << opt_.split << " has " << s.n
                                << " samples; the loader supports fewer than 2^32");
#ifndef H5_HAVE_THREADSAFE
  // Without the thread-safe HDF5 build, a reading prefetch thread would race
  // with HDF5 use elsewhere (checkpoints): streaming then reads inline.
  if (streaming_ && opt_.prefetch > 0) {
    LPSGD_WARN("HDF5 is not thread-safe here: streaming " << opt_.path << " without prefetch");
    opt_.prefetch = 0;
  }
#endif
  const int64_t G = opt_.batch * opt_.world;
  if (opt_.coverage == Coverage::DropLast && s.n < G)
    LPSGD_USAGE_ERROR(opt_.path << ": /" << opt_.split << " has " << s.n
                                << " samples, fewer than one global batch of " << opt_.batch
                                << " x " << opt_.world << " ranks = " << G);

  input_scaling(s.type, split_.attrs, s.c, scale_, shift_);
  augmenting_ = opt_.augment.any() && opt_.coverage == Coverage::DropLast;
  if (augmenting_) {
    check_augment(opt_.augment, s.h, s.w, opt_.path + ": /" + opt_.split);
    scratch_.resize(static_cast<size_t>(s.sample_elems()));
  }

  if (!streaming_) {
    raw_.resize(sample_bytes * static_cast<size_t>(s.n));
    read_samples(0, s.n, raw_.data());
  } else {
    // Room for two windows of chunks: B consecutive entries of the order lie
    // in at most two windows (B <= a window's samples), so each rank reads
    // every chunk once per epoch.
    const int64_t nchunks = (s.n + chunk_rows_ - 1) / chunk_rows_;
    slots_.resize(static_cast<size_t>(std::min(nchunks, 2 * opt_.window_chunks)));
  }
  start_thread();
}

Loader::~Loader() { stop_thread(); }

int64_t Loader::batches_per_epoch() const {
  const int64_t G = opt_.batch * opt_.world;
  return opt_.coverage == Coverage::DropLast ? size() / G : (size() + G - 1) / G;
}

std::vector<int64_t> Loader::epoch_order(uint64_t epoch) const {
  const int64_t n = size();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!opt_.shuffle) return order;
  if (!streaming_) {
    Rng r(opt_.seed, kOrderStream + epoch);
    shuffle(order.data(), n, r);
    return order;
  }
  // Streaming: shuffle the chunks, then the samples within each window of
  // window_chunks consecutive (shuffled) chunks.
  Rng r(opt_.seed, kStreamStream + epoch);
  const int64_t nchunks = (n + chunk_rows_ - 1) / chunk_rows_;
  std::vector<int64_t> chunks(static_cast<size_t>(nchunks));
  std::iota(chunks.begin(), chunks.end(), int64_t{0});
  shuffle(chunks.data(), nchunks, r);
  int64_t out = 0;
  for (int64_t w = 0; w < nchunks; w += opt_.window_chunks) {
    const int64_t begin = out;
    for (int64_t k = w; k < std::min(nchunks, w + opt_.window_chunks); ++k) {
      const int64_t first = chunks[static_cast<size_t>(k)] * chunk_rows_;
      for (int64_t i = first; i < std::min(n, first + chunk_rows_); ++i)
        order[static_cast<size_t>(out++)] = i;
    }
    shuffle(order.data() + begin, out - begin, r);
  }
  return order;
}

const std::vector<int64_t>& Loader::order_for(uint64_t epoch) {
  if (order_epoch_ != epoch) {
    order_ = epoch_order(epoch);
    order_epoch_ = epoch;
  }
  return order_;
}

Loader::Item Loader::produce(const LoaderState& pos, Batch&& reuse) {
  Item it;
  it.batch = std::move(reuse);
  const auto n = static_cast<uint64_t>(size());
  const auto G = static_cast<uint64_t>(opt_.batch * opt_.world);
  if (pos.cursor >= n || (opt_.coverage == Coverage::DropLast && pos.cursor + G > n)) {
    it.end = true;
    it.after = LoaderState{pos.epoch + 1, 0};
    return it;
  }
  // This global batch is order[cursor, end); the rank's slice is clamped to it.
  const uint64_t end = std::min(n, pos.cursor + G);
  const auto B = static_cast<uint64_t>(opt_.batch), r = static_cast<uint64_t>(opt_.rank);
  const uint64_t lo = std::min(end, pos.cursor + r * B), hi = std::min(end, pos.cursor + (r + 1) * B);
  const std::vector<int64_t>& order = order_for(pos.epoch);
  fill(it.batch, order.data() + lo, static_cast<int64_t>(hi - lo), pos.epoch);
  it.batch.epoch = pos.epoch;
  it.batch.cursor = pos.cursor;
  it.after = LoaderState{pos.epoch, end};
  return it;
}

void Loader::read_samples(int64_t first, int64_t count, unsigned char* out) {
  try {
    split_.x->read_rows(static_cast<hsize_t>(first), static_cast<hsize_t>(count),
                        split_.shape.type == SampleType::U8 ? h5::Type::U8 : h5::Type::F32, out);
  } catch (const Error& e) {
    // The wrapper's message starts with the file and object; say which
    // samples instead, in one line, keeping HDF5's reason.
    std::string reason = e.message();
    const std::string prefix = split_.x->where() + ": ";
    if (reason.rfind(prefix, 0) == 0) reason.erase(0, prefix.size());
    LPSGD_THROW_ERRNO(e.sys_errno(), opt_.path << ": samples " << first << "-" << first + count - 1
                                               << " of /" << opt_.split
                                               << " cannot be read: " << reason);
  }
}

const unsigned char* Loader::stored_sample(int64_t index) {
  const size_t sample_bytes = split_.shape.sample_bytes();
  if (!streaming_) return raw_.data() + static_cast<size_t>(index) * sample_bytes;
  const int64_t chunk = index / chunk_rows_;
  ChunkSlot* slot = &slots_.front();
  for (ChunkSlot& c : slots_) {
    if (c.chunk == chunk) {
      slot = &c;
      break;
    }
    if (c.used < slot->used) slot = &c;  // least recently used so far
  }
  if (slot->chunk != chunk) {  // a miss: read the whole chunk into the LRU slot
    const int64_t first = chunk * chunk_rows_, rows = std::min(chunk_rows_, size() - first);
    slot->data.resize(static_cast<size_t>(chunk_rows_) * sample_bytes);
    slot->chunk = -1;
    read_samples(first, rows, slot->data.data());
    slot->chunk = chunk;
  }
  slot->used = ++tick_;
  return slot->data.data() + static_cast<size_t>(index - chunk * chunk_rows_) * sample_bytes;
}

void Loader::fill(Batch& b, const int64_t* indices, int64_t count, uint64_t epoch) {
  const SplitShape& s = split_.shape;
  const int64_t elems = s.sample_elems(), plane = s.h * s.w;
  b.size = count;
  b.x.resize(static_cast<size_t>(count * elems));
  b.y.resize(static_cast<size_t>(count));
  b.index.assign(indices, indices + count);
  h5::silence_errors();  // this may run on the prefetch thread
  for (int64_t j = 0; j < count; ++j) {
    b.y[static_cast<size_t>(j)] = split_.y[static_cast<size_t>(indices[j])];
    // Converted at once: in streaming mode the next sample may evict this chunk.
    const unsigned char* src = stored_sample(indices[j]);
    float* const out = b.x.data() + j * elems;
    // Augmenting: normalised into the scratch sample, then cropped and
    // flipped into the batch, the padding being a stored 0 (shift).
    float* dst = augmenting_ ? scratch_.data() : out;
    for (int64_t c = 0; c < s.c; ++c) {
      const float a = scale_[static_cast<size_t>(c)], sh = shift_[static_cast<size_t>(c)];
      float* d = dst + c * plane;
      if (s.type == SampleType::U8) {
        const unsigned char* p = src + c * plane;
        for (int64_t k = 0; k < plane; ++k) d[k] = static_cast<float>(p[k]) * a + sh;
      } else {
        std::memcpy(d, src + static_cast<size_t>(c * plane) * 4, static_cast<size_t>(plane) * 4);
        for (int64_t k = 0; k < plane; ++k) d[k] = d[k] * a + sh;
      }
    }
    if (augmenting_) {
      const AugmentDraw draw = augment_draw(opt_.augment, opt_.seed, epoch, indices[j]);
      augment_sample(opt_.augment, draw, dst, out, s.c, s.h, s.w, shift_.data());
    }
  }
}

// ---- consumer side and the prefetch thread --------------------------------------

bool Loader::next(Batch& out) {
  Item it;
  if (opt_.prefetch == 0) {
    it = produce(state_, std::move(out));
  } else {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return !items_.empty(); });
    it = std::move(items_.front());
    items_.pop_front();
    cv_.notify_all();
  }
  if (it.error) std::rethrow_exception(it.error);
  state_ = it.after;
  if (!it.end) std::swap(out, it.batch);
  if (opt_.prefetch > 0) {  // hand the old buffers back to the thread
    std::lock_guard<std::mutex> lk(mu_);
    free_.push_back(std::move(it.batch));
  } else if (it.end) {
    out = std::move(it.batch);
  }
  return !it.end;
}

void Loader::restore(const LoaderState& s) {
  if (s.cursor > static_cast<uint64_t>(size()))
    LPSGD_USAGE_ERROR(opt_.path << ": loader state cursor " << s.cursor << " is beyond the "
                                << size() << " samples of /" << opt_.split);
  stop_thread();
  state_ = s;
  start_thread();
}

void Loader::start_thread() {
  pos_ = state_;
  if (opt_.prefetch == 0) return;
  stop_ = false;
  thread_ = std::thread([this] { run_thread(); });
}

void Loader::stop_thread() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (Item& it : items_) free_.push_back(std::move(it.batch));
  items_.clear();
}

void Loader::run_thread() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || items_.size() < static_cast<size_t>(opt_.prefetch); });
    if (stop_) return;
    Batch reuse;
    if (!free_.empty()) {
      reuse = std::move(free_.back());
      free_.pop_back();
    }
    const LoaderState pos = pos_;
    lk.unlock();
    Item it;
    try {
      it = produce(pos, std::move(reuse));
    } catch (...) {
      it.error = std::current_exception();
    }
    lk.lock();
    if (stop_) return;
    const bool failed = static_cast<bool>(it.error);
    pos_ = it.after;
    items_.push_back(std::move(it));
    cv_.notify_all();
    if (failed) {  // the consumer rethrows; produce nothing more
      cv_.wait(lk, [&] { return stop_; });
      return;
    }
  }
}

}  // namespace lpsgd::io
