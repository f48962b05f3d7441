// oneDNN plans for the CPU device: convolution and fully connected layers run
// as oneDNN primitives, which use the widest vector ISA the CPU has (decided at
// run time) and blocked memory layouts inside a convolution.
//
// Built when CMake finds oneDNN (Debian libdnnl-dev); LPSGD_ONEDNN=0 in the
// environment switches it off at run time, leaving the generic plans over
// OpenBLAS (for comparison, or on a CPU where oneDNN misbehaves).
#pragma once

#include <memory>
#include <string>

#include "device/plans.hpp"

namespace lpsgd {
class Device;
}

namespace lpsgd::onednn {

/// Built with oneDNN and not switched off by LPSGD_ONEDNN=0.
bool enabled();
/// "oneDNN 2.6.3 (avx2)", or why it is not used.
std::string describe();
/// The ISA oneDNN multiplies bf16 in on this CPU ("avx512_core_bf16",
/// "avx512_core_amx"), or "" where it has none natively (it would emulate
/// bf16 on plain AVX-512, slower than fp32) or oneDNN is not used.
std::string bf16_isa();
/// Threads oneDNN's primitives use when run from the calling thread (its
/// OpenMP team); nothing without oneDNN.
void set_threads(int n);

/// oneDNN plans for s, or nullptr where oneDNN has no fast implementation of
/// the shape (the caller then uses the generic plan), or where s asks for
/// bf16 and bf16_isa() is "". dev (a CPU device) is
/// borrowed and must outlive the plan.
std::unique_ptr<AffinePlan> conv2d(Device& dev, const Conv2dSpec& s);
std::unique_ptr<AffinePlan> linear(Device& dev, const LinearSpec& s);

}  // namespace lpsgd::onednn
