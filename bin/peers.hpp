// The machines of a networked job: --peers parsed into one entry per rank, which entry is this
// machine (its own addresses, a launcher's environment or --rank), and this machine's endpoint
// opened with every other rank as a peer (PeerId = rank). What the programs in bin/ call before
// training over udp, raw Ethernet or RDMA verbs.
// Not for: liveness (the endpoint never declares a peer down by itself; the job layer decides),
// discovery (every machine is in the list; verbs queue pair numbers, which are not known before
// start, are traded over UDP by transport/verbs/exchange.hpp), the wire (transport/).
//
// Pure functions (ParsePeers aside, which resolves host names) take the local addresses and the
// environment as arguments, so tests feed them; ReadLocalAddresses and LauncherEnv read the real
// ones. Every error a user can cause is a one-line Error naming the entry or flag at fault.
// The machines of a networked job: --peers parsed into one entry per rank (by the one url parser,
// transport/open.hpp), which entry is this machine (its own addresses, a launcher's environment
// or --rank), and this machine's endpoint opened by the transport factory with every other rank
// as a peer (PeerId = rank). What the programs in bin/ (and `hogstream bench --peers`) call before
// training over udp, raw Ethernet or RDMA verbs.
// Not for: parsing urls or opening endpoints itself (transport/open.hpp does both, once),
// liveness (the endpoint never declares a peer down by itself; the job layer decides),
// discovery (every machine is in the list; verbs queue pair numbers, which are not known before
// start, are traded over UDP by transport/verbs/exchange.hpp), the wire (transport/).
//
// Threads: the caller's only, at start-up. Pure functions (ParsePeers aside, which resolves host
// names) take the local addresses and the environment as arguments, so tests feed them;
// ReadLocalAddresses and LauncherEnv read the real ones. Every error a user can cause is a
// one-line Error naming the entry or flag at fault.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "transport/frame.hpp"
#include "transport/open.hpp"
#include "transport/raw/device.hpp"
#include "transport/transport.hpp"

namespace hogstream {

struct VerbsApi;

// --peers=SPEC: "udp://HOST:PORT,HOST:PORT,..." | "raw://MAC,MAC,..." | "verbs://HOST:PORT,..." |
// "@FILE" (the same text in a file: entries separated by commas and/or newlines, '#' starts a
// comment, blank lines ignored). An entry may go on with its machine's own settings after
// whitespace: "udp://10.0.0.1:7000 solvers=4 private iface=eth1" (a topology file, see
// configs/topology/): one file for a job whose machines differ. The scheme is written on the first entry and may be repeated on
// any other (all must agree). One machine is a valid list; at most kMaxPeers. Errors: an unknown
// or missing scheme, an empty list, a host that does not resolve, a bad or missing port, a bad
// MAC, the same machine twice, an unreadable FILE. ParseTransportUrl with the rules of --peers
// (transport/open.hpp has the grammar).
PeerList ParsePeers(const std::string& spec);
// raw.bin's positional form "MAC1:MAC2[:MAC3...]", each MAC 12 hex digits without colons
// (0025908a56d8:0025908a56d9); text starting "raw://" (or "@") is read as --peers.
PeerList ParseRawBinPeers(const std::string& text);

struct SelfRank {
  int rank = -1;
  std::string how;    // why this rank, for the log: "--rank", "the only local entry", "OMPI_COMM_WORLD_RANK"
  std::string iface;  // raw: the interface whose MAC is the entry (empty when decided otherwise)
};
// The entries that are this machine, in rank order: udp and verbs, those whose ip is in
// local.ipv4; raw, those whose MAC is an interface's (with that interface).
std::vector<std::pair<int, std::string>> LocalEntries(const PeerList& list, const LocalAddresses& local);
// Which entry is this machine, in this order:
//  1. forced >= 0 (--rank=N): that, range-checked.
//  2. The one entry that is local: udp and verbs, its ip is in local.ipv4; raw, its MAC is an
//     interface's.
//  3. A launcher's rank in `env` (OMPI_COMM_WORLD_*, PMI_*, SLURM_PROCID/SLURM_NTASKS, torchrun's
//     RANK/WORLD_SIZE; the first pair present wins) when the addresses do not decide: no entry
//     local, or several (ranks sharing a host; the launcher's must then be one of them).
// Unless --rank decides, a launcher's size, wherever set, must be the list's length (else an Error naming both).
// Otherwise a one-line Error: none local (the local addresses listed), or several local and no
// launcher (run under mpirun/srun/torchrun or give --rank).
SelfRank FindSelf(const PeerList& list, const LocalAddresses& local,
                  const std::map<std::string, std::string>& env, int forced = -1);
// A launcher's rank and size, from the first pair of its variables present in `env`
// (OMPI_COMM_WORLD_*, PMI_*, SLURM_PROCID/SLURM_NTASKS, torchrun's RANK/WORLD_SIZE); nullopt:
// none. A variable set without its partner, or not a number, is a one-line Error.
struct LauncherRank {
  int rank = -1, size = 0;
  const char *rank_var = "", *size_var = "", *who = "";  // e.g. "RANK", "WORLD_SIZE", "torchrun"
};
std::optional<LauncherRank> LauncherRankOf(const std::map<std::string, std::string>& env);
// The launcher variables FindSelf reads, from this process's environment.
std::map<std::string, std::string> LauncherEnv();

struct PeerOpenOptions {
  uint64_t job = 0;             // frames of other jobs are dropped
  std::optional<JobKey> key;    // --job-key
  std::string iface;            // raw: interface override (else SelfRank::iface); verbs:
                                // DEVICE[:PORT] (default: the first RDMA device, port 1)
  // Dest::Group(0) for every rank, "" = none. udp: "GROUP:PORT" (GROUP in 239.0.0.0/8), every
  // endpoint joins; a member also gets its own sends to the group back (source == self()).
  // raw: "on" = a locally administered group MAC derived from `job` (03:48:53:...), or a group
  // MAC; the kernel does not hand a raw endpoint its own sends.
  std::string multicast;
  uint32_t max_payload = 0;     // 0 = the most one datagram (udp) or frame (raw) carries
                                // within the local interface's MTU (udp: at most 32 KiB)
  std::string netns;            // open the sockets in this `ip netns` ("" = the caller's own)
  // verbs: the library (nullptr: the system's libibverbs; tests: a fake), and how long the port
  // may take to come up plus the address exchange with every machine (then a one-line Error).
  const VerbsApi* verbs_api = nullptr;
  std::chrono::milliseconds exchange_timeout{60000};
};
// This machine's endpoint, opened by OpenTransport (transport/open.hpp; udp: bound to its
// entry's ip:port; raw: on the interface) with every other entry as peer (PeerId = rank) and group 0 when asked. Its peer timeout is effectively
// infinite: it never latches kPeerDown by itself. verbs: a UD queue pair on --iface's device;
// the addresses are traded over UDP on the entries' HOST:PORT first (every machine must be up
// within exchange_timeout); --multicast is an Error (no subnet-manager join yet); a build
// without the verbs transport says so in one line.
std::unique_ptr<Transport> OpenPeers(const PeerList& list, const SelfRank& self, const PeerOpenOptions& opt);

}  // namespace hogstream
