#include "bin/link_bench.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/if_packet.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <functional>
#include <sstream>
#include <atomic>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <memory>
#include <thread>

#include "core/common.hpp"
#include "sync/segment.hpp"
#include "transport/frame.hpp"
#include "transport/inproc/device.hpp"
#include "transport/raw/device.hpp"
#include "transport/raw/endpoint.hpp"
#include "transport/udp/device.hpp"
#include "transport/udp/endpoint.hpp"
#ifdef HOGSTREAM_VERBS
#include "transport/verbs/device.hpp"
#endif

namespace hogstream {

namespace {

using Clock = std::chrono::steady_clock;

struct Link {
  std::unique_ptr<Transport> a, b;  // peer 0 (master / sender), peer 1 (slave / receiver)
  Dest to_b = Dest::Peer(1);        // where positions (and blast frames) go
};

// A port for a multicast group no other run of this program on the host is likely to use.
uint16_t GroupPort() { return static_cast<uint16_t>(40000 + getpid() % 20000); }

Link MakeUdpLink(const LinkBenchOptions& opt, uint32_t payload_bytes) {
  UdpOptions o;
  o.max_payload = (payload_bytes + 15) / 16 * 16;
  HS_REQUIRE(o.max_payload <= 65000) << "chunk of " << payload_bytes
                                     << " bytes does not fit one UDP datagram (at most 65000)";
  o.send_slots = o.recv_slots = opt.slots;
  o.max_batch = std::max<uint32_t>(32, *std::max_element(opt.batches.begin(), opt.batches.end()));
  o.job = 0xbe4c;
  o.gso = opt.gso;
  if (!opt.job_key.empty()) o.key = LoadJobKey(opt.job_key);
  UdpOptions oa = o, ob = o;
  oa.address = opt.where[0].empty() ? "127.0.0.1" : opt.where[0];
  ob.address = opt.where[1].empty() ? "127.0.0.1" : opt.where[1];
  oa.netns = opt.netns[0];
  ob.netns = opt.netns[1];
  auto a = std::make_unique<UdpEndpoint>(0, oa), b = std::make_unique<UdpEndpoint>(1, ob);
  a->AddPeer(1, ob.address, b->port());
  b->AddPeer(0, oa.address, a->port());
  Link link;
  if (!opt.multicast.empty()) {
    HS_REQUIRE(b->AddGroup(1, opt.multicast, GroupPort(), true))
        << "udp: could not join " << opt.multicast << " on " << ob.address
        << " (no multicast route there? try: ip route add 224.0.0.0/4 dev IFACE)";
    HS_REQUIRE(a->AddGroup(1, opt.multicast, GroupPort(), false))
        << "udp: cannot send to group " << opt.multicast << " from " << oa.address;
    link.to_b = Dest::Group(1);
  }
  link.a = std::move(a);
  link.b = std::move(b);
  return link;
}

Link MakeRawLink(const LinkBenchOptions& opt, uint32_t payload_bytes) {
  HS_REQUIRE(!opt.where[0].empty() && !opt.where[1].empty())
      << "--transport=raw needs an interface per end: --where=IFACE_A,IFACE_B (with --netns=A,B "
         "when they live in namespaces)";
  RawOptions o;
  o.max_payload = (payload_bytes + 15) / 16 * 16;
  o.send_slots = opt.slots;
  o.max_batch = std::max<uint32_t>(32, *std::max_element(opt.batches.begin(), opt.batches.end()));
  o.job = 0xbe4c;
  if (!opt.job_key.empty()) o.key = LoadJobKey(opt.job_key);
  RawOptions oa = o, ob = o;
  oa.iface = opt.where[0];
  ob.iface = opt.where[1];
  oa.netns = opt.netns[0];
  ob.netns = opt.netns[1];
  auto a = std::make_unique<RawEndpoint>(0, oa), b = std::make_unique<RawEndpoint>(1, ob);
  a->AddPeer(1, b->mac());
  b->AddPeer(0, a->mac());
  Link link;
  if (!opt.multicast.empty()) {
    const Mac group = ParseMac(opt.multicast);
    a->AddGroup(1, group);
    b->AddGroup(1, group);
    link.to_b = Dest::Group(1);
  }
  link.a = std::move(a);
  link.b = std::move(b);
  return link;
}

Link MakeLink(const LinkBenchOptions& opt, uint32_t payload_bytes) {
  const std::string& kind = opt.transport;
  if (kind == "inproc") {
    HS_REQUIRE(opt.multicast.empty()) << "--multicast needs a network transport (udp or raw)";
    InprocOptions o;
    o.max_payload = payload_bytes;
    o.slots = opt.slots;
    auto [a, b] = InprocDevice::MakePair(o);
    return {std::move(a), std::move(b)};
  }
  if (kind == "udp") return MakeUdpLink(opt, payload_bytes);
  if (kind == "raw") return MakeRawLink(opt, payload_bytes);
  if (kind == "verbs") {
#ifdef HOGSTREAM_VERBS
    HS_REQUIRE(opt.multicast.empty() && opt.netns[0].empty() && opt.netns[1].empty())
        << "--transport=verbs: both ends on one port of one device (--where=DEVICE); no --multicast "
           "or --netns";
    VerbsOptions o;
    o.device = opt.where[0];
    o.max_payload = (payload_bytes + 15) / 16 * 16;
    o.send_slots = o.recv_slots = opt.slots;
    o.job = 0xbe4c;
    if (!opt.job_key.empty()) o.key = LoadJobKey(opt.job_key);
    auto [a, b] = VerbsDevice(o).LoopbackPair();
    return {std::move(a), std::move(b)};
#else
    HS_FAIL() << "--transport=verbs: this build has no verbs (rdma-core was not found at configure time)";
#endif
  }
  HS_FAIL() << "--transport must be inproc, udp, raw or verbs, got '" << kind << "'";
}

// A side with nothing to do sleeps until its endpoint may have something (wait_fd), at most
// 1 ms: a spinning thread would take the CPU the kernel needs to move the frames (softirq on a
// 2-core machine), and a real daemon sleeps the same way. inproc has no fd: it yields.
void Idle(Transport* t) {
  const int fd = t->wait_fd();
  if (fd < 0) {
    std::this_thread::yield();
    return;
  }
  pollfd p{fd, POLLIN, 0};
  poll(&p, 1, 1);
}

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
  Link link = MakeLink(opt, kWireHeaderBytes + chunk);  // the segment's messages: sync's header, then a chunk
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

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, sep);) out.push_back(item);
  return out;
}

