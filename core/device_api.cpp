#include "core/device_api.hpp"

#include <atomic>

namespace hogstream {

namespace {
std::atomic<DeviceApi*> g_api{nullptr};
}  // namespace

DeviceApi* LoadedDeviceApi() { return g_api.load(std::memory_order_acquire); }
void RegisterDeviceApi(DeviceApi* api) { g_api.store(api, std::memory_order_release); }

}  // namespace hogstream
