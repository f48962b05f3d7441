// The collective oracle matrix: every algorithm × collective × dtype × op ×
// root × count (0, 1, b−1, b, b+1 and a large odd one) × in-place/out-of-place,
// against the MPI library's own collective on inputs whose sums are exact
// (collective_oracle.hpp). Results must match bitwise, inputs must be
// unchanged, and every rank must hold the same bits. bf16 and fp16 results
// must lie within the derived bound of the exact sum, with the same bits on
// every rank and in a repeat. Chains: LPSGD_TEST_LINKS (auto|mpi) and
// LPSGD_RANKS_PER_NODE (pretend nodes, so peer and MPI links mix).
// LPSGD_TEST_STAGE_MPI=1 sends MPI traffic through pinned host staging (the
// GPU path without CUDA-aware MPI). LPSGD_TEST_DEVICE=cuda puts every buffer
// on the GPU (ranks of a node share it; the collectives run on its
// communication queue); every test is skipped, on all ranks, without one.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "collective_oracle.hpp"
#include "comm/chain.hpp"
#include "comm/communicator.hpp"
#include "comm/cost_model.hpp"
#include "comm/link.hpp"
#include "comm/links/device_mpi_link.hpp"
#include "comm/progress_engine.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "core/rng.hpp"
#include "device/device.hpp"
#include "lpsgd/config.hpp"
#if LPSGD_HAVE_CUDA
#include "comm/links/cuda_ipc_link.hpp"
#endif

using namespace lpsgd;
using namespace lpsgd::comm;

namespace {

constexpr size_t kBlockElems = 5;  // forces many blocks in flight for small counts
constexpr int kWindow = 4;

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::string(v) == value;
}

DeviceKind test_device_kind() {
  return env_is("LPSGD_TEST_DEVICE", "cuda") ? DeviceKind::Cuda : DeviceKind::Cpu;
}

// Whether every rank can make the test device (agreed: a rank alone skipping
// would leave the others waiting in a collective).
bool device_missing() {
  static const bool missing = [] {
    int have = test_device_kind() == DeviceKind::Cpu || cuda_device_count() > 0 ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return have == 0;
  }();
  return missing;
}

#define SKIP_WITHOUT_DEVICE() \
  if (device_missing()) GTEST_SKIP() << "no usable GPU for LPSGD_TEST_DEVICE=cuda"

std::unique_ptr<Device> g_dev;
std::unique_ptr<Communicator> g_comm;

// The communicator must go before MPI_Finalize: a gtest environment tears it down.
class CommEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    g_comm.reset();
    g_dev.reset();
  }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new CommEnvironment);

Communicator& test_comm() {
  if (!g_comm) g_comm = [] {
    g_dev = make_device(test_device_kind(), node_local_rank(MPI_COMM_WORLD));
    CommOptions o;
    const char* links = std::getenv("LPSGD_TEST_LINKS");
    o.links = parse_links(links && *links ? links : "auto");
    o.window = kWindow;
    o.slot_bytes = 64 << 10;
    o.timeout_s = 20;
    o.stage_mpi = env_is("LPSGD_TEST_STAGE_MPI", "1");
    return std::make_unique<Communicator>(MPI_COMM_WORLD, g_dev->comm_queue(), o);
  }();
  return *g_comm;
}

// Buffers on the communicator's device, filled and read through the host.
template <class T>
void to_device(void* d, const std::vector<T>& h) {
  if (!h.empty()) test_comm().device().copy_from_host(d, h.data(), h.size() * sizeof(T));
}
template <class T>
std::vector<T> to_host(const void* d, size_t n) {
  std::vector<T> h(n);
  if (n) test_comm().device().copy_to_host(h.data(), d, n * sizeof(T));
  return h;
}

// One input and one output buffer from Communicator::alloc_shared, which peer
// links read in place (zero copy); allocated once, by every rank at the same
// point (the call is collective).
constexpr size_t kSharedBytes = 16u << 20;
std::pair<void*, void*> shared_buffers() {
  static std::pair<void*, void*> bufs{nullptr, nullptr};
  if (!bufs.first) {
    bufs.first = test_comm().alloc_shared(kSharedBytes);
    bufs.second = test_comm().alloc_shared(kSharedBytes);
  }
  return bufs;
}

