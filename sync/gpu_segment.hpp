// The GPU↔host sync segment: a GPU solver's weights on the device (the slave copy `w`, with its
// `last` beside it on the device) linked to the host weights of its process (the master) by the
// delta rule of sync/segment.hpp, so that a GPU solver trains on its own device copy and only
// chunks of deltas and positions cross the bus, never every weight every iteration.
//
// Per chunk, round-robin: the master's values are read into a pinned staging buffer, copied to
// the device on the segment's own stream, one kernel applies the slave's rule and writes the
// delta (core/slave_rule.hpp: d = w - last; w += pos - last; last = pos + d), the delta is
// copied back into pinned memory, and an event marks the chunk's end; once the event has come,
// the master takes the delta (master += d). Each chunk in flight holds one of `slots` staging
// slots, and the endpoint advances as a state machine (Step): it never waits for the device,
// so one daemon can drive it beside other work. Invariant, as the CPU segment's:
//   master + (deltas on their way back) + (w - last) = initial + every increment on either side.
// A chunk is never in flight twice (a second position would overtake the first's delta and
// step the device copy back for a round). Bandwidth: at most `max_bytes_per_s` of positions and
// deltas together (0: no cap).
//
// Threads: Step and Sweep from any thread (one at a time: a turn holds the segment), Start and
// Stop from the owner; stats() from any thread. The device copy is written by the solver's own kernels concurrently
// (Hogwild, on the device: a solver write that lands inside the rule's read and write of an
// element is lost, as on the host); the master likewise by host solvers.
// Not for: links between host copies (sync/local_segment.hpp) or machines (sync/net_job.hpp).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/news.hpp"
#include "core/device_api.hpp"
#include "sync/segment.hpp"

namespace hogstream {

struct GpuSegmentOptions {
  uint32_t chunk_floats = 16384;  // 64 KiB of floats
  uint32_t slots = 4;             // chunks in flight at once
  double max_bytes_per_s = 0;     // positions + deltas per second (0: no cap)
  uint32_t idle_us = 50;          // the daemon's sleep when a Step found nothing to do
  // The master's update counts per chunk, shared with the other copies' segments (CPU ones
  // too, sync/segment.hpp): each delta taken counts there, its staleness counted as the CPU
  // master counts it (the updates of its chunk since this copy's previous delta, plus one).
  std::shared_ptr<ChunkUpdates> updates;
  // How the master takes each delta: the same rule, called the same way, as a CPU master's
  // (sync/aggregate.hpp; private copies' default: min(1, 2 / staleness) from three up). Null:
  // every delta whole. A delta is first checked as a CPU master checks it (DeltaCheck).
  std::shared_ptr<AggregateRule> aggregate;
};

struct GpuSegmentStats {
  uint64_t chunks = 0;     // chunks whose delta the master took
  uint64_t sweeps = 0;     // passes over every chunk (chunks / the chunk count)
  uint64_t bytes = 0;      // positions and deltas moved
  uint64_t capped = 0;     // Steps that left a free slot idle for the bandwidth cap
  uint64_t master_runs = 0;  // RunOnMaster calls (the leader's tests and snapshots)
  uint64_t weighted = 0;     // deltas taken at a weight below 1 (the aggregation rule)
  uint64_t refused = 0;      // deltas not taken: not finite (a diverged copy's) or absurd (DeltaCheck)
  uint64_t retakes = 0;      // Retake calls that re-took the master's values
};

class GpuSegment {
 public:
  // `master`: the host weights (n floats, any host memory); `device_w`: room for the solver's
  // weights on the device (n floats). The segment fills the device copy and its `last` from one
  // snapshot of the master, and returns once both are on the device: the solver's kernels may
  // touch the copy from then on, not before. (Taking `last` from a copy the solver uploaded
  // itself races with the solver's first steps on its own stream: a step made before `last`
  // was taken is never sent. The fake found it: GpuSegmentLedger.) Both outlive the segment.
  GpuSegment(DeviceApi& api, float* master, float* device_w, size_t n, GpuSegmentOptions options = {});
  ~GpuSegment();
  GpuSegment(const GpuSegment&) = delete;
  GpuSegment& operator=(const GpuSegment&) = delete;

  // One turn of the state machine, never blocking: the master takes the deltas whose events
  // have come, then free slots take the next chunks (within the cap). true: something moved.
  bool Step();
  // A daemon thread that runs Step (sleeping `idle_us` when nothing moved); Stop joins it.
  void Start();
  void Stop();
  bool running() const { return thread_.joinable(); }
  // Every chunk once more, from the calling thread, waiting for all of them (and for any
  // already in flight): afterwards the master holds the device's progress of before the call,
  // and the device the master's values of it. A daemon's Steps wait meanwhile.
  void Sweep();
  // Waits until `sweeps` more passes over every chunk have completed, or `limit` has passed
  // (false), polling; for a solver bounding its lead over the segment (HogwildOptions::copy_lead).
  bool AwaitSweeps(uint64_t sweeps, std::chrono::milliseconds limit);
  // Runs `f` with the master's values in the device copy, then puts the copy back as it was:
  // the leader's test on a GPU solver reads the job's weights without rolling the solver's
  // copy back under `last` (which would send the difference to the master as progress). The
  // segment issues nothing meanwhile and lands what it has in flight; on the device, the copy
  // is swapped after the work the solver queued on its stream `solver` before the call, and put
  // back after the work `f` queued there, before anything queued later. From the solver's
  // thread, the daemon running or not.
  void RunOnMaster(StreamId solver, const std::function<void()>& f);
  // The device copy is lost (it went non-finite): the copy and `last` become the master's
  // values of now (nothing of the copy is sent back), ordered with the solver's stream as
  // RunOnMaster's swap is. false: the master's values are not finite either (nothing done).
  // From the solver's thread, the daemon running or not.
  bool Retake(StreamId solver);
  GpuSegmentStats stats() const;
  size_t chunks() const { return count_; }
  StreamId stream() const { return stream_; }  // the segment's own (tests stall it)

