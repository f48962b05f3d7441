// The cost model's formulas against their closed forms at small P.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "comm/calibrate.hpp"
#include "comm/cost_model.hpp"
#include "core/error.hpp"

using namespace lpsgd::comm;

namespace {
CostModel model() {
  CostModel m;
  m.alpha_shm = 1e-6;
  m.beta_shm = 1e-10;
  m.alpha_mpi = 2e-6;
  m.beta_mpi = 8e-10;
  m.gamma = 2e-10;
  return m;
}
const LinkMix kMpi{false, true};
}  // namespace

TEST(CostModel, LpBcastIsDepthPlusBlocks) {
  const CostModel m = model();
  // P=4, root 0: depth 3, k = 10 blocks of 100 B: (3 - 1 + 10)(α + bβ).
  EXPECT_DOUBLE_EQ(m.predict(Algo::Lp, CollKind::Bcast, 1000, 4, 0, 100, kMpi),
                   12 * (2e-6 + 100 * 8e-10));
  // Root in the middle halves the depth (P=5 root 2: depth 2, one start-up
  // hop) but sends two streams through its one NIC: each block takes 2bβ.
  EXPECT_DOUBLE_EQ(m.predict(Algo::Lp, CollKind::Bcast, 1000, 5, 2, 100, kMpi),
                   1 * (2e-6 + 100 * 8e-10) + 10 * (2e-6 + 2 * 100 * 8e-10));
}

TEST(CostModel, LpAllreduceTurnsAroundInTheMiddle) {
  CostModel m = model();
  const double a = 2e-6, b = 8e-10, g = 2e-10, blk = 250;
  const double hop = a + blk * (b + g);
  // P=5: centre 2, depth 2, start-up 2·2 − 1 = 3 hops, k = 4 blocks. Every
  // inner rank's NIC carries partial sums one way and results the other (two
  // streams), and the centre reduces both sides' partials: with W = 1 a block
  // is received, then reduced, so p = α + 2bβ + 2bγ.
  EXPECT_DOUBLE_EQ(m.predict(Algo::Lp, CollKind::Allreduce, 1000, 5, 0, blk, kMpi),
                   3 * hop + 4 * (a + 2 * blk * b + 2 * blk * g));
  // W >= 2: the next block arrives while this one is reduced, p = max(link, reductions).
  m.window = 2;
  EXPECT_DOUBLE_EQ(m.predict(Algo::Lp, CollKind::Allreduce, 1000, 5, 0, blk, kMpi),
                   3 * hop + 4 * std::max(a + 2 * blk * b, 2 * blk * g));
  m.gamma = 1e-8;  // reductions slower than the link: they set the pace
  EXPECT_DOUBLE_EQ(m.predict(Algo::Lp, CollKind::Allreduce, 1000, 5, 0, blk, kMpi),
                   3 * (a + blk * (b + 1e-8)) + 4 * 2 * blk * 1e-8);
  // P=2: one stream each way, one reduction: (1 + k)(α + b(β+γ)) with W = 1.
  m = model();
  EXPECT_DOUBLE_EQ(m.predict(Algo::Lp, CollKind::Allreduce, 1000, 2, 0, blk, kMpi), 5 * hop);
  EXPECT_DOUBLE_EQ(m.predict(Algo::Lp, CollKind::Allreduce, 1000, 1, 0, 250, kMpi), 0.0);
  // A link per neighbour (ring network): partial sums and results travel on
  // different links, one stream each: P=5 costs 3 hops + 4(α + bβ + 2bγ).
  m.mpi_neighbour_links = true;
  EXPECT_DOUBLE_EQ(m.predict(Algo::Lp, CollKind::Allreduce, 1000, 5, 0, blk, kMpi),
                   3 * hop + 4 * (a + blk * b + 2 * blk * g));
}

