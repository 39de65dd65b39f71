// The verbs address exchange (see exchange.hpp).
#include "transport/verbs/exchange.hpp"

#include <poll.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "base/common.hpp"

namespace hogstream {

namespace {

// The exchange's message: a tag that says it is one, HELLO (0) or REPLY (1), and an address in
// fixed bytes (both ends run this code; no pointers).
struct Wire {
  uint32_t tag;   // kTag
  uint32_t what;  // kHello or kReply
  uint16_t lid;
  uint8_t gid[16];
  uint8_t pad[2];
  uint32_t qpn;
};
static_assert(sizeof(Wire) == 32, "the wire form of an address is 32 bytes");
constexpr uint32_t kTag = 0x58565348;  // "HSVX" read as little-endian bytes
constexpr uint32_t kHello = 0, kReply = 1;

Wire ToWire(const VerbsAddress& a) {
  Wire w{};
  w.tag = kTag;
  w.lid = a.lid;
  std::memcpy(w.gid, a.gid.data(), sizeof w.gid);
  w.qpn = a.qpn;
  return w;
}

VerbsAddress FromWire(const Wire& w) {
  VerbsAddress a;
  a.lid = w.lid;
  std::memcpy(a.gid.data(), w.gid, sizeof w.gid);
  a.qpn = w.qpn;
  return a;
}

}  // namespace

std::vector<VerbsAddress> ExchangeVerbsAddresses(Transport& t, uint32_t ranks, const VerbsAddress& mine,
                                                 const VerbsExchangeOptions& opt) {
  const PeerId me = t.self();
  HS_CHECK(me < ranks) << "rank " << me << " of " << ranks;
  auto name = [&](PeerId r) { return opt.name ? opt.name(r) : "rank " + std::to_string(r); };
  std::vector<VerbsAddress> all(ranks);
  std::vector<bool> known(ranks, false), replied(ranks, false);
  all[me] = mine;
  known[me] = replied[me] = true;
  Wire wire = ToWire(mine);
  std::vector<PeerId> owe;  // ranks whose HELLO awaits our REPLY (no send slot yet)

  auto send = [&](PeerId to, uint32_t what) {
    wire.what = what;
    return t.PostSend(Dest::Peer(to), &wire, sizeof wire);
  };
  auto receive = [&] {
    Packet got[32];
    const size_t n = t.Poll(got, 32);
    for (size_t i = 0; i < n; ++i) {
      const Packet& m = got[i];
      const PeerId from = m.source;
      uint32_t tag = 0;
      if (m.length >= sizeof tag) std::memcpy(&tag, m.payload, sizeof tag);
      if (tag != kTag || from >= ranks || from == me) continue;  // not ours to read
      Wire w{};
      if (m.length == sizeof w) std::memcpy(&w, m.payload, sizeof w);
      HS_REQUIRE(m.length == sizeof w && w.what <= kReply)
          << "verbs address exchange: " << name(from) << " sent a malformed address (" << m.length
          << " bytes): is it running the same hogstream?";
      all[from] = FromWire(w);
      known[from] = true;
      if (w.what == kReply) replied[from] = true;
      else owe.push_back(from);
    }
    t.Release(n);
    return n;
  };
  auto answer = [&] {  // REPLY to every HELLO heard, as slots allow
    size_t sent = 0;
    while (sent < owe.size() && send(owe[sent], kReply)) ++sent;
    owe.erase(owe.begin(), owe.begin() + static_cast<std::ptrdiff_t>(sent));
    t.Flush();
  };
  auto sleep_on_wire = [&](std::chrono::milliseconds ms) {
    // A wait computed from a time already past is none: poll(2) takes a negative timeout as
    // "forever", and a rank whose HELLO fell due while it was busy (or descheduled) then slept
    // until a datagram came, which after the others' linger is never.
    ms = std::max(ms, std::chrono::milliseconds(0));
    if (const int fd = t.wait_fd(); fd >= 0) {
      pollfd p{fd, POLLIN, 0};
      poll(&p, 1, static_cast<int>(ms.count()));
    } else {
      std::this_thread::sleep_for(std::min(ms, std::chrono::milliseconds(1)));
    }
  };
  auto complete = [&] {
    return std::all_of(known.begin(), known.end(), [](bool b) { return b; }) &&
           std::all_of(replied.begin(), replied.end(), [](bool b) { return b; });
  };

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto next_hello = start;
  while (!complete()) {
    const auto now = Clock::now();
    if (now - start > opt.timeout) {
      std::string silent;
      for (PeerId r = 0; r < ranks; ++r)
        if (!known[r] || !replied[r]) silent += (silent.empty() ? "" : ", ") + name(r);
      HS_FAIL() << "verbs address exchange: no answer within " << opt.timeout.count() / 1000.0 << " s from "
                << silent
                << " (is hogstream running there with the same --peers and --job?)";
    }
    if (now >= next_hello) {
      for (PeerId r = 0; r < ranks; ++r)
        if (!replied[r]) send(r, kHello);  // a full slot skips this round: the next one sends
      next_hello = now + opt.resend;
    }
    answer();
    if (receive() == 0 && owe.empty())
      sleep_on_wire(std::chrono::duration_cast<std::chrono::milliseconds>(next_hello - Clock::now()) +
                    std::chrono::milliseconds(1));
  }
  // Linger: a rank whose REPLY from us was lost keeps saying HELLO; answer until nobody has
  // asked for `linger` (a slow rank's every HELLO extends it), within the whole timeout.
  for (auto quiet_until = Clock::now() + opt.linger;
       Clock::now() < quiet_until && Clock::now() - start < opt.timeout;) {
    answer();
    const size_t got = receive();
    if (!owe.empty()) quiet_until = Clock::now() + opt.linger;  // a HELLO (not any message) came
    else if (got == 0) sleep_on_wire(std::chrono::milliseconds(5));
  }
  answer();
  return all;
}

}  // namespace hogstream