constexpr int kShareIn = 1, kShareOut = 2, kShareBoth = 3;

struct Case {
  CollKind kind;
  Algo algo;
  DType dtype;
  ReduceOp op;
  int root;
  size_t count;
  bool in_place;
  size_t block_bytes;
  int share = 0;  // which buffers come from alloc_shared (peer links read them in place)
};

void run(const Case& c) {
  test::OracleCase o;
  o.kind = c.kind;
  o.algo = c.algo;
  o.dtype = c.dtype;
  o.op = c.op;
  o.root = c.root;
  o.count = c.count;
  o.in_place = c.in_place;
  o.block_bytes = c.block_bytes;
  o.salt = static_cast<int>(c.count % 5) + c.root;
  if (c.share) {
    const auto [in, out] = shared_buffers();
    if (c.share & kShareIn) o.shared_in = in;
    if (c.share & kShareOut) o.shared_out = out;
    o.shared_bytes = kSharedBytes;
  }
  try {
    const std::string wrong = test::check_collective(test_comm(), o);
    ASSERT_EQ(wrong, "");
  } catch (const Error& e) {
    FAIL() << o.str(test_comm().size()) << " on rank " << test_comm().rank() << ": " << e.where();
  }
}

const Algo kAlgos[] = {Algo::Lp, Algo::Tree, Algo::Mst, Algo::Be, Algo::Ring, Algo::Mpi, Algo::Auto};
const CollKind kKinds[] = {CollKind::Bcast, CollKind::Reduce, CollKind::Allreduce};
const DType kTypes[] = {DType::F32, DType::F64, DType::I32, DType::BF16, DType::F16};

}  // namespace

TEST(Collectives, SmallCountsEveryRootDtypeOpAndPlacement) {
  SKIP_WITHOUT_DEVICE();
  const int P = test_comm().size();
  for (DType t : kTypes) {
    const size_t b = kBlockElems * dtype_size(t);
    for (size_t n : {size_t(0), size_t(1), kBlockElems - 1, kBlockElems, kBlockElems + 1,
                     kBlockElems * 9 + 2})
      for (CollKind k : kKinds)
        for (Algo algo : kAlgos) {
          if (!supports(algo, k)) continue;
          for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
            if (op == ReduceOp::Avg && (!dtype_is_float(t) || k == CollKind::Bcast)) continue;
            for (int root = 0; root < (k == CollKind::Allreduce ? 1 : P); ++root)
              for (bool in_place : {false, true})
                for (int share : {0, kShareBoth}) {
                  if (share && !uses_blocks(algo)) continue;  // LP reads them in place
                  run({k, algo, t, op, root, n, in_place, uses_blocks(algo) ? b : 0, share});
                  if (HasFatalFailure()) return;
                }
          }
        }
  }
}

TEST(Collectives, LargeOddCountSampled) {
  SKIP_WITHOUT_DEVICE();
  const int P = test_comm().size();
  const size_t n = 1000003;
  for (CollKind k : kKinds)
    for (Algo algo : kAlgos) {
      if (!supports(algo, k)) continue;
      const int root = k == CollKind::Allreduce ? 0 : (P - 1) / 2 + (algo == Algo::Lp ? 0 : P / 2);
      for (bool in_place : {false, true}) {
        // LP with a block that leaves a short last block, and W blocks in flight.
        run({k, algo, DType::F32, ReduceOp::Sum, root % P, n, in_place, uses_blocks(algo) ? size_t(40000) : size_t(0)});
        if (HasFatalFailure()) return;
        if (uses_blocks(algo)) {  // the same from shared buffers (zero copy on peer links)
          run({k, algo, DType::F32, ReduceOp::Sum, root % P, n, in_place, size_t(40000), kShareBoth});
          if (HasFatalFailure()) return;
        }
      }
    }
  run({CollKind::Allreduce, Algo::Lp, DType::I32, ReduceOp::Sum, 0, n, true, 4 * 1021});
  run({CollKind::Allreduce, Algo::Lp, DType::F64, ReduceOp::Avg, 0, n, false, 8 * 3001});
  run({CollKind::Allreduce, Algo::Lp, DType::F64, ReduceOp::Avg, 0, n, true, 8 * 3001, kShareBoth});
}