TEST(CostModel, LpOnPeerLinksCountsTheNodesCopiesAndReductions) {
  CostModel m = model();
  m.window = 4;
  const LinkMix shm{true, false};
  const double a = 1e-6, c = 1e-10 / 2, g = 2e-10, blk = 100;  // a copy is β_shm / 2
  // Two ranks doing half each: α + the two ranks' copies (2c per byte) for
  // an allreduce (each reads n, writes n), 3/4 of that for reduce and bcast.
  ASSERT_TRUE(m.lp_direct_pairs || std::getenv("LPSGD_LP_DIRECT"));
  m.lp_direct_pairs = true;
  EXPECT_DOUBLE_EQ(m.predict(Algo::Lp, CollKind::Allreduce, 1000, 2, 0, blk, shm),
                   a + (a + 1000 * 2 * c));
  EXPECT_DOUBLE_EQ(m.predict(Algo::Lp, CollKind::Reduce, 1000, 2, 1, blk, shm),
                   a + 0.75 * (a + 1000 * 2 * c));
  EXPECT_DOUBLE_EQ(m.predict(Algo::Lp, CollKind::Bcast, 1000, 2, 0, blk, shm),
                   a + 0.75 * (a + 1000 * 2 * c));
  EXPECT_DOUBLE_EQ(m.predict(Algo::Lp, CollKind::Bcast, 1000, 3, 0, blk, shm),
                   2 * (a + blk * 2 * c) + 10 * (a + blk * 3 * c));  // P = 3: the chain
  // The pipeline (LPSGD_LP_DIRECT=0, or buffers one rank cannot reach):
  m.lp_direct_pairs = false;
  // Blocks are read in place; each rank works on its own core, copies share
  // the node's memory. P=2 reduce to 0: rank 1 sends in place, rank 0 adds
  // its neighbour's block to its own (γ): no transfer stage before it.
  EXPECT_DOUBLE_EQ(m.predict(Algo::Lp, CollKind::Reduce, 1000, 2, 0, blk, shm), 10 * (a + blk * g));
  // P=2 allreduce: rank 0 reduces (γ) while rank 1 copies the results (c).
  EXPECT_DOUBLE_EQ(m.predict(Algo::Lp, CollKind::Allreduce, 1000, 2, 0, blk, shm),
                   (a + blk * (2 * c + g)) + 10 * (a + blk * std::max(c, g)));
  m.gamma = c / 2;  // ...unless copying is the slower
  EXPECT_DOUBLE_EQ(m.predict(Algo::Lp, CollKind::Allreduce, 1000, 2, 0, blk, shm),
                   (a + blk * (2 * c + c / 2)) + 10 * (a + blk * c));
  m.gamma = g;
  // P=4 bcast from 0: every rank makes one copy (the root in -> out, a stage
  // of its own; the others their neighbour's out -> out), all through one
  // memory: 4c.
  EXPECT_DOUBLE_EQ(m.predict(Algo::Lp, CollKind::Bcast, 1000, 4, 0, blk, shm),
                   3 * (a + blk * 2 * c) + 10 * (a + blk * 4 * c));
  // Several nodes of 3 ranks: an inner rank's reduction sets the pace, unless the MPI link is slower.
  const LinkMix mixed{true, true, 3};
  EXPECT_DOUBLE_EQ(m.predict(Algo::Lp, CollKind::Reduce, 1000, 6, 0, blk, mixed),
                   (2e-6 + blk * (8e-10 + g)) * 4 +
                       10 * std::max({2e-6 + blk * 8e-10, blk * g, a + blk * g}));
  // ...and in a bcast the node's three copies share its memory.
  EXPECT_DOUBLE_EQ(m.predict(Algo::Lp, CollKind::Bcast, 1000, 6, 0, blk, mixed),
                   (2e-6 + blk * 8e-10) * 5 + 10 * std::max(2e-6 + blk * 8e-10, a + blk * 3 * c));
}

TEST(CostModel, BestBlockMinimisesThePrediction) {
  const CostModel m = model();
  const double n = 64.0 * 1024 * 1024;
  for (int P : {3, 8, 64, 1024})
    for (CollKind k : {CollKind::Bcast, CollKind::Reduce, CollKind::Allreduce}) {
      const double b = m.best_block(k, n, P, 0, kMpi);
      const double t = m.predict(Algo::Lp, k, n, P, 0, b, kMpi);
      EXPECT_LE(t, m.predict(Algo::Lp, k, n, P, 0, b * 0.7, kMpi) * 1.01);
      EXPECT_LE(t, m.predict(Algo::Lp, k, n, P, 0, b * 1.4, kMpi) * 1.01);
    }
  // Closed form b* = sqrt(nα/(Sβ)) for bcast from an end: S = P − 2.
  EXPECT_NEAR(m.best_block(CollKind::Bcast, n, 10, 0, kMpi), std::sqrt(n * 2e-6 / (8 * 8e-10)), 1e-6);
}

