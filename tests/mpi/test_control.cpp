// The trainer's control channel (lib/train/control.hpp): its small collectives
// agree, and one whose wait fails never leaves MPI writing into freed memory.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "device/device.hpp"
#include "train/control.hpp"

using namespace lpsgd;
using namespace lpsgd::train;

namespace {
Device& cpu() {
  static auto dev = make_device(DeviceKind::Cpu);
  return *dev;
}
}  // namespace

TEST(Control, AllreduceAllgatherAndAgree) {
  comm::Communicator cm(MPI_COMM_WORLD, cpu());
  Control ctl(cm, 30);
  const int P = ctl.size(), me = ctl.rank();
  int v[2] = {me, 1};
  ctl.allreduce(v, 2, MPI_INT, MPI_SUM, "test sums");
  EXPECT_EQ(v[0], P * (P - 1) / 2);
  EXPECT_EQ(v[1], P);
  const uint64_t mine = 100 + static_cast<uint64_t>(me);
  std::vector<uint64_t> all(static_cast<size_t>(P));
  ctl.allgather(&mine, all.data(), MPI_UINT64_T, "test gather");
  for (int r = 0; r < P; ++r) EXPECT_EQ(all[static_cast<size_t>(r)], 100u + static_cast<uint64_t>(r));
  // Every rank throws the lowest failing rank's error.
  Outcome o;
  if (P > 1 && me == P - 1) {
    o.code = Outcome::kRuntime;
    o.message = "cannot read the test data";
  }
  std::string what;
  try {
    ctl.agree(o, "check of the test data");
  } catch (const Error& e) {
    what = e.message();
  }
  if (P == 1) {
    EXPECT_TRUE(what.empty()) << what;
  } else {
    EXPECT_EQ(what, "cannot read the test data (on rank " + std::to_string(P - 1) + ")");
  }
  EXPECT_EQ(Control::abandoned(), 0u);
}

// Rank 1 fails (its error notice reaches rank 0) and the ranks but 0 join
// rank 0's gather only after rank 0 has given up on it. Rank 0's wait throws with the gather
// still in flight; its MPI then delivers rank 1's late contribution, as the
// error path's last MPI calls do (app/entry.cpp keeps MPI going for up to 2 s
// before aborting). The bytes must land in memory the gather still owns: the
// abandoned block, not the caller's vector, freed by then. (The trainer's
// small collectives before control.cpp waited into the caller's stack and
// vectors: a heap-use-after-free under ASan, a silently overwritten chunk
// without it.)
TEST(Control, FailedWaitAbandonsItsBuffersInsteadOfFreeingThem) {
  comm::Communicator cm(MPI_COMM_WORLD, cpu());
  Control ctl(cm, 30);
  if (ctl.size() < 2) GTEST_SKIP() << "needs two ranks";
  const uint64_t mine = 7 + static_cast<uint64_t>(ctl.rank());
  if (ctl.rank() != 0) {
    if (ctl.rank() == 1) cm.report_error("rank 1 stops taking part");
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    std::vector<uint64_t> all(static_cast<size_t>(ctl.size()));
    MPI_Request req;
    MPI_Iallgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, ctl.comm(), &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
  } else if (ctl.rank() == 0) {
    std::string what;
    {
      std::vector<uint64_t> all(static_cast<size_t>(ctl.size()), 0);
      try {
        ctl.allgather(&mine, all.data(), MPI_UINT64_T, "comparison of checksums");
      } catch (const Error& e) {
        what = e.message();
      }
    }  // `all` is freed here, the gather still in flight
    EXPECT_NE(what.find("rank 1 stops taking part"), std::string::npos) << what;
    EXPECT_EQ(Control::abandoned(), 1u);
    // Keep MPI progressing while rank 1's part arrives.
    for (Timer t; t.elapsed_s() < 4;) {
      int flag = 0;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
      std::this_thread::yield();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}
