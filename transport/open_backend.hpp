// What a backend's registration (transport/<x>/open.cpp, transport/registry.hpp) shares with the
// factory: the url pieces every scheme parses alike, the options every backend takes alike, and
// this host's interfaces. Only backends' open.cpp files include it.
#pragma once

#include <string>

#include "transport/open.hpp"
#include "transport/registry.hpp"

namespace hogstream {

// A port 0..65535 written in decimal digits; -1 when it is not one.
int ParsePort(const std::string& s);
// HOST:PORT into e->ip (resolved to its first IPv4 address) and e->port; PORT 0 only where
// rules.here. A mistake is one line naming rules.flag and the entry.
void ParseHostPort(const std::string& body, const UrlRules& rules, PeerEntry* e);
// The `ip netns` of end r ("" = the caller's own).
const std::string& NetnsOf(const OpenOptions& o, size_t r);
// End r receives group 0.
bool GroupMember(const OpenOptions& o, size_t r);
// The MTU of the interface holding IPv4 address `ip` in namespace `netns`; 0 when none does.
uint32_t MtuOfAddress(const std::string& ip, const std::string& netns);
// The first interface in `netns` whose MAC is `mac`; "" when none.
std::string InterfaceWithMac(const Mac& mac, const std::string& netns);
// Whether some entry's ip is one of `local`'s (udp, verbs: is_here).
bool HasAddress(const LocalAddresses& local, const std::string& ip);

// What every wire backend's options take alike from OpenOptions: slots and batch (where given),
// the job, its key and liveness.
template <class BackendOptions>
void TakeCommon(const OpenOptions& o, BackendOptions* b) {
  if (o.send_slots) b->send_slots = o.send_slots;
  if constexpr (requires { b->recv_slots; }) {
    if (o.recv_slots) b->recv_slots = o.recv_slots;
  }
  if (o.max_batch) b->max_batch = o.max_batch;
  b->job = o.job;
  b->key = o.key;
  b->heartbeat_ms = o.heartbeat_ms;
  b->peer_timeout_ms = o.peer_timeout_ms;
}

}  // namespace hogstream
