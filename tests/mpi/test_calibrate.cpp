// Calibration (lib/comm/calibrate.hpp) on real ranks: every rank returns the
// same model and the same verdict on its quality, and the start-up check can
// tell a calibration that is wrong from a node that is merely busy.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "comm/calibrate.hpp"
#include "comm/communicator.hpp"
#include "device/device.hpp"

using namespace lpsgd;
using namespace lpsgd::comm;

namespace {
Device& cpu() {
  static auto dev = make_device(DeviceKind::Cpu);
  return *dev;
}

/// Whether every rank holds the same bytes in `v`.
template <class T>
bool same_everywhere(const T& v) {
  int P = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  std::vector<T> all(static_cast<size_t>(P));
  MPI_Allgather(&v, sizeof(T), MPI_BYTE, all.data(), sizeof(T), MPI_BYTE, MPI_COMM_WORLD);
  for (const T& x : all)
    if (std::memcmp(&x, &v, sizeof(T)) != 0) return false;
  return true;
}
}  // namespace

// The numbers, the flags and the quality are every rank's alike, so that auto
// chooses alike everywhere and the ranks agree on whether to keep the file;
// the quality is one of the two documented verdicts.
TEST(Calibrate, EveryRankGetsTheSameModelAndVerdict) {
  const CostModel m = calibrate(MPI_COMM_WORLD, cpu(), 0, 10);
  std::array<double, CostModel::kParams + 5> s{};  // doubles: no padding for memcmp to trip on
  const auto p = m.params();
  std::copy(p.begin(), p.end(), s.begin());
  s[CostModel::kParams] = m.quality.cpu_share;
  s[CostModel::kParams + 1] = m.quality.spread;
  s[CostModel::kParams + 2] = static_cast<double>(m.quality.confidence);
  s[CostModel::kParams + 3] = m.quality.rounds;
  s[CostModel::kParams + 4] = m.mpi_neighbour_links ? 1 : 0;
  EXPECT_TRUE(same_everywhere(s));
  EXPECT_NE(m.quality.confidence, CostModel::Confidence::Unknown);
  EXPECT_GE(m.quality.rounds, 2);
  EXPECT_GT(m.quality.cpu_share, 0.0);
  EXPECT_LE(m.quality.cpu_share, 1.0);
  EXPECT_GE(m.quality.spread, 1.0);
  // Low says why; High has had its cores and agreeing rounds.
  if (m.quality.confidence == CostModel::Confidence::Low) EXPECT_FALSE(m.quality.note.empty());
  else EXPECT_LE(m.quality.spread, 1.5);
  for (const double v : m.params()) EXPECT_GT(v, 0.0);
  EXPECT_EQ(m.measured_with.window, 4);
  EXPECT_EQ(m.measured_with.mpi_message, static_cast<long long>(default_mpi_message_bytes()));
}

// A calibration that predicts links of 1 MB/s is wrong however busy the node
// is: load only ever slows a link down, so the check says Differs, never
// Busy, on every rank. A calibration measured now that is sure of itself
// fits, or (on a machine that got busy since) cannot be judged; one that is
// not sure may be wrong, and then only by predicting too slow.
TEST(Calibrate, TheCheckTellsAWrongCalibrationFromABusyNode) {
  int P = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  if (P < 2) GTEST_SKIP() << "one rank has no links";
  Communicator c(MPI_COMM_WORLD, cpu());
  CostModel slow;
  slow.alpha_shm = slow.alpha_mpi = 1e-3;
  slow.beta_shm = slow.beta_mpi = 1e-6;
  const LinkCheck k = check_links(c, slow);
  EXPECT_EQ(k.result, LinkCheck::Differs);
  EXPECT_LT(k.measured_s * 1.5, k.predicted_s);
  const int verdict = static_cast<int>(k.result);
  EXPECT_TRUE(same_everywhere(verdict));
  const CostModel now = calibrate(MPI_COMM_WORLD, cpu(), 0, 10);
  const LinkCheck fresh = check_links(c, now);
  EXPECT_TRUE(same_everywhere(static_cast<int>(fresh.result)));
  if (now.quality.confidence == CostModel::Confidence::High) {
    EXPECT_NE(fresh.result, LinkCheck::Differs)
        << "measured " << fresh.measured_s << " s, predicted " << fresh.predicted_s << " s";
  } else if (fresh.result == LinkCheck::Differs) {
    EXPECT_LT(fresh.measured_s, fresh.predicted_s) << now.quality_text();
  }
}