TEST(CostModel, BaselinesClosedForms) {
  const CostModel m = model();
  const double n = 1 << 20, a = 2e-6, b = 8e-10, g = 2e-10;
  EXPECT_DOUBLE_EQ(m.predict(Algo::Mst, CollKind::Bcast, n, 8, 0, 0, kMpi), 3 * (a + n * b));
  EXPECT_DOUBLE_EQ(m.predict(Algo::Mst, CollKind::Bcast, n, 5, 0, 0, kMpi), 3 * (a + n * b));
  EXPECT_DOUBLE_EQ(m.predict(Algo::Mst, CollKind::Reduce, n, 4, 0, 0, kMpi), 2 * (a + n * (b + g)));
  EXPECT_DOUBLE_EQ(m.predict(Algo::Ring, CollKind::Allreduce, n, 4, 0, 0, kMpi),
                   2 * 3 * (a + n / 4 * b) + 0.75 * n * g);
  EXPECT_DOUBLE_EQ(m.predict(Algo::Be, CollKind::Allreduce, n, 4, 0, 0, kMpi),
                   2 * 2 * a + 2 * 0.75 * n * b + 0.75 * n * g);
  // On one node the messages are copies through shared memory and every
  // rank's bytes add up: BE's ranks all move data each round (× P), the
  // binomial tree's P − 1 messages no longer overlap.
  const LinkMix one_node{true, false};
  EXPECT_DOUBLE_EQ(m.predict(Algo::Be, CollKind::Allreduce, n, 4, 0, 0, one_node),
                   2 * 2 * a + 2 * 0.75 * 4 * n * b + 0.75 * 4 * n * g);
  EXPECT_DOUBLE_EQ(m.predict(Algo::Mst, CollKind::Bcast, n, 8, 0, 0, one_node), 3 * a + 7 * n * b);
  EXPECT_TRUE(std::isinf(m.predict(Algo::Ring, CollKind::Bcast, n, 4, 0, 0, kMpi)));
  EXPECT_TRUE(std::isnan(m.predict(Algo::Mpi, CollKind::Bcast, n, 4, 0, 0, kMpi)));
}

