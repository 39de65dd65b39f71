// The transport factory: a url names the machines of a job (or the ends of a link in this
// process), and OpenTransport / OpenTransports open the endpoint(s) behind the Transport
// interface, each knowing every other as a peer (PeerId = the entry's rank, its position in the
// url) and multicast group 0 when asked. Callers never construct a backend, nor call its
// AddPeer / AddGroup with addresses or MACs: each backend's registration does
// (transport/registry.hpp; transport/<x>/open.cpp). Here: the url grammar, the parser of peer
// lists (`--peers`, `hogstream bench --peers`, frame_flood's MACHINES go through it), this host's
// addresses, and the dispatch to the scheme a url names.
// Not for: deciding which entry this process is (bin/peers.hpp: FindSelf, from the addresses
// and a launcher's environment), liveness (the caller's peer timeout), the wire (each backend),
// discovery (every machine is in the url; verbs queue pair numbers are traded over UDP by
// transport/verbs/exchange.hpp inside OpenTransport).
//
// Url grammar (what --peers took before this file existed, plus ends opened in this process):
//   URL     := LIST | "@" FILE | SCHEME "://" WHOLE     (a scheme's url of its own: inproc://[NAME])
//   LIST    := ENTRY ("," ENTRY)*     a FILE may also separate entries by newlines; '#' starts a
//                                     comment; blank entries are ignored
//   ENTRY   := [SCHEME "://"] ADDRESS (" " SETTING)*   the scheme on the first entry, repeated
//                                     on any other (all agree); at most kMaxPeers entries
//   ADDRESS := the scheme's own (TransportScheme::address): udp and verbs HOST:PORT (HOST a name
//              or IPv4 address, resolved, AF_INET; PORT 1..65535; verbs trades its RDMA address
//              there), raw a MAC (12 hex digits, or 6 pairs joined by ':')
//   SETTING := solvers=SPEC | private | iface=NAME     a topology file's per-machine settings
//                                     (configs/topology/); the factory reads only iface=
// Only where every end is opened in this process (OpenTransports; UrlRules::here):
//   udp     PORT 0                    the kernel picks the port
//   raw     "%" IFACE                 an end on interface IFACE, its MAC learnt when opened
//   verbs   "%" [DEVICE [":" PORT]]   an end on that RDMA device and port (default: the first
//                                     device, port 1); no address exchange
//   inproc://[NAME]                   two ends over shared memory; NAME only names the link
// Multicast is not in the url: OpenOptions::multicast (--multicast) names group 0.
// Every mistake in a url is a one-line Error naming the url's flag and the entry at fault.
//
// Threads: everything here runs on the caller's (owner) thread, before traffic; the endpoints it
// returns then follow transport.hpp's model. It may block: host names resolve (getaddrinfo), a
// verbs OpenTransport waits for its port and for every machine's address (exchange_timeout).
// TransportsOpened() may be read from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "transport/frame.hpp"
#include "transport/raw/device.hpp"  // Mac
#include "transport/transport.hpp"

