// frame_flood: an attacker on the wire of a job over UDP on this host, for bench/steer.sh.
// Root only (it reads the loopback with AF_PACKET and forges source addresses with a raw IP
// socket). Two commands:
//
//   frame_flood capture PORT[,PORT...] COUNT FILE [TRAILER]
//       records the frames (payload, source and destination) sent to 127.0.0.1:PORT, up to
//       COUNT of them or until killed, into FILE: the frames of one run of a job, to be
//       replayed into a later run (TRAILER: the frames' trailer bytes, 32 keyed (default), 8 not).
//   frame_flood flood PORT[,PORT...] COUNT RATE JOB [KEYFILE] [CAPTURE]
//       loads CAPTURE, says "ready", and 3 s later sends COUNT datagrams to the ports, RATE a
//       second, in turn: a third garbage (random bytes and
//       lengths, some with our magic), a third forged frames of the job (NaN positions and
//       deltas, control messages saying done, stop and a clock of 1e9; sealed with the job's
//       id and, where KEYFILE is given, with a key derived from another file's bytes: an
//       attacker without the key), half of them from a stranger's address and half with the
//       source forged to the next port of the list (another machine of the job), and a third
//       the CAPTURE's frames of an earlier run, each to its original port from its original
//       source address. Prints what it sent, by kind.
//
// Not a test: the job's logs say what it refused (bench/steer.sh reads them).
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
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
#include <string>
#include <vector>

#include "transport/frame.hpp"

namespace {

using hogstream::FrameFormat;
using hogstream::Header;
using hogstream::MsgKind;

struct Datagram {
  uint16_t from = 0, to = 0;  // ports on 127.0.0.1
  std::vector<std::byte> bytes;
};

std::vector<uint16_t> Ports(const std::string& text) {
  std::vector<uint16_t> ports;
  std::stringstream ss(text);
  for (std::string p; std::getline(ss, p, ',');) ports.push_back(static_cast<uint16_t>(std::stoi(p)));
  return ports;
}

int Capture(const std::vector<uint16_t>& ports, size_t count, const std::string& file, size_t trailer) {
  const int fd = socket(AF_PACKET, SOCK_DGRAM, htons(ETH_P_IP));
  if (fd < 0) {
    std::perror("frame_flood: AF_PACKET socket (root?)");
    return 1;
  }
  std::ofstream out(file, std::ios::binary);
  std::vector<unsigned char> buf(1 << 17);
  size_t kept = 0;
  while (kept < count) {
    sockaddr_ll from{};
    socklen_t len = sizeof from;
    const ssize_t n = recvfrom(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n < static_cast<ssize_t>(sizeof(iphdr) + sizeof(udphdr))) continue;
    if (from.sll_pkttype == PACKET_OUTGOING) continue;  // lo shows each datagram twice
    const auto* ip = reinterpret_cast<const iphdr*>(buf.data());
    if (ip->protocol != IPPROTO_UDP) continue;
    const size_t ihl = ip->ihl * 4u;
    const auto* udp = reinterpret_cast<const udphdr*>(buf.data() + ihl);
    if (std::find(ports.begin(), ports.end(), ntohs(udp->dest)) == ports.end()) continue;
    const size_t payload = std::min<size_t>(ntohs(udp->len) - sizeof(udphdr), n - ihl - sizeof(udphdr));
    const uint16_t src = ntohs(udp->source), dst = ntohs(udp->dest);
    // A GSO send shows here as one datagram holding a run of frames, each padded to 16
    // bytes: each frame is kept as the datagram a receiver would have read.
    const unsigned char* at = buf.data() + ihl + sizeof(udphdr);
    for (size_t off = 0; off + FrameFormat::kHeaderBytes <= payload && kept < count;) {
      uint32_t length;
      std::memcpy(&length, at + off + 28, sizeof length);
      const size_t frame = FrameFormat::kHeaderBytes + size_t{length} + trailer;
      const uint32_t bytes = static_cast<uint32_t>(std::min(payload - off, (frame + 15) / 16 * 16));
      out.write(reinterpret_cast<const char*>(&src), 2).write(reinterpret_cast<const char*>(&dst), 2);
      out.write(reinterpret_cast<const char*>(&bytes), 4);
      out.write(reinterpret_cast<const char*>(at + off), bytes);
      ++kept;
      off += bytes;
    }
    if (kept % 1000 == 0) out.flush();
  }
  std::cout << "captured " << kept << " datagrams\n";
  return 0;
}

std::vector<Datagram> Load(const std::string& file) {
  std::vector<Datagram> all;
  std::ifstream in(file, std::ios::binary);
  for (;;) {
    Datagram d;
    uint32_t bytes = 0;
    if (!in.read(reinterpret_cast<char*>(&d.from), 2) || !in.read(reinterpret_cast<char*>(&d.to), 2) ||
        !in.read(reinterpret_cast<char*>(&bytes), 4) || bytes > (1u << 17))
      break;
    d.bytes.resize(bytes);
    if (!in.read(reinterpret_cast<char*>(d.bytes.data()), bytes)) break;
    all.push_back(std::move(d));
  }
  return all;
}

// A raw IPv4 socket that writes its own headers: any source address and port on loopback.
class Spoofer {
 public:
  Spoofer() { fd_ = socket(AF_INET, SOCK_RAW, IPPROTO_RAW); }
  ~Spoofer() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  bool Send(uint16_t from, uint16_t to, const std::vector<std::byte>& payload) {
    std::vector<unsigned char> pkt(sizeof(iphdr) + sizeof(udphdr) + payload.size());
    auto* ip = reinterpret_cast<iphdr*>(pkt.data());
    ip->version = 4;
    ip->ihl = 5;
    ip->ttl = 64;
    ip->protocol = IPPROTO_UDP;
    ip->tot_len = htons(static_cast<uint16_t>(pkt.size()));
    ip->saddr = ip->daddr = htonl(INADDR_LOOPBACK);
    auto* udp = reinterpret_cast<udphdr*>(pkt.data() + sizeof(iphdr));
    udp->source = htons(from);
    udp->dest = htons(to);
    udp->len = htons(static_cast<uint16_t>(sizeof(udphdr) + payload.size()));
    udp->check = 0;  // none (IPv4 allows it)
    if (!payload.empty()) std::memcpy(pkt.data() + sizeof(iphdr) + sizeof(udphdr), payload.data(), payload.size());
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sendto(fd_, pkt.data(), pkt.size(), 0, reinterpret_cast<sockaddr*>(&dst), sizeof dst) ==
           static_cast<ssize_t>(pkt.size());
  }

