// The sharded Loader: ranks simulated in one process. Every batch is checked
// against the fixture's self-describing samples (io_fixtures.hpp), so these
// tests do not take the loader's word for which sample it delivered.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "core/error.hpp"
#include "io/loader.hpp"
#include "io_fixtures.hpp"

namespace lpsgd::io {
namespace {

using testing::TempDir;
using testing::write_index_dataset;

constexpr int64_t kClasses = 10;

// Checks that the batch's labels and pixels are those of the samples it names.
void expect_consistent(const Batch& b, const Loader& l) {
  const SplitShape& s = l.shape();
  const int64_t e = s.sample_elems();
  ASSERT_EQ(b.x.size(), static_cast<size_t>(b.size * e));
  ASSERT_EQ(b.y.size(), static_cast<size_t>(b.size));
  ASSERT_EQ(b.index.size(), static_cast<size_t>(b.size));
  const double mean = l.attrs().mean[0], sd = l.attrs().std[0];
  for (int64_t j = 0; j < b.size; ++j) {
    const int64_t i = b.index[static_cast<size_t>(j)];
    ASSERT_EQ(b.y[static_cast<size_t>(j)], i % kClasses) << "sample " << i;
    const double stored = s.type == SampleType::U8 ? static_cast<double>(i % 256) / 255.0
                                                   : static_cast<double>(i);
    const float want = static_cast<float>((stored - mean) / sd);
    for (int64_t k = 0; k < e; ++k)
      ASSERT_NEAR(b.x[static_cast<size_t>(j * e + k)], want, 1e-4f * (1.0f + std::fabs(want)))
          << "sample " << i << " element " << k;
  }
}

LoaderOptions options(const std::string& path, int64_t batch, int rank, int world) {
  LoaderOptions o;
  o.path = path;
  o.batch = batch;
  o.rank = rank;
  o.world = world;
  o.seed = 42;
  o.prefetch = (rank % 2 == 0) ? 2 : 0;  // exercise both the thread and the inline path
  return o;
}

// Runs one epoch on every simulated rank; returns the per-rank batch lists.
std::vector<std::vector<Batch>> run_epoch(std::vector<std::unique_ptr<Loader>>& ranks) {
  std::vector<std::vector<Batch>> out(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    Batch b;
    while (ranks[r]->next(b)) {
      expect_consistent(b, *ranks[r]);
      out[r].push_back(b);
    }
  }
  return out;
}

std::vector<std::unique_ptr<Loader>> make_ranks(LoaderOptions base, int world, int64_t batch) {
  std::vector<std::unique_ptr<Loader>> ranks;
  for (int r = 0; r < world; ++r) {
    LoaderOptions o = base;
    o.batch = batch;
    o.rank = r;
    o.world = world;
    o.prefetch = (r % 2 == 0) ? 2 : 0;
    ranks.push_back(std::make_unique<Loader>(o));
  }
  return ranks;
}

// Concatenates, global batch by global batch, the ranks' slices.
std::vector<int64_t> global_sequence(const std::vector<std::vector<Batch>>& per_rank) {
  std::vector<int64_t> seq;
  for (size_t g = 0; g < per_rank[0].size(); ++g)
    for (const auto& rank : per_rank) {
      EXPECT_EQ(rank.size(), per_rank[0].size()) << "ranks made different numbers of steps";
      seq.insert(seq.end(), rank[g].index.begin(), rank[g].index.end());
    }
  return seq;
}

bool is_permutation_of_n(std::vector<int64_t> v, int64_t n) {
  if (static_cast<int64_t>(v.size()) != n) return false;
  std::sort(v.begin(), v.end());
  for (int64_t i = 0; i < n; ++i)
    if (v[static_cast<size_t>(i)] != i) return false;
  return true;
}

TEST(Loader, RankSlicesTileTheGlobalPermutation) {
  TempDir dir;
  const int64_t n = 1003, B = 7;
  write_index_dataset(dir / "d.h5", n, 0, SampleType::F32);
  for (int P = 1; P <= 4; ++P) {
    SCOPED_TRACE("P=" + std::to_string(P));
    auto ranks = make_ranks(options(dir / "d.h5", B, 0, P), P, B);
    const std::vector<int64_t> order = ranks[0]->epoch_order(0);
    ASSERT_TRUE(is_permutation_of_n(order, n));
    EXPECT_NE(order, ranks[0]->epoch_order(1)) << "different epochs must differ";
    for (const auto& r : ranks) EXPECT_EQ(r->epoch_order(0), order);

    const auto per_rank = run_epoch(ranks);
    const int64_t steps = n / (B * P);  // the tail of n mod B*P samples is dropped
    for (const auto& rank : per_rank) {
      ASSERT_EQ(static_cast<int64_t>(rank.size()), steps);
      for (const Batch& b : rank) EXPECT_EQ(b.size, B);
    }
    EXPECT_EQ(ranks[0]->batches_per_epoch(), steps);
    const std::vector<int64_t> seq = global_sequence(per_rank);
    EXPECT_EQ(seq, std::vector<int64_t>(order.begin(), order.begin() + steps * B * P));
    for (const auto& r : ranks) EXPECT_EQ(r->state(), (LoaderState{1, 0}));

    // The next epoch is a different permutation, sliced the same way.
    const auto per_rank1 = run_epoch(ranks);
    const std::vector<int64_t> order1 = ranks[0]->epoch_order(1);
    EXPECT_EQ(global_sequence(per_rank1),
              std::vector<int64_t>(order1.begin(), order1.begin() + steps * B * P));
  }
}

TEST(Loader, SameSeedSameOrderOtherSeedOtherOrder) {
  TempDir dir;
  write_index_dataset(dir / "d.h5", 500, 0, SampleType::F32);
  LoaderOptions o = options(dir / "d.h5", 16, 0, 1);
  Loader a(o), b(o);
  o.seed = 43;
  Loader c(o);
  Batch ba, bb, bc;
  bool differs = false;
  while (a.next(ba)) {
    ASSERT_TRUE(b.next(bb));
    ASSERT_TRUE(c.next(bc));
    EXPECT_EQ(ba.index, bb.index);
    EXPECT_EQ(ba.x, bb.x);
    differs = differs || ba.index != bc.index;
  }
  EXPECT_FALSE(b.next(bb));
  EXPECT_TRUE(differs);
}

TEST(Loader, NoShuffleIsIdentityOrder) {
  TempDir dir;
  write_index_dataset(dir / "d.h5", 50, 0, SampleType::F32);
  LoaderOptions o = options(dir / "d.h5", 5, 1, 2);
  o.shuffle = false;
  Loader l(o);
  Batch b;
  ASSERT_TRUE(l.next(b));
  EXPECT_EQ(b.index, (std::vector<int64_t>{5, 6, 7, 8, 9}));
  ASSERT_TRUE(l.next(b));
  EXPECT_EQ(b.index, (std::vector<int64_t>{15, 16, 17, 18, 19}));
}

TEST(Loader, Uint8IsScaledThenNormalised) {
  TempDir dir;
  write_index_dataset(dir / "d.h5", 300, 0, SampleType::U8, kClasses, 0, 2, 2, 2);
  Loader l(options(dir / "d.h5", 32, 0, 1));
  // The writer's statistics of i % 256 / 255 over 300 samples: not 0 and 1.
  EXPECT_GT(l.attrs().mean[0], 0.2);
  EXPECT_LT(l.attrs().std[0], 0.5);
  Batch b;
  int batches = 0;
  while (l.next(b)) {
    expect_consistent(b, l);
    ++batches;
  }
  EXPECT_EQ(batches, 300 / 32);
}

// Saves the state after `before` batches, runs `after` more, and checks a
// fresh loader restored to the state produces exactly those batches.
TEST(Loader, RestoreContinuesWithIdenticalBatches) {
  TempDir dir;
  write_index_dataset(dir / "d.h5", 400, 0, SampleType::F32);
  for (int prefetch : {0, 3}) {
    LoaderOptions o = options(dir / "d.h5", 9, 0, 1);
    o.prefetch = prefetch;
    Loader a(o);
    Batch b;
    for (int i = 0; i < 30; ++i) a.next(b);  // an epoch has 400 / 9 = 44 batches
    const LoaderState saved = a.state();
    std::vector<Batch> want;
    for (int i = 0; i < 40; ++i) {  // crosses into epoch 1
      if (a.next(b)) want.push_back(b);
    }
    ASSERT_GT(want.back().epoch, want.front().epoch);

    Loader fresh(o);
    fresh.restore(saved);
    EXPECT_EQ(fresh.state(), saved);
    std::vector<Batch> got;
    for (int i = 0; i < 40; ++i)
      if (fresh.next(b)) got.push_back(b);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].index, want[i].index);
      EXPECT_EQ(got[i].x, want[i].x);
      EXPECT_EQ(got[i].y, want[i].y);
      EXPECT_EQ(got[i].epoch, want[i].epoch);
    }
    // Restoring the same loader backwards works too (prefetched batches dropped).
    a.restore(saved);
    ASSERT_TRUE(a.next(b));
    EXPECT_EQ(b.index, want[0].index);
  }
}

