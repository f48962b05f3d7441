// Errors in collectives reach every rank quickly instead of hanging: a count
// that differs on one rank, and a rank that never joins.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "device/device.hpp"

using namespace lpsgd;
using namespace lpsgd::comm;

namespace {
Device& cpu() {
  static auto dev = make_device(DeviceKind::Cpu);
  return *dev;
}
}  // namespace

TEST(CommErrors, MismatchedCountFailsOnEveryRankWithinSeconds) {
  CommOptions o;
  o.slot_bytes = 4096;
  Communicator cm(MPI_COMM_WORLD, cpu(), o);
  const int me = cm.rank();
  const size_t n = me == 1 % cm.size() ? 1001 : 1000;  // rank 1 disagrees
  std::vector<float> buf(1001, 1.0f);
  CollArgs a{CollKind::Allreduce, buf.data(), buf.data(), n, DType::F32, ReduceOp::Sum, 0};
  Timer t;
  std::string what;
  try {
    cm.run(Algo::Lp, a, 64);
  } catch (const Error& e) {
    what = e.message();
  }
  EXPECT_LT(t.elapsed_s(), 10.0);
  if (cm.size() == 1) {
    EXPECT_TRUE(what.empty());  // nobody to disagree with
    return;
  }
  EXPECT_NE(what.find("mismatch"), std::string::npos) << "rank " << me << ": " << what;
  EXPECT_NE(what.find("count="), std::string::npos) << what;
}

TEST(CommErrors, AbsentRankTimesOutNamingBlockAndNeighbour) {
  CommOptions o;
  o.slot_bytes = 4096;
  o.timeout_s = 2;
  Communicator cm(MPI_COMM_WORLD, cpu(), o);
  if (cm.size() < 2) GTEST_SKIP() << "needs two ranks";
  const int me = cm.rank();
  const int absent = cm.size() - 1;
  std::vector<float> buf(100, 1.0f);
  std::string what;
  Timer t;
  try {
    if (me != absent) {
      CollArgs a{CollKind::Bcast, buf.data(), buf.data(), 100, DType::F32, ReduceOp::Sum, 0};
      cm.run(Algo::Lp, a, 16);
    }
    // A rank whose part finished learns of the failure at its next use of the
    // communicator, as a trainer's next step would.
    while (t.elapsed_s() < 20) cm.check_errors();
  } catch (const Error& e) {
    what = e.message();
  }
  EXPECT_LT(t.elapsed_s(), 15.0);
  EXPECT_FALSE(what.empty()) << "rank " << me << " saw no error";
  if (me == absent - 1) {
    EXPECT_NE(what.find("made no progress"), std::string::npos) << what;
  }
  EXPECT_NE(what.find("rank"), std::string::npos) << what;
}