// bf16 and fp16 at counts where rounding shows, against the bound of
// collective_oracle.cpp (every algorithm, kind and op; several LP blocks in
// flight; shared buffers for the block algorithms).
TEST(Collectives, SixteenBitWithinBound) {
  SKIP_WITHOUT_DEVICE();
  const int P = test_comm().size();
  for (DType t : {DType::BF16, DType::F16})
    for (CollKind k : kKinds)
      for (Algo algo : kAlgos) {
        if (!supports(algo, k)) continue;
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
          if (op == ReduceOp::Avg && k == CollKind::Bcast) continue;
          const int root = k == CollKind::Allreduce ? 0 : P - 1;
          const size_t n = 30011;
          run({k, algo, t, op, root, n, op == ReduceOp::Avg, uses_blocks(algo) ? size_t(2 * 4001) : 0});
          if (HasFatalFailure()) return;
          if (uses_blocks(algo)) {
            run({k, algo, t, op, root, n, false, size_t(2 * 4001), kShareBoth});
            if (HasFatalFailure()) return;
          }
        }
      }
}

// A 16-bit reduce or allreduce that reads a float input (CollArgs::in_float,
// the trainer's --wire) has the bits of converting that input first and
// reducing the 16-bit copy wherever data travels: LP's chain (ends, middles,
// centre), its pair allreduce, short last blocks and the empty message,
// shared buffers or private ones. LP's two halves of a node, where nothing
// travels, have the bits of the float sum (chain order) scaled and rounded
// once. The float input is left unchanged. Algorithms that read their input
// as the message's type refuse a float one with a clear error.
TEST(Collectives, FloatInputRoundsOnTheWayOrSumsInFloat) {
  SKIP_WITHOUT_DEVICE();
  Communicator& cm = test_comm();
  const int P = cm.size(), me = cm.rank();
  Device& dev = cm.device();
  for (DType t : {DType::BF16, DType::F16})
    for (CollKind k : {CollKind::Allreduce, CollKind::Reduce})
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg})
        for (size_t n : {size_t(0), size_t(1), size_t(4001), size_t(30011)})
          for (int share : {0, kShareBoth}) {
            const int root = k == CollKind::Allreduce ? 0 : (P - 1) / 2;
            const size_t block = 2 * 1999;
            // Floats with more bits than 16 keep, of both signs and many scales.
            const auto input = [n](int rank) {
              std::vector<float> v(n);
              Rng rng(1000u + n, static_cast<uint64_t>(rank));
              for (auto& f : v)
                f = static_cast<float>((rng.uniform_double() - 0.5) *
                                       std::ldexp(1.0, static_cast<int>(rng.below(20)) - 10));
              return v;
            };
            const std::vector<float> x = input(me);
            // The float input and the outputs: shared ones from alloc_shared
            // (peer links read them in place), else private.
            DeviceBuffer own_in(dev, std::max<size_t>(1, n) * 4), own_out(dev, std::max<size_t>(1, n) * 2),
                own_ref(dev, std::max<size_t>(1, n) * 2);
            const auto [sh_in, sh_out] = shared_buffers();
            void* in = share ? sh_in : own_in.data();
            void* out = share ? sh_out : own_out.data();
            to_device(in, x);
            // The reference: the input converted first, then reduced in place.
            dev.convert(t, own_ref.data(), DType::F32, in, n);
            cm.run(Algo::Lp, {k, own_ref.data(), own_ref.data(), n, t, op, root}, block);
            CollArgs a{k, in, out, n, t, op, root};
            a.in_float = true;
            std::string variant;
            try {
              auto h = cm.create(Algo::Lp, a, block);
              h->start();
              h->wait();
              variant = h->variant();
            } catch (const Error& e) {
              FAIL() << dtype_name(t) << " " << coll_name(k) << " n=" << n << ": " << e.where();
            }
            const std::string what = std::string(dtype_name(t)) + " " + coll_name(k) + " " +
                                     op_name(op) + " n=" + std::to_string(n) +
                                     (share ? " shared" : " private") + " variant=" + variant;
            EXPECT_EQ(to_host<float>(in, n), x) << what << ": the float input changed";
            if (k == CollKind::Reduce && me != root) continue;
            auto want = to_host<uint16_t>(own_ref.data(), n);
            if (variant == "halves") {  // the float sum x0 + x1, scaled and rounded once
              const std::vector<float> x0 = input(0), x1 = input(1);
              const float alpha = op == ReduceOp::Avg ? static_cast<float>(1.0 / P) : 1.0f;
              for (size_t i = 0; i < n; ++i) {
                const float v = static_cast<float>(static_cast<float>(x0[i] + x1[i]) * alpha);
                want[i] = t == DType::BF16 ? bf16_bits_from_float(v) : f16_bits_from_float(v);
              }
            }
            const auto got = to_host<uint16_t>(out, n);
            for (size_t i = 0; i < n; ++i)
              ASSERT_EQ(got[i], want[i]) << what << ", element " << i << " on rank " << me;
          }
  // Every other algorithm reads its input as the message's type.
  DeviceBuffer in(dev, 64 * 4), out(dev, 64 * 2);
  for (Algo algo : {Algo::Tree, Algo::Mst, Algo::Be, Algo::Ring, Algo::Mpi}) {
    CollArgs a{CollKind::Allreduce, in.data(), out.data(), 64, DType::BF16, ReduceOp::Sum, 0};
    a.in_float = true;
    try {
      cm.create(algo, a, algo == Algo::Tree ? 2 * 8 : 0);
      ADD_FAILURE() << algo_name(algo) << " took a float input";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("convert the float input first"), std::string::npos)
          << e.what();
    }
  }
  // ... and a float input is for 16-bit reductions, not in place.
  CollArgs f32{CollKind::Allreduce, in.data(), out.data(), 64, DType::F32, ReduceOp::Sum, 0};
  f32.in_float = true;
  EXPECT_THROW(cm.create(Algo::Lp, f32, 4 * 8), Error);
  CollArgs inplace{CollKind::Allreduce, out.data(), out.data(), 64, DType::BF16, ReduceOp::Sum, 0};
  inplace.in_float = true;
  EXPECT_THROW(cm.create(Algo::Lp, inplace, 2 * 8), Error);
}

