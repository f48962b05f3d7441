#include "comm/chain.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"

namespace lpsgd::comm {

int ranks_per_node_from_env() {
  const char* v = std::getenv("LPSGD_RANKS_PER_NODE");
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0)
    LPSGD_USAGE_ERROR("LPSGD_RANKS_PER_NODE must be a non-negative integer, got '" << v << "'");
  return static_cast<int>(n);
}

int node_local_rank(MPI_Comm parent) {
  MPI_Comm node = MPI_COMM_NULL;
  int prank = 0, local = 0;
  MPI_CHECK(MPI_Comm_rank(parent, &prank));
  MPI_CHECK(MPI_Comm_split_type(parent, MPI_COMM_TYPE_SHARED, prank, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &local));
  MPI_Comm_free(&node);
  return local;
}

Chain::Chain(MPI_Comm parent, LinksMode links, int ranks_per_node) {
  if (ranks_per_node <= 0) ranks_per_node = ranks_per_node_from_env();
#ifdef SMPI_SHARED_MALLOC
  // Under SimGrid SMPI every rank is a simulated host of its own platform, with
  // no real shared memory to build peer links on: every link is an MPI link.
  links = LinksMode::Mpi;
#endif
  ranks_per_node_ = ranks_per_node;
  links_ = links;
  int prank = 0, psize = 1;
  MPI_CHECK(MPI_Comm_rank(parent, &prank));
  MPI_CHECK(MPI_Comm_size(parent, &psize));

  // Real nodes: ranks that can share memory. The node's id is the lowest
  // parent rank on it, so every rank agrees on node order.
  MPI_CHECK(MPI_Comm_split_type(parent, MPI_COMM_TYPE_SHARED, prank, MPI_INFO_NULL, &node_comm_));
  MPI_CHECK(MPI_Comm_rank(node_comm_, &real_local_rank_));
  int node_leader = prank;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &node_leader, 1, MPI_INT, MPI_MIN, node_comm_));

  // Everyone learns (real node leader, real local rank) of everyone, and the
  // host names.
  std::vector<int> mine = {node_leader, real_local_rank_};
  std::vector<int> all(2 * static_cast<size_t>(psize));
  MPI_CHECK(MPI_Allgather(mine.data(), 2, MPI_INT, all.data(), 2, MPI_INT, parent));
  constexpr int kHost = 64;
  char host[kHost] = {};
  gethostname(host, kHost - 1);
  std::vector<char> hosts(static_cast<size_t>(psize) * kHost);
  MPI_CHECK(MPI_Allgather(host, kHost, MPI_CHAR, hosts.data(), kHost, MPI_CHAR, parent));

  // Order by (real node, local rank); split real nodes into pretend nodes.
  std::vector<std::tuple<int, int, int>> order;  // leader, local, parent rank
  for (int r = 0; r < psize; ++r)
    order.emplace_back(all[2 * static_cast<size_t>(r)], all[2 * static_cast<size_t>(r) + 1], r);
  std::sort(order.begin(), order.end());
  size_ = psize;
  parent_rank_of_.resize(static_cast<size_t>(psize));
  node_of_.resize(static_cast<size_t>(psize));
  int node = -1, last_leader = -1;
  for (int p = 0; p < psize; ++p) {
    const auto [leader, local, r] = order[static_cast<size_t>(p)];
    if (leader != last_leader) {
      ++node;
      last_leader = leader;
      hosts_.emplace_back(&hosts[static_cast<size_t>(r) * kHost]);
    } else if (ranks_per_node > 0 && local % ranks_per_node == 0) {
      ++node;  // a pretend node boundary inside a real node
    }
    parent_rank_of_[static_cast<size_t>(p)] = r;
    node_of_[static_cast<size_t>(p)] = node;
    if (r == prank) {
      pos_ = p;
      local_rank_ = ranks_per_node > 0 ? local % ranks_per_node : local;
    }
  }
  nodes_ = node + 1;
  node_ = node_of_[static_cast<size_t>(pos_)];
  MPI_CHECK(MPI_Comm_split(parent, 0, pos_, &comm_));

  auto kind_to = [&](int other) {
    if (other < 0 || other >= size_) return LinkKind::None;
    const bool same_node = node_of_[static_cast<size_t>(other)] == node_;
    return (links == LinksMode::Auto && same_node) ? LinkKind::Shm : LinkKind::Mpi;
  };
  left_kind_ = kind_to(pos_ - 1);
  right_kind_ = kind_to(pos_ + 1);
}

Chain::~Chain() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  if (node_comm_ != MPI_COMM_NULL) MPI_Comm_free(&node_comm_);
}

std::string Chain::describe() const {
  // One bracket per node, in chain order. Past 16 nodes only the first eight
  // and the last four are listed: a 1,024-node chain is one line, not a page.
  std::vector<std::string> groups;
  for (int p = 0; p < size_; ++p) {
    const bool same = p > 0 && node_of_[static_cast<size_t>(p)] == node_of_[static_cast<size_t>(p) - 1];
    if (same) {
      groups.back() += " " + std::to_string(p);
    } else {
      groups.push_back(std::to_string(p));
    }
  }
  constexpr size_t kAll = 16, kHead = 8, kTail = 4;
  std::ostringstream os;
  os << "P=" << size_ << " nodes=" << nodes_ << ":";
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups.size() > kAll && g == kHead) {
      os << " ... (" << groups.size() - kHead - kTail << " more)";
      g = groups.size() - kTail - 1;
      continue;
    }
    os << " [" << groups[g] << "]";
  }
  return os.str();
}

}  // namespace lpsgd::comm
