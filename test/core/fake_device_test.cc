// The CPU fake of a GPU runtime (test/core/fake_device.hpp) keeps the semantics the code above
// the seam relies on: one stream's work in order and asynchronous to the caller, an event
// complete only once its stream reached it, WaitEvent ordering two streams, a pageable copy
// synchronous, and misuse recorded rather than run. Every wait has a deadline.
#include "test/core/fake_device.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace hogstream {
namespace HS_UNITY_ID {

using namespace std::chrono_literals;
using test::FakeDevice;

bool Within(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

TEST(FakeDeviceTest, AStreamRunsInOrderAndAnEventCompletesWhenItIsReached) {
  FakeDevice dev;
  const StreamId s = dev.CreateStream();
  const EventId e = dev.CreateEvent();
  EXPECT_TRUE(dev.Query(e)) << "an event never recorded is complete";
  std::vector<int> order;
  dev.Stall(s);
  for (int k = 0; k < 5; ++k) dev.Launch(s, "k", [&order, k] { order.push_back(k); });
  dev.Record(e, s);
  std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(dev.Query(e)) << "complete before its stream reached it";
  EXPECT_TRUE(order.empty()) << "a stalled stream ran";
  dev.Release(s);
  EXPECT_TRUE(Within([&] { return dev.Query(e); }, 2000ms));
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  dev.DestroyEvent(e);
  dev.DestroyStream(s);
  EXPECT_TRUE(dev.errors().empty());
}

TEST(FakeDeviceTest, WaitEventOrdersTwoStreams) {
  FakeDevice dev;
  const StreamId a = dev.CreateStream(), b = dev.CreateStream();
  const EventId e = dev.CreateEvent();
  std::atomic<int> step{0};
  dev.Stall(a);
  dev.Launch(a, "first", [&] { step.store(1); });
  dev.Record(e, a);
  dev.WaitEvent(b, e);
  std::atomic<int> seen{-1};
  dev.Launch(b, "second", [&] { seen.store(step.load()); });
  std::this_thread::sleep_for(10ms);
  EXPECT_EQ(seen.load(), -1) << "b ran before the event it waits for";
  dev.Release(a);
  dev.Synchronize(b);
  EXPECT_EQ(seen.load(), 1);
  dev.DestroyEvent(e);
  dev.DestroyStream(a);
  dev.DestroyStream(b);
}

TEST(FakeDeviceTest, APageableCopyIsSynchronousAndAPinnedOneIsNot) {
  FakeDevice dev;
  const StreamId s = dev.CreateStream();
  auto* d = static_cast<float*>(dev.Alloc(64 * sizeof(float)));
  auto* pinned = static_cast<float*>(dev.AllocPinned(64 * sizeof(float)));
  std::vector<float> pageable(64, 3.f);
  for (int i = 0; i < 64; ++i) pinned[i] = 5.f;
  dev.Stall(s);
  dev.CopyAsync(d, pinned, 64 * sizeof(float), CopyKind::kHostToDevice, s);  // queued
  EXPECT_EQ(dev.blocking_copies(), 0u);
  std::atomic<bool> returned{false};
  std::thread t([&] {
    dev.CopyAsync(pageable.data(), d, 64 * sizeof(float), CopyKind::kDeviceToHost, s);  // waits for the stream
    returned.store(true);
  });
  std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(returned.load()) << "a pageable copy returned before the stream's earlier work ran";
  dev.Release(s);
  t.join();
  EXPECT_EQ(pageable[0], 5.f) << "the copy came after the pinned one, in stream order";
  EXPECT_EQ(dev.blocking_copies(), 1u);
  dev.Free(d);
  dev.FreePinned(pinned);
  dev.DestroyStream(s);
}

TEST(FakeDeviceTest, DeviceMemoryIsPoisonedAndMisuseIsRecorded) {
  FakeDevice dev;
  const StreamId s = dev.CreateStream();
  auto* d = static_cast<float*>(dev.Alloc(16 * sizeof(float)));
  std::vector<float> host(16, 1.f);
  dev.CopyAsync(host.data(), d, 16 * sizeof(float), CopyKind::kDeviceToHost, s);
  EXPECT_TRUE(std::isnan(host[7])) << "device memory nobody wrote";
  dev.CopyAsync(d, host.data(), 16 * sizeof(float), CopyKind::kDeviceToHost, s);  // the kinds swapped
  dev.LaunchSlaveRule(16, host.data(), d, d, d, s);                               // a host pointer
  dev.Free(host.data());                                                         // not the device's
  dev.Synchronize(s);
  const auto errors = dev.errors();
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_NE(errors[0].find("D2H with a pointer of the wrong kind"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("not device memory"), std::string::npos) << errors[1];
  EXPECT_NE(errors[2].find("did not allocate"), std::string::npos) << errors[2];
  dev.Free(d);
  dev.DestroyStream(s);
}

}  // namespace
}  // namespace hogstream
