// soak_collectives: random collective cases, each checked against the MPI
// library by the oracle of the collective tests (tests/mpi/collective_oracle).
// tests/soak/collectives.sh plans the cases and launches this program once per
// (P, LPSGD_LP_PAIR), so that mpiexec's start-up is paid once for many cases.
//
//   soak_collectives --plan SEED N
//       (no MPI) one line "seed P lp_pair" for each of the N cases SEED..SEED+N-1
//   mpiexec -n P soak_collectives --progress FILE SEED...
//       runs the cases of those seeds (each must have this P); rank 0 appends
//       "start SEED <the case>" and "ok|wrong SEED" to FILE around each case,
//       so that the script can name the case in flight when a launch hangs or
//       dies
//
// A case is a pure function of its seed: P, pretend-node split, links, window,
// slot size, staging, collective, algorithm, dtype, op, root, size (0-10 MiB),
// block, in place or not, shared or private buffers. Wrong results are
// printed ("WRONG seed=S ...") and the run goes on; an lpsgd error (a stall, a
// mismatch) is printed ("ERROR seed=S ...") and aborts the launch.
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "collective_oracle.hpp"
#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "device/device.hpp"

using namespace lpsgd;
using namespace lpsgd::comm;

namespace {

constexpr size_t kMaxBytes = 10u << 20;           // the largest case
constexpr size_t kSharedBytes = kMaxBytes + 64;   // + the oracle's overrun guard
constexpr size_t kMaxBlocks = 4096;               // LP blocks per case, at most

// splitmix64: small, and the same sequence everywhere.
struct Rand {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, n).
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
  bool one_in(uint64_t n) { return below(n) == 0; }
  /// Log-uniform in [lo, hi].
  uint64_t log_uniform(uint64_t lo, uint64_t hi) {
    const double u = static_cast<double>(next() >> 11) / 9007199254740992.0;
    const double v = std::exp(std::log(static_cast<double>(lo)) +
                              u * (std::log(static_cast<double>(hi) + 1) - std::log(static_cast<double>(lo))));
    return std::min<uint64_t>(hi, std::max<uint64_t>(lo, static_cast<uint64_t>(v)));
  }
};

// What a communicator is built with; cases sharing it reuse one.
struct CommKey {
  int ranks_per_node = 0;  // 0: the real node (all ranks of this machine)
  LinksMode links = LinksMode::Auto;
  int window = 4;
  size_t slot_bytes = 1u << 20;
  bool stage_mpi = false;
  size_t max_message = size_t(60) << 10;  // CommOptions::mpi_message_bytes
  auto tie() const { return std::tie(ranks_per_node, links, window, slot_bytes, stage_mpi, max_message); }
  bool operator==(const CommKey& o) const { return tie() == o.tie(); }
  std::string str() const {
    std::ostringstream os;
    os << "rpn=" << ranks_per_node << " links=" << (links == LinksMode::Mpi ? "mpi" : "auto")
       << " window=" << window << " slot=" << slot_bytes << (stage_mpi ? " staged" : "")
       << " message=" << max_message;
    return os.str();
  }
};

struct SoakCase {
  uint64_t seed = 0;
  int P = 1;
  bool lp_pair = false;  // LPSGD_LP_PAIR=1 (a process-wide setting: its own launch)
  CommKey comm;
  test::OracleCase c;
  bool shared = false;
  std::string str() const {
    std::ostringstream os;
    os << "seed=" << seed << " " << c.str(P) << (shared ? " shared" : "") << " "
       << comm.str() << (lp_pair ? " lp-pair" : "");
    return os.str();
  }
};