TEST(CostModel, AutoPicksByDepthAndLinks) {
  const CostModel m = model();  // α, β of a 10 Gb/s switch
  const double big = 64.0 * 1024 * 1024, mib = 1024.0 * 1024;
  // Two ranks: nothing to pipeline against, LP (or anything) is nβ.
  EXPECT_EQ(m.best_algo(CollKind::Bcast, big, 2, 0, kMpi), Algo::Lp);
  // On a switch the tree's fill is log P hops, the chain's P: the tree wins
  // once P is large, by far for 1 MiB (fill ≫ transfer for the chain).
  EXPECT_EQ(m.best_algo(CollKind::Bcast, mib, 1024, 0, kMpi), Algo::Tree);
  EXPECT_GT(m.predict(Algo::Lp, CollKind::Bcast, mib, 1024, 0, m.best_block(CollKind::Bcast, mib, 1024, 0, kMpi), kMpi),
            2 * m.predict(Algo::Tree, CollKind::Bcast, mib, 1024, 0,
                          m.best_block(Algo::Tree, CollKind::Bcast, mib, 1024, 0, kMpi), kMpi));
  EXPECT_EQ(m.best_algo(CollKind::Reduce, big, 256, 0, kMpi), Algo::Tree);
  // On one node, LP's peer links beat MPI copies.
  EXPECT_EQ(m.best_algo(CollKind::Allreduce, big, 8, 0, LinkMix{true, false}), Algo::Lp);
  // Across nodes with one NIC each, an allreduce must move 2n(P−1)/P bytes
  // through every NIC whatever the algorithm; LP's inner ranks and the
  // tree's carry 2n. Ring and bidirectional exchange move just that: for a
  // large message the ring, whose chunks hide its reductions behind its
  // transfers (BE reduces between its rounds); for a small one BE, whose
  // 2 log P start-ups beat the ring's 2(P − 1).
  EXPECT_EQ(m.best_algo(CollKind::Allreduce, big, 64, 0, kMpi), Algo::Ring);
  EXPECT_LT(m.predict(Algo::Ring, CollKind::Allreduce, big, 64, 0, 0, kMpi),
            m.predict(Algo::Be, CollKind::Allreduce, big, 64, 0, 0, kMpi));
  EXPECT_EQ(m.best_algo(CollKind::Allreduce, 64.0 * 1024, 64, 0, kMpi), Algo::Be);
  EXPECT_NE(m.best_algo(CollKind::Allreduce, 8, 64, 0, kMpi), Algo::Lp);
  // A segment larger than a chunk: one chunk's reduction exposed per
  // reduce-scatter round, not the segment's.
  const double chunk = static_cast<double>(ring_chunk_bytes());
  EXPECT_DOUBLE_EQ(m.predict(Algo::Ring, CollKind::Allreduce, 4 * 4 * chunk, 4, 0, 0, kMpi),
                   2 * 3 * (2e-6 + 4 * chunk * 8e-10) + 3 * chunk * 2e-10);
  // A link per chain neighbour (a ring network): the tree's long edges share
  // links, the chain never does: LP for large messages.
  CostModel ring = model();
  ring.mpi_neighbour_links = true;
  EXPECT_EQ(ring.best_algo(CollKind::Bcast, big, 256, 0, kMpi), Algo::Lp);
  EXPECT_EQ(ring.best_algo(CollKind::Allreduce, big, 256, 0, kMpi), Algo::Lp);
  EXPECT_EQ(ring.best_algo(CollKind::Allreduce, 64.0 * 1024, 64, 0, kMpi), Algo::Lp);
  // The ring algorithm's closing message crosses the whole chain each round.
  EXPECT_DOUBLE_EQ(ring.predict(Algo::Ring, CollKind::Allreduce, 1000, 4, 0, 0, kMpi),
                   2 * 3 * (3 * 2e-6 + 250 * 8e-10) + 0.75 * 1000 * 2e-10);
  EXPECT_TRUE(std::isnan(ring.predict(Algo::Tree, CollKind::Bcast, big, 8, 0, 1e5, kMpi)));
}

TEST(CostModel, TreeIsFillPlusSteps) {
  const CostModel m = model();
  const double a = 2e-6, b = 8e-10, g = 2e-10, blk = 100;
  // Bcast, P = 8: Q = 7 ranks below the root, D = 2 levels, S = D + 1 = 3
  // hops (each a block to two children at once), k = 1000/2/100 = 5 blocks
  // per tree, two blocks per step through every busy NIC.
  EXPECT_DOUBLE_EQ(m.predict(Algo::Tree, CollKind::Bcast, 1000, 8, 0, blk, kMpi),
                   3 * (a + 2 * blk * b) + 4 * (a + 2 * blk * b));
  // Reduce: the same with two reductions per block (W = 1: after the transfer).
  EXPECT_DOUBLE_EQ(m.predict(Algo::Tree, CollKind::Reduce, 1000, 8, 0, blk, kMpi),
                   3 * (a + 2 * blk * (b + g)) + 4 * (a + 2 * blk * b + 2 * blk * g));
  // Allreduce, P = 8: D = 3, S = 2D = 6; an inner rank's NIC moves 4 blocks a step.
  EXPECT_DOUBLE_EQ(m.predict(Algo::Tree, CollKind::Allreduce, 1000, 8, 0, blk, kMpi),
                   6 * (a + 2 * blk * (b + g)) + 4 * (a + 4 * blk * b + 2 * blk * g));
  // P = 2: each rank is one tree's root and the other's leaf: 2 blocks a
  // step, and a fill hop is one block to one child.
  EXPECT_DOUBLE_EQ(m.predict(Algo::Tree, CollKind::Allreduce, 1000, 2, 0, blk, kMpi),
                   2 * (a + blk * (b + g)) + 4 * (a + 2 * blk * b + 2 * blk * g));
  EXPECT_DOUBLE_EQ(m.predict(Algo::Tree, CollKind::Bcast, 1000, 1, 0, blk, kMpi), 0.0);
  // A short last block: 500 bytes per tree in blocks of 150 are 150, 150, 150
  // and 50; the three steps after the fill carry 350 bytes, not 450.
  EXPECT_DOUBLE_EQ(m.predict(Algo::Tree, CollKind::Bcast, 1000, 8, 0, 150, kMpi),
                   3 * (a + 2 * 150 * b) + 3 * a + 2 * 350 * b);
  // The best block is the prediction's minimum.
  for (int P : {3, 64, 1024})
    for (CollKind k : {CollKind::Bcast, CollKind::Allreduce}) {
      const double n = 16.0 * 1024 * 1024, bb = m.best_block(Algo::Tree, k, n, P, 0, kMpi);
      const double t = m.predict(Algo::Tree, k, n, P, 0, bb, kMpi);
      EXPECT_LE(t, m.predict(Algo::Tree, k, n, P, 0, bb * 0.7, kMpi) * 1.001);
      EXPECT_LE(t, m.predict(Algo::Tree, k, n, P, 0, bb * 1.4, kMpi) * 1.001);
    }
}

