// frame_flood: an attacker on the wire of a job over UDP, for bench/steer.sh (on loopback) and
// test/bin/cluster_test.cc (between network namespaces, run in one of them with `ip netns
// exec`). Root only (it reads the wire with AF_PACKET and forges source addresses with a raw IP
// socket). MACHINES is the job's --peers list (with or without "udp://"), in rank order: ADDRESS:PORT
// entries, or bare PORTs meaning 127.0.0.1:PORT. Three commands:
//
//   frame_flood capture MACHINES COUNT FILE [TRAILER]
//       records the frames (payload, source and destination) sent to the machines, up to
//       COUNT of them or until killed, into FILE: the frames of one run of a job, to be
//       replayed into a later run (TRAILER: the frames' trailer bytes, 32 keyed (default), 8
//       not). It reads every interface of its network namespace and keeps each datagram as it
//       arrives (not as it leaves): on lo, or in a bridge's namespace, every frame once.
//   frame_flood flood MACHINES COUNT RATE JOB [KEYFILE] [CAPTURE]
//       loads CAPTURE, says "ready", 3 s later "sending", and sends COUNT datagrams to the
//       machines, RATE a second, in turn: a third garbage (random bytes and lengths, some with
//       our magic), a third forged frames of the job (NaN positions and deltas, control
//       messages saying done, stop and a clock of 1e9; claiming a random machine's rank;
//       sealed with the job's id and, where KEYFILE is given, with a key derived from another
//       file's bytes: an attacker without the key), of garbage and forged frames each half
//       from a stranger's address (this host's own) and half with the source forged to the
//       next machine of the list, and a third the CAPTURE's frames of an earlier run, each to
//       its original machine from its original source address. Prints what it sent, by kind.
//   frame_flood replay MACHINES COUNT RATE CAPTURE
//       says "ready" and "sending" and at once sends COUNT of the CAPTURE's frames (drawn at
//       random), RATE a second, each to its original machine from its original source
//       address: replays only.
//
// Not a test: the job's logs say what it refused (bench/steer.sh and the tests read them).
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "sync/wire.hpp"
#include "transport/frame.hpp"
#include "transport/open.hpp"

