// The double binary tree's shape (comm/collectives/tree_util.hpp) for every
// size up to 1100 and the powers of two (and their neighbours) to 4097: one tree each, parents and children agree, depth ⌊log₂Q⌋,
// and no rank inner in both trees (which is what keeps every rank's traffic
// at about n instead of 2n).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "comm/collectives/tree_util.hpp"

using namespace lpsgd::comm::tree;

TEST(DoubleTree, EveryRankInnerInAtMostOneTreeAndDepthLogQ) {
  std::vector<int> sizes;
  for (int Q = 1; Q <= 1100; ++Q) sizes.push_back(Q);
  for (int Q : {2047, 2048, 2049, 4095, 4096, 4097}) sizes.push_back(Q);
  for (int Q : sizes) {
    int floor_log = 0;
    while ((2 << floor_log) <= Q) ++floor_log;
    for (int t = 0; t < 2; ++t) {
      int roots = 0, depth = 0;
      std::vector<int> parent(static_cast<size_t>(Q));
      for (int q = 0; q < Q; ++q) parent[static_cast<size_t>(q)] = dbt_node(t, q, Q).parent;
      for (int q = 0; q < Q; ++q) {
        const Node n = dbt_node(t, q, Q);
        if (n.parent < 0) {
          ++roots;
          ASSERT_EQ(q, dbt_root(t, Q)) << "Q=" << Q << " tree " << t;
        } else {
          const Node p = dbt_node(t, n.parent, Q);
          ASSERT_TRUE(p.child[0] == q || p.child[1] == q) << "Q=" << Q << " tree " << t << " q=" << q;
        }
        for (int c : n.child) {
          if (c < 0) continue;
          ASSERT_EQ(dbt_node(t, c, Q).parent, q) << "Q=" << Q << " tree " << t;
        }
        ASSERT_TRUE(n.child[1] < 0 || n.child[0] < n.child[1]) << "children in chain order";
        int d = 0;
        for (int v = q; parent[static_cast<size_t>(v)] >= 0 && d <= Q; v = parent[static_cast<size_t>(v)]) ++d;
        depth = std::max(depth, d);
      }
      ASSERT_EQ(roots, 1) << "Q=" << Q << " tree " << t;
      ASSERT_LE(depth, floor_log) << "Q=" << Q << " tree " << t;
    }
    for (int q = 0; q < Q; ++q)
      ASSERT_TRUE(dbt_node(0, q, Q).leaf() || dbt_node(1, q, Q).leaf()) << "Q=" << Q << " q=" << q;
  }
}

TEST(DoubleTree, SmallShapes) {
  // Q = 7: tree 0 is 3 over (1 over 0, 2) and (5 over 4, 6); tree 1 shifts by one.
  EXPECT_EQ(dbt_root(0, 7), 3);
  EXPECT_EQ(dbt_node(0, 1, 7).child[0], 0);
  EXPECT_EQ(dbt_node(0, 1, 7).child[1], 2);
  EXPECT_EQ(dbt_node(0, 5, 7).parent, 3);
  EXPECT_EQ(dbt_root(1, 7), 4);
  EXPECT_EQ(dbt_node(1, 2, 7).child[0], 1);
  EXPECT_EQ(dbt_node(1, 2, 7).child[1], 3);
  // Q = 4: tree 1 mirrors tree 0 (3 over 1 over 0, 2): root 0 over 2 over 1, 3.
  EXPECT_EQ(dbt_root(0, 4), 3);
  EXPECT_EQ(dbt_root(1, 4), 0);
  EXPECT_EQ(dbt_node(1, 2, 4).parent, 0);
  EXPECT_TRUE(dbt_node(1, 1, 4).leaf());
}