 private:
  int fd_ = -1;
};

int Flood(const std::vector<uint16_t>& ports, size_t count, double rate, const std::string& job,
          const std::string& keyfile, const std::string& capture) {
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
  std::mt19937_64 rng(12345);
  const std::vector<float> nan(1024, std::numeric_limits<float>::quiet_NaN());
  size_t garbage = 0, forged = 0, replayed = 0, failed = 0;
  std::cout << "ready: " << replay.size() << " frames to replay; starting in 3 s" << std::endl;
  sleep(3);  // the job's machines start meanwhile
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < count; ++i) {
    uint16_t to = ports[i % ports.size()];
    std::vector<std::byte> bytes;
    bool spoofed = false;
    uint16_t from = ports[(i + 1) % ports.size()];  // another machine of the job
    const int kind = replay.empty() ? static_cast<int>(i % 2) : static_cast<int>(i % 3);
    if (kind == 0) {  // garbage
      bytes.resize(rng() % 1500);
      for (auto& b : bytes) b = static_cast<std::byte>(rng());
      if (bytes.size() >= 8 && rng() % 2) std::memcpy(bytes.data(), &FrameFormat::kMagic, 4);
      ++garbage;
    } else if (kind == 1) {  // forged
      Header h;
      h.source = static_cast<uint16_t>(rng() % 2);
      h.epoch = static_cast<uint32_t>(rng());
      h.chunk = static_cast<uint32_t>(rng() % 64);
      h.seq = rng() % 1000;
      h.clock = 1000000000;
      const int what = static_cast<int>(rng() % 3);
      h.kind = what == 0 ? MsgKind::kPosition : what == 1 ? MsgKind::kDelta : MsgKind::kIteration;
      h.length = what == 2 ? 120 : 4096;
      if (what == 2) h.chunk = 1 | 2 | 16 | 32;  // ready, training, done, stop
      bytes.resize(h.length + fmt.overhead());
      std::memcpy(bytes.data() + FrameFormat::kHeaderBytes, nan.data(), h.length);
      fmt.Seal(bytes.data(), h);
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
      sockaddr_in dst{};
      dst.sin_family = AF_INET;
      dst.sin_port = htons(to);
      dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ok = sendto(plain, bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&dst), sizeof dst) ==
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
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s: " << garbage << " garbage, " << forged
            << " forged (half from a stranger, half from a machine's address), " << replayed
            << " replayed from an earlier run; " << failed << " not taken by the kernel\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "capture" && (argc == 5 || argc == 6))
      return Capture(Ports(argv[2]), std::stoull(argv[3]), argv[4], argc == 6 ? std::stoull(argv[5]) : 32);
    if (cmd == "flood" && argc >= 6)
      return Flood(Ports(argv[2]), std::stoull(argv[3]), std::stod(argv[4]), argv[5], argc > 6 ? argv[6] : "",
                   argc > 7 ? argv[7] : "");
  } catch (const std::exception& e) {
    std::cerr << "frame_flood: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "usage: frame_flood capture PORT[,PORT...] COUNT FILE [TRAILER]\n"
               "       frame_flood flood PORT[,PORT...] COUNT RATE JOB [KEYFILE] [CAPTURE]\n";
  return 2;
}
