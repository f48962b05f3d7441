// Small helpers shared by the tree-shaped baselines (MST and BE).
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

}  // namespace lpsgd::comm::tree
