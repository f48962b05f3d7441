// MpiLink: a chain neighbour reached with MPI_Isend/MPI_Issend/MPI_Irecv.
// Sends go straight from the caller's memory; receives land in the caller's
// buffer when it names one, else in one of W private slots allocated (and
// touched) up front. A block travels as messages of at most max_message bytes
// (CommOptions::mpi_message_bytes: under the TCP eager limit, so no message
// waits for its receiver's reply, which in an allreduce queues behind the
// other direction's data), its last one synchronous: the window W holds
// across the network, a block's slot being free again only once the receiver
// has matched all of it. A plain MPI_Isend of a
// block under the MPI library's eager limit completes at once, so a rank with
// nothing to wait for (a chain end's reduce) ran ahead of the whole pipeline
// and took a shared port from the streams the others waited on (a 4-node
// switch's LP allreduce ran 35% over its model; with Issend, within 5%).
#pragma once

#include <mpi.h>

#include <vector>

#include "comm/link.hpp"
#include "device/device.hpp"

namespace lpsgd::comm {

class MpiLink final : public Link {
 public:
  /// tag_out / tag_in tell the two directions apart on `comm`.
  MpiLink(Device& dev, MPI_Comm comm, int peer, int window, size_t slot_bytes, size_t max_message,
          int tag_out, int tag_in);
  ~MpiLink() override;
  LinkKind kind() const override { return LinkKind::Mpi; }

  bool can_send(uint64_t seq) override;
  void* send_slot(uint64_t seq) override;
  void post_send(uint64_t seq, const void* src, size_t bytes) override;
  bool send_done(uint64_t seq) override;
  void post_recv(uint64_t seq, size_t bytes, void* dst) override;
  const void* test_recv(uint64_t seq) override;
  /// Adds the requests still in flight (sends and receives not yet seen complete).
  void pending_requests(std::vector<MPI_Request*>& out) override;

 private:
  size_t slot(uint64_t seq) const { return static_cast<size_t>(seq % static_cast<uint64_t>(window_)); }
  /// The requests of slot s's messages: per_slot_ of them, null when unused.
  MPI_Request* sends(size_t s) { return &send_req_[s * per_slot_]; }
  MPI_Request* recvs(size_t s) { return &recv_req_[s * per_slot_]; }
  MPI_Comm comm_;
  size_t max_message_, per_slot_;
  int tag_out_, tag_in_;
  DeviceBuffer send_slots_, recv_slots_;
  std::vector<MPI_Request> send_req_, recv_req_;
  std::vector<uint64_t> send_seq_;   // which seq each send request belongs to
  std::vector<uint64_t> recv_seq_;  // which seq each receive slot holds
  std::vector<const void*> recv_ptr_;
  std::vector<char> recv_arrived_;
};

}  // namespace lpsgd::comm
