// The collective oracle (see collective_oracle.hpp).
#include "collective_oracle.hpp"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "core/dtype.hpp"
#include "core/rng.hpp"
#include "device/device.hpp"

namespace lpsgd::test {

using namespace lpsgd::comm;

namespace {

MPI_Datatype mpi_type(DType t) {
  return t == DType::F32 ? MPI_FLOAT : t == DType::F64 ? MPI_DOUBLE : MPI_INT32_T;
}

// Waits for the oracle's collective giving the core away between polls: the
// tests run more ranks than cores, and an MPI library that spins in its
// blocking calls (MPICH's ch4 never yields) would hold a core its peers need.
void wait_yielding(MPI_Request& req) {
  int done = 0;
  for (;;) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::yield();
  }
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

// Buffers on the communicator's device, filled and read through the host.
template <class T>
void to_device(Device& d, void* p, const std::vector<T>& h) {
  if (!h.empty()) d.copy_from_host(p, h.data(), h.size() * sizeof(T));
}
template <class T>
std::vector<T> to_host(Device& d, const void* p, size_t n) {
  std::vector<T> h(n);
  if (n) d.copy_to_host(h.data(), p, n * sizeof(T));
  return h;
}

// Index of the first element whose bits differ, or n.
template <class T>
size_t first_difference(const T* a, const T* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(a + i, b + i, sizeof(T)) != 0) return i;
  return n;
}

// lpsgd's result for one case: the case run once on the communicator's device
// from `input`, and what this rank found wrong with the buffers around the
// result (overrun, input changed, a non-root output written), else "".
template <class T>
struct Ran {
  std::vector<T> got;      // the output, n + 2 elements (the last two: overrun guard)
  std::vector<T> repeat;   // the output of a second run on the same inputs, if asked
  std::string wrong;
};

template <class T>
Ran<T> run_lpsgd(Communicator& cm, const OracleCase& c, const std::vector<T>& input, T sentinel,
                 bool repeat) {
  const int me = cm.rank();
  const size_t n = c.count;
  Ran<T> r;
  Device& dev = cm.device();
  const size_t bytes = n * sizeof(T);
  DeviceBuffer in_own, out_own;
  void* in = nullptr;
  void* out = nullptr;
  if (c.shared() && (n + 2) * sizeof(T) > c.shared_bytes) {
    r.wrong = "case larger than the shared buffers";
    return r;
  }
  if (c.shared_in) {
    in = c.shared_in;
  } else {
    in_own = DeviceBuffer(dev, bytes + 8);
    in = in_own.data();
  }
  if (c.shared_out) {
    out = c.shared_out;
  } else {
    out_own = DeviceBuffer(dev, (n + 2) * sizeof(T));
    out = out_own.data();
  }
  to_device(dev, in, input);
  std::vector<T> out_init(n + 2, sentinel);  // n+2: overrun guard
  CollArgs a;
  a.kind = c.kind;
  a.count = n;
  a.dtype = c.dtype;
  a.op = c.op;
  a.root = c.root;
  if (c.in_place) {
    if (!(c.kind == CollKind::Bcast && me != c.root))
      std::copy(input.begin(), input.end(), out_init.begin());
    a.in = out;
    a.out = out;
  } else {
    a.in = in;
    a.out = out;
  }
  for (int run = 0; run < (repeat ? 2 : 1); ++run) {
    to_device(dev, out, out_init);
    auto h = cm.create(c.algo, a, c.block_bytes);  // a handle runs once
    h->start();
    h->wait(60);
    (run ? r.repeat : r.got) = to_host<T>(dev, out, n + 2);
  }

  const std::vector<T>& got = r.got;
  const bool writes_out = c.kind != CollKind::Reduce || me == c.root;
  const auto same = [](const T& x, const T& y) { return std::memcmp(&x, &y, sizeof(T)) == 0; };
  if (!writes_out && !c.in_place) {
    for (size_t i = 0; i < n; ++i)
      if (!same(got[i], sentinel)) {
        r.wrong = "non-root out written at element " + std::to_string(i);
        return r;
      }
  }
  if (!same(got[n], sentinel) || !same(got[n + 1], sentinel)) {
    r.wrong = "wrote past the end";
    return r;
  }
  if (!c.in_place) {
    const std::vector<T> after = to_host<T>(dev, in, n);
    const size_t i = first_difference(after.data(), input.data(), n);
    if (i < n) r.wrong = "input modified at element " + std::to_string(i);
  }
  return r;
}

// float, double, int32: small integers whose sums are exact, and the MPI
// library's result to match bitwise.
template <class T>
std::string run_case(Communicator& cm, const OracleCase& c) {
  const int P = cm.size(), me = cm.rank();
  const size_t n = c.count;
  const std::vector<T> input = exact_input<T>(n, me, c.salt);
  const T sentinel = static_cast<T>(-77);
  std::ostringstream err;
  auto fail = [&](const std::string& what) {
    err << c.str(P) << " rank " << me << ": " << what;
    return err.str();
  };

  // Oracle: the MPI library on the chain communicator (rank == chain position).
  std::vector<T> expect(n, sentinel);
  const bool writes_out = c.kind != CollKind::Reduce || me == c.root;
  if (c.kind == CollKind::Bcast) {
    if (me == c.root) expect = input;
    MPI_Request req;
    MPI_Ibcast(expect.data(), static_cast<int>(n), mpi_type(c.dtype), c.root, cm.chain().comm(),
               &req);
    wait_yielding(req);
  } else {
    std::vector<T> sum(n);
    MPI_Request req;
    MPI_Iallreduce(input.data(), sum.data(), static_cast<int>(n), mpi_type(c.dtype), MPI_SUM,
                   cm.chain().comm(), &req);
    wait_yielding(req);
    if (c.op == ReduceOp::Avg)
      for (auto& x : sum) x = static_cast<T>(x * static_cast<T>(1.0 / P));
    if (writes_out) expect = sum;
  }

  const Ran<T> r = run_lpsgd(cm, c, input, sentinel, false);
  if (!r.wrong.empty()) return fail(r.wrong);
  if (writes_out) {
    const size_t i = first_difference(r.got.data(), expect.data(), n);
    if (i < n) {
      std::ostringstream os;
      os << "wrong result: element " << i << " is " << +r.got[i] << ", the MPI library gives "
         << +expect[i];
      return fail(os.str());
    }
  }
  return "";
}

// bf16 and fp16: sums round, so the reference is the exact sum (in double) of
// the same 16-bit inputs, and the result must lie within the bound derived in
// docs/precision.md: an element summed from P inputs by P - 1 additions, each
// rounded once to the 16-bit type, has
//     |result - sum| <= gamma(P - 1) * sum_r |x_r|,  gamma(k) = k u' / (1 - k u')
// (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., sec. 4.2:
// recursive summation in any order and association), and an average one more
// rounding, gamma(P) * sum_r |x_r| / P. u' is the 16-bit unit roundoff u
// (bf16 2^-8, fp16 2^-11) plus 2^-22: each addition is a float operation
// (exact or rounded by 2^-24) before its 16-bit rounding, an average's last
// step a float add and multiply by 1/P, itself rounded to float
// (sum16_gamma, core/dtype.hpp). Inputs: a
// common value per element plus a per-rank one, over exponents 2^-4 to 2^4,
// so that sums have cancellation yet are not tiny against sum |x|. Beyond the
// bound: every rank must hold the same bits, a second run the same bits again,
// and a large enough sum must show rounding somewhere (else the bound tests
// nothing).
template <class H>
std::vector<H> rounded_input(size_t n, int rank, int salt) {
  std::vector<H> v(n);
  for (size_t i = 0; i < n; ++i) {
    Rng common(33, static_cast<uint64_t>(salt) * 1000003 + i);
    Rng mine(34, (static_cast<uint64_t>(salt) * 1000003 + i) * 64 + static_cast<uint64_t>(rank));
    const double scale = std::ldexp(1.0, static_cast<int>(common.below(9)) - 4);
    const double x = (common.uniform_double() * 2 - 0.5) + (mine.uniform_double() * 2 - 1);
    v[i] = H(static_cast<float>(x * scale));
  }
  return v;
}

template <class H>
std::string run_case16(Communicator& cm, const OracleCase& c) {
  const int P = cm.size(), me = cm.rank();
  const size_t n = c.count;
  std::ostringstream err;
  auto fail = [&](const std::string& what) {
    err << c.str(P) << " rank " << me << ": " << what;
    return err.str();
  };
  const std::vector<H> input = rounded_input<H>(n, me, c.salt);
  const H sentinel = H(-77.0f);
  const Ran<H> r = run_lpsgd(cm, c, input, sentinel, true);
  // The bits of the lowest rank that writes, on every rank (all take part).
  const int first_rank = c.kind == CollKind::Reduce ? c.root : 0;
  std::vector<H> first(r.got.begin(), r.got.begin() + static_cast<std::ptrdiff_t>(std::min(n, r.got.size())));
  first.resize(n);
  MPI_Request req;
  MPI_Ibcast(first.data(), static_cast<int>(n * sizeof(H)), MPI_BYTE, first_rank,
             cm.chain().comm(), &req);
  wait_yielding(req);
  if (!r.wrong.empty()) return fail(r.wrong);
  const bool writes_out = c.kind != CollKind::Reduce || me == c.root;
  if (!writes_out) return "";
  const size_t i_rep = first_difference(r.got.data(), r.repeat.data(), n);
  if (i_rep < n) return fail("a repeat gave other bits at element " + std::to_string(i_rep));
  const size_t i_rank = first_difference(r.got.data(), first.data(), n);
  if (i_rank < n)
    return fail("bits differ from rank " + std::to_string(first_rank) + "'s at element " +
                std::to_string(i_rank));

  if (c.kind == CollKind::Bcast) {
    const std::vector<H> root_in = rounded_input<H>(n, c.root, c.salt);
    const size_t i = first_difference(r.got.data(), root_in.data(), n);
    return i < n ? fail("broadcast changed element " + std::to_string(i)) : "";
  }
  const bool avg = c.op == ReduceOp::Avg;
  const double gamma = sum16_gamma(c.dtype, avg ? P : P - 1);
  std::vector<std::vector<H>> all(static_cast<size_t>(P));
  for (int q = 0; q < P; ++q) all[static_cast<size_t>(q)] = rounded_input<H>(n, q, c.salt);
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    double sum = 0, abs_sum = 0;
    for (const auto& x : all) {
      const double v = static_cast<float>(x[i]);
      sum += v;  // exact: P small 16-bit values
      abs_sum += std::fabs(v);
    }
    const double want = avg ? sum / P : sum;
    const double bound = gamma * (avg ? abs_sum / P : abs_sum);
    const double got = static_cast<float>(r.got[i]);
    const double e = std::fabs(got - want);
    worst = std::max(worst, e);
    if (!(e <= bound)) {
      std::ostringstream os;
      os << "element " << i << " is " << got << ", the exact "
         << (avg ? "average " : "sum ") << want << ": error " << e << " above the bound " << bound;
      return fail(os.str());
    }
  }
  if (P >= 2 && n >= 100 && worst == 0) return fail("no element rounded: the bound tested nothing");
  return "";
}
}  // namespace

std::string OracleCase::str(int P) const {
  std::ostringstream os;
  os << coll_name(kind) << "/" << algo_name(algo) << "/" << dtype_name(dtype) << "/"
     << op_name(op) << " root=" << root << " count=" << count
     << (in_place ? " in-place" : " out-of-place")
     << (shared_in && shared_out ? " shared" : shared_in ? " shared-in" : shared_out ? " shared-out" : "")
     << " block=" << block_bytes << " P=" << P;
  return os.str();
}

std::string check_collective(Communicator& cm, const OracleCase& c) {
  switch (c.dtype) {
    case DType::F32: return run_case<float>(cm, c);
    case DType::F64: return run_case<double>(cm, c);
    case DType::I32: return run_case<int32_t>(cm, c);
    case DType::BF16: return run_case16<bfloat16>(cm, c);
    case DType::F16: return run_case16<float16>(cm, c);
  }
  return "unknown dtype";
}

}  // namespace lpsgd::test
