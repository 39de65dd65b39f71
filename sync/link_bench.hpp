// `hogstream bench`: how fast the delta rule moves weights over a transport, next to the raw
// rate of the same link measured in the same run — a plain blast of frames of the same size
// from one endpoint to the other. Per chunk size: payload Gbit/s and frames/s of both, their
// ratio, frames lost, and the CPU each side used. For tuning chunk sizes and batches.
//
// Both ends run in this process (--loopback): over `inproc` (two threads, shared memory) or
// `udp` (two sockets on 127.0.0.1). Both rates are one direction's payload: the segment's
// positions out (its deltas come back at the same rate on the other direction), the raw
// blast's delivered frames; the JSON also has the segment's two directions together.
// Not yet: raw Ethernet and verbs (their backends come next), peers on other machines.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace hogstream {

struct LinkBenchOptions {
  std::string transport = "udp";             // inproc | udp
  std::vector<uint32_t> chunk_bytes = {4096, 16384, 32768};
  double seconds = 1.0;                      // per measurement
  uint32_t slots = 64;                       // send/receive slots per endpoint
  size_t buffer_bytes = size_t{16} << 20;    // the weights the segment keeps in sync
};

struct LinkBenchRow {
  std::string transport;
  uint32_t chunk_bytes = 0;
  double segment_gbps = 0;       // positions' payload, master -> slave (one direction)
  double segment_both_gbps = 0;  // positions and deltas together
  double raw_gbps = 0, ratio = 0;  // ratio = segment_gbps / raw_gbps
  double segment_frames_per_s = 0, raw_frames_per_s = 0;
  uint64_t segment_lost = 0, raw_lost = 0;  // frames sent and never received
  double segment_sweeps_per_s = 0;
  double cpu_master = 0, cpu_slave = 0;      // CPU seconds per second, segment run
  double cpu_sender = 0, cpu_receiver = 0;   // the same, raw run
};

// Runs every chunk size; Error (one line) for an unknown transport or a chunk that does not
// fit the transport.
std::vector<LinkBenchRow> RunLinkBench(const LinkBenchOptions& options);
void PrintLinkBench(const std::vector<LinkBenchRow>& rows, std::ostream& os, bool json);

}  // namespace hogstream
