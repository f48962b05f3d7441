// The collective oracle (see collective_oracle.hpp).
#include "collective_oracle.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "core/dtype.hpp"
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

  // lpsgd, from buffers on the device.
  Device& dev = cm.device();
  const size_t bytes = n * sizeof(T);
  DeviceBuffer in_own, out_own;
  void* in = nullptr;
  void* out = nullptr;
  if (c.shared() && (n + 2) * sizeof(T) > c.shared_bytes) return fail("case larger than the shared buffers");
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
  to_device(dev, out, out_init);
  auto h = cm.create(c.algo, a, c.block_bytes);
  h->start();
  h->wait(60);

  const std::vector<T> got = to_host<T>(dev, out, n + 2);
  if (writes_out) {
    const size_t i = first_difference(got.data(), expect.data(), n);
    if (i < n) {
      std::ostringstream os;
      os << "wrong result: element " << i << " is " << +got[i] << ", the MPI library gives "
         << +expect[i];
      return fail(os.str());
    }
  } else if (!c.in_place) {
    for (size_t i = 0; i < n; ++i)
      if (got[i] != sentinel) return fail("non-root out written at element " + std::to_string(i));
  }
  if (got[n] != sentinel || got[n + 1] != sentinel) return fail("wrote past the end");
  if (!c.in_place) {
    const std::vector<T> after = to_host<T>(dev, in, n);
    const size_t i = first_difference(after.data(), input.data(), n);
    if (i < n) return fail("input modified at element " + std::to_string(i));
  }
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
  }
  return "unknown dtype";
}

}  // namespace lpsgd::test