namespace {

using hogstream::FrameFormat;
using hogstream::Header;
using hogstream::MsgKind;

// An IPv4 address and UDP port, both in network byte order.
struct Where {
  uint32_t addr = 0;
  uint16_t port = 0;
  bool operator==(const Where& o) const { return addr == o.addr && port == o.port; }
  sockaddr_in sockaddr() const {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = addr;
    a.sin_port = port;
    return a;
  }
};

struct Datagram {
  Where from, to;
  std::vector<std::byte> bytes;
};

// "ADDRESS:PORT,..." or "PORT,..." (127.0.0.1), as the machines' ranks order them (or the
// job's --peers text itself, udp://...): read by the one peer-list parser (transport/open.hpp).
std::vector<Where> Machines(const std::string& text) {
  std::string url = text;
  if (text.find("://") == std::string::npos) {
    url = "udp://";
    std::stringstream ss(text);
    for (std::string entry; std::getline(ss, entry, ',');)
      url += (entry.find(':') == std::string::npos ? "127.0.0.1:" : "") + entry + ",";
  }
  hogstream::UrlRules rules;
  rules.flag = "MACHINES";
  const hogstream::PeerList list = hogstream::ParseTransportUrl(url, rules);
  if (list.scheme != "udp") throw std::runtime_error("MACHINES are udp addresses");
  std::vector<Where> all;
  for (const hogstream::PeerEntry& e : list.peers) {
    Where w;
    inet_pton(AF_INET, e.ip.c_str(), &w.addr);  // resolved: dotted IPv4
    w.port = htons(e.port);
    all.push_back(w);
  }
  return all;
}

volatile sig_atomic_t g_stop = 0;
void OnStop(int) { g_stop = 1; }

int Capture(const std::vector<Where>& machines, size_t count, const std::string& file, size_t trailer) {
  // Every protocol, so that a bridge's ports show too (a bridge takes its ports' frames before
  // an ETH_P_IP socket would see them); each datagram is kept where it arrives.
  const int fd = socket(AF_PACKET, SOCK_DGRAM, htons(ETH_P_ALL));
  if (fd < 0) {
    std::perror("frame_flood: AF_PACKET socket (root?)");
    return 1;
  }
  const int rcvbuf = 64 << 20;  // a job's bursts, while this process waits for a core
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);
  // SIGTERM or SIGINT ends the capture (recvfrom returns EINTR): what was kept is written.
  struct sigaction sa {};
  sa.sa_handler = OnStop;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  std::ofstream out(file, std::ios::binary);
  std::vector<unsigned char> buf(1 << 17);
  size_t kept = 0, fragmented = 0;
  std::cout << "capturing" << std::endl;
  while (kept < count && !g_stop) {
    sockaddr_ll from{};
    socklen_t len = sizeof from;
    const ssize_t n = recvfrom(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n < static_cast<ssize_t>(sizeof(iphdr) + sizeof(udphdr))) continue;
    if (from.sll_protocol != htons(ETH_P_IP)) continue;
    if (from.sll_pkttype == PACKET_OUTGOING) continue;  // lo (and a bridge) shows each datagram twice
    const auto* ip = reinterpret_cast<const iphdr*>(buf.data());
    if (ip->protocol != IPPROTO_UDP) continue;
    if (ip->frag_off & htons(IP_OFFMASK)) continue;  // a later fragment (counted with its first)
    const size_t ihl = ip->ihl * 4u;
    const auto* udp = reinterpret_cast<const udphdr*>(buf.data() + ihl);
    const Where src{ip->saddr, udp->source}, dst{ip->daddr, udp->dest};
    if (std::find(machines.begin(), machines.end(), dst) == machines.end()) continue;
    if (ip->frag_off & htons(IP_MF)) {  // a datagram over the MTU: this tool does not reassemble
      ++fragmented;
      continue;
    }
    const size_t payload = std::min<size_t>(ntohs(udp->len) - sizeof(udphdr), n - ihl - sizeof(udphdr));
    // A GSO send shows here as one datagram holding a run of frames, each padded to 16
    // bytes: each frame is kept as the datagram a receiver would have read.
    const unsigned char* at = buf.data() + ihl + sizeof(udphdr);
    for (size_t off = 0; off + FrameFormat::kHeaderBytes <= payload && kept < count;) {
      uint32_t length;
      std::memcpy(&length, at + off + FrameFormat::kLengthAt, sizeof length);
      const size_t frame = FrameFormat::kHeaderBytes + size_t{length} + trailer;
      const uint32_t bytes = static_cast<uint32_t>(std::min(payload - off, (frame + 15) / 16 * 16));
      for (const Where* w : {&src, &dst})
        out.write(reinterpret_cast<const char*>(&w->addr), 4).write(reinterpret_cast<const char*>(&w->port), 2);
      out.write(reinterpret_cast<const char*>(&bytes), 4);
      out.write(reinterpret_cast<const char*>(at + off), bytes);
      ++kept;
      off += bytes;
    }
    if (kept % 1000 == 0) out.flush();
  }
  out.flush();
  tpacket_stats st{};
  socklen_t st_len = sizeof st;
  getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &st, &st_len);
  std::cout << "captured " << kept << " frames; " << fragmented << " datagrams skipped, fragmented (over the MTU); "
            << st.tp_drops << " packets dropped by the kernel" << std::endl;
  return 0;
}