PeerEnd OpenPeers(const LinkBenchOptions& opt) {
  const std::string& spec = opt.peers;
  const size_t colon = spec.find("://");
  HS_REQUIRE(colon != std::string::npos)
      << "--peers wants udp://IP:PORT,IP:PORT or raw://MAC,MAC, got '" << spec << "'";
  const std::string scheme = spec.substr(0, colon);
  const std::vector<std::string> entries = Split(spec.substr(colon + 3), ',');
  HS_REQUIRE(entries.size() == 2) << "bench --peers takes exactly two entries (the two ends of one link), got "
                                  << entries.size() << " in '" << spec << "'";
  HS_REQUIRE(scheme == opt.transport)
      << "--peers=" << scheme << "://... does not match --transport=" << opt.transport;
  const uint32_t max_chunk = *std::max_element(opt.chunk_bytes.begin(), opt.chunk_bytes.end());
  const uint32_t payload = std::max<uint32_t>((kWireHeaderBytes + max_chunk + 15) / 16 * 16,
                                              (kControlBytes + sizeof(ReportMsg) + 15) / 16 * 16);
  const uint32_t batch = std::max<uint32_t>(32, *std::max_element(opt.batches.begin(), opt.batches.end()));
  ifaddrs* ifs = nullptr;
  HS_REQUIRE(getifaddrs(&ifs) == 0) << "bench: getifaddrs: " << ErrnoText(errno);
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> guard(ifs, freeifaddrs);
  PeerEnd end;
  int local = -1;
  if (scheme == "udp") {
    std::vector<std::pair<std::string, uint16_t>> at;
    for (const std::string& e : entries) {
      const size_t c = e.rfind(':');
      HS_REQUIRE(c != std::string::npos && c > 0) << "--peers: '" << e << "' is not IP:PORT";
      char* tail = nullptr;
      const long port = std::strtol(e.c_str() + c + 1, &tail, 10);
      HS_REQUIRE(*tail == 0 && port > 0 && port < 65536) << "--peers: bad port in '" << e << "'";
      in_addr probe{};
      HS_REQUIRE(inet_pton(AF_INET, e.substr(0, c).c_str(), &probe) == 1)
          << "--peers: '" << e.substr(0, c) << "' is not an IPv4 address";
      at.emplace_back(e.substr(0, c), static_cast<uint16_t>(port));
    }
    for (int r = 0; r < 2; ++r) {
      for (ifaddrs* i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, ip, sizeof ip);
        if (at[r].first == ip) {
          HS_REQUIRE(local < 0) << "--peers: both entries are addresses of this host; run one end on each";
          local = r;
          break;
        }
      }
    }
    HS_REQUIRE(local >= 0) << "--peers: neither " << entries[0] << " nor " << entries[1]
                           << " is an address of this host";
    UdpOptions o;
    o.address = at[local].first;
    o.port = at[local].second;
    o.max_payload = payload;
    o.send_slots = o.recv_slots = opt.slots;
    o.max_batch = batch;
    o.job = 0xbe4c;
    o.gso = opt.gso;
    o.peer_timeout_ms = 5000;
    if (!opt.job_key.empty()) o.key = LoadJobKey(opt.job_key);
    auto u = std::make_unique<UdpEndpoint>(local, o);
    u->AddPeer(1 - local, at[1 - local].first, at[1 - local].second);
    end.to_other = Dest::Peer(1 - local);
    if (!opt.multicast.empty()) {  // the group's port: end 1's port + 1, the same on both ends
      const uint16_t gport = static_cast<uint16_t>(at[1].second + 1);
      HS_REQUIRE(u->AddGroup(1, opt.multicast, gport, local == 1))
          << "udp: could not join " << opt.multicast << " on " << o.address
          << " (no multicast route? try: ip route add 224.0.0.0/4 dev IFACE)";
      if (local == 0) end.to_other = Dest::Group(1);
    }
    end.t = std::move(u);
  } else if (scheme == "raw") {
    const Mac macs[2] = {ParseMac(entries[0]), ParseMac(entries[1])};
    std::string iface;
    for (ifaddrs* i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_PACKET) continue;
      const auto* ll = reinterpret_cast<const sockaddr_ll*>(i->ifa_addr);
      if (ll->sll_halen != 6) continue;
      for (int r = 0; r < 2; ++r) {
        if (std::memcmp(ll->sll_addr, macs[r].data(), 6) != 0) continue;
        HS_REQUIRE(local < 0 || local == r) << "--peers: both MACs are on this host; run one end on each";
        if (!opt.where[0].empty() && opt.where[0] != i->ifa_name) continue;  // --where picks the NIC
        local = r;
        iface = i->ifa_name;
      }
    }
    HS_REQUIRE(local >= 0) << "--peers: neither " << entries[0] << " nor " << entries[1]
                           << " is the MAC of a network interface of this host";
    RawOptions o;
    o.iface = iface;
    o.max_payload = payload;
    o.send_slots = opt.slots;
    o.max_batch = batch;
    o.job = 0xbe4c;
    o.peer_timeout_ms = 5000;
    if (!opt.job_key.empty()) o.key = LoadJobKey(opt.job_key);
    auto r = std::make_unique<RawEndpoint>(local, o);
    r->AddPeer(1 - local, macs[1 - local]);
    end.to_other = Dest::Peer(1 - local);
    if (!opt.multicast.empty()) {
      r->AddGroup(1, ParseMac(opt.multicast));
      if (local == 0) end.to_other = Dest::Group(1);
    }
    end.t = std::move(r);
  } else {
    HS_FAIL() << "bench --peers works over udp:// or raw://, got '" << scheme << "://'";
  }
  end.rank = local;
  end.other = entries[1 - local];
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
               kWireHeaderBytes + run.chunk <= end.t->caps().max_payload && run.seconds > 0 && run.seconds <= 600)
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

}  // namespace