// LP on two ranks of a node does half each and writes the outputs directly
// only where the buffers that kind needs are shared on both ranks (allreduce:
// every input and output; reduce: the inputs and the root's output; bcast:
// the root's input and the outputs); otherwise both must take the pipeline
// together. Every pair of what each rank shares (nothing, input, output,
// both), every kind and root, counts around the cut between the halves, in
// place or not. The matrix above covers both ranks sharing everything.
TEST(Collectives, TwoRanksShareBuffersOnlyWhereBothCan) {
  SKIP_WITHOUT_DEVICE();
  const int me = test_comm().rank();
  for (int share0 = 0; share0 <= kShareBoth; ++share0)
    for (int share1 = 0; share1 <= kShareBoth; ++share1)
      for (CollKind k : kKinds)
        for (int root = 0; root < (k == CollKind::Allreduce ? 1 : std::min(2, test_comm().size())); ++root)
          for (size_t n : {size_t(1), size_t(33), size_t(100003)})
            for (bool in_place : {false, true})
              for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
                if (op == ReduceOp::Avg && (k == CollKind::Bcast || n != 33)) continue;
                run({k, Algo::Lp, DType::F32, op, root, n, in_place, 4 * 1000, me == 0 ? share0 : share1});
                if (HasFatalFailure()) return;
              }
}