TEST(Loader, ResumeAtAnotherWorldSizeKeepsTheGlobalOrder) {
  TempDir dir;
  const int64_t n = 600;
  write_index_dataset(dir / "d.h5", n, 0, SampleType::F32);
  LoaderOptions base = options(dir / "d.h5", 8, 0, 2);
  const std::vector<int64_t> order = Loader(base).epoch_order(0);

  // P=2, B=8: three global batches (48 samples), then save.
  auto two = make_ranks(base, 2, 8);
  Batch b;
  for (auto& r : two)
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(r->next(b));
  const LoaderState saved = two[0]->state();
  ASSERT_EQ(saved.cursor, 48u);
  EXPECT_EQ(two[1]->state(), saved);

  // Resume on P=4 with B=4 (same global batch) and on P=3 with B=5 (another):
  // either way the ranks' slices continue the same global sequence.
  for (auto [P, B] : {std::pair<int, int64_t>{4, 4}, {3, 5}}) {
    SCOPED_TRACE("P=" + std::to_string(P));
    auto ranks = make_ranks(base, P, B);
    for (auto& r : ranks) r->restore(saved);
    const auto per_rank = run_epoch(ranks);
    const int64_t steps = (n - 48) / (B * P);
    ASSERT_EQ(static_cast<int64_t>(per_rank[0].size()), steps);
    EXPECT_EQ(global_sequence(per_rank),
              std::vector<int64_t>(order.begin() + 48, order.begin() + 48 + steps * B * P));
  }
}

