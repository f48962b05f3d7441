// Testing MPI requests the same way under a real MPI and under SimGrid SMPI.
//
// SMPI 3.32 keeps every request that MPI_Test (or Testall, Testany,
// Testsome) finds complete in its rank's list of pending activities — only
// MPI_Wait and MPI_Waitany remove theirs — and each later completion searches
// that list: a simulated pipeline of k blocks then costs O(k²) wall time (a
// 16-rank chain of 8192 blocks: 29 s instead of 3). Its
// MPI_Request_get_status reports unmatched receives as complete, so it cannot
// stand in. Under SMPI a request is therefore never completed by a test: it
// is complete once a blocking MPI_Waitany has reaped it (Collective::wait
// blocks on every pending request whenever nothing else can move), which
// leaves it null. Code that polls without such a wait (the progress engine,
// calibration) does not run under SMPI.
#pragma once

#include <mpi.h>

#include <cstddef>

#include "core/error.hpp"

namespace lpsgd::comm {

/// MPI_Test: true (and r freed, set to MPI_REQUEST_NULL) once r is complete.
/// A null request is complete.
inline bool test_request(MPI_Request& r) {
  if (r == MPI_REQUEST_NULL) return true;
#ifdef SMPI_SHARED_MALLOC
  return false;
#else
  int done = 0;
  MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
  return done != 0;
#endif
}

/// True once every request of reqs[0, n) is complete; completed ones are
/// freed as they are found (so a later call does not test them again).
inline bool test_all(MPI_Request* reqs, size_t n) {
  bool all = true;
  for (size_t i = 0; i < n; ++i) all &= test_request(reqs[i]);
  return all;
}

}  // namespace lpsgd::comm
