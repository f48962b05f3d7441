// Errors in collectives reach every rank quickly instead of hanging: a count
// that differs on one rank, and a rank that never joins; and what an error
// leaves in flight is let go of safely.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/progress_engine.hpp"
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

namespace {

// Rank 0 alone queues collectives on a progress engine (its neighbours never
// join, so they stay in flight) and hands them to `body`; afterwards every
// rank learns of rank 0's error so that no communicator is left half-used.
void with_stalled_collectives_on_rank0(
    const std::function<void(Communicator&, std::vector<std::unique_ptr<Collective>>&,
                             std::unique_ptr<ProgressEngine>&)>& body) {
  CommOptions o;
  o.slot_bytes = 4096;
  o.timeout_s = 30;  // longer than the test: nothing fails by itself
  Communicator cm(MPI_COMM_WORLD, cpu(), o);
  if (cm.rank() == 0) {
    static std::vector<float> bufs[3];
    auto engine = std::make_unique<ProgressEngine>(cm);
    std::vector<std::unique_ptr<Collective>> held;
    for (auto& b : bufs) {
      b.assign(1000, 1.0f);
      CollArgs a{CollKind::Allreduce, b.data(), b.data(), b.size(), DType::F32, ReduceOp::Sum, 0};
      held.push_back(cm.create(Algo::Lp, a, 64));
      engine->submit(held.back().get());
    }
    body(cm, held, engine);
    cm.report_error("test over");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (cm.rank() != 0) {
    // Rank 0's notice travels the chain; wait for it so the communicator is
    // marked failed here too.
    bool told = false;
    for (Timer t; !told && t.elapsed_s() < 10;) {
      try {
        cm.check_errors();
      } catch (const Error&) {
        told = true;
      }
    }
    EXPECT_TRUE(told);
  }
}

}  // namespace

// An error unwinds a trainer: the collectives it had queued on the progress
// engine are destroyed first, while the engine thread still drives them. They
// withdraw from the engine before they are freed (under ASan, before the fix,
// the engine thread read and wrote them after they were freed).
TEST(CommErrors, CollectivesDestroyedWhileTheEngineHoldsThem) {
  with_stalled_collectives_on_rank0([](Communicator&, auto& held, auto& engine) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the engine started them
    held.clear();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // it would touch them now
    Timer t;
    engine.reset();
    EXPECT_LT(t.elapsed_s(), 2.0);
  });
}

// An engine destroyed while it still holds collectives stops at once and
// fails them, rather than driving them until they time out: their owners'
// wait() says why.
TEST(CommErrors, EngineDestroyedWithCollectivesInFlightFailsThem) {
  with_stalled_collectives_on_rank0([](Communicator&, auto& held, auto& engine) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    Timer t;
    engine.reset();
    EXPECT_LT(t.elapsed_s(), 2.0);
    for (auto& c : held) {
      std::string what;
      try {
        c->wait();
      } catch (const Error& e) {
        what = e.message();
      }
      EXPECT_NE(what.find("progress engine stopped"), std::string::npos) << what;
    }
  });
}