TEST(Loader, StreamingYieldsASeedDeterminedPermutation) {
  TempDir dir;
  const int64_t n = 1003;
  write_index_dataset(dir / "d.h5", n, 0, SampleType::F32, kClasses, /*chunk_rows=*/10);
  for (int P : {1, 3}) {
    SCOPED_TRACE("P=" + std::to_string(P));
    LoaderOptions o = options(dir / "d.h5", 6, 0, P);
    o.cache_mb = 0;  // force streaming
    o.window_chunks = 4;
    o.coverage = Coverage::All;
    auto ranks = make_ranks(o, P, 6);
    ASSERT_TRUE(ranks[0]->streaming());
    EXPECT_EQ(ranks[0]->chunk_rows(), 10);
    const std::vector<int64_t> order = ranks[0]->epoch_order(0);
    ASSERT_TRUE(is_permutation_of_n(order, n));
    std::vector<int64_t> identity(static_cast<size_t>(n));
    std::iota(identity.begin(), identity.end(), int64_t{0});
    EXPECT_NE(order, identity);
    EXPECT_NE(order, ranks[0]->epoch_order(1));
    // The first window holds 4 chunks, so at least 33 samples: its first 30
    // entries come from at most 4 chunks.
    std::set<int64_t> chunks;
    for (int64_t k = 0; k < 30; ++k) chunks.insert(order[static_cast<size_t>(k)] / 10);
    EXPECT_LE(chunks.size(), 4u);

    const auto per_rank = run_epoch(ranks);
    std::vector<int64_t> seq = global_sequence(per_rank);
    EXPECT_EQ(seq, order);
  }
  // The streaming order is a function of the seed: a second loader agrees.
  LoaderOptions o = options(dir / "d.h5", 6, 0, 1);
  o.cache_mb = 0;
  o.window_chunks = 4;
  EXPECT_EQ(Loader(o).epoch_order(3), Loader(o).epoch_order(3));
  o.cache_mb = 1024;
  EXPECT_FALSE(Loader(o).streaming());
}

TEST(Loader, EvalCoversEveryTestSampleOnce) {
  TempDir dir;
  const int64_t n = 103;
  write_index_dataset(dir / "d.h5", 50, n, SampleType::F32);
  for (int P = 1; P <= 4; ++P)
    for (bool shuffle : {false, true}) {
      SCOPED_TRACE("P=" + std::to_string(P) + " shuffle=" + std::to_string(shuffle));
      LoaderOptions o = options(dir / "d.h5", 8, 0, P);
      o.split = "test";
      o.coverage = Coverage::All;
      o.shuffle = shuffle;
      auto ranks = make_ranks(o, P, 8);
      const auto per_rank = run_epoch(ranks);
      int64_t total = 0;
      for (const auto& rank : per_rank) {
        EXPECT_EQ(static_cast<int64_t>(rank.size()), (n + 8 * P - 1) / (8 * P));
        for (const Batch& b : rank) total += b.size;
      }
      EXPECT_EQ(total, n);
      EXPECT_TRUE(is_permutation_of_n(global_sequence(per_rank), n));
    }
}

// ---- bad input: one usage error naming the file and the problem ----------------

void expect_usage_error(const LoaderOptions& o, const std::string& what) {
  try {
    Loader l(o);
    FAIL() << "no error for " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage) << e.message();
    EXPECT_NE(e.message().find(o.path), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(what), std::string::npos) << e.message();
    EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
  }
}