TEST(CostModel, SaveAndLoadRoundTrip) {
  const std::string path = ::testing::TempDir() + "lpsgd_calib/test.ini";
  CostModel m = model();
  m.alpha_mpi = 2.0000000000000004e-06;  // a last bit that %g would lose
  m.quality.confidence = CostModel::Confidence::Low;
  m.quality.rounds = 4;
  m.quality.cpu_share = 0.46;
  m.quality.spread = 1.83;
  m.quality.note = "beside other work";
  m.quality.measured = "2026-12-07 15:03 UTC, 2 ranks on 1 node";
  m.measured_with = CostModel::settings_now(4, 61440);
  m.save(path);
  const CostModel r = CostModel::load_or_default(path);
  EXPECT_EQ(r.params(), m.params());  // every bit
  EXPECT_FALSE(r.mpi_neighbour_links);
  EXPECT_EQ(r.quality.confidence, CostModel::Confidence::Low);
  EXPECT_EQ(r.quality.rounds, 4);
  EXPECT_DOUBLE_EQ(r.quality.cpu_share, 0.46);
  EXPECT_DOUBLE_EQ(r.quality.spread, 1.83);
  EXPECT_EQ(r.quality.note, "beside other work");
  EXPECT_EQ(r.quality.measured, m.quality.measured);
  EXPECT_EQ(r.measured_with.window, 4);
  EXPECT_EQ(r.measured_with.mpi_message, 61440);
  EXPECT_EQ(r.settings_differ(CostModel::settings_now(4, 61440)), "");
  EXPECT_EQ(r.settings_differ(CostModel::settings_now(2, 61440)), "window 2 (measured with 4)");
  m.mpi_neighbour_links = true;
  m.save(path);
  EXPECT_TRUE(CostModel::load_or_default(path).mpi_neighbour_links);
  EXPECT_THROW(CostModel::load_or_default("/nonexistent/calibration.ini"), lpsgd::Error);
  // A file written before calibrations said how sure they are: unknown.
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs("alpha_shm = 1e-6\nbeta_shm = 1e-10\nalpha_mpi = 2e-6\nbeta_mpi = 8e-10\ngamma = 2e-10\n", f);
    std::fclose(f);
  }
  EXPECT_EQ(CostModel::load_or_default(path).quality.confidence, CostModel::Confidence::Unknown);
  for (const char* bad : {"confidence = maybe\n", "window = 2.5\n", "lp_direct = 3\n", "cpu_share = -1\n"}) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs(bad, f);
    std::fclose(f);
    EXPECT_THROW(CostModel::load_or_default(path), lpsgd::Error) << bad;
  }
  std::remove(path.c_str());
}

