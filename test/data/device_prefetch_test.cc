// Tests of data/device_prefetch on the CPU fake of a GPU runtime (test/core/fake_device.hpp):
// batch k + 1 crosses to the device while batch k trains (the fake's timeline), every batch a
// training kernel reads is whole and its own (no copy overwrites a batch in use, under random
// stream delays), no copy blocks the host, and misuse is a Bug, not a hang.
#include "data/device_prefetch.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "base/common.hpp"
#include "test/core/fake_device.hpp"
#include "test/test_seed.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using namespace std::chrono_literals;
using test::FakeDevice;
using test::FakeDeviceOptions;

// Six batches of 4 M floats, batch k all k + 1; each training step checks its batch as it
// begins (a step that ran before its copy would see the fake's poison or another batch), takes
// 20 ms, and checks it again (a copy overwriting it meanwhile would show). The copy of batch k + 1
// begins before step k ends (it never waits for the step; a copy queued behind the step would
// begin after it), with or without random delays before every operation of the streams. (On an
// idle host it runs during step k; the fake's threads need a core each for that to show, so the
// test does not ask it: on a loaded host of two cores the step's thread may wake only after the
// copy's memcpy.)
class DevicePrefetchTest : public testing::TestWithParam<int> {};  // the fake's max delay, µs