std::vector<Datagram> Load(const std::string& file) {
  std::vector<Datagram> all;
  std::ifstream in(file, std::ios::binary);
  for (;;) {
    Datagram d;
    uint32_t bytes = 0;
    if (!in.read(reinterpret_cast<char*>(&d.from.addr), 4) || !in.read(reinterpret_cast<char*>(&d.from.port), 2) ||
        !in.read(reinterpret_cast<char*>(&d.to.addr), 4) || !in.read(reinterpret_cast<char*>(&d.to.port), 2) ||
        !in.read(reinterpret_cast<char*>(&bytes), 4) || bytes > (1u << 17))
      break;
    d.bytes.resize(bytes);
    if (!in.read(reinterpret_cast<char*>(d.bytes.data()), bytes)) break;
    all.push_back(std::move(d));
  }
  return all;
}

// A raw IPv4 socket that writes its own headers: any source address and port. (It does not
// fragment: a datagram over the path's MTU is not sent.)
class Spoofer {
 public:
  Spoofer() { fd_ = socket(AF_INET, SOCK_RAW, IPPROTO_RAW); }
  ~Spoofer() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  bool Send(const Where& from, const Where& to, const std::vector<std::byte>& payload) {
    std::vector<unsigned char> pkt(sizeof(iphdr) + sizeof(udphdr) + payload.size());
    auto* ip = reinterpret_cast<iphdr*>(pkt.data());
    ip->version = 4;
    ip->ihl = 5;
    ip->ttl = 64;
    ip->protocol = IPPROTO_UDP;
    ip->tot_len = htons(static_cast<uint16_t>(pkt.size()));
    ip->saddr = from.addr;
    ip->daddr = to.addr;
    auto* udp = reinterpret_cast<udphdr*>(pkt.data() + sizeof(iphdr));
    udp->source = from.port;
    udp->dest = to.port;
    udp->len = htons(static_cast<uint16_t>(sizeof(udphdr) + payload.size()));
    udp->check = 0;  // none (IPv4 allows it)
    if (!payload.empty()) std::memcpy(pkt.data() + sizeof(iphdr) + sizeof(udphdr), payload.data(), payload.size());
    const sockaddr_in dst = to.sockaddr();
    return sendto(fd_, pkt.data(), pkt.size(), 0, reinterpret_cast<const sockaddr*>(&dst), sizeof dst) ==
           static_cast<ssize_t>(pkt.size());
  }

 private:
  int fd_ = -1;
};

