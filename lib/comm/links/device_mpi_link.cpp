#include "comm/links/device_mpi_link.hpp"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI: MPIX_Query_cuda_support
#endif

#include "comm/requests.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace lpsgd::comm {

bool mpi_accepts_device_memory(const Device& dev) {
  if (dev.kind() == DeviceKind::Cpu) return true;
  if (const char* v = std::getenv("LPSGD_MPI_CUDA_AWARE"); v && *v) {
    const std::string s = v;
    if (s == "1" || s == "yes" || s == "true") return true;
    if (s == "0" || s == "no" || s == "false") return false;
    LPSGD_USAGE_ERROR("LPSGD_MPI_CUDA_AWARE must be 0 or 1, got '" << s << "'");
  }
#if defined(MPIX_CUDA_AWARE_SUPPORT)
  // Open MPI: the macro says what the headers were built with; only the
  // library loaded at run time knows whether CUDA support is really there.
  return MPIX_Query_cuda_support() == 1;
#else
  return false;  // unknown library: staging is always correct (override above)
#endif
}

DeviceMpiLink::DeviceMpiLink(Device& dev, MPI_Comm comm, int peer, int window, size_t slot_bytes,
                             size_t max_message, int tag_out, int tag_in, bool staged)
    : Link(peer, window, slot_bytes), dev_(dev), comm_(comm), max_message_(link_message_bytes(max_message, window, slot_bytes)),
      per_slot_(message_count(slot_bytes, max_message_)), tag_out_(tag_out), tag_in_(tag_in),
      staged_(staged),
      send_slots_(dev, static_cast<size_t>(window) * slot_bytes),
      recv_slots_(dev, static_cast<size_t>(window) * slot_bytes),
      tx_(static_cast<size_t>(window)), rx_(static_cast<size_t>(window)) {
  LPSGD_CHECK(slot_bytes <= static_cast<size_t>(INT_MAX), "MPI link slot too large");
  if (staged_) {
    host_send_ = PinnedBuffer(dev, static_cast<size_t>(window) * slot_bytes);
    host_recv_ = PinnedBuffer(dev, static_cast<size_t>(window) * slot_bytes);
  }
  for (auto& s : tx_) {
    s.ready = dev.create_event();
    s.req.assign(per_slot_, MPI_REQUEST_NULL);
  }
  for (auto& r : rx_) {
    r.req.assign(per_slot_, MPI_REQUEST_NULL);
    r.copied = dev.create_event();
    r.free = dev.create_event();
  }
}

// The slots are freed after this body, so nothing may still use them: MPI
// neither (a request still in flight, a peer gone or stopped on an error
// path, keeps its slots, leaked rather than freed under MPI:
// comm/requests.hpp) nor queued copies.
DeviceMpiLink::~DeviceMpiLink() {
  const double deadline = release_deadline();
  bool recv_in_flight = false, send_in_flight = false;
  for (auto& r : rx_) recv_in_flight |= !end_receives(r.req.data(), r.req.size(), deadline);
  for (auto& s : tx_) send_in_flight |= !end_sends(s.req.data(), s.req.size(), deadline);
  if (recv_in_flight || send_in_flight)
    LPSGD_WARN("MPI link to rank " << peer_ << ": transfers still in flight at shutdown; their "
               "buffers are left allocated");
  if (recv_in_flight) {
    (void)recv_slots_.release();
    (void)host_recv_.release();
  }
  if (send_in_flight) {
    (void)send_slots_.release();
    (void)host_send_.release();
  }
  try {
    dev_.synchronize();  // queued copies still use the slots freed next
  } catch (const Error& e) {
    LPSGD_WARN("MPI link to rank " << peer_ << ": " << e.message());
  }
}

void DeviceMpiLink::pump() {
  while (!queued_.empty()) {
    SendSlot& s = tx_[queued_.front()];
    if (!s.ready->done()) break;  // later ones were queued after it: not ready either
    // The last message synchronous, as MpiLink's: the window holds across the network.
    post_sends(s.src, s.bytes, max_message_, peer_, tag_out_, comm_, /*sync_last=*/true, s.req.data());
    s.state = Tx::InFlight;
    queued_.pop_front();
  }
  while (!waiting_.empty()) {
    RecvSlot& r = rx_[waiting_.front()];
    if (!(staged_ ? r.copied : r.free)->done()) break;  // in order, as MPI matches them
    post_recvs(r.land, r.bytes, max_message_, peer_, tag_in_, comm_, r.req.data());
    r.state = Rx::Posted;
    waiting_.pop_front();
  }
}

