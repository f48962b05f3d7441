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

#include <algorithm>
#include <climits>
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

/// The largest message a link may send so that it never has more than
/// kMaxMessagesInFlight in flight per direction (W slots of slot_bytes each):
/// `max_message`, raised where W x slot_bytes / max_message would exceed it.
/// Open MPI numbers the messages between two processes with 16 bits; with
/// more than 65,536 in flight (64-byte messages, W = 6 slots of 4 MiB) its
/// matching mixed them up and a broadcast delivered wrong data (found by the
/// collective soak). A rank's links to one peer (a chain link and two tree
/// links) stay well below that together.
constexpr size_t kMaxMessagesInFlight = 8192;
inline size_t link_message_bytes(size_t max_message, int window, size_t slot_bytes) {
  if (max_message == 0) return 0;
  const size_t in_flight = static_cast<size_t>(window) * slot_bytes;
  return std::max(max_message, (in_flight + kMaxMessagesInFlight - 1) / kMaxMessagesInFlight);
}

/// The same bound for one transfer of `bytes` (a baseline's region): both
/// ends compute it from the transfer's size alone, so they split it alike.
inline size_t transfer_message_bytes(size_t max_message, size_t bytes) {
  if (max_message == 0) return 0;
  return std::max(max_message, (bytes + kMaxMessagesInFlight - 1) / kMaxMessagesInFlight);
}

/// How many MPI messages carry `bytes` when none may exceed `max_message`
/// bytes (0: no limit); at least one, so an empty transfer still matches.
inline size_t message_count(size_t bytes, size_t max_message) {
  if (max_message == 0 || bytes <= max_message) return 1;
  return (bytes + max_message - 1) / max_message;
}

/// Sends `bytes` from p as message_count() messages in order, one request
/// each in reqs[0..). With `sync_last` the last goes as MPI_Issend: it
/// completes once the receiver has matched it, and so every message before
/// it (MPI never overtakes on one tag and communicator).
inline void post_sends(const void* p, size_t bytes, size_t max_message, int peer, int tag,
                       MPI_Comm comm, bool sync_last, MPI_Request* reqs) {
  const size_t n = message_count(bytes, max_message);
  const char* c = static_cast<const char*>(p);
  for (size_t i = 0; i < n; ++i) {
    const size_t off = i * max_message, len = n == 1 ? bytes : std::min(max_message, bytes - off);
    LPSGD_CHECK(len <= static_cast<size_t>(INT_MAX), "MPI message of " << len << " bytes");
    if (sync_last && i + 1 == n)
      MPI_CHECK(MPI_Issend(c + off, static_cast<int>(len), MPI_BYTE, peer, tag, comm, &reqs[i]));
    else
      MPI_CHECK(MPI_Isend(c + off, static_cast<int>(len), MPI_BYTE, peer, tag, comm, &reqs[i]));
  }
}

/// The receives of post_sends(): the same split, in the same order.
inline void post_recvs(void* p, size_t bytes, size_t max_message, int peer, int tag, MPI_Comm comm,
                       MPI_Request* reqs) {
  const size_t n = message_count(bytes, max_message);
  char* c = static_cast<char*>(p);
  for (size_t i = 0; i < n; ++i) {
    const size_t off = i * max_message, len = n == 1 ? bytes : std::min(max_message, bytes - off);
    LPSGD_CHECK(len <= static_cast<size_t>(INT_MAX), "MPI message of " << len << " bytes");
    MPI_CHECK(MPI_Irecv(c + off, static_cast<int>(len), MPI_BYTE, peer, tag, comm, &reqs[i]));
  }
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
