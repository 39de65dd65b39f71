// The control channel of a job across machines (sync/net_job.hpp): what one machine tells every
// other one each heartbeat (MsgKind::kIteration: its state bits, the floor of its run's master
// epochs, its iterations, its view of the global iteration, the agreement hashes) and whether a
// message that came in is believed. NetControlChannel encodes this machine's message, one
// counter per round and the echoes per receiver, and decodes and checks what came in:
// malformed, unproven (no echo of our nonce), replayed, of a replaced run, disagreeing, or
// "done" from a machine that does not lead; every refusal is counted by reason. BoundClock says
// how far a claimed clock may be taken.
// Not for: liveness, leaders and what each machine last told (sync/net_members.hpp keeps that),
// sending (the daemon puts the encoded message on its transport), chunks.
// Threads: none of its own; one owner (the network daemon) calls everything; not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sync/wire.hpp"
#include "transport/transport.hpp"

namespace hogstream {

// What every machine of a job must share, checked in every control message: a mismatch is one
// line on each machine naming the other and what differs (NetJob::Attach's Error at the start;
// later, that machine's messages are refused and the line is logged once).
enum Agree : int {
  kAgreePeers = 0,  // the --peers list, in order, and the job's name
  kAgreeNet,        // the net's parameter shapes
  kAgreeSolver,     // the update rule and schedule (SolverSettings)
  kAgreeSettings,   // the exchange: policy, codec, aggregation, chunking
  kAgreeKinds
};
const char* AgreeName(Agree a);
// "machine 1 (...) differs from machine 0 (...) in its net (...): every machine of a job needs
// the same" (`who` and `me` as MachineName writes them).
std::string DisagreementLine(const std::string& who, const std::string& me, Agree a);

// Control messages refused, by reason (on top of the transport's own Reject counts).
enum class ControlRefusal : uint8_t {
  kMalformed = 0,  // not a control payload of this version
  kUnproven,       // its sender has not echoed this run's nonce yet: nothing in it is believed
  kReplay,         // a counter at or below one already taken: a replay within a run
  kOldRun,         // from a run of that machine that a newer one replaced
  kNotLeader,      // "done" from a machine that does not lead
  kDisagree,       // from a machine whose peers, net, solver or settings differ
  kCount
};
const char* ControlRefusalName(ControlRefusal r);

// The state bits of a control message (Header::chunk).
enum NetFlag : uint32_t {
  kNetReady = 1,      // has the weights: may own chunks
  kNetTraining = 2,   // past the start: its solvers train (a newcomer seeing it joins a running job)
  kNetFinished = 4,   // its solvers are done
  kNetFlushed = 8,    // ... and every chunk it does not own has been answered since
  kNetDone = 16,      // the job is over (the leader's final snapshot is written; the others echo it)
  kNetStop = 32,      // a stop was requested (a signal): the leader snapshots and ends the job
  kNetKeep = 64,      // with kNetDone from the leader: its final snapshot failed; each machine
                      // keeps its own copy (Group::End::kKeepCopy) and ends in error
  kNetTesting = 128,  // a solver of it is in a test pass (its rate falls: not a straggler's lag)
  kNetLeaving = 256,  // it leaves on notice: it no longer leads; its solvers stop, its progress goes
                      // out, then its chunks' finals (MsgKind::kFinal) until every machine holds them
  kNetLeft = 512,     // ... and it has left: the others re-share its chunks at once
};

// The control message's payload (MsgKind::kIteration; the header carries the run's first
// master epoch in `epoch`, the NetFlag bits in `chunk`, the machine's iterations in `clock` and
// its view of the global iteration in `seq`). Fixed size, little-endian, covered by the frame's checksum or MAC.
// Freshness: a receiver believes a control message only once it echoes the receiver's own
// nonce, drawn at random when that machine started (so no frame of an earlier run is taken),
// and only with a counter above the last one taken from that run (no replay within a run).
struct NetControl {
  static constexpr int kEchoes = 3;
  uint64_t nonce = 0;           // the sender's run: 64 random bits drawn at its start
  uint64_t echo[kEchoes] = {};  // the receiver's nonces the sender has seen: [0] the one it took,
                                // then the latest ones not yet proven (0: none)
  uint64_t counter = 0;         // the sender's control messages so far
  int64_t flushed = 0;          // its iterations whose progress has gone out (track_fresh)
  int64_t snapshots = 0;        // snapshot requests (SIGHUP) made on that machine
  int64_t solvers = 0;          // its solvers (a clock per solver is its iterations / this)
  uint64_t held = 0;            // bit r: the sender holds the finals of every chunk machine r
                                // (leaving) owns (the first 64 machines)
  uint64_t agree[kAgreeKinds] = {};
};
static_assert(sizeof(NetControl) == 8 * (9 + kAgreeKinds), "no padding in a wire struct");

// 64 random bits, never 0: a run's nonce.
uint64_t FreshNonce();

// What a machine tells in its control message (the header's fields and the body's).
struct ControlState {
  uint32_t flags = 0;        // NetFlag bits
  uint32_t first_epoch = 0;  // every master epoch of its run is above it (the others' floor)
  int64_t clock = 0;         // its solvers' iterations (this run)
  int64_t view = 0;          // its view of the global iteration
  int64_t flushed = 0;       // its iterations whose progress has gone out (track_fresh)
  int64_t snapshots = 0;     // its own snapshot requests
  int solvers = 1;           // its solvers (1 to kMaxGroupSolvers)
  uint64_t held = 0;         // NetControl::held
};

// What NetControlChannel::Decode made of one message.
struct ControlNews {
  bool taken = false;       // believed: `told` holds what it says
  ControlRefusal refused = ControlRefusal::kCount;  // why not (kCount: taken)
  bool not_leader = false;  // taken, but its "done" (and "keep") struck: it does not lead
  int disagree = -1;        // refused kDisagree: the first Agree that differs
  bool first_disagree = false;  // ... and its sender had not disagreed before (name it once)
  bool new_run = false;     // taken, from a run of that machine not taken before
  bool restarted = false;   // ... which replaces one taken before (a restart)
  bool answer_now = false;  // a new run of it heard: our next message is due at once (its proof)
  ControlState told;        // clock and view clamped to int64_t
};

// A machine's clock only grows, and by no more than it could have run since its last word:
// kClockSlack iterations plus kClockRateMargin times `rate` (the fastest it, or this machine,
// has shown; NetMembers::Hear passes at least kClockRateUnknown until it has shown one; 0 here
// is kClockRateUnknown) over `secs` since its count was last
// taken. Returns the count to take (the rest comes with its next messages); `clamped`: the
// claim went beyond. A forged clock moves the job by a few of its machine's steps, not by
// thousands of iterations.
constexpr int64_t kClockSlack = 64;
constexpr double kClockRateMargin = 4;
constexpr double kClockRateUnknown = 1000;
// Where a machine's run ends (dead, left, restarted) with part of its claim not yet taken, the
// others take up to this much more of it at once (NetMembers::Settle): the same on every
// machine, so their views of the global iteration stay together.
constexpr int64_t kClockSettle = 1024;
// A clamped claim that its machine's count has not reached this long after is not believed
// (NetMembers::unbacked): an honest burst is taken within a few of its next messages.
constexpr std::chrono::seconds kClockBearOut{5};
int64_t BoundClock(int64_t count, int64_t claimed, double secs, double rate, bool* clamped);

class NetControlChannel {
 public:
  // This machine (`rank` of `machines`) and its run's `nonce` (FreshNonce).
  NetControlChannel(int rank, int machines, uint64_t nonce);
  // The hashes every machine must share (0: not checked); before the first Decode.
  void set_agreement(const uint64_t (&agree)[kAgreeKinds]);
  uint64_t nonce() const { return nonce_; }
  // A new machine joined the running job (NetJob's admission): `machines` now.
  void Grow(int machines);

