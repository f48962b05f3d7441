// lib/core: errors, RNG (Philox known answers and reproducibility), option helpers,
// checksum (XXH64 known answers), atomic file replacement.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/atomic_file.hpp"
#include "core/checksum.hpp"
#include "core/cli.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/timer.hpp"

using namespace lpsgd;

TEST(Error, CarriesFileLineAndMessage) {
  try {
    LPSGD_CHECK(1 + 1 == 3, "arithmetic is off by " << 1);
    FAIL() << "LPSGD_CHECK did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "arithmetic is off by 1");
    EXPECT_NE(std::string(e.file()).find("test_core.cpp"), std::string::npos);
    EXPECT_GT(e.line(), 0);
    EXPECT_EQ(e.kind(), ErrorKind::Runtime);
    EXPECT_NE(e.where().find("test_core.cpp:"), std::string::npos);
  }
  EXPECT_NO_THROW(LPSGD_CHECK(true, "never"));
}

TEST(Error, UsageKind) {
  try {
    LPSGD_USAGE_ERROR("bad option");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
  }
}

// Known-answer vectors of Philox4x32-10 from the Random123 distribution.
TEST(Rng, PhiloxKnownAnswers) {
  auto a = Philox4x32::generate(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(a.v[0], 0x6627e8d5u);
  EXPECT_EQ(a.v[1], 0xe169c58du);
  EXPECT_EQ(a.v[2], 0xbc57ac4cu);
  EXPECT_EQ(a.v[3], 0x9b00dbd8u);
  auto b = Philox4x32::generate(~0u, ~0u, ~0u, ~0u, ~0u, ~0u);
  EXPECT_EQ(b.v[0], 0x408f276du);
  EXPECT_EQ(b.v[1], 0x41c83b0eu);
  EXPECT_EQ(b.v[2], 0xa20bc7c6u);
  EXPECT_EQ(b.v[3], 0x6d5451fdu);
  auto c = Philox4x32::generate(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u,
                                0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(c.v[0], 0xd16cfe09u);
  EXPECT_EQ(c.v[1], 0x94fdccebu);
  EXPECT_EQ(c.v[2], 0x5001e420u);
  EXPECT_EQ(c.v[3], 0x24126ea1u);
}

TEST(Rng, StreamsAreReproducibleAndDistinct) {
  Rng a(42, 7), b(42, 7), c(42, 8), d(43, 7);
  for (int i = 0; i < 100; ++i) {
    const uint32_t x = a.next_u32();
    EXPECT_EQ(x, b.next_u32());
    (void)c;
  }
  Rng a2(42, 7), c2(42, 8), d2(43, 7);
  int same_stream = 0, same_seed = 0;
  for (int i = 0; i < 100; ++i) {
    const uint32_t x = a2.next_u32();
    same_stream += x == c2.next_u32();
    same_seed += x == d2.next_u32();
  }
  EXPECT_LT(same_stream, 3);
  EXPECT_LT(same_seed, 3);
  (void)d;
}

TEST(Rng, CounterRestoresPosition) {
  Rng a(1, 2);
  for (int i = 0; i < 17; ++i) a.next_u32();
  Rng b(1, 2, a.counter());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next_u32(), b.next_u32());
}

TEST(Rng, UniformAndNormalMoments) {
  Rng r(123, 0);
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0;
  std::set<uint32_t> below;
  for (int i = 0; i < n; ++i) {
    const float u = r.uniform();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    su += static_cast<double>(u);
    const double z = r.normal();
    ASSERT_TRUE(std::isfinite(z));
    sn += z;
    sn2 += z * z;
    const uint32_t k = r.below(7);
    ASSERT_LT(k, 7u);
    below.insert(k);
  }
  EXPECT_NEAR(su / n, 0.5, 0.005);
  EXPECT_NEAR(sn / n, 0.0, 0.01);
  EXPECT_NEAR(sn2 / n, 1.0, 0.02);
  EXPECT_EQ(below.size(), 7u);
}

TEST(Cli, ParseBytes) {
  EXPECT_EQ(cli::parse_bytes("0"), 0u);
  EXPECT_EQ(cli::parse_bytes("4096"), 4096u);
  EXPECT_EQ(cli::parse_bytes("64K"), 65536u);
  EXPECT_EQ(cli::parse_bytes("64M"), 64ull << 20);
  EXPECT_EQ(cli::parse_bytes("1G"), 1ull << 30);
  EXPECT_EQ(cli::parse_bytes("1.5M"), 1572864u);
  EXPECT_THROW(cli::parse_bytes("12Q"), Error);
  EXPECT_THROW(cli::parse_bytes("abc"), Error);
  EXPECT_THROW(cli::parse_bytes("-4K"), Error);
  EXPECT_EQ(cli::format_bytes(64ull << 20), "64M");
  EXPECT_EQ(cli::format_bytes(1000), "1000");
}

TEST(Cli, ShortestReadsBackExactly) {
  EXPECT_EQ(cli::shortest(0.05), "0.05");
  EXPECT_EQ(cli::shortest(0.9), "0.9");
  EXPECT_EQ(cli::shortest(300.0), "300");
  EXPECT_EQ(cli::shortest(0.0), "0");
  EXPECT_EQ(cli::shortest(1e-4), "1e-4");
  EXPECT_EQ(cli::shortest(1e6), "1e6");
  EXPECT_EQ(cli::shortest(-2.5e-10), "-2.5e-10");
  EXPECT_EQ(cli::shortest(0.1f), "0.1");
  for (double v : {0.1, 1.0 / 3, 2.0 / 3e-7, 123456.789, 1.7976931348623157e308})
    EXPECT_EQ(std::stod(cli::shortest(v)), v) << cli::shortest(v);
}

TEST(Cli, SplitList) {
  EXPECT_EQ(cli::split_list("lp,mst,,be"), (std::vector<std::string>{"lp", "mst", "be"}));
  EXPECT_TRUE(cli::split_list("").empty());
}

TEST(Cli, ConfigFileAndCommandLinePrecedence) {
  const std::string path = ::testing::TempDir() + "lpsgd_cli_test.ini";
  {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("epochs = 7\nlr = 0.5\n", f);
    std::fclose(f);
  }
  namespace po = cli::po;
  po::options_description desc("t");
  int epochs = 0;
  double lr = 0;
  desc.add_options()("epochs", po::value<int>(&epochs)->default_value(1), "")(
      "lr", po::value<double>(&lr)->default_value(0.1), "");
  std::string a0 = "train", a1 = "--config", a2 = path, a3 = "--epochs", a4 = "3";
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), a4.data()};
  po::variables_map vm;
  ASSERT_TRUE(cli::parse(5, argv, desc, vm, "usage"));
  EXPECT_EQ(epochs, 3);    // command line wins
  EXPECT_DOUBLE_EQ(lr, 0.5);  // from the file

  std::string b3 = "--bogus";
  char* bad[] = {a0.data(), b3.data()};
  po::variables_map vm2;
  EXPECT_THROW(cli::parse(2, bad, desc, vm2, "usage"), Error);
  std::remove(path.c_str());
}

