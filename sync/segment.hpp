// The delta rule between a MASTER and a SLAVE copy of a flat weight buffer, and the in-process
// Segment that runs it with one daemon thread. Not for: choosing topology, other segment kinds'
// devices (gpu, shm, net reuse the endpoints over their own transports).
//
// The buffer is cut into chunks (offset, length) of `chunk_floats` floats (the last may be
// shorter). Per chunk, round-robin, forever:
//   1. master posts POSITION pos = its current values, with seq = that chunk's next number;
//   2. slave, for each element:  d = w - last;  w = w + (pos - last);  last = pos + d;
//      and posts DELTA d with the same seq;
//   3. master: w += d.
// `last` is what the master holds for this chunk once it has applied d (its own concurrent
// updates aside), so w - last is exactly the slave's progress not yet sent. NOTE: DESIGN.md
// writes `last = pos`; that double-counts: with w = last + u, pos = m, the slave sends u, then
// next round sends (m + u) - m = u again, and the master grows without bound. Hence pos + d.
//
// Invariant (real arithmetic): master + (deltas in flight) + (w - last) + (deltas dropped)
//   = initial + all master increments + all slave increments.
// The invariant holds whatever position the slave answers, so sequence numbers are about
// freshness, not safety: the slave ignores a POSITION not newer than the last it applied for
// that chunk (a duplicate, or one overtaken), so its view never steps back; the master applies
// each DELTA seq once (a 64-seq window per chunk catches duplicates) but still applies a
// reordered older one, since deltas are disjoint progress. A dropped POSITION delays its chunk
// by one sweep. A dropped DELTA loses exactly that delta: the slave's progress on that chunk
// during one round, never more, and never a corruption of the weights.
// (Recovering it would need an ack from the master and a copy of every unacked delta on the
// slave: one more buffer of n floats; not done.)
//
// Concurrency (Hogwild): solver threads write w on both sides while the rule reads and writes
// it, without locks. A solver write that lands between the rule's read and write of an element
// is lost, as in any Hogwild update; nothing else breaks: no check looks at values. Plain float
// accesses (Access::kPlain, the default) are a formal data race that is benign on every target
// we build for (aligned 4-byte loads and stores do not tear); Access::kAtomic uses relaxed
// std::atomic_ref<float> instead, re-reads w just before writing it (narrowing the lost-write
// window), and is not vectorised: bench/segment_bench measured it 2-3x slower than kPlain
// (64 MiB buffer, 64 KiB chunks: 2.5 vs 7.2 GB/s of weights synchronised), hence the default.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "transport/fault/endpoint.hpp"
#include "transport/transport.hpp"

namespace hogstream {

enum class Access { kPlain, kAtomic };

// How a buffer of n floats is cut into chunks.
struct ChunkLayout {
  ChunkLayout(size_t n, uint32_t chunk_floats);
  size_t n;
  uint32_t chunk_floats;
  uint32_t count;  // number of chunks
  size_t offset(uint32_t c) const { return static_cast<size_t>(c) * chunk_floats; }
  uint32_t length(uint32_t c) const;
};

// Master side. One thread at a time drives it (PostNextPosition, PollDeltas); stats() from any.
class MasterEndpoint {
 public:
  // `master` is borrowed; solver threads may write it concurrently. Positions go to `slaves`
  // (a peer, or a group of them); deltas are accepted from any peer.
  MasterEndpoint(float* master, size_t n, uint32_t chunk_floats, Transport* transport, Dest slaves,
                 Access access = Access::kPlain);

  // Posts (and flushes) the POSITION of the next chunk in round-robin order. false = no send
  // slot; the same chunk goes next time.
  bool PostNextPosition();
  // Applies every DELTA waiting. Returns how many were applied.
  size_t PollDeltas();

  const ChunkLayout& layout() const { return layout_; }
  uint32_t next_chunk() const { return next_; }

  struct Stats {
    uint64_t positions_sent, deltas_applied, deltas_duplicate, deltas_too_old, malformed,
        bytes_sent, sweeps;
  };
  Stats stats() const;

 private:
  bool Fresh(uint32_t chunk, uint64_t seq);  // marks seq applied; false if seen or too old

  float* w_;
  ChunkLayout layout_;
  Transport* t_;
  Dest slaves_;
  Access access_;
  uint32_t next_ = 0;
  std::vector<uint64_t> seq_;   // last seq posted, per chunk
  std::vector<uint64_t> high_;  // highest delta seq applied, per chunk
  std::vector<uint64_t> seen_;  // bit k: delta high_ - k applied (a 64-seq replay window)
  std::atomic<uint64_t> positions_sent_{0}, deltas_applied_{0}, deltas_duplicate_{0},
      deltas_too_old_{0}, malformed_{0}, bytes_sent_{0}, sweeps_{0};
};

// Slave side. One thread at a time drives it (PollPositions); stats() from any.
class SlaveEndpoint {
 public:
  // `slave` is borrowed and must equal the master at construction (last starts as a copy).
  SlaveEndpoint(float* slave, size_t n, uint32_t chunk_floats, Transport* transport,
                Access access = Access::kPlain);

  // Answers waiting POSITIONs with DELTAs (to the peer that sent each) while a send slot is
  // free, then flushes. Returns how many.
  size_t PollPositions();

  const ChunkLayout& layout() const { return layout_; }

  struct Stats {
    uint64_t positions_applied, positions_stale, malformed, bytes_sent;
  };
  Stats stats() const;

 private:
  float* w_;
  ChunkLayout layout_;
  Transport* t_;
  Access access_;
  struct FreeDelete {
    void operator()(float* p) const;
  };
  std::unique_ptr<float[], FreeDelete> last_;  // 64-byte aligned
  std::vector<uint64_t> seq_;  // last position seq applied, per chunk
  std::atomic<uint64_t> positions_applied_{0}, positions_stale_{0}, malformed_{0}, bytes_sent_{0};
};

struct SegmentOptions {
  uint32_t chunk_floats = 16384;  // 64 KiB of floats
  uint32_t slots = 4;             // transport slots per direction
  FaultOptions faults;            // injected on both directions (seeds derived from faults.seed)
                                  // by transport/fault/ over the in-process pair
  uint32_t pause_us = 0;          // sleep between sweeps; 0 = full speed
  Access access = Access::kPlain;
};

struct SegmentStats {
  uint64_t chunks_sent = 0;    // positions posted
  uint64_t bytes_moved = 0;    // payload bytes posted, both directions
  uint64_t sweeps = 0;         // full passes of the master over all chunks
  uint64_t dropped = 0, duplicated = 0, reordered = 0;  // injected by the transport
  uint64_t stale_ignored = 0;  // stale positions + duplicate / too-old deltas ignored
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
  std::atomic<double> rate_{0};
};

}  // namespace hogstream
