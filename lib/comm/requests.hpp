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

/// Ends a receive whose buffer is about to be freed: cancels it and completes
/// it. MPI guarantees that waiting for a cancelled request returns whatever the
/// peer does, and once it has returned nothing can land in the buffer (a
/// receive that had already matched completes with its data first). Freeing a
/// cancelled request without completing it, instead, leaves a matched receive
/// writing into freed memory.
inline void cancel_receive(MPI_Request& r) {
  if (r == MPI_REQUEST_NULL) return;
  MPI_Cancel(&r);
  MPI_Wait(&r, MPI_STATUS_IGNORE);
}

/// Sends whose buffers are about to be freed: tests them until each is
/// complete or MPI_Wtime() passes `deadline`. Returns false when some send is still in
/// flight (a peer gone or stopped, on an error path): its request is freed,
/// so it completes in the background, if ever, and the caller must leave its
/// buffer allocated rather than free it under MPI.
inline bool finish_sends(MPI_Request* reqs, size_t n, double deadline) {
  bool all = true;
  for (size_t i = 0; i < n; ++i) {
    int done = reqs[i] == MPI_REQUEST_NULL;
    while (!done && MPI_Wtime() < deadline) MPI_Test(&reqs[i], &done, MPI_STATUS_IGNORE);
    if (!done) {
      MPI_Request_free(&reqs[i]);
      all = false;
    }
  }
  return all;
}

/// How long a link or collective being destroyed gives its sends to complete:
/// a few seconds normally (they are done: every collective waited for its
/// sends), none while an error unwinds (a peer that is gone or stopped will
/// not take them; their buffers are leaked instead).
inline double send_deadline() {
  return MPI_Wtime() + (std::uncaught_exceptions() > 0 ? 0.0 : 5.0);
}

}  // namespace lpsgd::comm