SoakCase make_case(uint64_t seed) {
  Rand r{seed * 0x2545F4914F6CDD1Dull + 1};
  SoakCase s;
  s.seed = seed;
  s.P = 1 + static_cast<int>(r.below(8));
  s.lp_pair = s.P == 2 && r.one_in(2);
  // Pretend nodes of rpn ranks (the last may be short); 0: one node.
  s.comm.ranks_per_node = r.one_in(3) ? 0 : 1 + static_cast<int>(r.below(static_cast<uint64_t>(s.P)));
  s.comm.links = r.one_in(5) ? LinksMode::Mpi : LinksMode::Auto;
  s.comm.window = 1 + static_cast<int>(r.below(8));
  static const size_t slots[] = {size_t(4) << 10, size_t(64) << 10, size_t(1) << 20, size_t(4) << 20};
  s.comm.slot_bytes = slots[r.below(4)];
  s.comm.stage_mpi = r.one_in(6);
  // MPI messages: whole blocks, the default, or small enough that every
  // block and region travels as many.
  static const size_t messages[] = {0, size_t(60) << 10, 64, 1000};
  s.comm.max_message = messages[r.below(4)];

  test::OracleCase& c = s.c;
  c.kind = static_cast<CollKind>(r.below(3));
  // LP, the subject, half the time; the tree, the baselines and auto share the rest.
  static const Algo others[] = {Algo::Tree, Algo::Tree, Algo::Mst, Algo::Be, Algo::Ring, Algo::Mpi, Algo::Auto};
  do {
    c.algo = r.one_in(2) ? Algo::Lp : others[r.below(7)];
  } while (!supports(c.algo, c.kind));
  c.dtype = static_cast<DType>(r.below(3));
  const size_t esize = dtype_size(c.dtype);
  c.op = c.kind != CollKind::Bcast && dtype_is_float(c.dtype) && r.one_in(2) ? ReduceOp::Avg
                                                                             : ReduceOp::Sum;
  c.root = static_cast<int>(r.below(static_cast<uint64_t>(s.P)));  // ignored by allreduce
  // Blocks: the cost model's (0) or a whole number of elements, up to twice
  // the slot (the communicator clamps it to the slot).
  c.block_bytes = r.one_in(5) ? 0 : esize * r.log_uniform(1, 2 * s.comm.slot_bytes / esize);
  const size_t block_elems = std::max<size_t>(1, (c.block_bytes ? c.block_bytes : s.comm.slot_bytes) / esize);
  switch (r.below(4)) {
    case 0: c.count = r.below(65); break;  // tiny, 0 included
    case 1:                                // around a multiple of the block
      c.count = std::min(kMaxBytes / esize, block_elems * (1 + r.below(12)));
      c.count = c.count + 1 - std::min<size_t>(c.count, r.below(3));
      break;
    default: c.count = r.log_uniform(1, kMaxBytes) / esize; break;  // up to 10 MiB
  }
  // At most kMaxBlocks blocks: with ranks oversubscribed on few cores each
  // block costs a scheduler hand-off (~0.7 ms at P=7 on 2 busy cores), so a
  // 4-byte block of a 3.5 MiB message takes ~10 minutes. Clamped after the
  // draws, so that the rest of every seed's case stays as it was.
  if (c.block_bytes) {
    const size_t least = (c.count + kMaxBlocks - 1) / kMaxBlocks * esize;
    c.block_bytes = std::max(c.block_bytes, least);
  }
  c.in_place = r.one_in(2);
  s.shared = r.one_in(3);
  c.salt = static_cast<int>(r.below(1000));
  // bf16 / fp16 in a third of the cases, checked against the oracle's bound.
  // Drawn last and in place of the type drawn above (its sizes, whole numbers
  // of 4 or 8 bytes, are whole numbers of 2), so that every other draw of a
  // seed stays what it was before these types existed.
  if (r.one_in(3)) c.dtype = r.one_in(2) ? DType::BF16 : DType::F16;
  return s;
}

// A few communicators kept for reuse, the oldest destroyed first (creating
// and destroying one is collective: every rank runs the same cases in order).
struct Built {
  CommKey key;
  std::unique_ptr<Communicator> comm;
  void* shared_in = nullptr;
  void* shared_out = nullptr;
};

