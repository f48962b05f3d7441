#include "comm/links/mpi_link.hpp"

#include <climits>

#include "comm/requests.hpp"
#include "core/error.hpp"

namespace lpsgd::comm {

void Link::out_of_order(uint64_t seq) const {
  LPSGD_THROW("link to rank " << peer_ << ": block " << seq << " released out of order (next is "
                              << released_ << ")");
}

MpiLink::MpiLink(Device& dev, MPI_Comm comm, int peer, int window, size_t slot_bytes,
                 size_t max_message, int tag_out, int tag_in)
    : Link(peer, window, slot_bytes), comm_(comm), max_message_(link_message_bytes(max_message, window, slot_bytes)),
      per_slot_(message_count(slot_bytes, max_message_)), tag_out_(tag_out), tag_in_(tag_in),
      send_slots_(dev, static_cast<size_t>(window) * slot_bytes),
      recv_slots_(dev, static_cast<size_t>(window) * slot_bytes),
      send_req_(static_cast<size_t>(window) * per_slot_, MPI_REQUEST_NULL),
      recv_req_(static_cast<size_t>(window) * per_slot_, MPI_REQUEST_NULL),
      send_seq_(static_cast<size_t>(window), 0),
      recv_ptr_(static_cast<size_t>(window), nullptr),
      recv_arrived_(static_cast<size_t>(window), 0) {
  recv_seq_.assign(static_cast<size_t>(window), ~uint64_t{0});
  LPSGD_CHECK(slot_bytes <= static_cast<size_t>(INT_MAX), "MPI link slot too large");
}

// The slots are freed after this body, so MPI must be done with them: a
// request still in flight (a peer gone or stopped, on an error path) keeps
// its slots, leaked rather than freed under MPI (comm/requests.hpp).
MpiLink::~MpiLink() {
  const double deadline = release_deadline();
  if (!end_receives(recv_req_.data(), recv_req_.size(), deadline)) (void)recv_slots_.release();
  if (!end_sends(send_req_.data(), send_req_.size(), deadline)) (void)send_slots_.release();
}

bool MpiLink::can_send(uint64_t seq) {
  return test_all(sends(slot(seq)), per_slot_);
}

void* MpiLink::send_slot(uint64_t seq) {
  return static_cast<char*>(send_slots_.data()) + slot(seq) * slot_bytes_;
}

void MpiLink::post_send(uint64_t seq, const void* src, size_t bytes) {
  const size_t s = slot(seq);
  LPSGD_CHECK(sends(s)[0] == MPI_REQUEST_NULL, "MPI link: send slot busy for block " << seq);
  LPSGD_CHECK(message_count(bytes, max_message_) <= per_slot_,
              "MPI link: block of " << bytes << " bytes exceeds the slot of " << slot_bytes_);
  send_seq_[s] = seq;
  // The last message synchronous: the slot frees once the receiver has
  // matched the whole block (mpi_link.hpp).
  post_sends(src, bytes, max_message_, peer_, tag_out_, comm_, /*sync_last=*/true, sends(s));
}

bool MpiLink::send_done(uint64_t seq) {
  const size_t s = slot(seq);
  if (send_seq_[s] != seq) return true;  // slot reused by a later block: long done
  return can_send(seq);
}

void MpiLink::post_recv(uint64_t seq, size_t bytes, void* dst) {
  const size_t s = slot(seq);
  LPSGD_CHECK(recvs(s)[0] == MPI_REQUEST_NULL,
              "MPI link to rank " << peer_ << ": receive slot busy for block " << seq
                                  << " (still holds block " << recv_seq_[s] << ", released up to "
                                  << released_ << ")");
  recv_seq_[s] = seq;
  void* p = dst ? dst : static_cast<char*>(recv_slots_.data()) + s * slot_bytes_;
  LPSGD_CHECK((dst || bytes <= slot_bytes_) && message_count(bytes, max_message_) <= per_slot_,
              "MPI link: block of " << bytes << " bytes exceeds the slot of " << slot_bytes_);
  recv_ptr_[s] = p;
  recv_arrived_[s] = 0;
  post_recvs(p, bytes, max_message_, peer_, tag_in_, comm_, recvs(s));
}

void MpiLink::pending_requests(std::vector<MPI_Request*>& out) {
  for (auto& r : send_req_)
    if (r != MPI_REQUEST_NULL) out.push_back(&r);
  for (auto& r : recv_req_)
    if (r != MPI_REQUEST_NULL) out.push_back(&r);
}

const void* MpiLink::test_recv(uint64_t seq) {
  const size_t s = slot(seq);
  if (recv_seq_[s] != seq) return nullptr;  // not posted yet
  if (!recv_arrived_[s]) {
    // (A request completed by a blocking wait elsewhere is null: complete.)
    if (!test_all(recvs(s), per_slot_)) return nullptr;
    recv_arrived_[s] = 1;
  }
  return recv_ptr_[s];
}

}  // namespace lpsgd::comm
