#include "sync/link_bench.hpp"

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <memory>
#include <thread>

#include "core/common.hpp"
#include "sync/segment.hpp"
#include "transport/inproc/device.hpp"
#include "transport/udp/device.hpp"

namespace hogstream {

namespace {

using Clock = std::chrono::steady_clock;

struct Link {
  std::unique_ptr<Transport> a, b;  // peer 0 (master / sender), peer 1 (slave / receiver)
};

Link MakeLink(const std::string& kind, uint32_t payload_bytes, uint32_t slots) {
  if (kind == "inproc") {
    InprocOptions o;
    o.max_payload = payload_bytes;
    o.slots = slots;
    auto [a, b] = InprocDevice::MakePair(o);
    return {std::move(a), std::move(b)};
  }
  HS_REQUIRE(kind == "udp") << "--transport must be inproc or udp (raw and verbs come later), got '"
                            << kind << "'";
  UdpOptions o;
  o.max_payload = (payload_bytes + 15) / 16 * 16;
  HS_REQUIRE(o.max_payload <= 65000) << "chunk of " << payload_bytes
                                     << " bytes does not fit one UDP datagram (at most 65000)";
  o.send_slots = o.recv_slots = slots;
  o.job = 0xbe4c;
  auto [a, b] = UdpDevice(o).LoopbackPair();
  return {std::move(a), std::move(b)};
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

}  // namespace

std::vector<LinkBenchRow> RunLinkBench(const LinkBenchOptions& opt) {
  HS_REQUIRE(opt.seconds > 0 && opt.seconds <= 600) << "--seconds must be in (0, 600]";
  HS_REQUIRE(!opt.chunk_bytes.empty()) << "--chunk needs at least one size";
  std::vector<LinkBenchRow> rows;
  for (uint32_t chunk : opt.chunk_bytes) {
    HS_REQUIRE(chunk >= 16 && chunk % 4 == 0) << "--chunk sizes must be multiples of 4 bytes, >= 16; got "
                                              << chunk;
    LinkBenchRow row;
    row.transport = opt.transport;
    row.chunk_bytes = chunk;

    // The raw link: one side commits frames of `chunk` bytes as fast as slots allow, the other
    // polls and releases them.
    {
      Link link = MakeLink(opt.transport, chunk, opt.slots);
      uint64_t sent = 0, received = 0;
      const double wall = RunPair(
          opt.seconds,
          [&](std::atomic<bool>& stop) {
            Header h;
            h.kind = MsgKind::kDelta;
            h.length = chunk;
            // Fill every payload byte, as the segment copies each chunk into its slot.
            const std::vector<std::byte> source(chunk, std::byte{0x5a});
            while (!stop.load(std::memory_order_relaxed)) {
              std::byte* slot = link.a->AcquireSend();
              if (!slot) {
                link.a->Flush();
                continue;
              }
              std::memcpy(slot, source.data(), chunk);
              h.seq = ++sent;
              link.a->CommitSend(Dest::Peer(1), h);
              if (sent % 16 == 0) link.a->Flush();
            }
            link.a->Flush();
          },
          [&](std::atomic<bool>& stop) {
            Message m[64];
            while (!stop.load(std::memory_order_relaxed)) {
              const size_t n = link.b->Poll(m, 64);
              for (size_t i = 0; i < n; ++i) received += m[i].h.kind == MsgKind::kDelta;
              if (n) link.b->Release(n);
            }
          },
          &row.cpu_sender, &row.cpu_receiver);
      row.raw_frames_per_s = received / wall;
      row.raw_gbps = received * 8.0 * chunk / wall / 1e9;
      row.raw_lost = sent > received ? sent - received : 0;
    }

    // The segment: a master and a slave buffer kept in sync over the same kind of link.
    {
      Link link = MakeLink(opt.transport, chunk, opt.slots);
      const size_t n = opt.buffer_bytes / sizeof(float);
      std::vector<float> master(n), slave;
      for (size_t i = 0; i < n; ++i) master[i] = static_cast<float>(i % 1000) * 1e-3f;
      slave = master;
      MasterEndpoint me(master.data(), n, chunk / 4, link.a.get(), Dest::Peer(1));
      SlaveEndpoint se(slave.data(), n, chunk / 4, link.b.get());
      const double wall = RunPair(
          opt.seconds,
          [&](std::atomic<bool>& stop) {
            while (!stop.load(std::memory_order_relaxed)) {
              me.PostNextPosition();
              me.PollDeltas();
            }
          },
          [&](std::atomic<bool>& stop) {
            while (!stop.load(std::memory_order_relaxed)) se.PollPositions();
          },
          &row.cpu_master, &row.cpu_slave);
      const auto ms = me.stats();
      const auto ss = se.stats();
      // One direction, as the raw blast measures one: positions out (deltas come back at the
      // same rate on the other direction of the link).
      row.segment_gbps = ms.bytes_sent * 8.0 / wall / 1e9;
      row.segment_both_gbps = (ms.bytes_sent + ss.bytes_sent) * 8.0 / wall / 1e9;
      row.segment_frames_per_s = (ms.positions_sent + ss.positions_applied) / wall;
      row.segment_sweeps_per_s = ms.sweeps / wall;
      // Positions the slave never saw, and deltas the master never got (in flight at the end
      // counts as lost here: a handful of frames at most).
      const uint64_t seen = ss.positions_applied + ss.positions_stale;
      row.segment_lost = (ms.positions_sent > seen ? ms.positions_sent - seen : 0) +
                         (ss.positions_applied > ms.deltas_applied ? ss.positions_applied - ms.deltas_applied : 0);
    }
    row.ratio = row.raw_gbps > 0 ? row.segment_gbps / row.raw_gbps : 0;
    rows.push_back(row);
  }
  return rows;
}

void PrintLinkBench(const std::vector<LinkBenchRow>& rows, std::ostream& os, bool json) {
  if (json) {
    for (const LinkBenchRow& r : rows) {
      os << std::setprecision(6) << "{\"transport\":\"" << r.transport << "\",\"chunk_bytes\":" << r.chunk_bytes
         << ",\"segment_gbps\":" << r.segment_gbps << ",\"segment_both_gbps\":" << r.segment_both_gbps
         << ",\"raw_gbps\":" << r.raw_gbps
         << ",\"ratio\":" << r.ratio << ",\"segment_frames_per_s\":" << r.segment_frames_per_s
         << ",\"raw_frames_per_s\":" << r.raw_frames_per_s << ",\"segment_lost\":" << r.segment_lost
         << ",\"raw_lost\":" << r.raw_lost << ",\"segment_sweeps_per_s\":" << r.segment_sweeps_per_s
         << ",\"cpu_master\":" << r.cpu_master << ",\"cpu_slave\":" << r.cpu_slave
         << ",\"cpu_sender\":" << r.cpu_sender << ",\"cpu_receiver\":" << r.cpu_receiver << "}\n";
    }
    return;
  }
  os << "transport   chunk  segment Gbit/s  raw Gbit/s  ratio  segment frames/s  raw frames/s"
        "  lost seg/raw  CPU master/slave  CPU send/recv\n";
  for (const LinkBenchRow& r : rows) {
    os << std::left << std::setw(9) << r.transport << std::right << std::setw(8) << r.chunk_bytes
       << std::fixed << std::setprecision(2) << std::setw(16) << r.segment_gbps << std::setw(12)
       << r.raw_gbps << std::setw(7) << r.ratio << std::setprecision(0) << std::setw(18)
       << r.segment_frames_per_s << std::setw(14) << r.raw_frames_per_s << std::setw(9)
       << r.segment_lost << "/" << std::left << std::setw(4) << r.raw_lost << std::right
       << std::setprecision(2) << std::setw(11) << r.cpu_master << "/" << std::left << std::setw(6)
       << r.cpu_slave << std::right << std::setw(9) << r.cpu_sender << "/" << r.cpu_receiver << "\n";
  }
}

}  // namespace hogstream
