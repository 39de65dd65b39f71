#include "bin/link_bench.hpp"

#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
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

// Runs `a_loop` and `b_loop` on two threads for `seconds` (each returns when `stop` is set);
// fills their CPU use per second of wall time. Returns the wall time.
template <class A, class B>
double RunPair(double seconds, A&& a_loop, B&& b_loop, double* cpu_a, double* cpu_b) {
  std::atomic<bool> stop{false};
  double ca = 0, cb = 0;
  const auto t0 = Clock::now();
  std::thread tb([&] {
    const double c0 = ThreadCpu();
    b_loop(stop);
    cb = ThreadCpu() - c0;
  });
  std::thread ta([&] {
    const double c0 = ThreadCpu();
    a_loop(stop);
    ca = ThreadCpu() - c0;
  });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop.store(true);
  ta.join();
  tb.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  *cpu_a = ca / wall;
  *cpu_b = cb / wall;
  return wall;
}

// The raw link, a plain blast of frames of `chunk` bytes in batches of `batch` (one Flush per
// batch, as fast as slots allow), measured two ways: one way (one side sends, the other polls
// and releases), and both ways at once, each side sending and receiving: the segment's traffic
// pattern (positions one way, deltas back), with no rule to run.
void RawRun(const LinkBenchOptions& opt, uint32_t chunk, uint32_t batch, bool duplex, LinkBenchRow* row) {
  Link link = MakeLink(opt, chunk);
  // Peer 1 answers to peer 0 (never to a group).
  struct Side {
    Transport* t;
    Dest to;
    uint64_t sent = 0, received = 0;
  };
  Side a{link.a.get(), link.to_b}, b{link.b.get(), Dest::Peer(0)};
  const std::vector<std::byte> source(chunk, std::byte{0x5a});
  auto send = [&](Side& s) {
    Header h;
    h.kind = MsgKind::kDelta;
    h.length = chunk;
    for (uint32_t i = 0; i < batch; ++i) {
      std::byte* slot = s.t->AcquireSend();
      if (!slot) break;
      // Fill every payload byte, as the segment copies each chunk into its slot.
      std::memcpy(slot, source.data(), chunk);
      h.seq = ++s.sent;
      s.t->CommitSend(s.to, h);
    }
    s.t->Flush();
  };
  auto receive = [&](Side& s) {
    Message m[64];
    const size_t n = s.t->Poll(m, 64);
    for (size_t i = 0; i < n; ++i) s.received += m[i].h.kind == MsgKind::kDelta;
    if (n) s.t->Release(n);
    return n;
  };
  double cpu_a = 0, cpu_b = 0;
  const double wall = RunPair(
      opt.seconds,
      [&](std::atomic<bool>& stop) {
        while (!stop.load(std::memory_order_relaxed)) {
          send(a);
          if (duplex) receive(a);
        }
      },
      [&](std::atomic<bool>& stop) {
        while (!stop.load(std::memory_order_relaxed)) {
          if (duplex) {
            receive(b);
            send(b);
          } else if (receive(b) == 0) {
            Idle(b.t);  // the receiver sleeps when idle, as the segment's sides do
          }
        }
      },
      &cpu_a, &cpu_b);
  // One direction's delivered payload (duplex: the mean of the two directions).
  const double frames = duplex ? 0.5 * static_cast<double>(a.received + b.received) : static_cast<double>(b.received);
  const uint64_t sent = a.sent + b.sent, received = a.received + b.received;
  const uint64_t lost = sent > received ? sent - received : 0;
  if (duplex) {
    row->raw_frames_per_s = frames / wall;
    row->raw_gbps = frames * 8.0 * chunk / wall / 1e9;
    row->raw_lost = lost;
    row->cpu_sender = cpu_a;
    row->cpu_receiver = cpu_b;
  } else {
    row->raw_one_way_gbps = frames * 8.0 * chunk / wall / 1e9;
  }
}