// Writes /train/x and /train/y with the given shapes and types and the
// num_classes attribute (when classes > 0).
void write_raw(const std::string& path, std::vector<hsize_t> xdims, h5::Type xtype,
               std::vector<hsize_t> ydims, std::vector<int32_t> labels, int64_t classes) {
  h5::File f = h5::File::create(path);
  h5::Group g = h5::Group::create(f, "train");
  if (!xdims.empty()) {
    h5::Dataset x = h5::Dataset::create(g, "x", xtype, xdims, 4, 0);
    size_t elems = 1;
    for (hsize_t d : xdims) elems *= d;
    std::vector<float> zeros(elems, 0.0f);
    x.write_rows(0, xdims[0], h5::Type::F32, zeros.data());
  }
  if (!ydims.empty()) {
    h5::Dataset y = h5::Dataset::create(g, "y", h5::Type::Int, ydims, 4, 0);
    y.write_rows(0, ydims[0], h5::Type::Int, labels.data());
  }
  if (classes > 0) f.write_attr("num_classes", classes);
}

TEST(LoaderErrors, BadFilesAreUsageErrorsNamingFileAndProblem) {
  TempDir dir;
  LoaderOptions o = options(dir / "missing.h5", 2, 0, 1);
  expect_usage_error(o, "no such file");

  o.path = dir / "text.h5";
  FILE* f = std::fopen(o.path.c_str(), "w");
  std::fputs("not hdf5\n", f);
  std::fclose(f);
  expect_usage_error(o, "not an HDF5 file");

  o.path = dir / "nox.h5";
  write_raw(o.path, {}, h5::Type::F32, {4}, {0, 1, 2, 3}, 10);
  expect_usage_error(o, "/train/x: missing dataset");

  o.path = dir / "noy.h5";
  write_raw(o.path, {4, 1, 2, 2}, h5::Type::F32, {}, {}, 10);
  expect_usage_error(o, "/train/y: missing dataset");

  o.path = dir / "rank3.h5";
  write_raw(o.path, {4, 2, 2}, h5::Type::F32, {4}, {0, 1, 2, 3}, 10);
  expect_usage_error(o, "/train/x: wrong rank 3");

  o.path = dir / "yrank2.h5";
  write_raw(o.path, {4, 1, 2, 2}, h5::Type::F32, {4, 1}, {0, 1, 2, 3}, 10);
  expect_usage_error(o, "/train/y: wrong rank 2");

  o.path = dir / "int_x.h5";
  write_raw(o.path, {4, 1, 2, 2}, h5::Type::Int, {4}, {0, 1, 2, 3}, 10);
  expect_usage_error(o, "element type must be uint8 or float32");

  o.path = dir / "mismatch.h5";
  write_raw(o.path, {4, 1, 2, 2}, h5::Type::F32, {3}, {0, 1, 2}, 10);
  expect_usage_error(o, "length mismatch, 3 labels but x has 4 samples");

  o.path = dir / "label.h5";
  write_raw(o.path, {4, 1, 2, 2}, h5::Type::F32, {4}, {0, 1, 10, 3}, 10);
  expect_usage_error(o, "label 10 at index 2 out of range [0, 10)");

  o.path = dir / "negative.h5";
  write_raw(o.path, {4, 1, 2, 2}, h5::Type::F32, {4}, {0, -1, 1, 3}, 10);
  expect_usage_error(o, "label -1 at index 1 out of range");

  o.path = dir / "noclasses.h5";
  write_raw(o.path, {4, 1, 2, 2}, h5::Type::F32, {4}, {0, 1, 2, 3}, 0);
  expect_usage_error(o, "missing attribute num_classes");

  o.path = dir / "notest.h5";
  write_raw(o.path, {4, 1, 2, 2}, h5::Type::F32, {4}, {0, 1, 2, 3}, 10);
  o.split = "test";
  expect_usage_error(o, "missing split /test");
}

TEST(LoaderErrors, TooFewSamplesForOneGlobalBatchAndBadCursor) {
  TempDir dir;
  write_index_dataset(dir / "d.h5", 20, 0, SampleType::F32);
  LoaderOptions o = options(dir / "d.h5", 8, 0, 3);
  expect_usage_error(o, "fewer than one global batch");
  o.coverage = Coverage::All;  // evaluation is fine: 8 + 8 + 4
  Loader l(o);
  EXPECT_THROW(l.restore(LoaderState{0, 21}), Error);
  l.restore(LoaderState{0, 20});  // at the end: the epoch is over
  Batch b;
  EXPECT_FALSE(l.next(b));
  EXPECT_EQ(l.state(), (LoaderState{1, 0}));
}

}  // namespace
}  // namespace lpsgd::io
