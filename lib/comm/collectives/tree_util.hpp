// Small helpers shared by the tree-shaped algorithms: the binomial trees of
// MST and BE, and the two complementary binary trees of the pipelined tree.
#pragma once

#include <algorithm>
#include <cstddef>

namespace lpsgd::comm::tree {

inline int lowbit(int v) { return v & -v; }
/// Smallest power of two >= P.
inline int pow2_ceil(int P) {
  int p = 1;
  while (p < P) p *= 2;
  return p;
}
/// Largest power of two <= P.
inline int pow2_floor(int P) {
  int p = 1;
  while (p * 2 <= P) p *= 2;
  return p;
}
/// Rank relative to the root, and back.
inline int rel(int p, int root, int P) { return (p - root + P) % P; }
inline int abs_rank(int v, int root, int P) { return (v + root) % P; }

/// One node of a binary tree over indices 0..Q-1: its parent and its two
/// children (lower index first), -1 where there is none.
struct Node {
  int parent = -1;
  int child[2] = {-1, -1};
  bool leaf() const { return child[0] < 0 && child[1] < 0; }
};

/// The in-order binary tree over 1-based lo..hi: its root is the number with
/// the most trailing zero bits (unique in a range), the left and right
/// subtrees are the ranges below and above it. Depth ⌊log₂Q⌋, and every odd
/// number (0-based: every even index) is a leaf.
inline int range_root(int lo, int hi) {
  for (int b = 30; b >= 0; --b) {
    const int c = (hi >> b) << b;
    if (c >= lo && c > 0) return c;
  }
  return lo;
}
inline Node inorder_node(int i, int Q) {
  Node n;
  const int x = i + 1;
  int lo = 1, hi = Q, parent = 0;
  for (;;) {
    const int r = range_root(lo, hi);
    if (r == x) {
      n.parent = parent - 1;
      n.child[0] = lo <= r - 1 ? range_root(lo, r - 1) - 1 : -1;
      n.child[1] = r + 1 <= hi ? range_root(r + 1, hi) - 1 : -1;
      return n;
    }
    parent = r;
    (x < r ? hi : lo) = x < r ? r - 1 : r + 1;
  }
}

/// Node q of tree t (0 or 1) of a double binary tree over 0..Q-1. Tree 0 is
/// the in-order tree; tree 1 is it mirrored (Q even) or shifted by one (Q odd),
/// so that a node is inner in at most one of the two: its leaves are tree 0's
/// inner nodes. Each tree carries half the message, so every node sends and
/// receives about the whole message once while the depth stays ⌊log₂Q⌋ + 1.
inline Node dbt_node(int t, int q, int Q) {
  if (t == 0) return inorder_node(q, Q);
  const bool mirror = Q % 2 == 0;
  auto role = [&](int v) { return mirror ? Q - 1 - v : (v - 1 + Q) % Q; };
  auto back = [&](int v) { return v < 0 ? -1 : mirror ? Q - 1 - v : (v + 1) % Q; };
  const Node r = inorder_node(role(q), Q);
  Node n;
  n.parent = back(r.parent);
  n.child[0] = back(r.child[0]);
  n.child[1] = back(r.child[1]);
  if (n.child[0] > n.child[1] && n.child[1] >= 0) std::swap(n.child[0], n.child[1]);
  if (n.child[0] < 0) std::swap(n.child[0], n.child[1]);
  return n;
}
/// The root of tree t over 0..Q-1.
inline int dbt_root(int t, int Q) {
  const int r = pow2_floor(Q) - 1;
  if (t == 0) return r;
  return Q % 2 == 0 ? Q - 1 - r : (r + 1) % Q;
}

}  // namespace lpsgd::comm::tree