// The file decides: a model just measured and the same model read back from
// its file make every choice alike (algorithm and block, every collective,
// size and P, one node and several), and say so with the same fingerprint.
// Before the numbers were written to the last bit, a near tie could go one
// way when measured and the other way when read back.
TEST(CostModel, AFreshCalibrationAndItsFileChooseAlike) {
  const std::string path = ::testing::TempDir() + "lpsgd_calib/fresh.ini";
  for (int variant = 0; variant < 3; ++variant) {
    CostModel m;  // numbers with every digit significant, as measured ones are
    m.alpha_shm = 4.605123456789e-07 * (1 + variant);
    m.beta_shm = 1.7151612345678e-09 / (1 + variant);
    m.alpha_mpi = 1.5731234567891e-06;
    m.beta_mpi = 2.5220612345678e-09 * (variant == 2 ? 0.1 : 1.0);
    m.gamma = 7.0007412345678e-10;
    m.mpi_neighbour_links = variant == 1;
    m.window = 4;
    m.mpi_message = 60 << 10;
    m.save(path);
    CostModel r = CostModel::load_or_default(path);
    r.window = m.window;            // the communicator sets both from its options,
    r.mpi_message = m.mpi_message;  // for a fresh model and a read one alike
    EXPECT_EQ(r.inputs_hash(), m.inputs_hash());
    for (const LinkMix mix : {LinkMix{true, false, 2}, LinkMix{false, true, 1}, LinkMix{true, true, 4}})
      for (CollKind k : {CollKind::Bcast, CollKind::Reduce, CollKind::Allreduce})
        for (int P : {2, 3, 4, 7, 16, 64})
          for (double n = 64; n <= 256.0 * 1024 * 1024; n *= 3.7) {
            const Algo a = m.best_algo(k, n, P, 0, mix);
            ASSERT_EQ(a, r.best_algo(k, n, P, 0, mix)) << "P=" << P << " n=" << n;
            if (uses_blocks(a)) {
              ASSERT_EQ(m.best_block(a, k, n, P, 0, mix), r.best_block(a, k, n, P, 0, mix));
            }
          }
  }
  std::remove(path.c_str());
}

// A measurement that is not sure of itself never replaces one that is; one
// that is replaces whatever was there; between two unsure ones, the one
// whose ranks had more of their cores.
TEST(CostModel, OnlyASureMeasurementReplacesASureOne) {
  using C = CostModel::Confidence;
  const auto cal = [](C c, double share) {
    CostModel m = model();
    m.calibrated = true;
    m.quality.confidence = c;
    m.quality.cpu_share = share;
    m.quality.note = c == C::Low ? "beside other work" : "";
    return m;
  };
  std::string why;
  EXPECT_TRUE(prefer_fresh(CostModel{}, cal(C::Low, 0.3), &why));
  EXPECT_EQ(why, "there was none");
  EXPECT_TRUE(prefer_fresh(cal(C::High, 0.99), cal(C::High, 0.97)));
  EXPECT_FALSE(prefer_fresh(cal(C::High, 0.99), cal(C::Low, 0.5), &why));
  EXPECT_NE(why.find("beside other work"), std::string::npos) << why;
  EXPECT_TRUE(prefer_fresh(cal(C::Low, 0.4), cal(C::High, 0.9)));
  EXPECT_TRUE(prefer_fresh(cal(C::Unknown, 0), cal(C::Low, 0.4)));  // a file from before quality
  EXPECT_TRUE(prefer_fresh(cal(C::Low, 0.4), cal(C::Low, 0.6)));
  EXPECT_FALSE(prefer_fresh(cal(C::Low, 0.6), cal(C::Low, 0.4)));
}

// One calibration file per cluster: one machine keeps its host's file; a set
// of machines gets one named after its first and its count, and a hash of all
// their names, so another set of nodes never reads this one's links.
TEST(CostModel, DefaultPathIsPerCluster) {
  unsetenv("LPSGD_CALIBRATION");
  const std::string one = CostModel::default_path({"node-a"});
  EXPECT_NE(one.find("/.cache/lpsgd/calibration-node-a.ini"), std::string::npos) << one;
  const std::string two = CostModel::default_path({"node-a", "node-b"});
  EXPECT_NE(two.find("/.cache/lpsgd/calibration-node-a+2-"), std::string::npos) << two;
  EXPECT_EQ(two, CostModel::default_path({"node-a", "node-b"}));  // stable
  EXPECT_NE(two, CostModel::default_path({"node-a", "node-c"}));
  EXPECT_NE(two, CostModel::default_path({"node-b", "node-a"}));
  EXPECT_NE(CostModel::default_path({"node-a", "node-b", "node-c"}).find("+3-"), std::string::npos);
  // LPSGD_CALIBRATION names the file outright; a missing one is the defaults.
  setenv("LPSGD_CALIBRATION", "/tmp/elsewhere.ini", 1);
  EXPECT_EQ(CostModel::default_path({"node-a", "node-b"}), "/tmp/elsewhere.ini");
  unsetenv("LPSGD_CALIBRATION");
  EXPECT_FALSE(CostModel::load_if_present("/nonexistent/calibration.ini").calibrated);
}

