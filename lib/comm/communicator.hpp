// Communicator: the chain, its links, scratch memory, the cost model and the
// error channel — everything a collective needs, set up once per job so nothing
// is allocated inside a collective.
//
//   Communicator comm(MPI_COMM_WORLD, device, opts);
//   auto h = comm.create(Algo::Lp, {CollKind::Allreduce, in, out, n, DType::F32});
//   h->start(); ... compute ... h->wait();
//   comm.run(Algo::Auto, args);   // the same, blocking
//
// On a GPU, collectives queue their device work (reduce kernels, copies) on
// the Device the communicator was given; give it dev.comm_queue() to keep it
// off the compute stream. Inputs must be complete on that queue when start()
// is called, and a finished collective has *queued* its last work there: work
// queued there later sees the result, another queue waits for an event
// recorded on it (Device::record / wait), the host for synchronize().
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/chain.hpp"
#include "comm/collective.hpp"
#include "comm/cost_model.hpp"
#include "comm/link.hpp"
#include "comm/types.hpp"
#include "device/device.hpp"

namespace lpsgd::comm {

class LinkBuilder;

/// $LPSGD_MPI_MESSAGE_BYTES, else 60 KiB (none under SimGrid SMPI, whose
/// network model has no such effect): under Open MPI's TCP eager limit
/// (64 KiB with its headers). A larger message goes by rendezvous: its bulk
/// waits for a reply from the receiver, and where both directions of a link
/// carry data (an allreduce) that reply queues behind the other direction's
/// data, so the two directions take turns. Measured across two network
/// namespaces at 200 Mbit/s, 16 MiB each way at once: in 256 KiB messages
/// 1380 ms, in 60 KiB messages 710 ms, one direction alone 701 ms
/// (docs/network.md).
size_t default_mpi_message_bytes();

struct CommOptions {
  LinksMode links = LinksMode::Auto;
  int ranks_per_node = 0;          ///< pretend-node size; 0: real nodes / LPSGD_RANKS_PER_NODE
  int window = 4;                  ///< blocks in flight per link direction (W)
  size_t slot_bytes = 1u << 20;    ///< largest LP block; W slots of this per link direction
  /// Largest MPI message of a block or region (links and baselines); a larger
  /// one goes as several, in order; 0: one message each. Rank 0's value is
  /// used everywhere. See default_mpi_message_bytes().
  size_t mpi_message_bytes = default_mpi_message_bytes();
  double timeout_s = 300;          ///< --comm-timeout: a stall this long is an error
  std::string calibration_file;    ///< α/β/γ file; empty: CostModel::default_path()
  /// Without a calibration file, measure α, β, γ now (about a second, once per
  /// machine) and keep them in CostModel::default_path(): what `auto` needs
  /// to choose well. Off: the built-in defaults.
  bool calibrate_if_missing = false;
  /// Copy MPI traffic through pinned host buffers even where MPI could take
  /// the device's memory (how a GPU without CUDA-aware MPI works; on the CPU
  /// this tests that path).
  bool stage_mpi = false;
};

class Communicator {
 public:
  /// Collective over `parent`: builds the chain, links and shared window.
  Communicator(MPI_Comm parent, Device& dev, CommOptions opts = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const Chain& chain() const { return *chain_; }
  Device& device() const { return dev_; }
  const CommOptions& options() const { return opts_; }
  const CostModel& model() const { return model_; }
  int rank() const { return chain_->pos(); }
  int size() const { return chain_->size(); }

  /// A collective ready to start(). algo Auto is resolved by the cost model;
  /// block_bytes 0 means the model's best LP block (clamped to the slot size).
  std::unique_ptr<Collective> create(Algo algo, const CollArgs& args, size_t block_bytes = 0);
  /// create + start + wait.
  void run(Algo algo, const CollArgs& args, size_t block_bytes = 0);
  /// The algorithm and block size create() would use.
  std::pair<Algo, size_t> resolve(Algo algo, const CollArgs& args, size_t block_bytes) const;

  /// Grows the scratch buffers the baselines use to `bytes` each (and their
  /// pinned host staging, when used), now rather than on first use.
  void reserve_scratch(size_t bytes);

  /// `bytes` of the communicator's device memory that peer links read in
  /// place: LP sends from it without copying into a link slot (CPU ranks on
  /// one node; elsewhere plain device memory). Collective: every rank calls it
  /// the same number of times in the same order (sizes may differ). Freed
  /// with the communicator, which must outlive its users.
  void* alloc_shared(size_t bytes);

  // ---- for collectives ---------------------------------------------------------
  Link* left_link() const { return links_[0].get(); }
  Link* right_link() const { return links_[1].get(); }
  /// The link to `peer` in tree t (0 or 1) of the pipelined tree: an MPI link
  /// of its own (also inside a node), made on first use.
  Link* tree_link(int t, int peer);
  MPI_Comm ctrl_comm() const { return ctrl_comm_; }  ///< signatures and error notices
  MPI_Comm p2p_comm() const { return p2p_comm_; }    ///< baselines' messages
  /// Largest MPI message (CommOptions::mpi_message_bytes, as rank 0 set it).
  size_t mpi_message_bytes() const { return opts_.mpi_message_bytes; }
  void* scratch(int which, size_t bytes);            ///< which: 0 or 1
  /// True when MPI cannot be given this device's memory (a GPU without a
  /// CUDA-aware MPI): the MPI-based algorithms then copy through host_stage().
  bool stages_through_host() const { return stage_host_; }
  /// Pinned host buffer `which` (0..3) of at least `bytes`, grown like scratch().
  void* host_stage(int which, size_t bytes);
  uint64_t take_ticket() { return tickets_++; }
  /// Throws if a neighbour reported an error (after passing the notice on).
  void check_errors();
  /// Tells both neighbours (and through them every rank) that this rank failed.
  void report_error(const std::string& message);
  bool failed() const { return failed_; }
  /// "rank N (left neighbour, pid P) has ended" when a neighbour running on
  /// this machine is gone (killed, crashed), else "". Reads /proc; for a
  /// collective that has stalled, so a lost rank is named at once rather than
  /// after --comm-timeout. Neighbours on other machines: always "".
  std::string lost_neighbour() const;
  /// The MPI requests in flight on the MPI links and the error-notice receives
  /// (for blocking waits under SMPI, see comm/requests.hpp).
  void pending_requests(std::vector<MPI_Request*>& out);
  /// Collectives move data one at a time, in start order: c may go when no
  /// other is active and its ticket is the next one.
  bool acquire(const Collective* c) {
    if (active_ == c) return true;
    if (active_ || c->ticket() != running_) return false;
    active_ = c;
    return true;
  }
  void release(const Collective* c) {
    if (active_ != c) return;
    active_ = nullptr;
    ++running_;
  }

 private:
  void share_model();
  /// Measures the links where the calibration is missing, unsure or stale,
  /// and keeps the better of the two (see communicator.cpp).
  void choose_calibration();
  void post_error_recv(int side);
  void find_local_neighbours();
  /// Sends an error notice to the neighbour on `side` (0 left, 1 right), once.
  void send_notice(int side, const std::string& text);

  Device& dev_;
  CommOptions opts_;
  std::unique_ptr<Chain> chain_;
  MPI_Comm ctrl_comm_ = MPI_COMM_NULL, p2p_comm_ = MPI_COMM_NULL, link_comm_ = MPI_COMM_NULL;
  std::unique_ptr<LinkBuilder> builder_;        // owns what the links share
  std::array<std::unique_ptr<Link>, 2> links_;  // [0] left, [1] right
  std::map<std::pair<int, int>, std::unique_ptr<Link>> tree_links_;  // (tree, peer)
  CostModel model_;
  std::array<DeviceBuffer, 2> scratch_;
  std::vector<DeviceBuffer> owned_;  // alloc_shared() where there is no shared window
  std::array<PinnedBuffer, 4> host_stage_;
  bool stage_host_ = false;
  uint64_t tickets_ = 0;   // handed out by Collective::start()
  uint64_t running_ = 0;   // the ticket allowed to move data next

  // Error notices: a persistent receive from each neighbour. A notice starts
  // with its communicator's id: one sent just before a communicator went away
  // can reach the next one over the same ranks (MPICH reuses the freed
  // communicators' context ids) and must not abort it.
  static constexpr int kNoticeBytes = 512;
  static constexpr size_t kNoticeHeader = sizeof(uint64_t);
  uint64_t id_ = 0;  ///< the same on every rank, different from earlier communicators'

  std::array<std::array<char, kNoticeBytes>, 2> notice_in_{};
  std::array<std::array<char, kNoticeBytes>, 2> notice_out_{};
  std::array<MPI_Request, 2> notice_req_{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  std::array<MPI_Request, 2> notice_send_{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  std::array<bool, 2> notice_posted_{false, false};  // a completed receive reads as null
  bool failed_ = false;
  const Collective* active_ = nullptr;
  // The neighbours' pids, where they run on this machine in this pid namespace.
  std::array<int, 2> local_pid_{0, 0};
};

}  // namespace lpsgd::comm
