// The MPI test harness: ranks agree, and a failure on one rank fails them all.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>

TEST(Harness, AllRanksSeeTheSameSum) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int sum = 0;
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(sum, size * (size - 1) / 2);
}

// Runs only as test_mpi_harness.fails_together (WILL_FAIL): rank 1 fails an
// assertion and skips the barrier the others wait in.
TEST(HarnessDemo, FailureOnOneRankFailsTheJob) {
  if (!std::getenv("LPSGD_TEST_DEMO_FAILURE")) GTEST_SKIP() << "demo only";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ASSERT_NE(rank, 1) << "deliberate failure on rank 1";
  MPI_Barrier(MPI_COMM_WORLD);
}
