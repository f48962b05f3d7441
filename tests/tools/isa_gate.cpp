// The gate of tools/isa_gate.hpp for unit tests, as a global test
// environment: linked into each test that lpsgd_isa_variants runs per level.
#include <gtest/gtest.h>

#include <cstdlib>

#include "isa_gate.hpp"

namespace {

struct IsaGate : ::testing::Environment {
  void SetUp() override {
    if (lpsgd::testing::isa_unavailable(true)) std::exit(77);
  }
};

[[maybe_unused]] ::testing::Environment* const gate = ::testing::AddGlobalTestEnvironment(new IsaGate);

}  // namespace
