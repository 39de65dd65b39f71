#include "bench/link_bench.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <iomanip>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/common.hpp"
#include "bin/peers.hpp"
#include "observe/stats_json.hpp"
#include "sync/segment.hpp"
#include "transport/frame.hpp"
#include "transport/open.hpp"

namespace hogstream {

namespace {

using Clock = std::chrono::steady_clock;

struct Link {
  std::unique_ptr<Transport> a, b;  // peer 0 (master / sender), peer 1 (slave / receiver)
  Dest to_b = Dest::Peer(1);        // where positions (and blast frames) go
};

// The message a chunk of `chunk` bytes takes in the segment's runs: sync's header (sync/wire.hpp),
// then the chunk, rounded up to 16 bytes. The raw runs send the chunk alone in such a slot.
uint32_t MessageFor(uint32_t chunk) { return (kWireHeaderBytes + chunk + 15) / 16 * 16; }
// The largest chunk (a multiple of 16) whose message fits `most` bytes.
uint32_t ChunkIn(uint32_t most) { return most > kWireHeaderBytes ? (most - kWireHeaderBytes) / 16 * 16 : 0; }

// A port for a multicast group no other run of this program on the host is likely to use.
uint16_t GroupPort() { return static_cast<uint16_t>(40000 + getpid() % 20000); }

// What every link of the bench opens with: `payload` bytes per message (0: the most one
// carries), the slots and batch asked for, the bench's job id and --job-key. Positions to the
// group go to end 1 only: end 0 sends them (a udp member would get its own sends back).
OpenOptions LinkOptions(const LinkBenchOptions& opt, uint32_t payload) {
  OpenOptions o;
  o.max_payload = payload;
  o.send_slots = o.recv_slots = opt.slots;
  o.max_batch = std::max<uint32_t>(32, *std::max_element(opt.batches.begin(), opt.batches.end()));
  o.job = 0xbe4c;
  o.gso = opt.gso;
  if (!opt.job_key.empty()) o.key = LoadJobKey(opt.job_key);
  o.group_members = {1};
  return o;
}

// The url of both ends of a --loopback link: each end's place (--where) in the transport's terms.
std::string LoopbackUrl(const LinkBenchOptions& opt) {
  const std::string& kind = opt.transport;
  if (kind == "inproc") return "inproc://bench";
  if (kind == "udp") {
    return "udp://" + (opt.where[0].empty() ? "127.0.0.1" : opt.where[0]) + ":0," +
           (opt.where[1].empty() ? "127.0.0.1" : opt.where[1]) + ":0";
  }
  if (kind == "raw") {
    HS_REQUIRE(!opt.where[0].empty() && !opt.where[1].empty())
        << "--transport=raw needs an interface per end: --where=IFACE_A,IFACE_B (with --netns=A,B "
           "when they live in namespaces)";
    return "raw://%" + opt.where[0] + ",%" + opt.where[1];
  }
  if (kind == "verbs") {
    HS_REQUIRE(opt.multicast.empty() && opt.netns[0].empty() && opt.netns[1].empty())
        << "--transport=verbs: both ends on one port of one device (--where=DEVICE); no --multicast "
           "or --netns";
    return "verbs://%" + opt.where[0] + ",%" + opt.where[0];
  }
  HS_FAIL() << "--transport must be inproc, udp, raw or verbs, got '" << kind << "'";
}

// Both ends of a --loopback link, through the transport factory.
Link MakeLink(const LinkBenchOptions& opt, uint32_t payload_bytes) {
  const std::string url = LoopbackUrl(opt);
  OpenOptions o = LinkOptions(opt, (payload_bytes + 15) / 16 * 16);
  o.netns = {opt.netns[0], opt.netns[1]};
  o.multicast = opt.multicast;
  if (!opt.multicast.empty() && opt.transport == "udp") o.multicast.append(":").append(std::to_string(GroupPort()));
  std::vector<std::unique_ptr<Transport>> ends = OpenTransports(url, o);
  Link link;
  link.a = std::move(ends[0]);
  link.b = std::move(ends[1]);
  if (!opt.multicast.empty()) link.to_b = Dest::Group(0);
  return link;
}

// A side with nothing to do sleeps until its endpoint may have something (wait_fd), at most
// 1 ms: a spinning thread would take the CPU the kernel needs to move the frames (softirq on a
// 2-core machine), and a real daemon sleeps the same way. inproc has no fd: it yields.
void Idle(Transport* t) { t->Idle(std::chrono::milliseconds(1), std::chrono::microseconds(0)); }

// CPU seconds the calling thread has used.
double ThreadCpu() {
  struct rusage u {};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// What is measured, one run at a time: the raw link both ways at once, the raw link one way,
// and the segment.
enum class RunKind : uint32_t { kRawDuplex = 0, kRawOneWay = 1, kSegment = 2, kQuit = 3 };

// What one end did in one run; plain data, so that a remote end can send it back (--peers: both
// ends run this same program, so the layout matches).
struct EndReport {
  uint64_t sent = 0, received = 0;       // raw runs: frames
  MasterEndpoint::Stats master{};        // segment run, end a
  SlaveEndpoint::Stats slave{};          // segment run, end b
  double cpu_seconds = 0;                // the end's thread, over its loop
};

// One end of one run. End a (peer 0) sends the blast or is the master; end b (peer 1) receives
// (and, both ways, sends back to peer 0) or is the slave. Step() is one turn of the end's loop;
// an end with nothing to do sleeps in it on the endpoint's wait_fd.
class EndRun {
 public:
  EndRun(RunKind kind, int end, Transport* t, Dest to, uint32_t chunk, uint32_t batch,
         size_t buffer_bytes, uint32_t window)
      : kind_(kind), end_(end), t_(t), to_(to), chunk_(chunk), batch_(batch) {
    if (kind_ == RunKind::kSegment) {
      const size_t n = buffer_bytes / sizeof(float);
      w_.resize(n);  // both ends start equal, as a segment needs
      for (size_t i = 0; i < n; ++i) w_[i] = static_cast<float>(i % 1000) * 1e-3f;
      if (end_ == 0) {
        FlowOptions flow;
        flow.window = window;
        master_ = std::make_unique<MasterEndpoint>(w_.data(), n, chunk / 4, t, to, Access::kPlain, flow);
      } else {
        slave_ = std::make_unique<SlaveEndpoint>(w_.data(), n, chunk / 4, t);
      }
    } else {
      source_.assign(chunk, std::byte{0x5a});
    }
  }

  void Step() {
    switch (kind_) {
      case RunKind::kSegment:
        if (master_) {
          const size_t posted = master_->PostPositions(batch_);
          if (master_->PollDeltas() == 0 && posted == 0) Idle(t_);
        } else if (slave_->PollPositions() == 0) {
          Idle(t_);
        }
        return;
      case RunKind::kRawDuplex:
        Send();
        Receive();
        return;
      default:  // one way: end a sends, end b receives and sleeps when idle
        if (end_ == 0) {
          Send();
        } else if (Receive() == 0) {
          t_->Flush();  // nothing to send: only the heartbeats that say this end is alive
          Idle(t_);
        }
        return;
    }
  }

  // Segment: what is still in flight, until this end is quiet for 20 ms (the master posts
  // nothing more), so that "lost" counts frames lost, not the window in flight at the end.
  void Drain(const std::function<size_t()>& other = nullptr) {
    if (kind_ != RunKind::kSegment) return;
    auto quiet_since = Clock::now();
    const auto deadline = quiet_since + std::chrono::milliseconds(500);
    while (Clock::now() < deadline && Clock::now() - quiet_since < std::chrono::milliseconds(20)) {
      size_t moved = master_ ? master_->PollDeltas() : slave_->PollPositions();
      if (other) moved += other();
      if (moved > 0) quiet_since = Clock::now();
    }
  }
  size_t Answer() { return slave_ ? slave_->PollPositions() : master_->PollDeltas(); }

  EndReport Report() const {
    EndReport r;
    r.sent = sent_;
    r.received = received_;
    if (master_) r.master = master_->stats();
    if (slave_) r.slave = slave_->stats();
    return r;
  }

 private:
  void Send() {
    for (uint32_t i = 0; i < batch_; ++i) {
      std::byte* slot = t_->AcquireSend();
      if (!slot) break;
      // Fill every payload byte, as the segment copies each chunk into its slot.
      std::memcpy(slot, source_.data(), chunk_);
      ++sent_;
      t_->CommitSend(to_, chunk_);
    }
    t_->Flush();
  }
  size_t Receive() {
    Packet m[64];
    const size_t n = t_->Poll(m, 64);
    for (size_t i = 0; i < n; ++i) received_ += m[i].length == chunk_;
    if (n) t_->Release(n);
    return n;
  }

  RunKind kind_;
  int end_;
  Transport* t_;
  Dest to_;
  uint32_t chunk_, batch_;
  std::vector<std::byte> source_;
  std::vector<float> w_;
  std::unique_ptr<MasterEndpoint> master_;
  std::unique_ptr<SlaveEndpoint> slave_;
  uint64_t sent_ = 0, received_ = 0;
};

// The master's window: --window, or by default 2 MiB of positions awaiting deltas (at least
// the slots), well inside the 4 MiB a receive buffer gets, so a burst is not dropped there.
uint32_t WindowFor(const LinkBenchOptions& opt, uint32_t chunk) {
  return opt.window ? opt.window : std::max<uint32_t>(opt.slots, (2u << 20) / chunk);
}

// Runs `end.Step()` until `stop` (or for `seconds` when stop is null); returns the loop's
// thread CPU seconds.
double Loop(EndRun& end, const std::atomic<bool>* stop, double seconds = 0) {
  const double c0 = ThreadCpu();
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  if (stop) {
    while (!stop->load(std::memory_order_relaxed)) end.Step();
  } else {
    while (Clock::now() < until) end.Step();
  }
  return ThreadCpu() - c0;
}

// A run's reports into the row: `a`, `b` as the clock stopped (rates over `wall` seconds);
// `a_end`, `b_end` after the drain (losses). CPU from a and b.
void Fill(RunKind kind, const EndReport& a, const EndReport& b, const EndReport& a_end, const EndReport& b_end,
          double wall, uint32_t chunk, LinkBenchRow* row) {
  const double payload = static_cast<double>(chunk);
  if (kind == RunKind::kSegment) {
    const auto& ms = a.master;
    const auto& ss = b.slave;
    row->segment_gbps = ss.positions_applied * payload * 8 / wall / 1e9;
    row->segment_both_gbps = (ss.positions_applied + ms.deltas_applied) * payload * 8 / wall / 1e9;
    row->segment_frames_per_s = ss.positions_applied / wall;
    row->segment_sweeps_per_s = ms.sweeps / wall;
    // Positions the slave never saw, and deltas the master never got, once drained.
    const auto& me = a_end.master;
    const auto& se = b_end.slave;
    const uint64_t seen = se.positions_applied + se.positions_stale;
    row->segment_lost = (me.positions_sent > seen ? me.positions_sent - seen : 0) +
                        (se.positions_applied > me.deltas_applied ? se.positions_applied - me.deltas_applied : 0);
    row->cpu_master = a.cpu_seconds / wall;
    row->cpu_slave = b.cpu_seconds / wall;
    return;
  }
  const uint64_t sent = a.sent + b.sent, received = a.received + b.received;
  if (kind == RunKind::kRawDuplex) {
    // One direction's delivered payload: the mean of the two directions.
    const double frames = 0.5 * static_cast<double>(received);
    row->raw_frames_per_s = frames / wall;
    row->raw_gbps = frames * 8.0 * payload / wall / 1e9;
    row->raw_lost = sent > received ? sent - received : 0;
    row->cpu_sender = a.cpu_seconds / wall;
    row->cpu_receiver = b.cpu_seconds / wall;
  } else {
    row->raw_one_way_gbps = static_cast<double>(b.received) * 8.0 * payload / wall / 1e9;
  }
}

// Both ends in this process, each on its own thread.
void LocalRun(const LinkBenchOptions& opt, RunKind kind, uint32_t chunk, uint32_t batch, LinkBenchRow* row) {
  Link link = MakeLink(opt, MessageFor(chunk));
  EndRun a(kind, 0, link.a.get(), link.to_b, chunk, batch, opt.buffer_bytes, WindowFor(opt, chunk));
  EndRun b(kind, 1, link.b.get(), Dest::Peer(0), chunk, batch, opt.buffer_bytes, WindowFor(opt, chunk));
  std::atomic<bool> stop{false};
  double cpu_a = 0, cpu_b = 0;
  const auto t0 = Clock::now();
  std::thread tb([&] { cpu_b = Loop(b, &stop); });
  std::thread ta([&] { cpu_a = Loop(a, &stop); });
  std::this_thread::sleep_for(std::chrono::duration<double>(opt.seconds));
  stop.store(true);
  ta.join();
  tb.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  EndReport ra = a.Report(), rb = b.Report();
  ra.cpu_seconds = cpu_a;
  rb.cpu_seconds = cpu_b;
  a.Drain([&] { return b.Answer(); });
  Fill(kind, ra, rb, a.Report(), b.Report(), wall, chunk, row);
}

// ---------------------------------------------------------------- --peers
// Each end in its own process, on its own host (or network namespace), running this same
// command: the list's entry that is local says which end this process is. End 0 drives: it
// asks end 1 to start each run (a kStart message carrying the run, answered by an echo), runs
// its side for the run's seconds, then asks for end 1's report (kReport, answered with it).
// Control messages are resent every 20 ms until answered; a peer that never answers is a
// one-line Error after peer_timeout_s (30 s), never a hang.

constexpr std::array<RunKind, 3> kOrderEven{RunKind::kRawDuplex, RunKind::kSegment, RunKind::kRawOneWay};
constexpr std::array<RunKind, 3> kOrderOdd{RunKind::kRawOneWay, RunKind::kSegment, RunKind::kRawDuplex};

// The bench's own control messages between its two ends, told apart from the runs' traffic by a
// tag: [kControlTag u32][Control u32][payload].
enum class Control : uint32_t { kNone = 0, kStart = 1, kReport = 2 };
constexpr uint32_t kControlTag = 0x424c5348;  // "HSLB" read as little-endian bytes
constexpr uint32_t kControlBytes = 8;

struct RunMsg {  // kStart: a run to start (end 0 -> 1) and its echo (1 -> 0)
  uint32_t id = 0;
  RunKind kind = RunKind::kQuit;
  uint32_t chunk = 0, batch = 0;
  double seconds = 0;
  uint64_t buffer_bytes = 0;
  uint32_t window = 0, pad = 0;
};
struct ReportMsg {  // kReport: end 1's report of run `id` (1 -> 0); end 0's request carries the id
  uint32_t id = 0, pad = 0;
  EndReport at_stop, drained;
};
static_assert(sizeof(RunMsg) % 4 == 0 && sizeof(ReportMsg) % 4 == 0);

struct PeerEnd {
  std::unique_ptr<Transport> t;
  int rank = 0;
  Dest to_other;          // positions and blasts from end 0 (a peer, or the group)
  std::string other;      // the other end's entry, for messages
};

// An entry's text without its scheme, as the bench names the other end.
std::string Unschemed(const std::string& text) {
  const size_t s = text.find("://");
  return s == std::string::npos ? text : text.substr(s + 3);
}

// Which of the two entries is this host (raw: on --where's interface, when given), and on which
// interface (raw).
std::pair<int, std::string> LocalEnd(const PeerList& list, const LinkBenchOptions& opt) {
  LocalAddresses local = ReadLocalAddresses();
  const bool raw = list.scheme == "raw";
  if (raw && !opt.where[0].empty()) {  // --where picks the NIC
    std::erase_if(local.macs, [&](const auto& m) { return m.first != opt.where[0]; });
  }
  const std::vector<std::pair<int, std::string>> mine = LocalEntries(list, local);
  HS_REQUIRE(mine.size() < 2) << (raw ? "--peers: both MACs are on this host; run one end on each"
                                      : "--peers: both entries are addresses of this host; run one end on each");
  HS_REQUIRE(mine.size() == 1) << "--peers: neither " << Unschemed(list.peers[0].text) << " nor "
                               << Unschemed(list.peers[1].text)
                               << (raw ? " is the MAC of a network interface of this host"
                                       : " is an address of this host");
  return mine[0];
}

// This process's end of a --peers link: the list parsed by the one --peers parser, the end the
// local entry picks, opened by the transport factory with `payload` bytes per message (0: the
// most one carries).
PeerEnd OpenPeerEnd(const LinkBenchOptions& opt, uint32_t payload) {
  const PeerList list = ParsePeers(opt.peers);
  HS_REQUIRE(list.peers.size() == 2) << "bench --peers takes exactly two entries (the two ends of one link), got "
                                     << list.peers.size() << " in '" << opt.peers << "'";
  const std::string scheme = list.scheme;
  HS_REQUIRE(scheme == opt.transport) << "--peers=" << scheme << "://... does not match --transport=" << opt.transport;
  HS_REQUIRE(list.scheme == "udp" || list.scheme == "raw")
      << "bench --peers works over udp:// or raw://, got '" << scheme << "://'";
  const auto [local, iface] = LocalEnd(list, opt);
  OpenOptions o = LinkOptions(opt, payload);
  o.rank = local;
  o.iface = iface;
  o.peer_timeout_ms = 5000;
  o.multicast = opt.multicast;  // udp: the group's port is end 1's port + 1, the same on both ends
  if (!opt.multicast.empty() && list.scheme == "udp")
    o.multicast.append(":").append(std::to_string(list.peers[1].port + 1));
  PeerEnd end;
  end.t = OpenTransport(list, o);
  end.rank = local;
  end.to_other = !opt.multicast.empty() && local == 0 ? Dest::Group(0) : Dest::Peer(static_cast<PeerId>(1 - local));
  end.other = Unschemed(list.peers[1 - local].text);
  return end;
}

// Sends a control message (waiting, to a deadline, for a send slot): the control tag, its kind,
// then `bytes` of payload.
void SendControl(const PeerEnd& end, Control kind, const void* payload, uint32_t bytes) {
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  std::byte* slot;
  while (!(slot = end.t->AcquireSend())) {
    end.t->Flush();
    HS_REQUIRE(Clock::now() < deadline) << "bench: cannot send to peer " << end.other << " (no send slot for 5 s)";
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const uint32_t head[2] = {kControlTag, static_cast<uint32_t>(kind)};
  std::memcpy(slot, head, sizeof head);
  std::memcpy(slot + kControlBytes, payload, bytes);
  end.t->CommitSend(Dest::Peer(1 - end.rank), kControlBytes + bytes);
  end.t->Flush();
}

// Polls until a control message of `kind` (or `or_kind`) arrives (anything else is released
// unread), calling `resend` every 20 ms, up to `seconds`. Its payload goes to `out`, its kind to
// `*which`; false: none in time.
bool AwaitControl(const PeerEnd& end, Control kind, std::vector<std::byte>* out, double seconds,
                  const std::function<void()>& resend, Control or_kind = Control::kNone,
                  Control* which = nullptr) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  auto next_send = Clock::now();
  Packet m[64];
  while (Clock::now() < deadline) {
    const Status st = end.t->status();
    HS_REQUIRE(st.ok()) << "bench: the link to " << end.other << " failed: " << st.what;
    if (resend && Clock::now() >= next_send) {
      resend();
      next_send = Clock::now() + std::chrono::milliseconds(20);
    }
    end.t->Flush();  // heartbeats
    const size_t n = end.t->Poll(m, 64);
    for (size_t i = 0; i < n; ++i) {
      uint32_t head[2] = {0, 0};
      if (m[i].length >= kControlBytes) std::memcpy(head, m[i].payload, sizeof head);
      const auto got = static_cast<Control>(head[1]);
      if (head[0] == kControlTag && got != Control::kNone && (got == kind || got == or_kind)) {
        out->assign(m[i].payload + kControlBytes, m[i].payload + m[i].length);
        if (which) *which = got;
        end.t->Release(n);
        return true;
      }
    }
    if (n) {
      end.t->Release(n);
    } else {
      Idle(end.t.get());
    }
  }
  return false;
}

// End 1: serves runs until end 0 says quit (or is silent for 30 s: an Error). A start it has
// already run is echoed again (its echo was lost) and not run twice; a report request is
// answered every time it comes (a report can be lost too).
void Follow(PeerEnd& end, double timeout_s) {
  uint32_t done = 0;
  ReportMsg report;
  for (;;) {
    std::vector<std::byte> got;
    Control which = Control::kStart;
    HS_REQUIRE(AwaitControl(end, Control::kStart, &got, timeout_s, nullptr, Control::kReport, &which))
        << "bench: peer " << end.other << " (end 0) sent nothing for " << timeout_s << " s";
    if (which == Control::kReport) {
      uint32_t id = 0;
      if (got.size() >= sizeof id) std::memcpy(&id, got.data(), sizeof id);
      if (id == done && done != 0) SendControl(end, Control::kReport, &report, sizeof report);
      continue;
    }
    if (got.size() != sizeof(RunMsg)) continue;  // not a start of ours
    RunMsg run;
    std::memcpy(&run, got.data(), sizeof run);
    SendControl(end, Control::kStart, &run, sizeof run);  // the echo: "started"
    if (run.kind == RunKind::kQuit) return;
    if (run.id == done) continue;
    HS_REQUIRE(run.kind <= RunKind::kSegment && run.chunk >= 16 && run.chunk % 4 == 0 &&
               MessageFor(run.chunk) <= end.t->caps().max_payload && run.seconds > 0 && run.seconds <= 600)
        << "bench: peer " << end.other << " asked for a run this end cannot do (chunk " << run.chunk
        << "; run both ends with the same --chunk)";
    EndRun side(run.kind, 1, end.t.get(), Dest::Peer(0), run.chunk, run.batch, run.buffer_bytes, run.window);
    const double cpu = Loop(side, nullptr, run.seconds);
    report.id = run.id;
    report.at_stop = side.Report();
    report.at_stop.cpu_seconds = cpu;
    side.Drain();
    report.drained = side.Report();
    done = run.id;
  }
}

// End 0: one run with the remote end 1.
void DriveRun(PeerEnd& end, const LinkBenchOptions& opt, RunKind kind, uint32_t chunk, uint32_t batch, uint32_t id,
              LinkBenchRow* row) {
  RunMsg run;
  run.id = id;
  run.kind = kind;
  run.chunk = chunk;
  run.batch = batch;
  run.seconds = opt.seconds;
  run.buffer_bytes = opt.buffer_bytes;
  run.window = opt.window;
  std::vector<std::byte> got;
  const bool started = AwaitControl(end, Control::kStart, &got, opt.peer_timeout_s,
                                    [&] { SendControl(end, Control::kStart, &run, sizeof run); });
  HS_REQUIRE(started) << "bench: peer " << end.other << " did not answer within " << opt.peer_timeout_s
                      << " s (is `hogstream bench` running there with the same --peers?)";
  EndRun side(kind, 0, end.t.get(), end.to_other, chunk, batch, opt.buffer_bytes, WindowFor(opt, chunk));
  const auto t0 = Clock::now();
  const double cpu = Loop(side, nullptr, opt.seconds);
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  EndReport a = side.Report();
  a.cpu_seconds = cpu;
  side.Drain();
  const EndReport a_end = side.Report();
  uint32_t ask = id;
  ReportMsg b;
  for (;;) {
    HS_REQUIRE(AwaitControl(end, Control::kReport, &got, opt.peer_timeout_s,
                            [&] { SendControl(end, Control::kReport, &ask, sizeof ask); }))
        << "bench: peer " << end.other << " sent no report for " << opt.peer_timeout_s << " s";
    if (got.size() == sizeof b) {
      std::memcpy(&b, got.data(), sizeof b);
      if (b.id == id) break;
    }
  }
  Fill(kind, a, b.at_stop, a_end, b.drained, wall, chunk, row);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Every numeric field of `rounds` replaced by its median.
LinkBenchRow MedianRow(const std::vector<LinkBenchRow>& rounds) {
  LinkBenchRow m = rounds.front();
  auto med = [&](auto field) {
    std::vector<double> v;
    for (const LinkBenchRow& r : rounds) v.push_back(static_cast<double>(r.*field));
    return Median(v);
  };
  for (auto f : {&LinkBenchRow::segment_gbps, &LinkBenchRow::segment_both_gbps, &LinkBenchRow::raw_gbps,
                 &LinkBenchRow::raw_one_way_gbps,
                 &LinkBenchRow::ratio, &LinkBenchRow::segment_frames_per_s, &LinkBenchRow::raw_frames_per_s,
                 &LinkBenchRow::segment_sweeps_per_s, &LinkBenchRow::cpu_master, &LinkBenchRow::cpu_slave,
                 &LinkBenchRow::cpu_sender, &LinkBenchRow::cpu_receiver})
    m.*f = med(f);
  for (auto f : {&LinkBenchRow::segment_lost, &LinkBenchRow::raw_lost})
    m.*f = static_cast<uint64_t>(med(f));
  return m;
}

// The largest message an opened link carries (both ends of a loopback link).
uint32_t MostOf(const Link& l) { return std::min(l.a->caps().max_payload, l.b->caps().max_payload); }
uint32_t MostOf(const PeerEnd& e) { return e.t->caps().max_payload; }

// Opens a link (`open(payload)`, payload 0: the most one message carries) for the chunk sizes in
// `*chunks`: with none given, with the most a message carries, and `*chunks` becomes the default
// sizes that fit it; else with room for the largest given (and at least `least` bytes), where a
// size the link cannot carry is one line naming it (the link opened with its own most: the size
// is at fault, not the link; a link that does not open at all says why).
template <class Open>
auto OpenFitting(const LinkBenchOptions& opt, uint32_t least, Open open, std::vector<uint32_t>* chunks) {
  if (chunks->empty()) {
    auto link = open(0);
    const uint32_t most = MostOf(link);
    HS_REQUIRE(most >= least) << "bench: a " << opt.transport << " message here carries at most " << most
                              << " bytes; the bench's control messages need " << least;
    *chunks = BenchChunks(ChunkIn(most));
    return link;
  }
  const uint32_t largest = *std::max_element(chunks->begin(), chunks->end());
  try {
    return open(std::max(MessageFor(largest), least));
  } catch (const Error& e) {
    const uint32_t most = MostOf(open(0));
    HS_FAIL() << "bench: --chunk=" << largest << " does not fit one " << opt.transport
              << " message here: a chunk takes at most " << ChunkIn(most) << " bytes (" << e.what() << ")";
  }
}

// Settings that need no link: one line for the first out of range.
void CheckSettings(const LinkBenchOptions& opt) {
  HS_REQUIRE(opt.seconds > 0 && opt.seconds <= 600) << "--seconds must be in (0, 600]";
  HS_REQUIRE(opt.repeat >= 1 && opt.repeat <= 100) << "--repeat must be in [1, 100]";
  HS_REQUIRE(opt.peer_timeout_s > 0 && opt.peer_timeout_s <= 3600) << "--timeout must be in (0, 3600] seconds";
  HS_REQUIRE(!opt.batches.empty()) << "--batch needs at least one size";
  for (uint32_t b : opt.batches)
    HS_REQUIRE(b >= 1 && b <= 1024) << "--batch sizes must be in [1, 1024], got " << b;
  for (uint32_t chunk : opt.chunk_bytes)
    HS_REQUIRE(chunk >= 16 && chunk % 4 == 0) << "--chunk sizes must be multiples of 4 bytes, >= 16; got " << chunk;
  HS_REQUIRE(opt.peers.empty() || (opt.netns[0].empty() && opt.netns[1].empty()))
      << "--peers runs one end per process: start each in its namespace (ip netns exec NS ...), no --netns";
}

using RunFn = std::function<void(RunKind, uint32_t, uint32_t, LinkBenchRow*)>;

// Every chunk size x batch size, `repeat` interleaved rounds each, medians.
std::vector<LinkBenchRow> Sweep(const LinkBenchOptions& opt, const std::vector<uint32_t>& chunks, const RunFn& run) {
  std::vector<LinkBenchRow> rows;
  for (uint32_t chunk : chunks) {
    for (uint32_t batch : opt.batches) {
      std::vector<LinkBenchRow> rounds;
      for (int r = 0; r < opt.repeat; ++r) {
        LinkBenchRow row;
        row.transport = opt.transport;
        row.chunk_bytes = chunk;
        row.batch = batch;
        row.multicast = !opt.multicast.empty();
        row.gso = opt.transport == "udp" && opt.gso;
        row.keyed = !opt.job_key.empty();
        // Alternate which run goes first, so a drift in the machine's load hits both alike.
        for (RunKind kind : r % 2 == 0 ? kOrderEven : kOrderOdd) run(kind, chunk, batch, &row);
        row.ratio = row.raw_gbps > 0 ? row.segment_gbps / row.raw_gbps : 0;
        rounds.push_back(row);
      }
      rows.push_back(MedianRow(rounds));
    }
  }
  return rows;
}

}  // namespace

std::vector<LinkBenchRow> RunLinkBench(const LinkBenchOptions& opt) {
  CheckSettings(opt);
  std::vector<uint32_t> chunks = opt.chunk_bytes;
  if (opt.peers.empty()) {
    // The sizes checked (or chosen) on a link opened for them; each run opens its own.
    OpenFitting(opt, 0, [&](uint32_t payload) { return MakeLink(opt, payload); }, &chunks);
    return Sweep(opt, chunks, [&](RunKind kind, uint32_t chunk, uint32_t batch, LinkBenchRow* row) {
      LocalRun(opt, kind, chunk, batch, row);
    });
  }
  const uint32_t report = (kControlBytes + sizeof(ReportMsg) + 15) / 16 * 16;
  PeerEnd peer = OpenFitting(opt, report, [&](uint32_t payload) { return OpenPeerEnd(opt, payload); }, &chunks);
  if (peer.rank == 1) {
    Follow(peer, opt.peer_timeout_s);
    return {};  // end 1 reports nothing: end 0 prints the table
  }
  uint32_t run_id = 0;
  std::vector<LinkBenchRow> rows =
      Sweep(opt, chunks, [&](RunKind kind, uint32_t chunk, uint32_t batch, LinkBenchRow* row) {
        DriveRun(peer, opt, kind, chunk, batch, ++run_id, row);
      });
  // End 1 may go; a lost goodbye only makes it wait out its 30 s.
  RunMsg quit;
  quit.id = ++run_id;
  std::vector<std::byte> got;
  AwaitControl(peer, Control::kStart, &got, 2, [&] { SendControl(peer, Control::kStart, &quit, sizeof quit); });
  return rows;
}

void PrintLinkBench(const std::vector<LinkBenchRow>& rows, std::ostream& os, bool json) {
  if (json) {  // one object per row, figures to 6 significant digits, non-finite as null
    auto g = [](double v) { return RoundedTo(v, 6); };
    for (const LinkBenchRow& r : rows) {
      const nlohmann::ordered_json j = {
          {"transport", r.transport}, {"chunk_bytes", r.chunk_bytes}, {"batch", r.batch},
          {"multicast", r.multicast}, {"gso", r.gso}, {"keyed", r.keyed},
          {"segment_gbps", g(r.segment_gbps)}, {"segment_both_gbps", g(r.segment_both_gbps)},
          {"raw_gbps", g(r.raw_gbps)}, {"ratio", g(r.ratio)}, {"raw_one_way_gbps", g(r.raw_one_way_gbps)},
          {"segment_frames_per_s", g(r.segment_frames_per_s)}, {"raw_frames_per_s", g(r.raw_frames_per_s)},
          {"segment_lost", r.segment_lost}, {"raw_lost", r.raw_lost},
          {"segment_sweeps_per_s", g(r.segment_sweeps_per_s)}, {"cpu_master", g(r.cpu_master)},
          {"cpu_slave", g(r.cpu_slave)}, {"cpu_sender", g(r.cpu_sender)}, {"cpu_receiver", g(r.cpu_receiver)}};
      os << j.dump() << "\n";
    }
    return;
  }
  os << "transport        chunk  batch  segment Gbit/s  raw Gbit/s  ratio  raw 1-way  segment frames/s"
        "  raw frames/s    lost seg/raw  CPU master/slave  CPU a/b raw\n";
  for (const LinkBenchRow& r : rows) {
    std::string name = r.transport + (r.multicast ? "+mcast" : "") + (r.transport == "udp" && !r.gso ? "-gso" : "") +
                       (r.keyed ? "+key" : "");
    os << std::left << std::setw(14) << name << std::right << std::setw(8) << r.chunk_bytes << std::setw(7)
       << r.batch << std::fixed << std::setprecision(2) << std::setw(16) << r.segment_gbps << std::setw(12)
       << r.raw_gbps << std::setw(7) << r.ratio << std::setw(11) << r.raw_one_way_gbps
       << std::setprecision(0) << std::setw(18)
       << r.segment_frames_per_s << std::setw(14) << r.raw_frames_per_s << std::setw(10)
       << r.segment_lost << "/" << std::left << std::setw(6) << r.raw_lost << std::right
       << std::setprecision(2) << std::setw(11) << r.cpu_master << "/" << std::left << std::setw(6)
       << r.cpu_slave << std::right << std::setw(9) << r.cpu_sender << "/" << r.cpu_receiver << "\n";
  }
}

}  // namespace hogstream
