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
#include <exception>

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

/// Requests whose buffers are about to be freed (a link, a collective or a
/// communicator being destroyed): tests each until it completes or
/// MPI_Wtime() passes `deadline`, receives cancelled first (a cancelled
/// receive that had not matched completes at once). Returns false when some
/// request is still in flight: a receive that had matched a message whose rest
/// never comes, a send the peer never takes (a peer gone or stopped, on an
/// error path). Its request is freed, so it completes in the background, if
/// ever, and the caller must leave its buffer allocated: freed, MPI would go on
/// writing into it (a receive) or reading it (a send). Not MPI_Wait after
/// MPI_Cancel: Open MPI's wait for a matched receive whose peer is cut off
/// does not return.
inline bool end_requests(MPI_Request* reqs, size_t n, bool receives, double deadline) {
  bool all = true;
  for (size_t i = 0; i < n; ++i) {
    if (reqs[i] == MPI_REQUEST_NULL) continue;
    if (receives) MPI_Cancel(&reqs[i]);
    int done = 0;
    do {
      MPI_Test(&reqs[i], &done, MPI_STATUS_IGNORE);
    } while (!done && MPI_Wtime() < deadline);
    if (!done) {
      MPI_Request_free(&reqs[i]);
      all = false;
    }
  }
  return all;
}
inline bool end_receives(MPI_Request* reqs, size_t n, double deadline) {
  return end_requests(reqs, n, true, deadline);
}
inline bool end_sends(MPI_Request* reqs, size_t n, double deadline) {
  return end_requests(reqs, n, false, deadline);
}

/// How long a link, collective or communicator being destroyed gives its
/// requests to complete: a few seconds normally (they are done: every
/// collective waited for its own), none while an error unwinds (a peer that
/// is gone or stopped will not complete them; their buffers are leaked).
inline double release_deadline() {
  return MPI_Wtime() + (std::uncaught_exceptions() > 0 ? 0.0 : 5.0);
}

}  // namespace lpsgd::comm
