// Verbs device: finds the RDMA device and port, answers "not yet" while the port comes up,
// and opens endpoints (see device.hpp).
#include "transport/verbs/device.hpp"

#include <errno.h>

#include <cstring>
#include <string>

#include "transport/verbs/endpoint.hpp"

namespace hogstream {

namespace {

constexpr const char* kInstead = "; use --transport=udp or --transport=raw";

const char* PortState(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default: return "NOP";
  }
}

}  // namespace

VerbsDevice::VerbsDevice(VerbsOptions opt) : opt_(std::move(opt)) {}

std::unique_ptr<Transport> VerbsDevice::Open(PeerId self) { return OpenEndpoint(self); }

std::unique_ptr<VerbsEndpoint> VerbsDevice::OpenEndpoint(PeerId self) {
  const VerbsApi* api = opt_.api ? opt_.api : VerbsApi::System();
  HS_REQUIRE(!api->unavailable) << "verbs: " << api->unavailable << kInstead;
  int count = 0;
  errno = 0;
  ibv_device** list = api->device_list(&count);
  const int err = errno;
  if (!list || count <= 0) {
    if (list) api->free_device_list(list);
    // Without an RDMA stack in the kernel, libibverbs answers ENOSYS rather than an empty list.
    HS_FAIL() << "verbs: no RDMA device on this host (ibv_get_device_list: "
              << (list || err == 0 ? std::string("none listed") : ErrnoText(err)) << ")" << kInstead;
  }
  ibv_device* dev = nullptr;
  std::string names;
  for (int i = 0; i < count && list[i]; ++i) {
    const char* name = api->device_name(list[i]);
    names += (names.empty() ? "" : ", ") + std::string(name ? name : "?");
    if (!dev && (opt_.device.empty() || opt_.device == (name ? name : ""))) dev = list[i];
  }
  if (!dev) {
    api->free_device_list(list);
    HS_FAIL() << "verbs: no RDMA device named '" << opt_.device << "' (found: " << names << ")";
  }
  const char* dn = api->device_name(dev);
  const std::string name = dn ? dn : "?";
  ibv_context* ctx = api->open_device(dev);
  const int open_err = errno;
  api->free_device_list(list);  // an opened device stays valid (ibv_free_device_list(3))
  HS_REQUIRE(ctx) << "verbs: cannot open RDMA device " << name << ": " << ErrnoText(open_err);
  ibv_port_attr port{};
  if (api->query_port(ctx, opt_.port, &port) != 0) {
    const int e = errno;
    api->close_device(ctx);
    HS_FAIL() << "verbs: RDMA device " << name << " has no port " << int{opt_.port} << " (" << ErrnoText(e) << ")";
  }
  if (port.state == IBV_PORT_INIT || port.state == IBV_PORT_ARMED) {  // coming up: ask again later
    api->close_device(ctx);
    return nullptr;
  }
  if (port.state != IBV_PORT_ACTIVE) {
    api->close_device(ctx);
    HS_FAIL() << "verbs: port " << int{opt_.port} << " of " << name << " is " << PortState(port.state)
              << " (no link?)" << kInstead;
  }
  return std::make_unique<VerbsEndpoint>(self, opt_, api, ctx, name, port);
}

std::pair<std::unique_ptr<Transport>, std::unique_ptr<Transport>> VerbsDevice::LoopbackPair() {
  auto a = OpenEndpoint(0);
  auto b = a ? OpenEndpoint(1) : nullptr;
  HS_REQUIRE(a && b) << "verbs: port " << int{opt_.port} << " is not active yet";
  a->AddPeer(1, b->Address());
  b->AddPeer(0, a->Address());
  return {std::move(a), std::move(b)};
}

}  // namespace hogstream