TEST(DType, NamesAndSizes) {
  EXPECT_EQ(parse_dtype("float"), DType::F32);
  EXPECT_EQ(parse_dtype("double"), DType::F64);
  EXPECT_EQ(parse_dtype("int32"), DType::I32);
  EXPECT_THROW(parse_dtype("fp8"), Error);
  EXPECT_EQ(dtype_size(DType::F64), 8u);
}

TEST(Timer, Monotonic) {
  Timer t;
  const double a = t.elapsed_s();
  const double b = t.elapsed_s();
  EXPECT_GE(b, a);
  EXPECT_GE(a, 0.0);
}

// Known answers of XXH64 from libxxhash 0.8.1 on bytes (i * 131 + 7) % 256:
// every path of the algorithm (tail bytes, tail half word, tail words, 32-byte
// rounds) at both seeds.
TEST(Checksum, Xxh64KnownAnswers) {
  std::vector<unsigned char> buf(1000);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<unsigned char>((i * 131 + 7) % 256);
  const uint64_t seed = 0x9E3779B97F4A7C15ULL;
  const struct {
    size_t n;
    uint64_t h0, hs;
  } cases[] = {
      {0, 0xef46db3751d8e999ULL, 0xc4349fc93c010000ULL},
      {1, 0xa96c7f0ce858bbb7ULL, 0x585882422a6165e7ULL},
      {3, 0xbed43740ee6332bbULL, 0x45fa1406538fa168ULL},
      {4, 0xfa212ae44b3bb23dULL, 0xa65107f22943365aULL},
      {7, 0x2744460dd675d2c0ULL, 0xc9b637e2c4599de2ULL},
      {8, 0x994b676b71ce94ddULL, 0xce592d5f53e192ecULL},
      {9, 0x572b84c18b983af8ULL, 0x5495aa796de8ab73ULL},
      {15, 0x09e6451ed2ff8b1dULL, 0x47a857d1f90c35e1ULL},
      {16, 0x94ad0095e72b24d5ULL, 0x3f8fea7c86a04013ULL},
      {31, 0x6711d55e306b5d8fULL, 0x24c4e99ab0404b5eULL},
      {32, 0x07f7b8e3bc5d6e25ULL, 0x046e99bbda1a814bULL},
      {33, 0x09f85eeb4e1cbe9fULL, 0xd7fe2bfee6e4cdedULL},
      {63, 0xb7c9968c066cb6a5ULL, 0xbd457f9ea47180c8ULL},
      {64, 0x50d4159a0411632eULL, 0xa768f350a8e4fcf6ULL},
      {100, 0x9ddada11d3dc2d8fULL, 0x35546bd9a4779ae4ULL},
      {1000, 0x0bf0bdbcc82eb373ULL, 0x3ecb5d7b5e7c64cfULL},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(checksum64(buf.data(), c.n), c.h0) << "n=" << c.n;
    EXPECT_EQ(checksum64(buf.data(), c.n, seed), c.hs) << "n=" << c.n;
  }
  EXPECT_EQ(checksum64("abc", 3), 0x44bc2cf5ad770999ULL);
}

