// The CUDA device itself: element-wise kernels against the CPU device (every
// dtype, odd sizes, aligned and misaligned pointers), the memory pool, pinned
// buffers, queued copies, and ordering between the compute and communication
// queues through events. Skips where no GPU is usable.
#include <cmath>
#include <cstring>
#include <vector>

#include "gpu_test.hpp"

using namespace lpsgd;
using lpsgd::test::GpuTest;
using lpsgd::test::randn;

namespace {

const size_t kSizes[] = {1, 3, 4, 5, 1000, 4097, 1000003};

template <class T>
std::vector<T> values(size_t n, uint64_t seed) {
  std::vector<T> v(n);
  Rng r(seed, n);
  for (T& x : v) x = static_cast<T>(std::is_integral_v<T> ? static_cast<int>(r.below(2001)) - 1000
                                                          : r.normal());
  return v;
}

}  // namespace

class CudaDeviceTest : public GpuTest {
 protected:
  // reduce_add, axpy and scale on the GPU and the CPU from the same inputs,
  // starting `offset` elements into the buffers (offset 1: misaligned, so the
  // element-by-element path runs; 0: the 16-byte packed path). Element-wise
  // kernels are built without FMA contraction, so the bits must match.
  template <class T>
  void check_elementwise(size_t n, size_t offset) {
    const DType t = dtype_of<T>::value;
    std::vector<T> a = values<T>(n + offset, 1), b = values<T>(n + offset, 2);
    DeviceBuffer da = upload(a), db = upload(b);
    T* ga = da.as<T>() + offset;
    const T* gb = db.as<T>() + offset;
    gpu->reduce_add(t, ga, ga, gb, n);
    gpu->axpy(t, ga, 0.5, gb, n);
    gpu->scale(t, ga, 3.0, n);
    const std::vector<T> got = download<T>(da.data(), n + offset);
    T* ca = a.data() + offset;
    cpu->reduce_add(t, ca, ca, b.data() + offset, n);
    cpu->axpy(t, ca, 0.5, b.data() + offset, n);
    cpu->scale(t, ca, 3.0, n);
    for (size_t i = 0; i < n + offset; ++i)
      ASSERT_EQ(got[i], a[i]) << dtype_name(t) << " n=" << n << " offset=" << offset << " i=" << i;
  }
};

TEST_F(CudaDeviceTest, ElementwiseMatchesCpuBitwise) {
  for (size_t n : kSizes)
    for (size_t offset : {size_t(0), size_t(1)}) {
      check_elementwise<float>(n, offset);
      check_elementwise<double>(n, offset);
      check_elementwise<int32_t>(n, offset);
      if (HasFatalFailure()) return;
    }
}

TEST_F(CudaDeviceTest, ReduceAddOutOfPlaceLeavesInputs) {
  const size_t n = 12347;
  const std::vector<float> a = randn(n, 3), b = randn(n, 4);
  DeviceBuffer da = upload(a), db = upload(b), dout(*gpu, n * 4);
  gpu->reduce_add(DType::F32, dout.data(), da.data(), db.data(), n);
  const auto out = download<float>(dout.data(), n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << i;
  EXPECT_EQ(download<float>(da.data(), n), a);
  EXPECT_EQ(download<float>(db.data(), n), b);
}

TEST_F(CudaDeviceTest, PoolReusesZeroedBlocks) {
  void* first = gpu->alloc(3000);
  gpu->zero(first, 3000);
  const std::vector<float> junk = randn(750, 5);
  gpu->copy_from_host(first, junk.data(), 3000);
  gpu->free(first);
  // Same size class: the cached block comes back, zeroed.
  void* again = gpu->alloc(2900);
  EXPECT_EQ(again, first);
  for (float x : download<float>(again, 725)) ASSERT_EQ(x, 0.0f);
  void* other = gpu->alloc(2900);  // the class is empty now: a new block
  EXPECT_NE(other, again);
  gpu->free(again);
  gpu->free(other);
  // Zero-byte and large requests work too.
  void* z = gpu->alloc(0);
  EXPECT_NE(z, nullptr);
  gpu->free(z);
  DeviceBuffer big(*gpu, (64u << 20) + 3);
  EXPECT_NE(big.data(), nullptr);
}

TEST_F(CudaDeviceTest, PinnedBufferAndQueuedCopies) {
  const size_t n = 1 << 20;
  PinnedBuffer h(*gpu, n * 4), back(*gpu, n * 4);
  for (size_t i = 0; i < n; ++i) h.as<float>()[i] = static_cast<float>(i % 1000);
  DeviceBuffer d(*gpu, n * 4);
  auto done = gpu->create_event();
  EXPECT_TRUE(done->done());  // never recorded
  gpu->copy_from_host_async(d.data(), h.data(), n * 4);
  gpu->scale(DType::F32, d.data(), 2.0, n);
  gpu->copy_to_host_async(back.data(), d.data(), n * 4);
  gpu->record(*done);
  done->synchronize();
  EXPECT_TRUE(done->done());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(back.as<float>()[i], 2.0f * static_cast<float>(i % 1000)) << i;
}

// Work on the communication queue that waits for an event of the compute
// queue sees the compute queue's results, and vice versa, without host waits.
TEST_F(CudaDeviceTest, EventsOrderComputeAndCommQueues) {
  Device& comm = gpu->comm_queue();
  EXPECT_NE(&comm, gpu.get());
  EXPECT_EQ(&comm.comm_queue(), &comm);
  EXPECT_EQ(comm.kind(), DeviceKind::Cuda);
  const size_t n = 8 << 20;  // large enough that the queues would overlap
  const std::vector<float> a = randn(n, 6);
  DeviceBuffer da = upload(a), db(*gpu, n * 4), dc(*gpu, n * 4);
  auto produced = gpu->create_event(), reduced = comm.create_event();
  for (int round = 0; round < 3; ++round) {
    gpu->copy(db.data(), da.data(), n * 4);          // compute: b = a
    gpu->scale(DType::F32, db.data(), 2.0, n);       // compute: b = 2a
    gpu->record(*produced);
    comm.wait(*produced);
    comm.reduce_add(DType::F32, dc.data(), db.data(), da.data(), n);  // comm: c = 3a
    comm.record(*reduced);
    gpu->wait(*reduced);
    gpu->scale(DType::F32, dc.data(), 0.5, n);       // compute: c = 1.5a
    gpu->zero(db.data(), n * 4);                      // must not race the comm read
  }
  const auto c = download<float>(dc.data(), n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(c[i], (2.0f * a[i] + a[i]) * 0.5f) << i;
}

TEST_F(CudaDeviceTest, NameAndKind) {
  EXPECT_EQ(gpu->kind(), DeviceKind::Cuda);
  EXPECT_EQ(gpu->name().rfind("cuda:", 0), 0u) << gpu->name();
  // Any local rank maps onto a visible GPU.
  auto other = make_device(DeviceKind::Cuda, 7 * cuda_device_count() + 1);
  EXPECT_EQ(other->kind(), DeviceKind::Cuda);
}