// Which way LP went: the halves exactly where both ranks share what the kind
// needs (and the links are peer links, LPSGD_LP_DIRECT is not 0, the pair
// allreduce is not asked for); the same answer on both ranks.
TEST(Collectives, TwoRanksTakeTheHalvesExactlyWhereTheyCan) {
  SKIP_WITHOUT_DEVICE();
  Communicator& cm = test_comm();
  if (cm.size() != 2) GTEST_SKIP() << "two ranks only";
  const Link* other = cm.rank() == 0 ? cm.right_link() : cm.left_link();
  const size_t n = 5000;
  const auto [in, out] = shared_buffers();
  DeviceBuffer own_out(cm.device(), n * 4);
  for (CollKind k : kKinds)
    for (bool rank1_shares_out : {true, false}) {
      void* my_out = cm.rank() == 1 && !rank1_shares_out ? own_out.data() : out;
      CollArgs a{k, in, my_out, n, DType::F32, ReduceOp::Sum, 0};
      auto h = cm.create(Algo::Lp, a, 4 * 1000);
      h->start();
      h->wait();
      // A reduce to rank 0 needs no output on rank 1.
      const bool can = other->kind() == LinkKind::Shm && lp_direct(k, 2) &&
                       (rank1_shares_out || k == CollKind::Reduce);
      const bool lp_pair = k == CollKind::Allreduce && lp_shares_reductions(k, 2);
      EXPECT_EQ(h->variant(), lp_pair ? "" : can ? "halves" : "chain")
          << coll_name(k) << (rank1_shares_out ? ", both share" : ", rank 1's output private");
      int halves = h->variant() == "halves", both = 0;
      MPI_Allreduce(&halves, &both, 1, MPI_INT, MPI_SUM, cm.chain().comm());
      EXPECT_TRUE(both == 0 || both == 2) << "the ranks went different ways";
    }
}

// Collectives started back to back on the same shared memory: a rank must
// not write the other rank's output for the next collective while that rank
// has not finished the previous one there. Here a pipelined bcast from rank
// 0's private input (a window's worth of blocks, copied into the link's
// slots) is over on rank 0 at once, while rank 1, busy elsewhere for a while,
// has not yet copied a block into its output; the allreduce after it must
// wait for rank 1 before writing there.
TEST(Collectives, BackToBackCollectivesOnSharedBuffersKeepTheirOrder) {
  SKIP_WITHOUT_DEVICE();
  Communicator& cm = test_comm();
  const int P = cm.size(), me = cm.rank();
  const size_t n = 4000;  // 4 blocks of 4000 bytes: no more than the window
  const auto [x, y] = shared_buffers();
  DeviceBuffer priv(cm.device(), n * 4);
  for (int round = 0; round < 3; ++round) {
    std::vector<int32_t> a(n), b(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = static_cast<int32_t>(1000 * round + i % 7);
      b[i] = static_cast<int32_t>(i % 5) + me + round;
    }
    to_device(priv.data(), a);
    to_device(x, b);
    // y = a, then y = the sum of b.
    auto h1 = cm.create(Algo::Lp, {CollKind::Bcast, priv.data(), y, n, DType::I32, ReduceOp::Sum, 0}, 4000);
    auto h2 = cm.create(Algo::Lp, {CollKind::Allreduce, x, y, n, DType::I32, ReduceOp::Sum, 0}, 4000);
    h1->start();
    h2->start();
    if (me == P - 1) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    h1->wait();
    h2->wait();
    const std::vector<int32_t> got = to_host<int32_t>(y, n);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(got[i], P * (static_cast<int32_t>(i % 5) + round) + P * (P - 1) / 2)
          << "round " << round << ", element " << i;
  }
}

// Non-exact sums (random floats): the fixed sum order must give every rank the
// same bits, and the same bits on a second run.
TEST(Collectives, BitwiseIdenticalOnEveryRankAndRun) {
  SKIP_WITHOUT_DEVICE();
  Communicator& cm = test_comm();
  const size_t n = 12345;
  std::vector<float> input(n);
  Rng r(2024, static_cast<uint64_t>(cm.rank()));
  for (auto& x : input) x = r.normal();
  DeviceBuffer in(cm.device(), n * 4), d1(cm.device(), n * 4), d2(cm.device(), n * 4);
  to_device(in.data(), input);
  for (Algo algo : {Algo::Lp, Algo::Tree, Algo::Mst, Algo::Be, Algo::Ring}) {
    for (DeviceBuffer* out : {&d1, &d2}) {
      CollArgs a{CollKind::Allreduce, in.data(), out->data(), n, DType::F32, ReduceOp::Sum, 0};
      cm.run(algo, a, uses_blocks(algo) ? 4 * 97 : 0);
    }
    const std::vector<float> out1 = to_host<float>(d1.data(), n), out2 = to_host<float>(d2.data(), n);
    ASSERT_EQ(0, std::memcmp(out1.data(), out2.data(), n * 4)) << algo_name(algo) << ": run to run";
    std::vector<float> rank0 = out1;
    MPI_Bcast(rank0.data(), static_cast<int>(n), MPI_FLOAT, 0, cm.chain().comm());
    ASSERT_EQ(0, std::memcmp(out1.data(), rank0.data(), n * 4))
        << algo_name(algo) << ": rank " << cm.rank() << " differs from rank 0";
  }
}