std::vector<LinkBenchRow> RunLinkBench(const LinkBenchOptions& opt) {
  HS_REQUIRE(opt.seconds > 0 && opt.seconds <= 600) << "--seconds must be in (0, 600]";
  HS_REQUIRE(opt.repeat >= 1 && opt.repeat <= 100) << "--repeat must be in [1, 100]";
  HS_REQUIRE(opt.peer_timeout_s > 0 && opt.peer_timeout_s <= 3600) << "--timeout must be in (0, 3600] seconds";
  HS_REQUIRE(!opt.chunk_bytes.empty()) << "--chunk needs at least one size";
  HS_REQUIRE(!opt.batches.empty()) << "--batch needs at least one size";
  for (uint32_t b : opt.batches)
    HS_REQUIRE(b >= 1 && b <= 1024) << "--batch sizes must be in [1, 1024], got " << b;
  std::vector<LinkBenchRow> rows;
  std::unique_ptr<PeerEnd> peer;
  uint32_t run_id = 0;
  std::function<void(RunKind, uint32_t, uint32_t, LinkBenchRow*)> run;
  if (opt.peers.empty()) {
    run = [&](RunKind kind, uint32_t chunk, uint32_t batch, LinkBenchRow* row) { LocalRun(opt, kind, chunk, batch, row); };
  } else {
    HS_REQUIRE(opt.netns[0].empty() && opt.netns[1].empty())
        << "--peers runs one end per process: start each in its namespace (ip netns exec NS ...), no --netns";
    for (uint32_t chunk : opt.chunk_bytes)
      HS_REQUIRE(chunk >= 16 && chunk % 4 == 0) << "--chunk sizes must be multiples of 4 bytes, >= 16; got " << chunk;
    peer = std::make_unique<PeerEnd>(OpenPeers(opt));
    if (peer->rank == 1) {
      Follow(*peer, opt.peer_timeout_s);
      return rows;  // end 1 reports nothing: end 0 prints the table
    }
    run = [&](RunKind kind, uint32_t chunk, uint32_t batch, LinkBenchRow* row) {
      DriveRun(*peer, opt, kind, chunk, batch, ++run_id, row);
    };
  }
  for (uint32_t chunk : opt.chunk_bytes) {
    HS_REQUIRE(chunk >= 16 && chunk % 4 == 0) << "--chunk sizes must be multiples of 4 bytes, >= 16; got "
                                              << chunk;
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
  if (peer) {  // end 1 may go; a lost goodbye only makes it wait out its 30 s
    RunMsg quit;
    quit.id = ++run_id;
    std::vector<std::byte> got;
    AwaitControl(*peer, Control::kStart, &got, 2, [&] { SendControl(*peer, Control::kStart, &quit, sizeof quit); });
  }
  return rows;
}

void PrintLinkBench(const std::vector<LinkBenchRow>& rows, std::ostream& os, bool json) {
  if (json) {
    for (const LinkBenchRow& r : rows) {
      os << std::setprecision(6) << "{\"transport\":\"" << r.transport << "\",\"chunk_bytes\":" << r.chunk_bytes
         << ",\"batch\":" << r.batch << ",\"multicast\":" << (r.multicast ? "true" : "false")
         << ",\"gso\":" << (r.gso ? "true" : "false") << ",\"keyed\":" << (r.keyed ? "true" : "false")
         << ",\"segment_gbps\":" << r.segment_gbps << ",\"segment_both_gbps\":" << r.segment_both_gbps
         << ",\"raw_gbps\":" << r.raw_gbps << ",\"ratio\":" << r.ratio
         << ",\"raw_one_way_gbps\":" << r.raw_one_way_gbps
         << ",\"segment_frames_per_s\":" << r.segment_frames_per_s
         << ",\"raw_frames_per_s\":" << r.raw_frames_per_s << ",\"segment_lost\":" << r.segment_lost
         << ",\"raw_lost\":" << r.raw_lost << ",\"segment_sweeps_per_s\":" << r.segment_sweeps_per_s
         << ",\"cpu_master\":" << r.cpu_master << ",\"cpu_slave\":" << r.cpu_slave
         << ",\"cpu_sender\":" << r.cpu_sender << ",\"cpu_receiver\":" << r.cpu_receiver << "}\n";
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
