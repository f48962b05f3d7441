// The collective oracle matrix: every algorithm × collective × dtype × op ×
// root × count (0, 1, b−1, b, b+1 and a large odd one) × in-place/out-of-place,
// against the MPI library's own collective on inputs whose sums are exact.
// Results must match bitwise, inputs must be unchanged, and every rank must
// hold the same bits. Chains: LPSGD_TEST_LINKS (auto|mpi) and
// LPSGD_RANKS_PER_NODE (pretend nodes, so peer and MPI links mix).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/progress_engine.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "device/device.hpp"

using namespace lpsgd;
using namespace lpsgd::comm;

namespace {

constexpr size_t kBlockElems = 5;  // forces many blocks in flight for small counts
constexpr int kWindow = 4;

Device& cpu() {
  static auto dev = make_device(DeviceKind::Cpu);
  return *dev;
}

std::unique_ptr<Communicator> g_comm;

// The communicator must go before MPI_Finalize: a gtest environment tears it down.
class CommEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { g_comm.reset(); }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new CommEnvironment);

Communicator& test_comm() {
  if (!g_comm) g_comm = [] {
    CommOptions o;
    const char* links = std::getenv("LPSGD_TEST_LINKS");
    o.links = parse_links(links && *links ? links : "auto");
    o.window = kWindow;
    o.slot_bytes = 64 << 10;
    o.timeout_s = 20;
    return std::make_unique<Communicator>(MPI_COMM_WORLD, cpu(), o);
  }();
  return *g_comm;
}

MPI_Datatype mpi_type(DType t) {
  return t == DType::F32 ? MPI_FLOAT : t == DType::F64 ? MPI_DOUBLE : MPI_INT32_T;
}

// Small integers, different on every rank: every sum is exact in every dtype.
template <class T>
std::vector<T> exact_input(size_t n, int rank, int salt) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<T>(static_cast<int>((i * 7 + static_cast<size_t>(rank) * 13 +
                                            static_cast<size_t>(salt)) % 17) - 8);
  return v;
}

struct Case {
  CollKind kind;
  Algo algo;
  DType dtype;
  ReduceOp op;
  int root;
  size_t count;
  bool in_place;
  size_t block_bytes;
  std::string str() const {
    std::ostringstream os;
    os << coll_name(kind) << "/" << algo_name(algo) << "/" << dtype_name(dtype) << "/"
       << op_name(op) << " root=" << root << " count=" << count
       << (in_place ? " in-place" : " out-of-place") << " block=" << block_bytes
       << " P=" << test_comm().size();
    return os.str();
  }
};

template <class T>
void run_case(const Case& c) {
  Communicator& cm = test_comm();
  const int P = cm.size(), me = cm.rank();
  const size_t n = c.count;
  const int salt = static_cast<int>(n % 5) + c.root;
  const std::vector<T> input = exact_input<T>(n, me, salt);
  const T sentinel = static_cast<T>(-77);

  // Oracle: the MPI library on the chain communicator (rank == chain position).
  std::vector<T> expect(n, sentinel);
  const bool writes_out = c.kind != CollKind::Reduce || me == c.root;
  if (c.kind == CollKind::Bcast) {
    if (me == c.root) expect = input;
    MPI_Bcast(expect.data(), static_cast<int>(n), mpi_type(c.dtype), c.root, cm.chain().comm());
  } else {
    std::vector<T> sum(n);
    MPI_Allreduce(input.data(), sum.data(), static_cast<int>(n), mpi_type(c.dtype), MPI_SUM,
                  cm.chain().comm());
    if (c.op == ReduceOp::Avg)
      for (auto& x : sum) x = static_cast<T>(x * static_cast<T>(1.0 / P));
    if (writes_out) expect = sum;
  }

  // lpsgd, from buffers on the device (the CPU here).
  const size_t bytes = n * sizeof(T);
  DeviceBuffer in(cpu(), bytes + 8), out(cpu(), bytes + 8);
  std::memcpy(in.data(), input.data(), bytes);
  for (size_t i = 0; i < n + 2; ++i) out.as<T>()[i] = sentinel;  // n+2: overrun guard
  CollArgs a;
  a.kind = c.kind;
  a.count = n;
  a.dtype = c.dtype;
  a.op = c.op;
  a.root = c.root;
  if (c.in_place) {
    std::memcpy(out.data(), input.data(), bytes);
    if (c.kind == CollKind::Bcast && me != c.root)
      for (size_t i = 0; i < n; ++i) out.as<T>()[i] = sentinel;
    a.in = out.data();
    a.out = out.data();
  } else {
    a.in = in.data();
    a.out = out.data();
  }
  auto h = cm.create(c.algo, a, c.block_bytes);
  h->start();
  h->wait(60);

  const T* got = out.as<T>();
  if (writes_out) {
    ASSERT_EQ(0, std::memcmp(got, expect.data(), bytes)) << c.str() << " rank " << me;
  } else if (!c.in_place) {
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], sentinel) << c.str() << ": non-root out written";
  }
  ASSERT_EQ(got[n], sentinel) << c.str() << ": wrote past the end";
  ASSERT_EQ(got[n + 1], sentinel) << c.str() << ": wrote past the end";
  if (!c.in_place) {
    ASSERT_EQ(0, std::memcmp(in.data(), input.data(), bytes)) << c.str() << ": input modified";
  }
}