TEST(Checksum, EveryBitAndTheOrderMatter) {
  std::vector<float> v(37);  // odd length: 32-byte rounds, a word tail and a half word
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.25f - 3.0f;
  const size_t bytes = v.size() * sizeof(float);
  const uint64_t h = checksum64(v.data(), bytes);
  EXPECT_EQ(h, checksum64(v.data(), bytes));  // deterministic
  auto* b = reinterpret_cast<unsigned char*>(v.data());
  std::set<uint64_t> seen{h};
  for (size_t bit = 0; bit < bytes * 8; ++bit) {
    b[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    seen.insert(checksum64(v.data(), bytes));
    b[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
  }
  EXPECT_EQ(seen.size(), bytes * 8 + 1) << "a single-bit flip went unnoticed or collided";
  EXPECT_EQ(checksum64(v.data(), bytes), h);
  // Two flips of the same high bit in different words (FNV over words misses these).
  b[7] ^= 0x80;
  b[15] ^= 0x80;
  EXPECT_NE(checksum64(v.data(), bytes), h);
  b[7] ^= 0x80;
  b[15] ^= 0x80;
  std::swap(v[0], v[1]);
  EXPECT_NE(checksum64(v.data(), bytes), h);
  std::swap(v[0], v[1]);
  // Chaining depends on the order of the pieces.
  const uint64_t ab = checksum64(b + 8, 8, checksum64(b, 8));
  const uint64_t ba = checksum64(b, 8, checksum64(b + 8, 8));
  EXPECT_NE(ab, ba);
  EXPECT_NE(checksum64(b, 8, 1), checksum64(b, 8, 2));
}

TEST(Checksum, Hex) {
  EXPECT_EQ(checksum_hex(0), "0000000000000000");
  EXPECT_EQ(checksum_hex(0x2a), "000000000000002a");
  EXPECT_EQ(checksum_hex(0xef46db3751d8e999ULL), "ef46db3751d8e999");
}

TEST(AtomicFile, ReplacesAndLeavesNoTemporary) {
  namespace fs = std::filesystem;
  std::string tmpl = (fs::temp_directory_path() / "lpsgd-core-XXXXXX").string();
  ASSERT_TRUE(mkdtemp(tmpl.data()));
  const fs::path dir = tmpl;
  const std::string path = (dir / "latest").string();
  EXPECT_EQ(temp_path_for(path), (dir / ".latest.tmp.").string() + std::to_string(getpid()));
  write_file_atomic(path, "one\n");
  write_file_atomic(path, "two\n");
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "two");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}), 1);
  // A missing directory is an error naming the file, and nothing is created.
  try {
    write_file_atomic((dir / "no" / "such").string(), "x");
    ADD_FAILURE() << "no error for a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("no/.such.tmp."), std::string::npos) << e.message();
  }
  fs::remove_all(dir);
}
