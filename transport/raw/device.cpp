// MAC address text and the raw-Ethernet device (see device.hpp).
#include "transport/raw/device.hpp"

#include <cstdio>
#include <utility>

#include "transport/raw/endpoint.hpp"

namespace hogstream {

namespace {
int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

Mac ParseMac(const std::string& text) {
  // Either 12 hex digits, or 6 pairs of hex digits separated by ':'.
  const bool colons = text.size() == 17;
  bool ok = text.size() == 12 || colons;
  Mac mac{};
  for (size_t i = 0; ok && i < 6; ++i) {
    const size_t at = colons ? 3 * i : 2 * i;
    const int hi = Hex(text[at]), lo = Hex(text[at + 1]);
    ok = hi >= 0 && lo >= 0 && (!colons || i == 5 || text[at + 2] == ':');
    mac[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  HS_REQUIRE(ok) << "'" << text << "' is not a MAC address (like 00:25:90:8a:56:d8 or 0025908a56d8)";
  return mac;
}

std::string FormatMac(const Mac& mac) {
  char s[18];
  std::snprintf(s, sizeof s, "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]);
  return s;
}

RawDevice::RawDevice(RawOptions opt) : opt_(std::move(opt)) {}

std::unique_ptr<Transport> RawDevice::Open(PeerId self) { return std::make_unique<RawEndpoint>(self, opt_); }

}  // namespace hogstream