 private:
  enum class State : uint8_t { kFree, kInFlight };
  struct Slot {
    State state = State::kFree;
    uint32_t chunk = 0;
    float* pos_h = nullptr;    // pinned
    float* delta_h = nullptr;  // pinned
    float* pos_d = nullptr;    // device
    float* delta_d = nullptr;  // device
    EventId done = 0;
  };
  size_t offset(uint32_t c) const { return static_cast<size_t>(c) * opt_.chunk_floats; }
  uint32_t length(uint32_t c) const;
  bool Complete(Slot& s);  // the master takes its delta, if its event has come
  void Drain();            // the calling thread lands every chunk in flight (under step_mu_)
  // Pauses the segment and lands what it has in flight: for the swaps of RunOnMaster and Retake.
  void Quiesce();
  // `swap`'s copies on the segment's stream, after the work queued on `solver` so far and
  // before any queued there later.
  void InTurn(StreamId solver, const std::function<void()>& swap);
  void Issue(Slot& s, uint32_t c);
  bool Budget(size_t bytes);  // the cap allows `bytes` more now (and takes them)
  void Run();

  DeviceApi& api_;
  float* master_;
  float* w_;
  size_t n_;
  GpuSegmentOptions opt_;
  uint32_t count_;
  float* last_ = nullptr;  // device
  StreamId stream_ = 0;
  std::vector<Slot> slots_;
  std::vector<uint8_t> in_flight_;  // per chunk
  std::vector<uint64_t> last_update_;  // per chunk: the update count after this copy's previous delta
  DeltaCheck check_;
  uint32_t next_ = 0;               // the next chunk to issue
  double tokens_ = 0;               // the cap's bucket, bytes
  std::chrono::steady_clock::time_point refilled_;
  std::atomic<uint64_t> chunks_done_{0}, bytes_{0}, capped_{0}, master_runs_{0}, weighted_{0}, refused_{0},
      retakes_{0};
  std::atomic<bool> quit_{false};
  std::atomic<bool> paused_{false};   // RunOnMaster: Step issues nothing
  NewsBoard swept_;                   // told each time chunks_done_ completes a sweep
  std::mutex step_mu_;                // a turn (Step, Sweep, RunOnMaster's drain): slots change only under it
  std::atomic<uint32_t> in_flight_count_{0};
  float* saved_ = nullptr;            // device: the copy, kept across RunOnMaster (made at its first use)
  EventId solver_done_ = 0, swapped_ = 0;  // RunOnMaster's ordering with the solver's stream
  std::thread thread_;
};

// The device copies of one process's GPU solvers (gpus.bin): each solver trains its own copy on
// its device, linked to the process's host weights (the master) by its own GpuSegment, and ONE
// daemon thread drives every segment in turn (their Steps never wait): one host core serves
// any number of GPUs, and no two of them write the master at once.
// Threads: Add from any thread before Start (on the thread whose device the copy goes on);
// Finish and RunOnMaster from the copy's solver thread; stats from any thread.
class GpuCopies {
 public:
  GpuCopies(DeviceApi& api, float* master, size_t n, GpuSegmentOptions options = {});
  ~GpuCopies();  // the daemon stops, then the segments and copies go
  GpuCopies(const GpuCopies&) = delete;
  GpuCopies& operator=(const GpuCopies&) = delete;

  // A new copy of n floats in device memory, holding the master's values when Add returns
  // (GpuSegment's constructor); returns its index. Not once the daemon runs.
  int Add();
  float* copy(int k) { return copies_[k]->w; }
  GpuSegment& segment(int k) { return *copies_[k]->segment; }
  int size() const { return static_cast<int>(copies_.size()); }

  void Start();
  void Stop();
  // Copy k's solver has stopped training it: the daemon leaves it, and one last sweep from the
  // calling thread hands the master everything the copy made (its final deltas).
  void Finish(int k);
  // GpuSegment::RunOnMaster for copy k.
  void RunOnMaster(int k, StreamId solver, const std::function<void()>& f) {
    copies_[k]->segment->RunOnMaster(solver, f);
  }
  DeviceApi& api() { return api_; }
  std::vector<GpuSegmentStats> stats() const;

 private:
  struct Copy {
    float* w = nullptr;
    std::unique_ptr<GpuSegment> segment;
    std::atomic<bool> finished{false};
  };
  void Run();

  DeviceApi& api_;
  float* master_;
  size_t n_;
  GpuSegmentOptions opt_;
  mutable std::mutex mu_;  // copies_ (its growth, before Start)
  std::vector<std::unique_ptr<Copy>> copies_;
  std::atomic<bool> quit_{false};
  std::thread thread_;
};

}  // namespace hogstream
