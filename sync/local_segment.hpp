// The in-process sync segment: a master buffer and a slave buffer of one process (a solver's
// private copy and the shared weights) linked by one daemon thread that drives the delta rule's
// two endpoints (sync/segment.hpp) over the in-process transport, under the fault decorator for
// tests. The one place in sync/ that wires a backend: the thin local case of a segment.
// Not for: links between processes or machines (they run the same endpoints over a network
// transport).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "base/news.hpp"
#include "sync/segment.hpp"
#include "transport/fault/endpoint.hpp"

namespace hogstream {

struct SegmentOptions {
  uint32_t chunk_floats = 16384;  // 64 KiB of floats
  uint32_t slots = 4;             // transport slots per direction
  FaultOptions faults;            // injected on both directions (seeds derived from faults.seed)
                                  // by transport/fault/ over the in-process pair
  uint32_t pause_us = 0;          // sleep between sweeps; 0 = full speed
  Access access = Access::kPlain;
  SegmentRule rule;               // codec, weights (sync/policy.hpp); default: plain float32
  float elastic = 0;              // easgd's alpha: the slave runs the elastic rule instead
  // Chunks also cut at these offsets (a net's parameter blobs), and those wholly inside one of
  // the `skip` [begin, end) ranges never streamed (--svb carries them: sync/svb.hpp).
  std::vector<size_t> boundaries;
  std::vector<std::pair<size_t, size_t>> skip;
};

struct SegmentStats {
  uint64_t chunks_sent = 0;    // positions posted
  uint64_t bytes_moved = 0;    // payload bytes posted, both directions
  uint64_t sweeps = 0;         // full passes of the master over all chunks
  uint64_t dropped = 0, duplicated = 0, reordered = 0;  // injected by the transport
  uint64_t stale_ignored = 0;  // stale positions + duplicate / too-old deltas ignored
  uint64_t weeded = 0;         // deltas the weed-out rule dropped
  double sweeps_per_sec = 0;   // over the last completed measuring window (~0.5 s)
};

// A master buffer and a slave buffer of n floats linked by one daemon thread that drives both
// endpoints over an in-process transport pair. Control (Start, Stop, Sweep, destructor) from one
// owner thread; stats() from any thread. Both buffers must stay alive while it exists.
class Segment {
 public:
  Segment(float* master, float* slave, size_t n, SegmentOptions options = {});
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  void Start();  // spawns the daemon; no-op when running
  void Stop();   // asks it to stop and joins; no-op when stopped
  bool running() const { return thread_.joinable(); }
  // One synchronous pass over every chunk with faults off, on the calling thread, after
  // draining anything in flight. For a final sync and for tests. Must not run while the daemon
  // does (checked). With no concurrent writers, master == slave afterwards up to rounding.
  void Sweep();

  SegmentStats stats() const;
  // Waits until the daemon has completed `sweeps` more sweeps (positions out, deltas back) than
  // when called: the slave then holds the master's values of after the call, and the master the
  // slave's progress of before it. false: not within `limit`, or the daemon is not running.
  bool AwaitSweeps(uint64_t sweeps, std::chrono::milliseconds limit);
  // The slave copy is lost (it went non-finite): every chunk re-taken whole from the master
  // (slave = master, no progress sent back), on the calling thread; a running daemon is stopped
  // for it and started again. false: some chunk was not re-taken (its position was refused:
  // the master's values are not finite either; or it is never streamed, `skip`).
  bool Retake();

 private:
  void Round();  // post one position, answer it, apply the delta
  void Run();    // the daemon

  SegmentOptions opt_;
  // The master's end (peer 0) and the slave's (peer 1): in-process endpoints under fault
  // decorators (which pass straight through while no fault is asked for). Declared before the
  // endpoints that borrow them, so they are destroyed after them.
  struct Link {
    std::unique_ptr<FaultEndpoint> to_slave, to_master;
  };
  static Link MakeLink(const SegmentOptions& opt, size_t n);
  Link link_;
  MasterEndpoint master_;
  SlaveEndpoint slave_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> live_{false};  // the daemon runs (false once its loop has ended)
  NewsBoard news_;                 // told at each completed sweep and when the daemon ends
  std::atomic<double> rate_{0};
};

}  // namespace hogstream