namespace hogstream {

struct VerbsApi;

struct PeerEntry {
  std::string text;   // the address as the user wrote it (named in error messages)
  std::string ip;     // udp, verbs: IPv4 dotted, resolved (getaddrinfo, AF_INET)
  uint16_t port = 0;  // udp, verbs: 1..65535 (verbs: where the machine trades its RDMA address); udp
                      // 0: the kernel picks (ends in this process only)
  Mac mac{};          // raw (zero for a "%IFACE" end)
  bool local = false;  // "%NAME": an end in this process on interface / device `iface`
  // This machine's own settings, from a topology file (empty / false: the command line's).
  std::string solvers;          // solvers=SPEC: its solver threads, [gpu:]*N (bin/ reads it)
  bool private_copies = false;  // private: each solver its own copy (bin/ reads it)
  std::string iface;            // iface=NAME or %NAME: raw's interface, verbs' DEVICE[:PORT]
};

struct PeerList {
  std::string scheme;            // the registered scheme's name ("udp", "raw", ...)
  std::vector<PeerEntry> peers;  // index = rank
};
constexpr size_t kMaxPeers = 65534;

struct UrlRules {
  std::string flag = "url";  // names the text in errors ("--peers")
  bool here = false;         // allow what only ends opened in this process can be (see above)
};
// The url's entries; a one-line Error for any mistake: an unknown or missing scheme, an empty
// list, a host that does not resolve, a bad or missing port, a bad MAC, the same machine twice,
// an unreadable FILE, a setting that is none.
PeerList ParseTransportUrl(const std::string& url, const UrlRules& rules = {});
// "udp://127.0.0.1:9000" style text of entry r, for logs.
std::string PeerName(const PeerList& list, int r);

struct LocalAddresses {
  std::vector<std::string> ipv4;                  // every IPv4 address of an up interface (127.0.0.1 too)
  std::vector<std::pair<std::string, Mac>> macs;  // (interface, MAC) of every interface with a non-zero MAC
};
// getifaddrs in network namespace `netns` ("" = the calling thread's own).
LocalAddresses ReadLocalAddresses(const std::string& netns = "");



struct OpenOptions {
  int rank = -1;                // OpenTransport: the entry this process is (required)
  uint64_t job = 0;             // frames of other jobs are dropped
  std::optional<JobKey> key;    // --job-key: a keyed MAC on every frame
  // The most one message carries; 0 = the most that goes unfragmented: udp, one datagram within
  // the MTU of the end's address (UdpPayloadFor); raw, one frame within the interface's MTU;
  // verbs, the port's MTU; inproc, 32 KiB. A size the backend cannot carry is its one-line Error.
  uint32_t max_payload = 0;
  uint32_t send_slots = 0;      // 0 = the backend's default
  uint32_t recv_slots = 0;      // udp, verbs; 0 = the backend's default
  uint32_t max_batch = 0;       // udp, raw, verbs; 0 = the backend's default
  // Messages per peer that may be in flight to this end at once (0: unknown): a backend that
  // drops what finds no receive buffer (verbs' UD) sizes its buffers from it.
  uint32_t in_flight = 0;
  // Liveness: a heartbeat to every peer this often, and a peer silent for peer_timeout_ms (0: 10
  // heartbeats) is down. heartbeat_ms 0: no heartbeats and no timeout, for a caller whose own
  // messages decide who is alive (a job: sync/net_job.hpp's control messages).
  uint32_t heartbeat_ms = 50;
  uint32_t peer_timeout_ms = 0;
  bool gso = true;              // udp: UDP GSO where the kernel has it
  // OpenTransport: raw, the interface (default: the entry's iface=, else the one whose MAC is
  // the entry's); verbs, DEVICE[:PORT] (default: the entry's iface=, else the first device, 1).
  std::string iface;
  // Per rank, the `ip netns` to open that end's sockets in (verbs: none); one name serves every
  // end; empty = the caller's own namespace.
  std::vector<std::string> netns;
  // Group 0, "" = none. udp: "GROUP:PORT", GROUP in 239.0.0.0/8 (a member also gets its own
  // sends back); raw: "on" (a locally administered group MAC derived from `job`, 03:48:53:...)
  // or a group MAC; verbs, inproc: an Error.
  std::string multicast;
  std::vector<PeerId> group_members;  // the ranks that receive group 0 (empty: every rank)
  // verbs: the library (nullptr: the system's libibverbs; tests: a fake), and how long the port
  // may take to come up plus the address exchange with every machine (then a one-line Error).
  const VerbsApi* verbs_api = nullptr;
  std::chrono::milliseconds exchange_timeout{60000};
};

// The endpoint of entry `o.rank` of a job's machines (udp: bound to its HOST:PORT; raw: on its
// interface; verbs: a UD queue pair, every machine's address traded over UDP on the entries'
// HOST:PORT first), every other entry its peer. The url form parses with UrlRules{"url"};
// inproc:// and "%"/port-0 entries are Errors here (their ends live in one process).
std::unique_ptr<Transport> OpenTransport(const std::string& url, const OpenOptions& o);
std::unique_ptr<Transport> OpenTransport(const PeerList& list, const OpenOptions& o);
// Every end of the url opened in this process (index = rank), each the others' peer: both ends
// of a link for a bench or a test. o.rank and o.iface are not used. The url form parses with
// UrlRules{"url", /*here=*/true}.
std::vector<std::unique_ptr<Transport>> OpenTransports(const std::string& url, const OpenOptions& o);
std::vector<std::unique_ptr<Transport>> OpenTransports(const PeerList& list, const OpenOptions& o);

// Endpoints this process has opened through the factory (tests check that a program goes
// through it).
uint64_t TransportsOpened();

}  // namespace hogstream