TEST_P(DevicePrefetchTest, TheNextBatchCrossesWhileThisOneTrains) {
  FakeDeviceOptions o;
  o.seed = TestSeed();
  o.max_delay = std::chrono::microseconds(GetParam());
  FakeDevice dev(o);
  constexpr size_t kFloats = size_t{1} << 22;
  constexpr int kBatches = 6;
  std::vector<std::vector<float>> batches;
  for (int k = 0; k < kBatches; ++k) batches.emplace_back(kFloats, static_cast<float>(k + 1));
  const StreamId compute = dev.CreateStream();
  std::atomic<int> torn{0};
  double slowest_call = 0;
  auto timed = [&](auto&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    slowest_call = std::max(slowest_call, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  {
    DevicePrefetcher pre(dev, kFloats * sizeof(float), 2);
    pre.Submit(batches[0].data());
    pre.Submit(batches[1].data());
    EXPECT_FALSE(pre.CanSubmit()) << "both buffers hold a batch";
    for (int k = 0; k < kBatches; ++k) {
      const float* batch = nullptr;
      timed([&] { batch = static_cast<const float*>(pre.Next(compute)); });
      dev.Launch(compute, "train", [batch, k, &torn] {
        auto whole = [&] {
          for (size_t i = 0; i < kFloats; i += 4099)
            if (batch[i] != static_cast<float>(k + 1)) return false;
          return batch[kFloats - 1] == static_cast<float>(k + 1);
        };
        if (!whole()) torn.fetch_add(1);  // read before its copy landed
        std::this_thread::sleep_for(20ms);
        if (!whole()) torn.fetch_add(1);  // overwritten while in use
      });
      timed([&] { pre.Done(compute); });
      if (k + 2 < kBatches) timed([&] { pre.Submit(batches[k + 2].data()); });
    }
    dev.Synchronize(compute);
  }
  EXPECT_EQ(torn.load(), 0) << "a training step read a batch that was not its own";
  EXPECT_EQ(dev.blocking_copies(), 0u);
  EXPECT_LT(slowest_call, 0.1) << "the host waited for the device";  // a batch's staging memcpy only
  std::vector<test::FakeDevice::Span> copies, trains;
  for (const auto& s : dev.timeline()) {
    if (s.what == "H2D") copies.push_back(s);
    if (s.what == "train") trains.push_back(s);
  }
  ASSERT_EQ(copies.size(), static_cast<size_t>(kBatches));
  ASSERT_EQ(trains.size(), static_cast<size_t>(kBatches));
  int during = 0;  // copies of batch k + 1 that ran during step k
  for (int k = 0; k + 1 < kBatches; ++k) {
    EXPECT_GE(trains[k].start, copies[k].end) << "batch " << k << " trained before its copy ended";
    during += copies[k + 1].start < trains[k].end && copies[k + 1].end > trains[k].start;
    EXPECT_LT(copies[k + 1].start, trains[k].end)
        << "the copy of batch " << k + 1 << " [" << copies[k + 1].start << ", " << copies[k + 1].end
        << "] against batch " << k << "'s step [" << trains[k].start << ", " << trains[k].end << "]";
  }
  RecordProperty("copies_during_the_step_before", during);
  std::printf("copies of batch k + 1 during step k: %d of %d\n", during, kBatches - 1);
  EXPECT_TRUE(dev.errors().empty()) << dev.errors()[0];
  dev.DestroyStream(compute);
}

INSTANTIATE_TEST_SUITE_P(Delays, DevicePrefetchTest, testing::Values(0, 200),
                         [](const testing::TestParamInfo<int>& i) { return "max_delay_us" + std::to_string(i.param); });

// A step taken at once waits for its batch's copy on the device, not on the host: with the
// prefetch stream stalled, Next returns at once, and the step runs only once the copy has.
TEST(DevicePrefetchWait, AStepNeverRunsBeforeItsBatchsCopy) {
  FakeDevice dev;
  const StreamId compute = dev.CreateStream();
  std::vector<float> batch(1 << 16, 7.f);
  std::atomic<int> seen{0};
  {
    DevicePrefetcher pre(dev, batch.size() * sizeof(float), 2);
    dev.Stall(pre.stream());
    pre.Submit(batch.data());
    const auto t0 = std::chrono::steady_clock::now();
    const auto* d = static_cast<const float*>(pre.Next(compute));
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.01) << "Next waited";
    dev.Launch(compute, "train", [d, n = batch.size(), &seen] {
      seen.store(d[0] == 7.f && d[n - 1] == 7.f ? 1 : -1);
    });
    pre.Done(compute);
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(seen.load(), 0) << "the step ran while its copy was stalled";
    dev.Release(pre.stream());
    dev.Synchronize(compute);
  }
  EXPECT_EQ(seen.load(), 1) << "the step read its batch whole";
  dev.DestroyStream(compute);
}

TEST(DevicePrefetchMisuse, IsABug) {
  FakeDevice dev;
  const StreamId compute = dev.CreateStream();
  DevicePrefetcher pre(dev, 64, 2);
  EXPECT_THROW(pre.Next(compute), Bug);
  EXPECT_THROW(pre.Done(compute), Bug);
  std::vector<char> b(64, 1);
  pre.Submit(b.data());
  pre.Submit(b.data());
  EXPECT_THROW(pre.Submit(b.data()), Bug) << "a third batch with both buffers queued";
  pre.Next(compute);
  EXPECT_THROW(pre.Next(compute), Bug) << "a second batch before Done of the first";
  EXPECT_THROW(DevicePrefetcher(dev, 64, 1), Error);
  dev.Synchronize(compute);
  dev.DestroyStream(compute);
}

// A Data layer's use (DeviceBatches, one Next a Forward): the batches train in the order they
// were filled, each read whole and never overwritten while in use; the copy of batch k + 1 is
// under way before step k ends (queued as Next hands out batch k); the batch before is released
// only after the work queued with it (its step ran 20 ms after its Next returned).
TEST(DeviceBatchesTest, EachForwardTrainsItsBatchWhileTheNextCrosses) {
  FakeDeviceOptions o;
  o.seed = TestSeed();
  o.max_delay = std::chrono::microseconds(100);
  FakeDevice dev(o);
  constexpr size_t kFloats = size_t{1} << 20;
  constexpr int kSteps = 6;
  const StreamId compute = dev.CreateStream();
  std::atomic<int> torn{0};
  int filled = 0;
  {
    DeviceBatches batches(dev, kFloats * sizeof(float));
    for (int k = 0; k < kSteps; ++k) {
      const auto* batch = static_cast<const float*>(batches.Next(compute, [&](void* host) {
        ++filled;
        std::fill_n(static_cast<float*>(host), kFloats, static_cast<float>(filled));
      }));
      dev.Launch(compute, "train", [batch, k, &torn] {
        auto whole = [&] {
          for (size_t i = 0; i < kFloats; i += 4099)
            if (batch[i] != static_cast<float>(k + 1)) return false;
          return batch[kFloats - 1] == static_cast<float>(k + 1);
        };
        if (!whole()) torn.fetch_add(1);  // another batch, or one not yet landed
        std::this_thread::sleep_for(20ms);
        if (!whole()) torn.fetch_add(1);  // overwritten while in use
      });
    }
    dev.Synchronize(compute);
  }
  EXPECT_EQ(filled, kSteps + 1) << "one batch ahead";
  EXPECT_EQ(torn.load(), 0) << "a step read a batch that was not its own, whole";
  std::vector<test::FakeDevice::Span> copies, trains;
  for (const auto& s : dev.timeline()) {
    if (s.what == "H2D") copies.push_back(s);
    if (s.what == "train") trains.push_back(s);
  }
  ASSERT_EQ(copies.size(), static_cast<size_t>(kSteps + 1));
  ASSERT_EQ(trains.size(), static_cast<size_t>(kSteps));
  for (int k = 0; k < kSteps; ++k) {
    EXPECT_GE(trains[k].start, copies[k].end) << "batch " << k << " trained before its copy ended";
    EXPECT_LT(copies[k + 1].start, trains[k].end) << "the copy of batch " << k + 1 << " waited for step " << k;
  }
  EXPECT_EQ(dev.blocking_copies(), 0u);
  EXPECT_TRUE(dev.errors().empty()) << dev.errors()[0];
  dev.DestroyStream(compute);
}

}  // namespace
}  // namespace hogstream
