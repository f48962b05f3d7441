// gtest main for tests that run under mpiexec.
//
// - MPI is initialised (MPI_THREAD_MULTIPLE) before any test and finalised after.
// - Only rank 0 prints gtest's usual output; after every test all ranks meet on a
//   private communicator and rank 0 prints the other ranks' failures in rank order.
// - A rank whose test failed while others are stuck in a collective waits at most
//   LPSGD_TEST_SYNC_TIMEOUT seconds (default 30), prints its failures and aborts
//   the whole job, so a failing assertion on one rank fails the test instead of
//   hanging it until the CTest timeout.
// - The exit code is non-zero on every rank if any rank failed; 77 (skipped)
//   where LPSGD_MAX_ISA asks for more than the CPU has (tools/isa_gate.hpp).
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "isa_gate.hpp"

namespace {

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

class RankSyncListener : public ::testing::EmptyTestEventListener {
 public:
  RankSyncListener(MPI_Comm comm, double timeout_s) : comm_(comm), timeout_s_(timeout_s) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    failures_ += std::string(r.file_name() ? r.file_name() : "?") + ":" +
                 std::to_string(r.line_number()) + ": " + r.summary() + "\n";
  }

  void OnTestEnd(const ::testing::TestInfo& info) override {
    const std::string name = std::string(info.test_suite_name()) + "." + info.name();
    if (!wait_for_all()) {
      std::fprintf(stderr,
                   "[rank %d] ranks did not finish %s together within %.0f s (another rank "
                   "failed or hangs); aborting the job\n%s",
                   rank_, name.c_str(), timeout_s_, failures_.c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    // Gather every rank's failure text to rank 0 and print it in rank order.
    int len = static_cast<int>(failures_.size());
    std::vector<int> lens(static_cast<size_t>(size_));
    MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm_);
    std::vector<int> displs(static_cast<size_t>(size_), 0);
    int total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[static_cast<size_t>(r)] = total;
      total += lens[static_cast<size_t>(r)];
    }
    std::string all(static_cast<size_t>(total), '\0');
    MPI_Gatherv(failures_.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(),
                MPI_CHAR, 0, comm_);
    if (rank_ == 0) {
      for (int r = 1; r < size_; ++r) {
        const int l = lens[static_cast<size_t>(r)];
        if (l == 0) continue;
        any_failed_elsewhere_ = true;
        std::printf("[rank %d] FAILED %s:\n%s", r, name.c_str(),
                    all.substr(static_cast<size_t>(displs[static_cast<size_t>(r)]),
                               static_cast<size_t>(l)).c_str());
      }
      std::fflush(stdout);
    }
    failures_.clear();
  }

  bool any_failed_elsewhere() const { return any_failed_elsewhere_; }

 private:
  bool wait_for_all() {
    MPI_Request req;
    MPI_Ibarrier(comm_, &req);
    const double deadline = now_s() + timeout_s_;
    int done = 0;
    while (!done) {
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (!done && now_s() > deadline) return false;
      if (!done) std::this_thread::yield();
    }
    return true;
  }

  MPI_Comm comm_;
  double timeout_s_;
  int rank_ = 0, size_ = 1;
  std::string failures_;
  bool any_failed_elsewhere_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm control;
  MPI_Comm_dup(MPI_COMM_WORLD, &control);

  double timeout_s = 30;
  if (const char* t = std::getenv("LPSGD_TEST_SYNC_TIMEOUT")) timeout_s = std::atof(t);

  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  auto* sync = new RankSyncListener(control, timeout_s);
  listeners.Append(sync);

  // An entry of lpsgd_isa_variants asking for more than this CPU has: skipped.
  if (lpsgd::testing::isa_unavailable(rank == 0)) {
    MPI_Comm_free(&control);
    MPI_Finalize();
    return 77;
  }

  int rc = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, control);
  if (rank == 0 && worst != 0 && rc == 0)
    std::printf("[  FAILED  ] on other ranks (see the [rank N] lines above)\n");
  MPI_Comm_free(&control);
  MPI_Finalize();
  return worst != 0 ? 1 : 0;
}
