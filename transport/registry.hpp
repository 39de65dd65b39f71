// The schemes of the transport factory (transport/open.hpp), each registered by its own backend
// folder: how an entry's address parses and prints, whether an entry is this host, how one
// machine's end or every end in this process opens, and what a launcher needs of it. Adding a
// backend is its folder (an open.cpp that calls HS_REGISTER_TRANSPORT) and, where its folder is
// new to the build, one CMake line; nothing else names a scheme.
// Threads: registration happens while libraries load (static initialisers); lookups from any
// thread after main starts.
#pragma once

#include <netinet/in.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/open.hpp"
#include "transport/transport.hpp"

namespace hogstream {

struct TransportScheme {
  std::string name;     // "udp": the SCHEME of urls
  std::string address;  // "HOST:PORT": an entry's form, for error messages
  bool machines = true;  // may name the machines of a job (false: only ends in one process, inproc)
  bool admits = false;   // can take a new machine into a running job (Transport::set_admit)
  // A url that is not a list of entries (inproc://NAME: the two ends of one link); null: lists only.
  std::function<PeerList(const std::string& url, const UrlRules& rules)> whole;
  // Entry e's address from `body` (after "name://"); returns what makes the machine itself ("" where
  // two entries may name the same place: ends in this process). A mistake: one line naming rules.flag.
  std::function<std::string(const std::string& body, const UrlRules& rules, PeerEntry* e)> parse;
  // "udp://10.0.0.1:7000": entry e, for logs.
  std::function<std::string(const PeerEntry& e)> text;
  // Whether entry e is an address of this host (`local`); *iface: the interface it is on, where
  // the backend opens on one (raw). How a process finds its own entry.
  std::function<bool(const PeerEntry& e, const LocalAddresses& local, std::string* iface)> is_here;
  // This host's addresses as this scheme names them, for "none is this machine (local: ...)".
  std::function<std::vector<std::string>(const LocalAddresses& local)> local_text;
  // Whether the entry's traffic may leave this host (an unkeyed job warns then).
  std::function<bool(const PeerEntry& e)> leaves_host;
  // A rendezvous: this machine's entry on `local` (the address it reaches the store from); a
  // port it needs is held in *hold until its endpoint opens.
  std::function<std::string(const sockaddr_in& local, std::shared_ptr<void>* hold)> own_entry;
  // One machine's end (rank o.rank), every other entry its peer; null: none (ends in one process only).
  std::function<std::unique_ptr<Transport>(const PeerList& list, const OpenOptions& o)> open_machine;
  // Every end of the list in this process, each the others' peer.
  std::function<std::vector<std::unique_ptr<Transport>>(const PeerList& list, const OpenOptions& o)> open_here;
  // A url of two ends in this process that needs nothing of the host ("": it needs a device or
  // namespaces the caller sets up): what a conformance suite opens.
  std::string loopback;
};

// Adds a scheme (an Error if its name is taken); see HS_REGISTER_TRANSPORT.
void RegisterTransport(TransportScheme scheme);
// The scheme named `name`; null when none is registered.
const TransportScheme* FindTransport(const std::string& name);
// Every registered scheme, by name.
std::vector<const TransportScheme*> Transports();
// "udp://, raw:// or verbs://": the schemes that name machines (`machines`) or any, for errors.
std::string TransportList(bool machines);

// "raw://MAC,...|udp://HOST:PORT,...|verbs://HOST:PORT,...": the url forms of the schemes that
// name machines, for a flag's help.
std::string TransportUsage();

// An address of this host with a UDP port held open on it (until *hold is released): "IP:PORT",
// for a scheme whose entries are HOST:PORT (udp's own_entry).
std::string HeldUdpEntry(const sockaddr_in& local, std::shared_ptr<void>* hold);

}  // namespace hogstream

// At namespace scope in a backend's open.cpp: HS_REGISTER_TRANSPORT(udp, MakeUdpScheme());
#define HS_REGISTER_TRANSPORT(id, scheme) \
  namespace {                             \
  [[maybe_unused]] const bool hs_transport_registered_##id = (::hogstream::RegisterTransport(scheme), true); \
  }