// Round-by-round schedules (MST, BE) pay, per round across a network, one MPI
// message's transfer on top of α (the emptied pipe between two partners'
// streams); on one node, or with no message size given, nothing more. With
// it, a large allreduce across the namespaces' 200 Mbit/s links goes to the
// ring, as measured (BE 12-50 ms slower at 8 MiB), where the two were 0.1 ms
// apart before.
TEST(CostModel, RoundByRoundSchedulesPayAnEmptiedPipePerRound) {
  CostModel m = model();
  const double n = 8.0 * 1024 * 1024;
  const double be0 = m.predict(Algo::Be, CollKind::Allreduce, n, 4, 0, 0, kMpi);
  const double mst0 = m.predict(Algo::Mst, CollKind::Bcast, n, 4, 0, 0, kMpi);
  m.mpi_message = 60 << 10;
  const double per_round = (60 << 10) * 8e-10;
  EXPECT_DOUBLE_EQ(m.predict(Algo::Be, CollKind::Allreduce, n, 4, 0, 0, kMpi), be0 + 4 * per_round);
  EXPECT_DOUBLE_EQ(m.predict(Algo::Mst, CollKind::Bcast, n, 4, 0, 0, kMpi), mst0 + 2 * per_round);
  const LinkMix one_node{true, false};
  CostModel none = model();
  EXPECT_DOUBLE_EQ(m.predict(Algo::Be, CollKind::Allreduce, n, 4, 0, 0, one_node),
                   none.predict(Algo::Be, CollKind::Allreduce, n, 4, 0, 0, one_node));
  // The namespaces' calibration (200 Mbit/s, 100 ms queues): ring for 6 MiB.
  CostModel ns;
  ns.alpha_mpi = 0.000900828;
  ns.beta_mpi = 4.16494e-08;
  ns.gamma = 1.86231e-10;
  EXPECT_EQ(ns.best_algo(CollKind::Allreduce, 6.0 * 1024 * 1024, 4, 0, kMpi), Algo::Be);
  ns.mpi_message = 60 << 10;
  EXPECT_EQ(ns.best_algo(CollKind::Allreduce, 6.0 * 1024 * 1024, 4, 0, kMpi), Algo::Ring);
}

// A round shorter than one MPI message empties a pipe of its own bytes only:
// BE's recursive halving of 64 KiB over 256 ranks sends 32 KiB, 16 KiB, ...,
// 256 B, so both halves pay those bytes once more (not 16 whole 60 KiB
// messages: that had auto take the tree at 1.50x BE's simulated time on 2 us,
// 25 Gb/s links, tests/e2e/smpi_auto.sh).
TEST(CostModel, AnEmptiedPipeHoldsAtMostTheRoundsBytes) {
  CostModel m = model();
  m.alpha_mpi = 4e-6;
  m.beta_mpi = 3.2e-10;
  m.gamma = 0;
  const double n = 64 * 1024;
  const double be0 = m.predict(Algo::Be, CollKind::Allreduce, n, 256, 0, 0, kMpi);
  m.mpi_message = 60 << 10;
  double rounds = 0;
  for (int q = 256; q > 1; q /= 2) rounds += n * q / 512;
  EXPECT_DOUBLE_EQ(m.predict(Algo::Be, CollKind::Allreduce, n, 256, 0, 0, kMpi),
                   be0 + 2 * rounds * m.beta_mpi);
  EXPECT_EQ(m.best_algo(CollKind::Allreduce, n, 256, 0, kMpi), Algo::Be);
  // MST's rounds each carry the whole message: min(n, the limit).
  const double mst = m.predict(Algo::Mst, CollKind::Bcast, 1000, 8, 0, 0, kMpi);
  m.mpi_message = 0;
  EXPECT_DOUBLE_EQ(mst, m.predict(Algo::Mst, CollKind::Bcast, 1000, 8, 0, 0, kMpi) + 3 * 1000 * m.beta_mpi);
}