// The segment: a master and a slave buffer kept in sync over the same kind of link; the
// master posts `batch` positions per Flush within its window.
void SegmentRun(const LinkBenchOptions& opt, uint32_t chunk, uint32_t batch, LinkBenchRow* row) {
  Link link = MakeLink(opt, chunk);
  const size_t n = opt.buffer_bytes / sizeof(float);
  std::vector<float> master(n), slave;
  for (size_t i = 0; i < n; ++i) master[i] = static_cast<float>(i % 1000) * 1e-3f;
  slave = master;
  FlowOptions flow;
  // Default: 2 MiB of positions awaiting deltas (at least the slots), well inside the 4 MiB a
  // receive buffer gets, so a burst is not dropped by the receiving socket.
  flow.window = opt.window ? opt.window : std::max<uint32_t>(opt.slots, (2u << 20) / chunk);
  MasterEndpoint me(master.data(), n, chunk / 4, link.a.get(), link.to_b, Access::kPlain, flow);
  SlaveEndpoint se(slave.data(), n, chunk / 4, link.b.get());
  const double wall = RunPair(
      opt.seconds,
      [&](std::atomic<bool>& stop) {
        while (!stop.load(std::memory_order_relaxed)) {
          const size_t posted = me.PostPositions(batch);
          if (me.PollDeltas() == 0 && posted == 0) Idle(link.a.get());
        }
      },
      [&](std::atomic<bool>& stop) {
        while (!stop.load(std::memory_order_relaxed))
          if (se.PollPositions() == 0) Idle(link.b.get());
      },
      &row->cpu_master, &row->cpu_slave);
  const auto ms = me.stats();
  const auto ss = se.stats();
  // Drain what is still in flight (the master posts nothing more) until the link is quiet for
  // 20 ms, so that "lost" counts frames lost, not the window in flight when the clock stopped.
  {
    auto quiet_since = Clock::now();
    const auto deadline = quiet_since + std::chrono::milliseconds(500);
    while (Clock::now() < deadline && Clock::now() - quiet_since < std::chrono::milliseconds(20)) {
      if (se.PollPositions() + me.PollDeltas() > 0) quiet_since = Clock::now();
    }
  }
  const auto md = me.stats();
  const auto sd = se.stats();
  const double payload = static_cast<double>(chunk);
  row->segment_gbps = ss.positions_applied * payload * 8 / wall / 1e9;
  row->segment_both_gbps = (ss.positions_applied + ms.deltas_applied) * payload * 8 / wall / 1e9;
  row->segment_frames_per_s = ss.positions_applied / wall;
  row->segment_sweeps_per_s = ms.sweeps / wall;
  // Positions the slave never saw, and deltas the master never got, after the drain.
  const uint64_t seen = sd.positions_applied + sd.positions_stale;
  row->segment_lost = (md.positions_sent > seen ? md.positions_sent - seen : 0) +
                      (sd.positions_applied > md.deltas_applied ? sd.positions_applied - md.deltas_applied : 0);
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
  HS_REQUIRE(!opt.chunk_bytes.empty()) << "--chunk needs at least one size";
  HS_REQUIRE(!opt.batches.empty()) << "--batch needs at least one size";
  for (uint32_t b : opt.batches)
    HS_REQUIRE(b >= 1 && b <= 1024) << "--batch sizes must be in [1, 1024], got " << b;
  std::vector<LinkBenchRow> rows;
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
        if (r % 2 == 0) {
          RawRun(opt, chunk, batch, true, &row);
          SegmentRun(opt, chunk, batch, &row);
          RawRun(opt, chunk, batch, false, &row);
        } else {
          RawRun(opt, chunk, batch, false, &row);
          SegmentRun(opt, chunk, batch, &row);
          RawRun(opt, chunk, batch, true, &row);
        }
        row.ratio = row.raw_gbps > 0 ? row.segment_gbps / row.raw_gbps : 0;
        rounds.push_back(row);
      }
      rows.push_back(MedianRow(rounds));
    }
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