// The attack (see the top): kinds garbage, forged, replayed in turn (of those that apply).
int Flood(const std::vector<Where>& machines, size_t count, double rate, const std::string& job,
          const std::string& keyfile, const std::string& capture, bool replay_only) {
  Spoofer raw;
  if (!raw.ok()) {
    std::perror("frame_flood: raw socket (root?)");
    return 1;
  }
  const int plain = socket(AF_INET, SOCK_DGRAM, 0);
  std::optional<hogstream::JobKey> key;
  if (!keyfile.empty()) {
    key = hogstream::LoadJobKey(keyfile);
    (*key)[0] ^= 0x5a;  // the attacker has not the key: a near miss of it
  }
  const FrameFormat fmt(hogstream::JobIdOf(job), key);
  const std::vector<Datagram> replay = capture.empty() ? std::vector<Datagram>{} : Load(capture);
  if (replay_only && replay.empty()) throw std::runtime_error("nothing to replay in " + capture);
  std::mt19937_64 rng(12345);
  const std::vector<float> nan(1024, std::numeric_limits<float>::quiet_NaN());
  const size_t n = machines.size();
  size_t garbage = 0, forged = 0, replayed = 0, failed = 0;
  std::cout << "ready: " << replay.size() << " frames to replay"
            << (replay_only ? "; starting now" : "; starting in 3 s") << std::endl;
  if (!replay_only) sleep(3);  // the job's machines start meanwhile
  std::cout << "sending" << std::endl;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < count; ++i) {
    Where to = machines[i % n];
    std::vector<std::byte> bytes;
    bool spoofed = false;
    Where from = machines[(i + 1) % n];  // another machine of the job
    const int kind = replay_only ? 2 : replay.empty() ? static_cast<int>(i % 2) : static_cast<int>(i % 3);
    if (kind == 0) {  // garbage
      bytes.resize(rng() % 1500);
      for (auto& b : bytes) b = static_cast<std::byte>(rng());
      if (bytes.size() >= 8 && rng() % 2) std::memcpy(bytes.data(), &FrameFormat::kMagic, 4);
      spoofed = rng() % 2;
      ++garbage;
    } else if (kind == 1) {  // forged
      Header h;  // sync's header, in a frame sealed as one of the job's would be
      const auto source = static_cast<uint16_t>(rng() % n);
      h.epoch = static_cast<uint32_t>(rng());
      h.chunk = static_cast<uint32_t>(rng() % 64);
      h.seq = rng() % 1000;
      h.clock = 1000000000;
      const int what = static_cast<int>(rng() % 3);
      h.kind = what == 0 ? MsgKind::kPosition : what == 1 ? MsgKind::kDelta : MsgKind::kIteration;
      h.length = what == 2 ? 120 : 4096;
      if (what == 2) h.chunk = 1 | 2 | 16 | 32;  // ready, training, done, stop
      bytes.resize(hogstream::kWireHeaderBytes + h.length + fmt.overhead());
      hogstream::PutHeader(bytes.data() + FrameFormat::kHeaderBytes, h);
      std::memcpy(bytes.data() + FrameFormat::kHeaderBytes + hogstream::kWireHeaderBytes, nan.data(), h.length);
      fmt.Seal(bytes.data(), hogstream::FrameHeader{hogstream::FrameType::kData, source,
                                                    hogstream::kWireHeaderBytes + h.length});
      spoofed = rng() % 2;
      ++forged;
    } else {  // an earlier run's frame, from its original sender's address
      const Datagram& d = replay[rng() % replay.size()];
      bytes = d.bytes;
      from = d.from;
      to = d.to;
      spoofed = true;
      ++replayed;
    }
    bool ok;
    if (spoofed) {
      ok = raw.Send(from, to, bytes);
    } else {
      const sockaddr_in dst = to.sockaddr();
      ok = sendto(plain, bytes.data(), bytes.size(), 0, reinterpret_cast<const sockaddr*>(&dst), sizeof dst) ==
           static_cast<ssize_t>(bytes.size());
    }
    failed += !ok;
    if (i % 64 == 63) {  // RATE datagrams a second, spread over the job
      const double due = static_cast<double>(i + 1) / rate;
      const double now = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (due > now) usleep(static_cast<useconds_t>((due - now) * 1e6));
    }
  }
  close(plain);
  std::cout << "sent " << count - failed << " datagrams in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s: " << garbage
            << " garbage and " << forged << " forged (each half from a stranger, half from a machine's address), "
            << replayed << " replayed from an earlier run; " << failed << " not taken by the kernel" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "capture" && (argc == 5 || argc == 6))
      return Capture(Machines(argv[2]), std::stoull(argv[3]), argv[4], argc == 6 ? std::stoull(argv[5]) : 32);
    if (cmd == "flood" && argc >= 6 && argc <= 8)
      return Flood(Machines(argv[2]), std::stoull(argv[3]), std::stod(argv[4]), argv[5], argc > 6 ? argv[6] : "",
                   argc > 7 ? argv[7] : "", false);
    if (cmd == "replay" && argc == 6)
      return Flood(Machines(argv[2]), std::stoull(argv[3]), std::stod(argv[4]), "", "", argv[5], true);
  } catch (const std::exception& e) {
    std::cerr << "frame_flood: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "usage: frame_flood capture MACHINES COUNT FILE [TRAILER]\n"
               "       frame_flood flood MACHINES COUNT RATE JOB [KEYFILE] [CAPTURE]\n"
               "       frame_flood replay MACHINES COUNT RATE CAPTURE\n"
               "  MACHINES: ADDRESS:PORT,... (or PORT,... on 127.0.0.1), in rank order\n";
  return 2;
}
