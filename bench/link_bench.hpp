// `hogstream bench`: how fast the delta rule moves weights over a transport, next to the raw
// rate of the same link measured in the same run — a plain blast of frames of the same size
// and batch from one endpoint to the other. Per chunk size and batch size: payload Gbit/s and
// frames/s of both, their ratio, frames lost, and the CPU each side used. For tuning chunk
// sizes, batches and windows.
//
// Both ends run in this process (--loopback), each end on its own thread and, where asked, in
// its own network namespace (--netns=A,B: sockets are opened inside them, so two namespaces on
// a veth pair are two "machines"): over `inproc` (shared memory), `udp` (unicast, or positions
// to an IP multicast group; GSO on or off), `raw` (AF_PACKET on an interface per end; positions
// to a group MAC with --multicast) or `verbs` (a UD QP per end; where a device exists).
// What is compared, one direction each: the segment's positions delivered (applied by the
// slave) per second against a raw blast of frames of the same size and batch running both ways
// at once (each end sends and receives, as the segment's positions go out while its deltas come
// back), so both load the link and the CPUs alike; the ratio is the rule's and the protocol's
// cost. The one-way blast (one end only sends) is printed beside it: on a link whose two
// directions share the same CPUs (loopback, veth) it is up to twice the duplex rate.
// Rounds (--repeat) interleave the runs; the table shows medians.
// Both kinds of link are opened by the transport factory (transport/open.hpp): --loopback as a
// url of both ends (udp://A:0,B:0, raw://%IFACE_A,%IFACE_B, verbs://%DEV,%DEV, inproc://),
// --peers parsed by the one --peers parser (bin/peers.hpp). The default chunk sizes follow what
// one message of the link carries (its caps().max_payload: an MTU of 9000 carries no 32 KiB).
// Threads: RunLinkBench runs on the caller's thread and starts its own (one per end, joined).
// --peers: the two ends in two processes on two hosts (or namespaces), each running the same
// command; the entry that is local picks the end; end 0 drives the runs over the link itself
// and prints the table, end 1 serves them and prints nothing.
#pragma once

#include <array>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace hogstream {

struct LinkBenchOptions {
  std::string transport = "udp";                // inproc | udp | raw | verbs
  std::vector<uint32_t> chunk_bytes;             // empty: BenchChunks(the most a message carries)
  std::vector<uint32_t> batches = {16};          // frames per Flush, both runs
  double seconds = 1.0;                          // per measurement
  int repeat = 1;                                // interleaved rounds; medians reported
  uint32_t slots = 64;                           // send/receive slots per endpoint
  uint32_t window = 0;                           // segment: positions awaiting a delta; 0 = 2 MiB
                                                 // of them (at least `slots`)
  size_t buffer_bytes = size_t{16} << 20;        // the weights the segment keeps in sync
  std::array<std::string, 2> netns;              // per end: a network namespace ("" = this one)
  std::array<std::string, 2> where;              // per end: udp IPv4 (default 127.0.0.1), raw
                                                 // interface, verbs device
  std::string multicast;                         // udp: group IPv4; raw: group MAC ("" = unicast)
  bool gso = true;                               // udp: UDP GSO where the kernel has it
  std::string job_key;                           // --job-key=FILE: keyed MACs on every frame
  std::string peers;                             // "udp://IP:PORT,IP:PORT" or "raw://MAC,MAC": this
                                                 // process is the end whose entry is local
  double peer_timeout_s = 30;                    // --peers: how long a silent peer is waited for
};

struct LinkBenchRow {
  std::string transport;
  uint32_t chunk_bytes = 0, batch = 0;
  bool multicast = false, gso = false, keyed = false;
  double segment_gbps = 0;       // positions' payload applied by the slave (one direction)
  double segment_both_gbps = 0;  // positions applied and deltas applied, together
  double raw_gbps = 0, ratio = 0;  // raw both ways at once, per direction; ratio = segment / raw
  double raw_one_way_gbps = 0;     // raw, one end only sending
  double segment_frames_per_s = 0, raw_frames_per_s = 0;  // one direction
  uint64_t segment_lost = 0, raw_lost = 0;  // frames sent and never received (or rejected)
  double segment_sweeps_per_s = 0;
  double cpu_master = 0, cpu_slave = 0;      // CPU seconds per second, segment run
  double cpu_sender = 0, cpu_receiver = 0;   // the same, raw duplex run (end a, end b)
};

// The default chunk sizes on a link whose messages carry at most `most` bytes: 4 KiB, 16 KiB and
// 32 KiB where they fit, and where one does not, `most` (down to a multiple of 16) instead.
// (Inline: `--help` shows them, and programs without the bench link bin/commands.cpp.)
inline std::vector<uint32_t> BenchChunks(uint32_t most = UINT32_MAX) {
  std::vector<uint32_t> sizes;
  for (uint32_t c : {4096u, 16384u, 32768u})
    if (c <= most) sizes.push_back(c);
  if (sizes.size() < 3) sizes.push_back(most / 16 * 16);
  return sizes;
}

// Every chunk size x batch size, `repeat` rounds each (medians of every field); Error (one
// line) for an unknown transport, an unusable end (address, interface, namespace) or a chunk
// that does not fit the transport.
std::vector<LinkBenchRow> RunLinkBench(const LinkBenchOptions& options);
void PrintLinkBench(const std::vector<LinkBenchRow>& rows, std::ostream& os, bool json);

}  // namespace hogstream
