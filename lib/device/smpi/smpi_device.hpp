// SmpiDevice: the CPU device as seen by a rank of a SimGrid SMPI simulation
// (built only with LPSGD_SMPI, i.e. smpicxx).
//
// The simulations run with smpi/simulate-computation:no so that their times
// repeat exactly; host work then costs no simulated time at all. The one kind
// of work a collective's time depends on — reductions — is therefore charged
// explicitly: reduce_add() advances the simulated clock by γ seconds per byte
// it writes, γ being the cost model's (set_reduce_cost()). Copies are not
// charged: on MPI links the collectives send from and receive into the user's
// buffers, and the α-β-γ model has no copy term either. γ = 0 simulates the
// network alone (the pure α-β model).
//
// With shared memory all ranks use the same buffers: a rank's i-th allocation
// of a given size is the same SMPI_SHARED_MALLOC region on every rank, made
// once per simulation (SMPI_SHARED_CALL). So P ranks of n bytes cost n bytes
// and one mapping, not P·n bytes and P mappings (mapping pages is what makes
// large simulations slow: ~15 µs a page here), and SMPI does not copy message
// payloads between shared regions. The buffers hold no meaningful data:
// element-wise work is skipped (its simulated cost is still charged), results
// cannot be checked, and regions live until the simulation ends.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "device/cpu/cpu_device.hpp"

namespace lpsgd {

class SmpiDevice final : public CpuDevice {
 public:
  explicit SmpiDevice(bool shared_memory) : shared_(shared_memory) {}
  std::string name() const override { return shared_ ? "cpu (smpi, shared memory)" : "cpu (smpi)"; }
  bool shared_memory() const { return shared_; }
  /// Simulated seconds per byte written by reduce_add (γ); 0 by default.
  void set_reduce_cost(double seconds_per_byte);

  void* alloc(size_t bytes) override;
  void free(void* p) noexcept override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* p, size_t bytes) override;
  void reduce_add(DType t, void* out, const void* a, const void* b, size_t n) override;
  void reduce_add_scale(DType t, void* out, const void* a, const void* b, double alpha,
                        size_t n) override;
  void scale(DType t, void* x, double alpha, size_t n) override;
  void axpy(DType t, void* y, double alpha, const void* x, size_t n) override;
  /// No message is uncached: the simulated copies and reductions above are
  /// the only ones (and they skip the work on SMPI's shared buffers).
  size_t uncached_min_bytes() const override { return SIZE_MAX; }

 private:
  void charge(double seconds) const;
  bool shared_;
  double reduce_cost_ = 0;
  double host_speed_ = 0;  // flop/s of this rank's simulated host
  std::map<size_t, size_t> allocated_;  // shared mode: buffers of each size so far
};

}  // namespace lpsgd