  // Encoding: this round's message (a new counter), the same to every machine but for the
  // echoes, which EchoTo fills for machine r before each send.
  std::pair<Header, NetControl> Round(const ControlState& s);
  void EchoTo(int r, NetControl* body) const;
  // One round to every other machine over `wire` (each with its echoes), then Sent(now); false
  // when send slots ran out (the round is tried again at the next Due).
  bool Send(Wire& wire, const ControlState& s, std::chrono::steady_clock::time_point now);

  // Decoding a control message from machine m.h.source (a machine of the job, not this one):
  // checked, counted when refused, and its sender's run, counter and hellos moved on.
  // `done_believed`: its "done" is taken (it leads, or this machine is done already).
  ControlNews Decode(const Message& m, bool done_believed);

  // Whether a round is due now: `heartbeat_ms` since the last one sent, or 2 ms where an answer
  // is due at once (a hello to echo, a round a synchronous group awaits: AnswerSoon). At most
  // every 2 ms: forged hellos (new nonces without a key) must not make this machine send a
  // message for each. True clears the answer due; Sent(now) once the round went out.
  bool Due(std::chrono::steady_clock::time_point now, uint32_t heartbeat_ms);
  void AnswerSoon() { answer_now_ = true; }
  void Sent(std::chrono::steady_clock::time_point now) { last_sent_ = now; }

  // Refusals so far, by reason (ControlRefusal).
  const uint64_t* refusals() const { return refused_; }
  uint64_t refused(ControlRefusal r) const { return refused_[static_cast<size_t>(r)]; }

 private:
  // Per machine: the run taken from it once it echoed ours, the last counter taken, the latest
  // runs heard but not proven (echoed back so that it can prove itself), and the runs a newer
  // one replaced (never taken again).
  struct Fresh {
    uint64_t nonce = 0, counter = 0;
    uint64_t hello[NetControl::kEchoes - 1] = {};
    std::vector<uint64_t> retired;
    bool disagrees = false;  // named once
  };
  ControlNews Refuse(ControlRefusal why, ControlNews news = {});
  bool EchoBack(Fresh& f, uint64_t nonce);  // true: a new hello (to be echoed at once)
  int Disagreement(const NetControl& b) const;  // the first Agree that differs; -1: none
  void TakeRun(Fresh& f, uint64_t nonce, ControlNews* news);
  static ControlState Told(const Message& m, const NetControl& b);

  int rank_, machines_;
  uint64_t nonce_;
  uint64_t agree_[kAgreeKinds] = {};
  uint64_t counter_ = 0;  // control messages sent (each round carries the count)
  std::vector<Fresh> fresh_;  // per rank (this one's unused)
  uint64_t refused_[static_cast<size_t>(ControlRefusal::kCount)] = {};
  bool answer_now_ = false;                           // Due: an answer due at once
  std::chrono::steady_clock::time_point last_sent_{};  // Sent (the epoch: never)
};

}  // namespace hogstream
