// Replayable randomness for tests. Every test draws its seeds from TestSeed(): fresh each run
// (so the suite keeps exploring), derived from one base seed per test, which a failing test
// prints with the line that replays it:
//   HS_TEST_SEED=1234567 build/hogstream_tests --gtest_filter=Suite.Name
// With HS_TEST_SEED set, every test uses that base, and the same calls give the same seeds.
#pragma once

#include <cstdint>

namespace hogstream {

// The next seed of the running test (base + a per-test call counter, mixed).
uint32_t TestSeed();

}  // namespace hogstream
