#include "core/checksum.hpp"

#include <xxhash.h>

#include <cstdio>

namespace lpsgd {

uint64_t checksum64(const void* data, size_t bytes, uint64_t seed) {
  return static_cast<uint64_t>(XXH64(data, bytes, static_cast<XXH64_hash_t>(seed)));
}

std::string checksum_hex(uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

}  // namespace lpsgd
