#include "comm/calibrate.hpp"

#include <algorithm>
#include <array>
#include <vector>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"

namespace lpsgd::comm {
namespace {

// Collectives stream large buffers: every block comes from and goes to memory
// that is not in cache. Calibration does the same, walking through this much.
constexpr size_t kStreamBytes = 64u << 20;

/// Median one-way time of a block of `bytes` between chain positions 0 and 1,
/// through the links themselves (half a round trip), each repetition reading
/// and writing another part of `stream`. A first untimed pass visits every
/// part, as a collective's earlier iterations would (an MPI library's memory
/// registrations are then warm; the CPU caches cannot hold the stream).
double one_way(Communicator& c, size_t bytes, int reps, DeviceBuffer& stream) {
  const int pos = c.rank();
  std::vector<double> t;
  const size_t places = 64, stride = stream.bytes() / places;
  LPSGD_CHECK(bytes <= stride, "calibration block of " << bytes << " bytes exceeds " << stride);
  const int warm = static_cast<int>(places);
  for (int r = 0; r < reps + warm; ++r) {
    char* buf = static_cast<char*>(stream.data()) + (static_cast<size_t>(r) % places) * stride;
    MPI_CHECK(MPI_Barrier(c.ctrl_comm()));
    Timer timer;
    if (pos <= 1) {
      Link* L = pos == 0 ? c.right_link() : c.left_link();
      const uint64_t tx = L->tx_base(), rx = L->rx_base();
      auto send = [&] {
        while (!L->can_send(tx)) {}
        L->post_send(tx, buf, bytes);
        while (!L->send_done(tx)) {}
      };
      auto recv = [&] {
        L->post_recv(rx, bytes, buf);
        const void* d = nullptr;
        while (!(d = L->test_recv(rx))) {}
        if (d != buf) c.device().copy(buf, d, bytes);
        L->release_recv(rx);
      };
      if (pos == 0) {
        send();
        recv();
      } else {
        recv();
        send();
      }
      L->advance(1, 1);
    }
    if (r >= warm) t.push_back(timer.elapsed_s() / 2);
  }
  std::nth_element(t.begin(), t.begin() + static_cast<long>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

}  // namespace

CostModel calibrate(MPI_Comm parent, Device& dev, int ranks_per_node, int reps) {
  CostModel m;
  int size = 1;
  MPI_CHECK(MPI_Comm_size(parent, &size));
  const size_t big = 1u << 20;
  DeviceBuffer stream(dev, kStreamBytes);
  if (size >= 2) {
    for (LinksMode mode : {LinksMode::Auto, LinksMode::Mpi}) {
      CommOptions o;
      o.links = mode;
      o.ranks_per_node = ranks_per_node;
      o.slot_bytes = big;
      o.window = 1;
      Communicator c(parent, dev, o);
      int kind_i = static_cast<int>(c.rank() == 0 ? c.chain().right_kind() : LinkKind::None);
      MPI_CHECK(MPI_Bcast(&kind_i, 1, MPI_INT, 0, c.ctrl_comm()));
      const double a = one_way(c, 8, reps, stream);
      const double b = std::max(1e-13, (one_way(c, big, reps, stream) - a) / static_cast<double>(big));
      std::array<double, 2> ab = {a, b};
      MPI_CHECK(MPI_Bcast(ab.data(), 2, MPI_DOUBLE, 0, c.ctrl_comm()));
      if (static_cast<LinkKind>(kind_i) == LinkKind::Shm) {
        m.alpha_shm = ab[0];
        m.beta_shm = ab[1];
      } else {
        m.alpha_mpi = ab[0];
        m.beta_mpi = ab[1];
      }
    }
  }
  // γ per byte of output, as an LP step reduces: a block just received (in
  // cache) plus this rank's block of a large input, into a large output.
  const size_t n = big / 4;  // floats per block
  DeviceBuffer out(dev, kStreamBytes), part(dev, big);
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    Timer timer;
    for (size_t off = 0; off + big <= kStreamBytes; off += big)
      dev.reduce_add(DType::F32, static_cast<char*>(out.data()) + off, part.data(),
                     static_cast<const char*>(stream.data()) + off, n);
    dev.synchronize();
    t.push_back(timer.elapsed_s());
  }
  std::sort(t.begin(), t.end());
  double g = t[t.size() / 2] / static_cast<double>(kStreamBytes);
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &g, 1, MPI_DOUBLE, MPI_MAX, parent));
  m.gamma = g;
  return m;
}

}  // namespace lpsgd::comm