class Comms {
 public:
  explicit Comms(Device& dev) : dev_(dev) {}
  Built& get(const CommKey& k) {
    for (auto& b : built_)
      if (b.key == k) return b;
    if (built_.size() >= 3) built_.pop_front();
    CommOptions o;
    o.ranks_per_node = k.ranks_per_node;
    o.links = k.links;
    o.window = k.window;
    o.slot_bytes = k.slot_bytes;
    o.stage_mpi = k.stage_mpi;
    o.mpi_message_bytes = k.max_message;
    o.timeout_s = 30;
    built_.push_back({k, std::make_unique<Communicator>(MPI_COMM_WORLD, dev_, o)});
    return built_.back();
  }
  void clear() { built_.clear(); }

 private:
  Device& dev_;
  std::deque<Built> built_;
};

int plan(uint64_t seed, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    const SoakCase s = make_case(seed + i);
    std::printf("%llu %d %d\n", static_cast<unsigned long long>(s.seed), s.P, s.lp_pair ? 1 : 0);
  }
  return 0;
}

int usage() {
  std::fprintf(stderr,
               "usage: soak_collectives --plan SEED N\n"
               "       mpiexec -n P soak_collectives --progress FILE SEED...\n");
  return 2;
}

uint64_t parse_seed(const char* s) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (!*s || *end) {
    std::fprintf(stderr, "soak_collectives: not a seed: '%s'\n", s);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--plan") return plan(parse_seed(argv[2]), parse_seed(argv[3]));
  if (argc < 3 || std::string(argv[1]) != "--progress") return usage();
  const std::string progress_path = argv[2];
  std::vector<uint64_t> seeds;
  for (int i = 3; i < argc; ++i) seeds.push_back(parse_seed(argv[i]));

  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  FILE* progress = rank == 0 ? std::fopen(progress_path.c_str(), "a") : nullptr;
  if (rank == 0 && !progress) {
    std::fprintf(stderr, "soak_collectives: cannot write %s\n", progress_path.c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  auto note = [&](const char* what, uint64_t seed, const std::string& more = "") {
    if (!progress) return;
    std::fprintf(progress, "%s %llu %s\n", what, static_cast<unsigned long long>(seed), more.c_str());
    std::fflush(progress);
  };

  int wrong_cases = 0;
  {
    auto dev = make_device(DeviceKind::Cpu);
    Comms comms(dev->comm_queue());
    for (uint64_t seed : seeds) {
      const SoakCase s = make_case(seed);
      if (s.P != size) {
        if (rank == 0)
          std::fprintf(stderr, "soak_collectives: seed %llu is a case for P=%d, launched with %d\n",
                       static_cast<unsigned long long>(seed), s.P, size);
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      note("start", seed, s.str());
      std::string wrong;
      try {
        Built& b = comms.get(s.comm);
        test::OracleCase c = s.c;
        if (s.shared) {
          if (!b.shared_in) {
            b.shared_in = b.comm->alloc_shared(kSharedBytes);
            b.shared_out = b.comm->alloc_shared(kSharedBytes);
          }
          c.shared_in = b.shared_in;
          c.shared_out = b.shared_out;
          c.shared_bytes = kSharedBytes;
        }
        wrong = test::check_collective(*b.comm, c);
      } catch (const std::exception& e) {
        const auto* le = dynamic_cast<const Error*>(&e);
        std::fprintf(stderr, "ERROR %s rank %d: %s\n", s.str().c_str(), rank,
                     le ? le->where().c_str() : e.what());
        std::fflush(stderr);
        note("error", seed);
        MPI_Abort(MPI_COMM_WORLD, 3);
      }
      if (!wrong.empty()) {
        std::fprintf(stderr, "WRONG seed=%llu: %s (%s%s)\n", static_cast<unsigned long long>(seed),
                     wrong.c_str(), s.comm.str().c_str(), s.lp_pair ? " lp-pair" : "");
        std::fflush(stderr);
      }
      int bad = wrong.empty() ? 0 : 1;
      MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      wrong_cases += bad;
      note(bad ? "wrong" : "ok", seed);
    }
    comms.clear();
  }
  if (progress) std::fclose(progress);
  MPI_Finalize();
  return wrong_cases ? 1 : 0;
}
