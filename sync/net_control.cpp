// The control channel of a job across machines (see net_control.hpp): encoding this machine's
// control message and deciding whether one that came in is believed.
#include "sync/net_control.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>

#include "sync/group.hpp"

namespace hogstream {

const char* AgreeName(Agree a) {
  switch (a) {
    case kAgreePeers: return "--peers list (or its order, or the job's name)";
    case kAgreeNet: return "net (its parameter shapes)";
    case kAgreeSolver: return "solver settings (update rule or schedule)";
    case kAgreeSettings: return "exchange settings (--policy, --compress, --aggregate and the run's length, chunking)";
    case kAgreeKinds: break;
  }
  return "?";
}

std::string DisagreementLine(const std::string& who, const std::string& me, Agree a) {
  return who + " differs from " + me + " in its " + AgreeName(a) + ": every machine of a job needs the same";
}

const char* ControlRefusalName(ControlRefusal r) {
  switch (r) {
    case ControlRefusal::kMalformed: return "malformed";
    case ControlRefusal::kUnproven: return "unproven";
    case ControlRefusal::kReplay: return "replayed";
    case ControlRefusal::kOldRun: return "old run";
    case ControlRefusal::kNotLeader: return "done not from the leader";
    case ControlRefusal::kDisagree: return "disagreeing";
    case ControlRefusal::kCount: break;
  }
  return "?";
}

uint64_t FreshNonce() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return v;
}

int64_t BoundClock(int64_t count, int64_t claimed, double secs, double rate, bool* clamped) {
  *clamped = false;
  if (claimed <= count) return count;  // it only grows
  const double r = rate > 0 ? rate : kClockRateUnknown;
  const int64_t most = count + kClockSlack + static_cast<int64_t>(std::min(kClockRateMargin * r * secs, 1e15));
  *clamped = claimed > most;
  return std::min(claimed, most);
}

NetControlChannel::NetControlChannel(int rank, int machines, uint64_t nonce)
    : rank_(rank), machines_(machines), nonce_(nonce), fresh_(static_cast<size_t>(machines)) {}

void NetControlChannel::Grow(int machines) {
  HS_CHECK(machines >= machines_) << machines << " machines after " << machines_;
  machines_ = machines;
  fresh_.resize(static_cast<size_t>(machines));
}

void NetControlChannel::set_agreement(const uint64_t (&agree)[kAgreeKinds]) {
  std::copy(std::begin(agree), std::end(agree), agree_);
}

std::pair<Header, NetControl> NetControlChannel::Round(const ControlState& s) {
  Header h;
  h.kind = MsgKind::kIteration;
  h.epoch = s.first_epoch;  // every master epoch of this run is above it (set_min_epoch)
  h.chunk = s.flags;
  h.clock = static_cast<uint64_t>(s.clock);
  h.seq = static_cast<uint64_t>(s.view);
  h.length = sizeof(NetControl);
  NetControl b;
  b.nonce = nonce_;
  b.counter = ++counter_;
  b.flushed = s.flushed;
  b.snapshots = s.snapshots;
  b.solvers = s.solvers;
  b.held = s.held;
  std::copy(std::begin(agree_), std::end(agree_), b.agree);
  return {h, b};
}

bool NetControlChannel::Send(Wire& wire, const ControlState& s, std::chrono::steady_clock::time_point now) {
  auto [h, b] = Round(s);
  for (int r = 0; r < machines_; ++r) {
    if (r == rank_) continue;
    std::byte* slot = wire.AcquireSend();
    if (!slot) {
      wire.Flush();
      if (!(slot = wire.AcquireSend())) return false;
    }
    EchoTo(r, &b);
    std::memcpy(slot, &b, sizeof b);
    wire.CommitSend(Dest::Peer(static_cast<PeerId>(r)), h);
  }
  wire.Flush();
  Sent(now);
  return true;
}

bool NetControlChannel::Due(std::chrono::steady_clock::time_point now, uint32_t heartbeat_ms) {
  const auto since = now - last_sent_;
  if (since < std::chrono::milliseconds(heartbeat_ms) && !(answer_now_ && since >= std::chrono::milliseconds(2)))
    return false;
  answer_now_ = false;
  return true;
}

void NetControlChannel::EchoTo(int r, NetControl* body) const {
  const Fresh& f = fresh_[static_cast<size_t>(r)];
  body->echo[0] = f.nonce;
  std::copy(std::begin(f.hello), std::end(f.hello), body->echo + 1);
}