void run(const Case& c) {
  try {
    switch (c.dtype) {
      case DType::F32: run_case<float>(c); break;
      case DType::F64: run_case<double>(c); break;
      case DType::I32: run_case<int32_t>(c); break;
    }
  } catch (const Error& e) {
    FAIL() << c.str() << " on rank " << test_comm().rank() << ": " << e.where();
  }
}

const Algo kAlgos[] = {Algo::Lp, Algo::Mst, Algo::Be, Algo::Ring, Algo::Mpi, Algo::Auto};
const CollKind kKinds[] = {CollKind::Bcast, CollKind::Reduce, CollKind::Allreduce};
const DType kTypes[] = {DType::F32, DType::F64, DType::I32};

}  // namespace

TEST(Collectives, SmallCountsEveryRootDtypeOpAndPlacement) {
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
              for (bool in_place : {false, true}) {
                run({k, algo, t, op, root, n, in_place, algo == Algo::Lp ? b : 0});
                if (HasFatalFailure()) return;
              }
          }
        }
  }
}

TEST(Collectives, LargeOddCountSampled) {
  const int P = test_comm().size();
  const size_t n = 1000003;
  for (CollKind k : kKinds)
    for (Algo algo : kAlgos) {
      if (!supports(algo, k)) continue;
      const int root = k == CollKind::Allreduce ? 0 : (P - 1) / 2 + (algo == Algo::Lp ? 0 : P / 2);
      for (bool in_place : {false, true}) {
        // LP with a block that leaves a short last block, and W blocks in flight.
        run({k, algo, DType::F32, ReduceOp::Sum, root % P, n, in_place, algo == Algo::Lp ? size_t(40000) : size_t(0)});
        if (HasFatalFailure()) return;
      }
    }
  run({CollKind::Allreduce, Algo::Lp, DType::I32, ReduceOp::Sum, 0, n, true, 4 * 1021});
  run({CollKind::Allreduce, Algo::Lp, DType::F64, ReduceOp::Avg, 0, n, false, 8 * 3001});
}

// Non-exact sums (random floats): the fixed sum order must give every rank the
// same bits, and the same bits on a second run.
TEST(Collectives, BitwiseIdenticalOnEveryRankAndRun) {
  Communicator& cm = test_comm();
  const size_t n = 12345;
  std::vector<float> input(n);
  Rng r(2024, static_cast<uint64_t>(cm.rank()));
  for (auto& x : input) x = r.normal();
  for (Algo algo : {Algo::Lp, Algo::Mst, Algo::Be, Algo::Ring}) {
    std::vector<float> out1(n), out2(n);
    for (auto* out : {&out1, &out2}) {
      CollArgs a{CollKind::Allreduce, input.data(), out->data(), n, DType::F32, ReduceOp::Sum, 0};
      cm.run(algo, a, algo == Algo::Lp ? 4 * 97 : 0);
    }
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
  Communicator& cm = test_comm();
  const int P = cm.size();
  const size_t n = 1000;
  std::vector<std::vector<int32_t>> bufs(5, std::vector<int32_t>(n));
  for (size_t b = 0; b < bufs.size(); ++b)
    for (size_t i = 0; i < n; ++i) bufs[b][i] = static_cast<int32_t>(b + i % 3) + cm.rank();
  ProgressEngine engine(cm);
  std::vector<std::unique_ptr<Collective>> hs;
  for (size_t b = 0; b < bufs.size(); ++b) {
    CollArgs a{CollKind::Allreduce, bufs[b].data(), bufs[b].data(), n, DType::I32, ReduceOp::Sum, 0};
    hs.push_back(cm.create(b % 2 ? Algo::Mst : Algo::Lp, a, 4 * 7));
    engine.submit(hs.back().get());
  }
  for (auto& h : hs) h->wait();
  for (size_t b = 0; b < bufs.size(); ++b)
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(bufs[b][i], P * static_cast<int32_t>(b + i % 3) + P * (P - 1) / 2) << "bucket " << b;
}

TEST(Chain, OrderAndLinkKinds) {
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
}
