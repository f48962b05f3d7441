// A fast, deterministic 64-bit checksum of bytes.
//
// checksum64 is XXH64 from the xxHash library (Debian: libxxhash-dev; spec:
// github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md), so a value can be
// checked with any xxHash implementation (python: xxhash.xxh64(b, seed)).
// It consumes 32 bytes per round in four independent 64-bit lanes and mixes
// every bit of every word into the result (unlike FNV over words, where a flip
// in a high bit only reaches high bits), so two flips do not cancel. It depends
// on the order of the bytes, and bytes are read as little-endian words on every
// host, so all ranks and machines agree on it.
//
// Chaining: checksum64(b, n2, checksum64(a, n1)) is a checksum of the sequence
// (a, b) - not equal to the checksum of the concatenation, but as order- and
// content-dependent; checkpoints hash their tensors this way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lpsgd {

/// XXH64 of `bytes` bytes at `data` with `seed`.
uint64_t checksum64(const void* data, size_t bytes, uint64_t seed = 0);

/// 16 lower-case hex digits, zero-padded: 0x2a -> "000000000000002a".
std::string checksum_hex(uint64_t value);

}  // namespace lpsgd