ControlNews NetControlChannel::Refuse(ControlRefusal why, ControlNews news) {
  ++refused_[static_cast<size_t>(why)];
  news.taken = false;
  news.refused = why;
  return news;
}

bool NetControlChannel::EchoBack(Fresh& f, uint64_t nonce) {
  if (nonce == f.nonce || std::find(std::begin(f.hello), std::end(f.hello), nonce) != std::end(f.hello)) return false;
  for (int i = NetControl::kEchoes - 2; i > 0; --i) f.hello[i] = f.hello[i - 1];
  f.hello[0] = nonce;
  return true;  // a new run of it: its proof need not wait for our next interval
}

int NetControlChannel::Disagreement(const NetControl& b) const {
  for (int a = 0; a < kAgreeKinds; ++a)
    if (b.agree[a] && agree_[a] && b.agree[a] != agree_[a]) return a;
  return -1;
}

void NetControlChannel::TakeRun(Fresh& f, uint64_t nonce, ControlNews* news) {
  // Another run of that machine, proven fresh: first contact, or a restart.
  if (f.nonce != 0) {
    if (f.retired.size() >= 16) f.retired.erase(f.retired.begin());
    f.retired.push_back(f.nonce);
  }
  news->new_run = true;
  news->restarted = f.nonce != 0;
  news->answer_now = true;  // echo its nonce at once: it believes this machine one trip later
  f.nonce = nonce;
  for (uint64_t& h : f.hello) h = h == nonce ? 0 : h;
}

ControlState NetControlChannel::Told(const Message& m, const NetControl& b) {
  constexpr uint64_t kMost = std::numeric_limits<int64_t>::max();
  ControlState s;
  s.flags = m.h.chunk;
  s.first_epoch = m.h.epoch;
  s.clock = static_cast<int64_t>(std::min<uint64_t>(m.h.clock, kMost));
  s.view = static_cast<int64_t>(std::min<uint64_t>(m.h.seq, kMost));
  s.flushed = b.flushed;
  s.snapshots = b.snapshots;
  s.solvers = static_cast<int>(std::clamp<int64_t>(b.solvers, 1, kMaxGroupSolvers));  // 0 or absurd: one
  s.held = b.held;
  return s;
}

ControlNews NetControlChannel::Decode(const Message& m, bool done_believed) {
  const PeerId src = m.h.source;
  if (src >= machines_ || src == rank_ || m.h.length != sizeof(NetControl) || !m.payload)
    return Refuse(ControlRefusal::kMalformed);
  NetControl b;
  std::memcpy(&b, m.payload, sizeof b);
  if (b.nonce == 0) return Refuse(ControlRefusal::kMalformed);
  Fresh& f = fresh_[src];
  // Freshness. A message is believed only once its sender has echoed this run's nonce (drawn
  // at random at our start): a frame recorded in an earlier run cannot, whatever its MAC.
  // Until then it is a hello: its nonce is echoed back in ours, so a live machine proves
  // itself within two control intervals.
  if (std::find(f.retired.begin(), f.retired.end(), b.nonce) != f.retired.end())
    return Refuse(ControlRefusal::kOldRun);
  ControlNews news;
  if (std::find(std::begin(b.echo), std::end(b.echo), nonce_) == std::end(b.echo)) {
    news.answer_now = EchoBack(f, b.nonce);
    return Refuse(ControlRefusal::kUnproven, news);
  }
  if (b.nonce == f.nonce && b.counter <= f.counter) return Refuse(ControlRefusal::kReplay);
  // Agreement: the same peers list, net, solver and exchange settings.
  news.disagree = Disagreement(b);
  if (news.disagree >= 0) {
    news.first_disagree = !f.disagrees;
    f.disagrees = true;
    news.answer_now = EchoBack(f, b.nonce);  // so that it can believe us, and name the difference too
    return Refuse(ControlRefusal::kDisagree, news);
  }
  if (b.nonce != f.nonce) TakeRun(f, b.nonce, &news);
  f.counter = b.counter;
  news.taken = true;
  news.told = Told(m, b);
  if ((news.told.flags & kNetDone) && !done_believed) {
    // Only the leader ends the job; the others say "done" back once they have heard it.
    ++refused_[static_cast<size_t>(ControlRefusal::kNotLeader)];
    news.not_leader = true;
    news.told.flags &= ~(kNetDone | kNetKeep);
  }
  return news;
}

}  // namespace hogstream
