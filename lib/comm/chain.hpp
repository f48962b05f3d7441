// The chain: every rank of a job in one line, ordered by (node, local rank).
//
//   node A                          node B
//   d0 ⇄ d1 ⇄ d2 ⇄ d3  ⇄══ MPI ══⇄  d4 ⇄ d5 ⇄ d6 ⇄ d7
//   └── peer links ──┘               └── peer links ──┘
//
// Neighbours on one node talk over a peer link (shared memory), the last rank of
// a node and the first of the next over an MPI link. `ranks_per_node` splits the
// ranks of a real node into pretend nodes of that size, so a chain mixing both
// kinds of link can be tested and measured on one machine.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "comm/types.hpp"

namespace lpsgd::comm {

class Chain {
 public:
  /// Collective over `parent`. ranks_per_node <= 0 means: the real nodes
  /// (MPI_COMM_TYPE_SHARED), or LPSGD_RANKS_PER_NODE when that is set.
  Chain(MPI_Comm parent, LinksMode links, int ranks_per_node = 0);
  ~Chain();
  Chain(const Chain&) = delete;
  Chain& operator=(const Chain&) = delete;

  int pos() const { return pos_; }    ///< my position d_pos in the chain
  int size() const { return size_; }  ///< P
  bool has_left() const { return pos_ > 0; }
  bool has_right() const { return pos_ + 1 < size_; }
  LinkKind left_kind() const { return left_kind_; }
  LinkKind right_kind() const { return right_kind_; }
  /// Communicator whose rank i is chain position i.
  MPI_Comm comm() const { return comm_; }
  /// Ranks of my (real) node, for shared-memory windows; my rank in it.
  MPI_Comm node_comm() const { return node_comm_; }
  int node() const { return node_; }            ///< (pretend) node index
  int local_rank() const { return local_rank_; }  ///< rank within the (pretend) node
  int real_local_rank() const { return real_local_rank_; }  ///< within the machine
  int nodes() const { return nodes_; }
  int ranks_per_node() const { return ranks_per_node_; }
  LinksMode links() const { return links_; }
  /// Chain position -> rank in the parent communicator.
  int parent_rank_of(int pos) const { return parent_rank_of_[static_cast<size_t>(pos)]; }
  /// Node of chain position p.
  int node_of(int p) const { return node_of_[static_cast<size_t>(p)]; }
  /// "P=8 nodes=2: [0 1 2 3] [4 5 6 7]" for logs; past 16 nodes the middle is elided.
  std::string describe() const;
  /// The host name of every real machine the chain runs on, in chain order
  /// (pretend nodes of one machine count once): what a calibration is of.
  const std::vector<std::string>& hosts() const { return hosts_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm node_comm_ = MPI_COMM_NULL;
  int pos_ = 0, size_ = 1, node_ = 0, local_rank_ = 0, real_local_rank_ = 0, nodes_ = 1;
  int ranks_per_node_ = 0;
  LinksMode links_ = LinksMode::Auto;
  LinkKind left_kind_ = LinkKind::None, right_kind_ = LinkKind::None;
  std::vector<int> parent_rank_of_, node_of_;
  std::vector<std::string> hosts_;
};

/// LPSGD_RANKS_PER_NODE from the environment, or 0.
int ranks_per_node_from_env();

/// This rank's index among the ranks of `parent` on its machine (collective),
/// e.g. to pick a GPU before any Communicator exists.
int node_local_rank(MPI_Comm parent);

}  // namespace lpsgd::comm