// Several collectives queued on the progress engine thread complete in order
// while the main thread is free.
TEST(Collectives, ProgressEngineDrivesQueuedCollectives) {
  SKIP_WITHOUT_DEVICE();
  Communicator& cm = test_comm();
  const int P = cm.size();
  const size_t n = 1000;
  std::vector<DeviceBuffer> bufs;
  for (size_t b = 0; b < 6; ++b) {
    std::vector<int32_t> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = static_cast<int32_t>(b + i % 3) + cm.rank();
    bufs.emplace_back(cm.device(), n * 4);
    to_device(bufs.back().data(), h);
  }
  ProgressEngine engine(cm);
  std::vector<std::unique_ptr<Collective>> hs;
  for (size_t b = 0; b < bufs.size(); ++b) {
    CollArgs a{CollKind::Allreduce, bufs[b].data(), bufs[b].data(), n, DType::I32, ReduceOp::Sum, 0};
    const Algo algo = b % 3 == 0 ? Algo::Lp : b % 3 == 1 ? Algo::Mst : Algo::Tree;
    hs.push_back(cm.create(algo, a, 4 * 7));
    engine.submit(hs.back().get());
  }
  for (auto& h : hs) h->wait();
  for (size_t b = 0; b < bufs.size(); ++b) {
    const std::vector<int32_t> got = to_host<int32_t>(bufs[b].data(), n);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(got[i], P * static_cast<int32_t>(b + i % 3) + P * (P - 1) / 2) << "bucket " << b;
  }
}

TEST(Chain, OrderAndLinkKinds) {
  SKIP_WITHOUT_DEVICE();
  const Chain& ch = test_comm().chain();
  EXPECT_EQ(ch.size(), test_comm().size());
  EXPECT_EQ(ch.has_left(), ch.pos() > 0);
  EXPECT_EQ(ch.has_right(), ch.pos() + 1 < ch.size());
  const char* rpn = std::getenv("LPSGD_RANKS_PER_NODE");
  const int per = rpn ? std::atoi(rpn) : 0;
  if (per > 0) {
    EXPECT_EQ(ch.node(), ch.pos() / per) << ch.describe();
    if (ch.has_right()) {
      EXPECT_EQ(ch.right_kind() == LinkKind::Mpi, (ch.pos() + 1) % per == 0) << ch.describe();
    }
  }
  const char* links = std::getenv("LPSGD_TEST_LINKS");
  if (links && std::string(links) == "mpi" && ch.has_left()) {
    EXPECT_EQ(ch.left_kind(), LinkKind::Mpi);
  }
  if (!links && per == 0 && ch.has_left()) {
    EXPECT_EQ(ch.left_kind(), LinkKind::Shm);
  }
  // The links built match the chain and the device: staging and GPU memory
  // take the device-aware MPI link, GPU peers the CUDA IPC link.
  const Communicator& cm = test_comm();
  const bool gpu = cm.device().kind() == DeviceKind::Cuda;
  for (int side = 0; side < 2; ++side) {
    Link* L = side == 0 ? cm.left_link() : cm.right_link();
    const LinkKind k = side == 0 ? ch.left_kind() : ch.right_kind();
    if (k == LinkKind::None) {
      EXPECT_EQ(L, nullptr);
      continue;
    }
    ASSERT_NE(L, nullptr);
    EXPECT_EQ(L->kind(), k);
    if (k == LinkKind::Mpi) {
      auto* d = dynamic_cast<DeviceMpiLink*>(L);
      EXPECT_EQ(d != nullptr, gpu || cm.stages_through_host()) << "side " << side;
      if (d) {
        EXPECT_EQ(d->staged(), cm.stages_through_host());
      }
    }
#if LPSGD_HAVE_CUDA
    if (k == LinkKind::Shm) {
      EXPECT_EQ(dynamic_cast<CudaIpcLink*>(L) != nullptr, gpu);
    }
#endif
  }
}