bool DeviceMpiLink::test_send(SendSlot& s) {
  if (s.state == Tx::InFlight && test_all(s.req.data(), s.req.size())) s.state = Tx::Free;
  return s.state == Tx::Free;
}

bool DeviceMpiLink::can_send(uint64_t seq) {
  pump();
  return test_send(tx_[slot(seq)]);
}

void* DeviceMpiLink::send_slot(uint64_t seq) {
  return send_slots_.as<char>() + slot(seq) * slot_bytes_;
}

void DeviceMpiLink::post_send(uint64_t seq, const void* src, size_t bytes) {
  const size_t k = slot(seq);
  SendSlot& s = tx_[k];
  LPSGD_CHECK(s.state == Tx::Free, "MPI link to rank " << peer_ << ": send slot busy for block " << seq);
  LPSGD_CHECK(message_count(bytes, max_message_) <= per_slot_,
              "MPI link: block of " << bytes << " bytes exceeds the slot of " << slot_bytes_);
  s.seq = seq;
  s.bytes = bytes;
  if (staged_) {
    LPSGD_CHECK(bytes <= slot_bytes_, "MPI link: block of " << bytes << " bytes exceeds slot");
    dev_.copy_to_host_async(host_send(k), src, bytes);
    s.src = host_send(k);
  } else {
    s.src = src;
  }
  dev_.record(*s.ready);
  s.state = Tx::Queued;
  queued_.push_back(k);
  pump();
}

bool DeviceMpiLink::send_done(uint64_t seq) {
  pump();
  SendSlot& s = tx_[slot(seq)];
  if (s.seq != seq) return true;  // slot reused by a later block: long done
  return test_send(s);
}

void DeviceMpiLink::post_recv(uint64_t seq, size_t bytes, void* dst) {
  const size_t k = slot(seq);
  RecvSlot& r = rx_[k];
  LPSGD_CHECK(r.state == Rx::Idle,
              "MPI link to rank " << peer_ << ": receive slot busy for block " << seq
                                  << " (still holds block " << r.seq << ", released up to "
                                  << released_ << ")");
  LPSGD_CHECK((dst || bytes <= slot_bytes_) && message_count(bytes, max_message_) <= per_slot_,
              "MPI link: block of " << bytes << " bytes exceeds the slot of " << slot_bytes_);
  r.seq = seq;
  r.bytes = bytes;
  r.target = dst ? dst : recv_slots_.as<char>() + k * slot_bytes_;
  if (staged_) {
    LPSGD_CHECK(bytes <= slot_bytes_, "MPI link: block of " << bytes << " bytes exceeds slot");
    // Lands in the host slot once its previous block has been copied out
    // (r.copied, recorded after that copy; long since, W blocks ago).
    r.land = host_recv(k);
  } else {
    // MPI writes device memory behind the queue's back: work queued so far
    // (readers of the slot's previous block, or of dst) has to finish first.
    dev_.record(*r.free);
    r.land = r.target;
  }
  r.state = Rx::Waiting;
  waiting_.push_back(k);
  pump();
}

const void* DeviceMpiLink::test_recv(uint64_t seq) {
  pump();  // a neighbour waiting for our sends must not wait for this receive
  RecvSlot& r = rx_[slot(seq)];
  if (r.seq != seq || r.state == Rx::Idle || r.state == Rx::Waiting) return nullptr;  // not posted yet
  if (r.state == Rx::Posted) {
    if (!test_all(r.req.data(), r.req.size())) return nullptr;
    if (staged_) {
      // Queued: whoever uses the block queues after this copy on the same device.
      dev_.copy_from_host_async(r.target, host_recv(slot(seq)), r.bytes);
      dev_.record(*r.copied);
    }
    r.state = Rx::Delivered;
  }
  return r.target;
}

void DeviceMpiLink::release_recv(uint64_t seq) {
  Link::release_recv(seq);
  rx_[slot(seq)].state = Rx::Idle;
}

}  // namespace lpsgd::comm
