// The in-process Segment daemon (see local_segment.hpp).
#include "sync/local_segment.hpp"

#include <algorithm>
#include <chrono>

#include "base/common.hpp"
#include "core/context.hpp"
#include "transport/inproc/device.hpp"

namespace hogstream {

namespace {
constexpr auto kRelaxed = std::memory_order_relaxed;
}  // namespace

// ---------------------------------------------------------------- Segment

namespace {
FaultOptions Reseeded(FaultOptions f, uint64_t salt) {
  f.seed ^= salt;
  return f;
}
}  // namespace

Segment::Link Segment::MakeLink(const SegmentOptions& opt, size_t n) {
  HS_REQUIRE(opt.chunk_floats > 0) << "chunk size must be at least one float";
  InprocOptions o;
  o.max_payload = kWireHeaderBytes + static_cast<uint32_t>(
      sizeof(float) * std::min<size_t>(opt.chunk_floats, std::max<size_t>(n, 1)));
  o.slots = opt.slots;
  auto [to_slave, to_master] = InprocDevice::MakePair(o);
  return {std::make_unique<FaultEndpoint>(std::move(to_slave), opt.faults),
          std::make_unique<FaultEndpoint>(std::move(to_master),
                                          Reseeded(opt.faults, 0x9e3779b97f4a7c15ull))};
}

Segment::Segment(float* master, float* slave, size_t n, SegmentOptions options)
    : opt_(std::move(options)),
      link_(MakeLink(opt_, n)),
      master_(master, ChunkLayout(n, opt_.chunk_floats, opt_.boundaries), link_.to_slave.get(), Dest::Peer(1),
              opt_.access),
      slave_(slave, master_.layout(), link_.to_master.get(), opt_.access) {
  if (!opt_.skip.empty()) {
    const std::vector<bool> skipped = SkippedChunks(master_.layout(), opt_.skip);
    std::vector<uint32_t> streamed;
    for (uint32_t c = 0; c < skipped.size(); ++c)
      if (!skipped[c]) streamed.push_back(c);
    master_.set_owned(std::move(streamed));
  }
  master_.set_rule(opt_.rule);
  slave_.set_codec(opt_.rule.codec);
  slave_.set_elastic(opt_.elastic);
}

Segment::~Segment() { Stop(); }

void Segment::Start() {
  if (running()) return;
  stop_.store(false, kRelaxed);
  live_.store(true, std::memory_order_release);
  thread_ = std::thread([this] {
    NameThisThread("hs-segment");
    Run();
    live_.store(false, std::memory_order_release);
    news_.Tell();
  });
}

void Segment::Stop() {
  if (!running()) return;
  stop_.store(true, kRelaxed);
  thread_.join();  // join orders everything the daemon did before whatever the caller does next
}

void Segment::Round() {
  master_.PostPositions(opt_.slots);
  slave_.PollPositions();
  master_.PollDeltas();
}

void Segment::Run() {
  using Clock = std::chrono::steady_clock;
  auto window_start = Clock::now();
  uint64_t window_sweeps = master_.stats().sweeps;
  uint64_t sweeps = window_sweeps;
  bool measured = false;  // a whole window has closed
  while (!stop_.load(kRelaxed)) {
    Round();
    const uint64_t now_sweeps = master_.stats().sweeps;
    if (now_sweeps == sweeps) continue;
    sweeps = now_sweeps;
    news_.Tell();
    const auto now = Clock::now();
    const double secs = std::chrono::duration<double>(now - window_start).count();
    if (secs >= 0.5) {
      rate_.store(static_cast<double>(sweeps - window_sweeps) / secs, kRelaxed);
      window_start = now;
      window_sweeps = sweeps;
      measured = true;
    } else if (!measured && secs >= 0.05) {
      // Until the first window closes, the rate so far (a GPU run displays within 0.1 s).
      rate_.store(static_cast<double>(sweeps - window_sweeps) / secs, kRelaxed);
    }
    if (opt_.pause_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(opt_.pause_us));
  }
}

void Segment::Sweep() {
  HS_CHECK(!running()) << "Segment::Sweep while the daemon runs";
  link_.to_slave->set_enabled(false);  // also lets go of messages held back
  link_.to_master->set_enabled(false);
  auto drain = [this] {
    size_t moved = 0;
    for (size_t step; (step = slave_.PollPositions() + master_.PollDeltas()) > 0;) moved += step;
    return moved;
  };
  drain();  // what the daemon left in flight
  // Every chunk once: a position out, its delta back and applied. A post that finds no slot is
  // retried after draining; a link that stops moving is a bug, not a silent partial sweep.
  uint32_t posted = 0;
  for (int idle = 0; posted < master_.sweep_length();) {
    if (master_.PostNextPosition()) {
      ++posted;
      idle = 0;
    } else {
      HS_CHECK_LT(++idle, 1000) << "Segment::Sweep: the link made no progress";
    }
    drain();
  }
  drain();
  link_.to_slave->set_enabled(true);
  link_.to_master->set_enabled(true);
}

bool Segment::Retake() {
  const bool was_running = running();
  Stop();  // the daemon joined: this thread drives both endpoints now
  slave_.RetakeAll();
  Sweep();
  const bool whole = slave_.retaking() == 0;
  if (was_running) Start();
  return whole;
}

bool Segment::AwaitSweeps(uint64_t sweeps, std::chrono::milliseconds limit) {
  const uint64_t want = master_.stats().sweeps + sweeps;
  const auto swept = [&] { return master_.stats().sweeps >= want; };
  news_.Await([&] { return swept() || !live_.load(std::memory_order_acquire); },
              std::chrono::steady_clock::now() + limit);
  return swept();
}

SegmentStats Segment::stats() const {
  const auto m = master_.stats();
  const auto s = slave_.stats();
  const auto a = link_.to_slave->counters(), b = link_.to_master->counters();
  SegmentStats st;
  st.chunks_sent = m.positions_sent;
  st.bytes_moved = m.bytes_sent + s.bytes_sent;
  st.sweeps = m.sweeps;
  st.dropped = a.dropped + b.dropped;
  st.duplicated = a.duplicated + b.duplicated;
  st.reordered = a.reordered + b.reordered;
  st.stale_ignored = s.positions_stale + m.deltas_duplicate + m.deltas_too_old + m.deltas_other_epoch;
  st.weeded = m.deltas_weeded;
  st.sweeps_per_sec = rate_.load(kRelaxed);
  return st;
}

}  // namespace hogstream
