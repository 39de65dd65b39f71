#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

namespace hogstream {
namespace {

uint32_t g_base = 0;
uint32_t g_calls = 0;

// Picks each test's base seed before it starts and names it when the test fails.
class SeedListener : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo&) override {
    const char* fixed = std::getenv("HS_TEST_SEED");
    g_base = fixed ? static_cast<uint32_t>(std::strtoul(fixed, nullptr, 10)) : std::random_device{}();
    g_calls = 0;
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed() && g_calls > 0)
      std::printf("[  SEED    ] replay: HS_TEST_SEED=%u --gtest_filter=%s.%s\n", g_base,
                  info.test_suite_name(), info.name());
  }
};

// Registered before main runs (gtest_main's RUN_ALL_TESTS sees it).
const bool registered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new SeedListener);
  return true;
}();

}  // namespace

uint32_t TestSeed() {
  // splitmix-style mixing: consecutive calls give unrelated seeds.
  uint64_t z = (static_cast<uint64_t>(g_base) << 32) + ++g_calls;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return static_cast<uint32_t>(z ^ (z >> 31));
}

}  // namespace hogstream
