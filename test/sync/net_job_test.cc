// The network daemon of a job across machines (sync/net_job.hpp), with three "machines" in one
// process over real UDP sockets on loopback: each has its own group, host buffer and a
// stand-in solver that adds whole numbers to random elements (so the ledger is exact in
// float); and the same job over RDMA verbs queue pairs on the fake fabric. Covers the start, ownership, the global iteration, the end-of-job drain, a machine's
// death (re-share, takeover) and a restarted machine rejoining.
#include <gtest/gtest.h>

#include <future>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "sync/net_job.hpp"
#include "sync/solver_group.hpp"  // (stand-in solvers write the counters)
#include "test/test_seed.hpp"
#include "test/transport/forge.hpp"
#include "transport/fault/endpoint.hpp"
#include "transport/frame.hpp"
#include "transport/udp/device.hpp"
#include "transport/udp/endpoint.hpp"
#ifdef HOGSTREAM_VERBS
#include "bin/peers.hpp"
#include "test/transport/verbs/fake_verbs.hpp"
#endif

namespace hogstream {
namespace HS_UNITY_ID {

using namespace std::chrono_literals;

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

constexpr size_t kFloats = 20000;
constexpr uint32_t kChunk = 256;  // 79 chunks

struct Machine {
  std::unique_ptr<SolverGroup> counters = std::make_unique<SolverGroup>();
  std::unique_ptr<MachineGroup> group = std::make_unique<MachineGroup>(counters.get(), false);
  std::vector<float> w;
  std::vector<float> added;  // what this machine's stand-in solver added, per element
  std::unique_ptr<NetJob> job;
  std::thread solver;
  std::atomic<bool> pause{false};
  std::atomic<int> slow_ms{0};  // extra sleep per stand-in iteration (a straggler)
};

class NetJobTest : public ::testing::Test {
 protected:
  static constexpr int kMachines = 3;
  static constexpr int kSlots = kMachines + 1;  // and one new machine (ANewMachineJoins...)

  void SetUp() override {
    std::mt19937 rng(TestSeed());
    std::uniform_int_distribution<int> v(-100, 100);
    initial_.resize(kFloats);
    for (float& x : initial_) x = static_cast<float>(v(rng));
    for (int r = 0; r < kMachines; ++r) {
      UdpOptions o;
      o.job = 0x7e57;
      o.heartbeat_ms = 0;  // the job decides who is dead (its control messages), not the transport
      o.max_payload = kWireHeaderBytes + kChunk * sizeof(float);
      ports_[r] = Open(r, o);
    }
  }

  // Opens machine r's endpoint (on `port`, 0 = any) and points it at the others' ports.
  uint16_t Open(int r, UdpOptions o, uint16_t port = 0) {
    o.port = port;
    auto t = UdpDevice(o).Open(static_cast<PeerId>(r));
    auto* udp = static_cast<UdpEndpoint*>(t.get());
    transports_[r] = std::move(t);
    return udp->port();
  }
  void Connect(int r) {
    auto* udp = dynamic_cast<UdpEndpoint*>(transports_[r].get());
    if (!udp) return;  // a verbs endpoint knows its peers from the address exchange
    for (int q = 0; q < kMachines; ++q)
      if (q != r) udp->AddPeer(static_cast<PeerId>(q), "127.0.0.1", ports_[q]);
  }

  NetJobOptions Options(int r) {
    NetJobOptions o;
    o.rank = r;
    o.machines = r < kMachines ? kMachines : r + 1;  // a new machine: the others' list and its own
    o.admit = true;
    o.chunk_floats = kChunk;
    o.heartbeat_ms = 10;
    o.dead_ms = dead_ms_;
    o.start_ms = 10000;
    o.sweep_ms = 5;
    o.drain_ms = 5000;
    o.quorum_ms = quorum_ms_;
    o.log = false;
    return o;
  }

  // Starts machine r's job on a fresh copy of the initial weights (or `weights`), blocking in
  // Attach until the job lets it train.
  void Attach(int r, std::vector<float> weights = {}) {
    Machine& m = m_[r];
    m.w = weights.empty() ? initial_ : weights;
    m.added.assign(kFloats, 0);
    Connect(r);
    m.job = std::make_unique<NetJob>(std::move(transports_[r]), Options(r));
    if (!machine_group_.empty()) m.job->set_machine_group(machine_group_);
    if (sinks_[r]) m.job->set_stats(sinks_[r]);
    m.job->Attach(m.group.get(), 1, m.w.data(), kFloats);
  }
  void AttachAll() {
    std::vector<std::thread> ts;
    std::vector<std::string> errors(kMachines);
    for (int r = 0; r < kMachines; ++r)
      ts.emplace_back([this, r, &errors] {
        try {
          Attach(r);
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    for (auto& t : ts) t.join();
    for (int r = 0; r < kMachines; ++r) ASSERT_EQ(errors[r], "") << "machine " << r;
  }

  // Machine r's stand-in solver: `iters` iterations, each adding +1 or -1 to every element of
  // 8 random chunks and counting one iteration, 1 ms apart (the network streams meanwhile).
  // Whole chunks, so that a delta lost or counted twice moves a chunk's elements (hundreds),
  // where a write racing the daemon's rule loses one element (the ledger tolerates 8).
  void Train(int r, int iters, uint32_t seed) {
    Machine& m = m_[r];
    m.solver = std::thread([&m, iters, seed] {
      std::mt19937 rng(seed);
      std::uniform_int_distribution<size_t> at(0, (kFloats + kChunk - 1) / kChunk - 1);
      for (int i = 0; i < iters && !m.counters->stop.load(); ++i) {
        while (m.pause.load()) std::this_thread::sleep_for(1ms);
        for (int k = 0; k < 8; ++k) {
          const size_t c = at(rng);
          const float d = (rng() & 1) ? 1.f : -1.f;
          const size_t base = c * kChunk, len = std::min(kFloats, base + kChunk) - base;
          for (size_t k = 0; k < len; ++k) {
            const size_t j = base + k * 97 % len;  // out of order: a race with the rule's pass loses few
            m.w[j] += d;
            m.added[j] += d;
          }
        }
        m.counters->iter.fetch_add(1);  // as a solver claims its iteration
        m.counters->done[0].fetch_add(1);
        std::this_thread::sleep_for(1ms + std::chrono::milliseconds(m.slow_ms.load()));
      }
    });
  }
  void EndTraining(int r) {
    if (m_[r].solver.joinable()) m_[r].solver.join();
    m_[r].counters->finished[0].store(1);
  }
  // What the leader's final snapshot must hold: the initial weights plus every machine's sums.
  std::vector<float> Expected(const std::vector<int>& machines) const {
    std::vector<float> e = initial_;
    for (int r : machines)
      for (size_t j = 0; j < kFloats; ++j) e[j] += m_[r].added[j];
    return e;
  }
  // Elements of `got` that differ from `want`.
  static size_t Differing(const std::vector<float>& got, const std::vector<float>& want) {
    size_t n = 0;
    for (size_t j = 0; j < got.size(); ++j) n += got[j] != want[j];
    return n;
  }
  // The ledger: `got` (a machine's weights) holds `want` (the initial weights plus what the
  // machines added), each machine's progress once. A delta lost or counted twice moves every
  // element of its chunk (the stand-in solvers step whole chunks); a solver's write racing the
  // daemon's rule on an element loses that one write (Hogwild), a few elements of a chunk
  // (the solver writes a chunk out of order; up to 32 of 256 seen here, more where a sanitizer
  // slows both sides). So no chunk may have half of its elements off, and at most two chunks'
  // worth may be off in all.
  static ::testing::AssertionResult LedgerHolds(const std::vector<float>& got, const std::vector<float>& want) {
    size_t total = 0, worst = 0;
    std::string chunks;
    for (size_t c = 0; c * kChunk < got.size(); ++c) {
      size_t off = 0;
      for (size_t j = c * kChunk; j < std::min(got.size(), (c + 1) * kChunk); ++j) off += got[j] != want[j];
      if (off) {
        chunks += " " + std::to_string(c) + ":" + std::to_string(off);
        if (off == std::min<size_t>(kChunk, got.size() - c * kChunk))  // a whole chunk: by how much
          chunks += "(" + std::to_string(got[c * kChunk] - want[c * kChunk]) + ")";
      }
      total += off;
      worst = std::max(worst, off);
    }
    if (worst < kChunk / 2 && total <= 2 * kChunk)
      return ::testing::AssertionSuccess() << total << " elements off (chunk:elements" << chunks << ")";
    return ::testing::AssertionFailure() << total << " elements off, " << worst << " in one chunk of " << kChunk
                                         << " (chunk:elements" << chunks << ")";
  }

  // Each machine's counts of what may cost a delta (for a ledger that does not hold).
  std::string Drops() const {
    std::ostringstream os;
    for (int r = 0; r < kSlots; ++r) {
      if (!m_[r].job) continue;
      const NetJobStats s = m_[r].job->stats();
      os << " [machine " << r << ": lost " << s.lost << ", kernel-dropped " << s.kernel_dropped << ", stale "
         << s.stale << ", unanswered " << s.unanswered << ", re-shares " << s.reshares << "]";
    }
    return os.str();
  }

  void TrainAllAndCheckTheLedger();
  void FinishAll();
  void LeaveMidRun(int leaver);

  void TearDown() override {
    for (Machine& m : m_) {  // a test that failed early leaves its stand-in solvers running
      m.counters->stop.store(1);
      if (m.solver.joinable()) m.solver.join();
    }
  }

  std::vector<float> initial_;
  std::shared_ptr<NetworkSink> sinks_[kSlots];  // each machine's network sink, if any
  std::vector<int> machine_group_;  // bsp / gsp: each machine's synchronous group
  uint32_t quorum_ms_ = 0;          // 0: the default
  uint32_t dead_ms_ = 300;
  uint16_t ports_[kSlots] = {};
  std::unique_ptr<Transport> transports_[kSlots];
  Machine m_[kSlots];
};

// Every machine trains 300 stand-in iterations; the leader's snapshot must hold all of it, once.
void NetJobTest::TrainAllAndCheckTheLedger() {
  for (int r = 0; r < kMachines; ++r) Train(r, 300, TestSeed());
  for (int r = 0; r < kMachines; ++r) EndTraining(r);
  // The leader (rank 0) holds its snapshot until everyone's last deltas are in.
  MachineGroup& lead = *m_[0].group;
  ASSERT_TRUE(WaitFor([&] { return lead.holding_final() == 0; }, 10s)) << "the leader never stopped holding";
  EXPECT_EQ(lead.leads(), 1);
  EXPECT_EQ(m_[1].group->leads(), 0);
  EXPECT_EQ(m_[2].group->leads(), 0);
  EXPECT_EQ(lead.Reached(), 3 * 300) << "the global iteration is the sum over the machines";
  const std::vector<float> snapshot = m_[0].w;
  // Done: the others hear it and end.
  lead.Ended(true);
  for (int r = 1; r < kMachines; ++r)
    EXPECT_TRUE(WaitFor([&] { return m_[r].counters->job_done.load() == 1; }, 5s)) << "machine " << r;
  uint32_t owned = 0;
  for (int r = 0; r < kMachines; ++r) {
    ASSERT_TRUE(WaitFor([&] { return m_[r].job->stats().chunks > 0; }, 2s));
    const NetJobStats s = m_[r].job->stats();
    EXPECT_GT(s.owned, 20u) << "machine " << r << " masters about a third of the chunks";
    owned += s.owned;
    EXPECT_EQ(s.chunks, (kFloats + kChunk - 1) / kChunk);
    EXPECT_EQ(s.lost, 0u);
  }
  EXPECT_EQ(owned, (kFloats + kChunk - 1) / kChunk) << "every chunk has exactly one master";
  EXPECT_TRUE(LedgerHolds(snapshot, Expected({0, 1, 2})) << Drops())
      << "the leader's weights hold every machine's progress, once";
}

void NetJobTest::FinishAll() {
  for (Machine& m : m_)
    if (m.job) m.job->Finish();
}

// This process's threads whose name (/proc/self/task/TID/comm) is `name`.
int ThreadsNamed(const std::string& name) {
  int n = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "comm");
    std::string comm;
    n += std::getline(in, comm) && comm == name;
  }
  return n;
}

// (Each machine's daemon thread is named, as `top -H` shows it.)
TEST_F(NetJobTest, SharesTheChunksCountsTheGlobalIterationAndDrainsBeforeTheSnapshot) {
  AttachAll();
  EXPECT_EQ(ThreadsNamed("hs-net"), kMachines) << "each machine's daemon, named";
  TrainAllAndCheckTheLedger();
  FinishAll();
}

// What a machine's daemon hands its network sink (OnNetwork), kept for the test.
class NetworkRecorder : public NetworkSink {
 public:
  void OnNetwork(const NetworkFigures& f) override {
    std::lock_guard<std::mutex> lock(mu_);
    records_.push_back(f);
  }
  std::vector<NetworkFigures> records() const {
    std::lock_guard<std::mutex> lock(mu_);
    return records_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<NetworkFigures> records_;
};

// Every machine, not only the leader, reports its own exchange about once a second and once
// at its end: who it is, who leads, every machine's rate, and per sender the deltas its
// masters applied with their staleness histogram, which adds up to the machine's own count.
TEST_F(NetJobTest, EveryMachineReportsItsExchangePerSender) {
  std::shared_ptr<NetworkRecorder> rec[kMachines];
  for (int r = 0; r < kMachines; ++r) sinks_[r] = rec[r] = std::make_shared<NetworkRecorder>();
  AttachAll();
  // Machine 1's solvers run under a policy (the runner binds its figures; sync/hogwild.cpp).
  std::atomic<uint64_t> waits{0};
  m_[1].job->set_policy_figures("ssp:3", [&waits] {
    PolicyFigures f;
    f.waits = waits.fetch_add(1) + 1;
    f.wait_seconds = 0.5;
    return f;
  });
  for (int r = 0; r < kMachines; ++r)
    ASSERT_TRUE(WaitFor([&] { return !rec[r]->records().empty(); }, 10s)) << "machine " << r << " reported nothing";
  TrainAllAndCheckTheLedger();
  FinishAll();
  for (int r = 0; r < kMachines; ++r) {
    SCOPED_TRACE("machine " + std::to_string(r));
    const std::vector<NetworkFigures> all = rec[r]->records();
    ASSERT_GE(all.size(), 2u) << "once a second while it ran, and once at its end";
    const NetworkFigures& last = all.back();  // Finish's: every delta applied is in it
    EXPECT_EQ(last.machine, r);
    EXPECT_EQ(last.leader, 0);
    EXPECT_EQ(last.global_iter, 3 * 300);
    EXPECT_GT(last.bytes_sent, 0u);
    EXPECT_GT(last.bytes_received, 0u);
    ASSERT_EQ(last.peers.size(), static_cast<size_t>(kMachines));
    if (r == 1) {
      EXPECT_EQ(last.policy, "ssp:3");
      EXPECT_EQ(last.policy_figures.waits, waits.load()) << "the last record took the policy's last figures";
      EXPECT_EQ(last.policy_figures.wait_seconds, 0.5);
    } else {
      EXPECT_EQ(last.policy, "") << "no policy gates its solvers";
    }
    uint64_t applied = 0, in = 0, out = 0;
    for (const PeerNetFigures& p : last.peers) {
      SCOPED_TRACE("sender " + std::to_string(p.rank));
      EXPECT_EQ(p.self, p.rank == r);
      EXPECT_EQ(p.leader, p.rank == 0);
      EXPECT_EQ(p.iterations, 300);
      uint64_t in_buckets = 0;
      for (uint64_t n : p.staleness) in_buckets += n;
      EXPECT_EQ(in_buckets, p.deltas_applied) << "every delta applied is in one bucket";
      EXPECT_EQ(p.refused, 0u);
      if (p.self) {
        EXPECT_EQ(p.deltas_applied, 0u) << "a machine sends no delta to its own masters";
      } else {
        EXPECT_GT(p.deltas_applied, 0u) << "its deltas reached this machine's masters";
        EXPECT_LE(p.staleness_sum, p.deltas_applied * 900) << "no staleness beyond the job's iterations";
        EXPECT_GT(p.bytes_in, 0u) << "traffic from it";
        EXPECT_GT(p.bytes_out, 0u) << "traffic to it";
      }
      EXPECT_EQ(p.frames_lost + p.frames_foreign + p.frames_bad_mac + p.frames_malformed, 0u);
      applied += p.deltas_applied;
      in += p.bytes_in;
      out += p.bytes_out;
    }
    EXPECT_EQ(applied, last.deltas_applied) << "the senders' deltas add up to the machine's count";
    // Every message goes to one machine here (no multicast) and comes from one.
    EXPECT_EQ(in, last.bytes_received) << "the peers' traffic adds up to the machine's";
    EXPECT_EQ(out, last.bytes_sent);
  }
}

// Losses per peer: machine 1's sends go through a fault decorator that drops 5% of them (any
// kind). Its figures count each drop against the machine it was for, and they add up to its
// total; the others see no loss from it (a drop leaves no trace where it was going) and none
// of their own. The job still trains to its end.
TEST_F(NetJobTest, EachDropIsCountedAgainstTheMachineItWasFor) {
  Connect(1);  // its peers, before the decorator hides the UDP endpoint
  FaultOptions faults;
  faults.drop = 0.05;
  faults.seed = TestSeed();
  transports_[1] = std::make_unique<FaultEndpoint>(std::move(transports_[1]), faults);
  AttachAll();
  for (int r = 0; r < kMachines; ++r) Train(r, 300, TestSeed() + static_cast<uint32_t>(r));
  for (int r = 0; r < kMachines; ++r) EndTraining(r);
  MachineGroup& lead = *m_[0].group;
  ASSERT_TRUE(WaitFor([&] { return lead.holding_final() == 0; }, 10s));
  const NetJobStats lossy = m_[1].job->stats();
  ASSERT_EQ(lossy.peers.size(), static_cast<size_t>(kMachines));
  EXPECT_GT(lossy.peers[0].frames_lost, 0u) << "drops on the way to machine 0";
  EXPECT_GT(lossy.peers[2].frames_lost, 0u) << "drops on the way to machine 2";
  EXPECT_EQ(lossy.peers[1].frames_lost, 0u) << "nothing goes to itself";
  EXPECT_EQ(lossy.peers[0].frames_lost + lossy.peers[2].frames_lost, lossy.lost) << "the peers' drops are the machine's";
  for (int r : {0, 2}) {
    const NetJobStats s = m_[r].job->stats();
    EXPECT_EQ(s.lost, 0u) << "machine " << r;
    for (const PeerNetFigures& p : s.peers) EXPECT_EQ(p.frames_lost, 0u) << "machine " << r << ", peer " << p.rank;
    EXPECT_GT(s.peers[1].bytes_in, 0u) << "what machine 1 sent that was not dropped came in";
  }
  // The ledger sees the lost deltas (the bound the other tests hold).
  EXPECT_FALSE(LedgerHolds(m_[0].w, Expected({0, 1, 2}))) << "machine 1's dropped deltas are missing";
  lead.Ended(true);
  for (int r = 1; r < kMachines; ++r) WaitFor([&] { return m_[r].counters->job_done.load() == 1; }, 5s);
  FinishAll();
}

// A machine whose solver runs at a fraction of the others' rate is named a straggler within
// seconds in every machine's figures (and the leader's log), the others never; once it keeps
// up again it is no longer named; one that stands still while it tests is not named.
TEST_F(NetJobTest, ASlowMachineIsNamedAStragglerWithinSecondsAndNoLongerOnceItKeepsUp) {
  AttachAll();
  m_[2].slow_ms.store(12);  // about 1/8 of the others' rate (1 ms a step, and the sleep's grain)
  for (int r = 0; r < kMachines; ++r) Train(r, 1000000, TestSeed() + static_cast<uint32_t>(r));
  auto lags = [&](int seen_by, int who) {
    const NetJobStats s = m_[seen_by].job->stats();
    return s.peers.size() == kMachines && s.peers[who].straggler;
  };
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitFor([&] { return lags(0, 2) && lags(1, 2) && lags(2, 2); }, 10s))
      << "machine 2 was not named by every machine within 10 s";
  const double named_after = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(named_after, 5.0) << "named only after " << named_after << " s";
  for (int r = 0; r < kMachines; ++r) {
    const NetJobStats s = m_[r].job->stats();
    EXPECT_FALSE(s.peers[0].straggler) << "seen by machine " << r;
    EXPECT_FALSE(s.peers[1].straggler) << "seen by machine " << r;
    EXPECT_GT(s.median_iter_per_s, 4 * s.peers[2].iter_per_s) << "seen by machine " << r;
  }
  m_[2].slow_ms.store(0);
  EXPECT_TRUE(WaitFor([&] { return !lags(0, 2) && !lags(1, 2) && !lags(2, 2); }, 10s))
      << "machine 2 kept up again but is still named";
  // A machine whose solver tests (the leader's test passes) makes no steps meanwhile: that is
  // not lagging. Machine 1 stands still for 3.5 s, testing.
  m_[1].counters->testing.store(1);
  m_[1].pause.store(true);
  const auto still_until = std::chrono::steady_clock::now() + 3500ms;
  bool named = false;
  while (std::chrono::steady_clock::now() < still_until) {
    named = named || lags(0, 1) || lags(1, 1) || lags(2, 1);
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_FALSE(named) << "a machine in a test pass was named a straggler";
  m_[1].pause.store(false);
  m_[1].counters->testing.store(0);
  for (int r = 0; r < kMachines; ++r) m_[r].counters->stop.store(1);  // the stand-in solvers return
  for (int r = 0; r < kMachines; ++r) EndTraining(r);
  MachineGroup& lead = *m_[0].group;
  EXPECT_TRUE(WaitFor([&] { return lead.holding_final() == 0; }, 10s));
  lead.Ended(true);
  for (int r = 1; r < kMachines; ++r) WaitFor([&] { return m_[r].counters->job_done.load() == 1; }, 5s);
  FinishAll();
}

#ifdef HOGSTREAM_VERBS
// The same job over RDMA verbs, opened as `--peers=verbs://` does: each machine's UD queue
// pair on one (fake) device, the addresses traded over UDP on the ports SetUp found free.
TEST_F(NetJobTest, TrainsOverVerbsQueuePairs) {
  FakeVerbs fabric;
  std::string spec = "verbs://";
  for (int r = 0; r < kMachines; ++r) {
    spec += (r ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(ports_[r]);
    transports_[r].reset();  // frees the port for the exchange
  }
  const PeerList list = ParsePeers(spec);
  PeerOpenOptions o;
  o.job = 0x7e57;
  o.verbs_api = fabric.api();
  o.exchange_timeout = 10s;
  std::vector<std::thread> ts;
  std::vector<std::string> errors(kMachines);
  for (int r = 0; r < kMachines; ++r)
    ts.emplace_back([&, r] {
      try {
        transports_[r] = OpenPeers(list, SelfRank{r, "--rank", ""}, o);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < kMachines; ++r) ASSERT_EQ(errors[r], "") << "machine " << r;
  AttachAll();
  TrainAllAndCheckTheLedger();
  const auto fs = fabric.stats();  // before anyone leaves (sends to a machine gone are dropped)
  EXPECT_GT(fs.delivered, 1000u) << "positions and deltas went over verbs";
  EXPECT_EQ(fs.dropped_rnr, 0u) << "messages found no receive buffer posted";
  FinishAll();
  for (Machine& m : m_) m.job.reset();  // the queue pairs go before the fabric does
}
#endif

// The clock a policy bounds across machines (ssp, max-advance): each machine sees the fewest
// iterations any other machine still training has run, and a finished machine holds nobody.
TEST_F(NetJobTest, EachMachineSeesTheSlowestOtherMachinesClock) {
  AttachAll();
  Train(1, 50, TestSeed());
  Train(2, 120, TestSeed() + 1);
  m_[1].solver.join();
  m_[2].solver.join();
  EXPECT_TRUE(WaitFor([&] { return m_[0].job->slowest_other() == 50; }, 5s)) << m_[0].job->slowest_other();
  EXPECT_TRUE(WaitFor([&] { return m_[2].job->slowest_other() == 0; }, 5s)) << "machine 0 ran nothing";
  EndTraining(0);  // finished: no longer a clock anyone waits for
  EXPECT_TRUE(WaitFor([&] { return m_[2].job->slowest_other() == 50; }, 5s)) << m_[2].job->slowest_other();
  EndTraining(1);
  EndTraining(2);
  MachineGroup& lead = *m_[0].group;
  ASSERT_TRUE(WaitFor([&] { return lead.holding_final() == 0; }, 10s));
  lead.Ended(true);
  for (int r = 1; r < kMachines; ++r) WaitFor([&] { return m_[r].counters->job_done.load() == 1; }, 5s);
  FinishAll();
}

// bsp / gsp across machines: machines 0 and 1 are one synchronous group, 2 another. A
// machine's clock then counts only its group's other machines, by the iterations whose
// progress has gone out to every owner (flushed: each chunk answered since), and fresh rounds
// are kept; the other group's clock holds nobody, and neither does a mate that died.
TEST_F(NetJobTest, InASynchronousGroupEachMachineSeesItsMatesFlushedClock) {
  machine_group_ = {0, 0, 1};
  AttachAll();
  Train(1, 50, TestSeed());
  Train(2, 120, TestSeed() + 1);
  const uint64_t fresh0 = m_[0].job->fresh_rounds();
  m_[1].solver.join();
  m_[2].solver.join();
  EXPECT_TRUE(WaitFor([&] { return m_[0].job->slowest_other() == 50; }, 5s)) << m_[0].job->slowest_other();
  EXPECT_TRUE(WaitFor([&] { return m_[2].job->slowest_other() == 120; }, 5s)) << "machine 2 has no mates: its own clock";
  EXPECT_TRUE(WaitFor([&] { return m_[1].job->slowest_other() == 0; }, 5s)) << "machine 0 ran nothing";
  EXPECT_TRUE(WaitFor([&] { return m_[0].job->fresh_rounds() >= fresh0 + 3; }, 5s)) << "fresh rounds go on";
  std::this_thread::sleep_for(100ms);  // every copy settles on the same weights
  m_[1].job.reset();  // dies: a dead mate holds nobody (machine 0 then sees its own clock)
  EXPECT_TRUE(WaitFor([&] { return m_[0].job->slowest_other() == 0; }, 5s)) << m_[0].job->slowest_other();
  EndTraining(0);
  EndTraining(2);
  MachineGroup& lead = *m_[0].group;
  ASSERT_TRUE(WaitFor([&] { return lead.holding_final() == 0; }, 10s));
  EXPECT_TRUE(LedgerHolds(m_[0].w, Expected({1, 2})) << Drops()) << "the leader's weights hold every machine's progress, once";
  lead.Ended(true);
  WaitFor([&] { return m_[2].counters->job_done.load() == 1; }, 5s);
  m_[0].job->Finish();
  m_[2].job->Finish();
}

TEST_F(NetJobTest, ASilentMachineIsTakenForDeadAndItsChunksReshared) {
  AttachAll();
  for (int r = 0; r < kMachines; ++r) Train(r, 100, TestSeed());
  for (int r = 0; r < kMachines; ++r) m_[r].solver.join();
  std::this_thread::sleep_for(100ms);  // every copy settles on the same weights
  std::vector<float> phase1 = Expected({0, 1, 2});
  m_[2].job.reset();  // killed: silent from now on, nothing said
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(WaitFor([&] {
      const NetJobStats s = m_[r].job->stats();
      return s.reshares >= 1 && !s.peers[2].live;
    }, 5s)) << "machine " << r << " never re-shared the dead machine's chunks";
  }
  ASSERT_TRUE(WaitFor([&] {
    const NetJobStats a = m_[0].job->stats(), b = m_[1].job->stats();
    return a.owned + b.owned == a.chunks;
  }, 5s)) << "the survivors master every chunk between them";
  // Its data partition is theirs to read now (TakenOverPartitions).
  for (int r = 0; r < 2; ++r) EXPECT_EQ(m_[r].job->dead_machines(), uint64_t{1} << 2) << "machine " << r;
  // The survivors go on; the dead one's chunks now live on them.
  for (int r = 0; r < 2; ++r) {
    m_[r].added.assign(kFloats, 0);
    Train(r, 100, TestSeed());
  }
  for (int r = 0; r < 2; ++r) EndTraining(r);
  ASSERT_TRUE(WaitFor([&] { return m_[0].group->holding_final() == 0; }, 10s))
      << "the leader waits on a dead machine";
  std::vector<float> want = phase1;
  for (int r = 0; r < 2; ++r)
    for (size_t j = 0; j < kFloats; ++j) want[j] += m_[r].added[j];
  EXPECT_TRUE(LedgerHolds(m_[0].w, want)) << "all of phase 1 and the survivors' phase 2, once" << Drops();
  EXPECT_EQ(m_[0].counters->iter.load(), 3 * 100 + 2 * 100);
  m_[0].group->Ended(true);
  for (int r = 0; r < 2; ++r) m_[r].job->Finish();
}

// Leave on notice (SIGUSR1's request): machine `leaver` is asked to leave mid-run. Its solver
// stops, its progress and its chunks' last values reach the others, and they re-share its
// chunks at once: dead_ms is 10 s here, so a leave that waited for it fails. The final
// snapshot holds every machine's work, the leaver's too, once; the global iteration counts
// every iteration run; its data partition goes to the others. The others train throughout:
// the re-share after the leave hands the chunks that move among them over too (their finals),
// and the deltas in flight to the masters it replaces still land (retired masters).
void NetJobTest::LeaveMidRun(int leaver) {
  dead_ms_ = 10000;
  AttachAll();
  EXPECT_TRUE(WaitFor([&] { return m_[0].job->leads(); }, 5s)) << "machine 0 never led";
  constexpr int kIters = 1000;
  for (int r = 0; r < kMachines; ++r) Train(r, r == leaver ? 1000000 : kIters, TestSeed() + r);
  std::atomic<int64_t>& leaver_done = m_[leaver].counters->done[0];
  ASSERT_TRUE(WaitFor([&] { return leaver_done.load() >= 150; }, 10s));
  std::vector<int> stay;
  for (int r = 0; r < kMachines; ++r)
    if (r != leaver) stay.push_back(r);
  const auto asked = std::chrono::steady_clock::now();
  m_[leaver].group->Request(SolverAction::LEAVE);
  m_[leaver].solver.join();  // its solver stops after its iteration (the group's stop)
  EXPECT_TRUE(m_[leaver].group->leaving());
  EndTraining(leaver);  // as a solver's Finish does
  ASSERT_TRUE(WaitFor([&] { return m_[leaver].job->left(); }, 5s)) << "never handed its chunks over";
  ASSERT_TRUE(WaitFor([&] {
    const NetJobStats a = m_[stay[0]].job->stats(), b = m_[stay[1]].job->stats();
    return a.owned + b.owned == a.chunks && a.peers[leaver].left && b.peers[leaver].left && !a.peers[leaver].live;
  }, 5s)) << "the others never took the leaver's chunks";
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  EXPECT_LT(took, 4.0) << "the others took its chunks " << took << " s after the notice: not at once (dead_ms: 10 s)";
  for (int r : stay) EXPECT_EQ(m_[r].job->dead_machines(), uint64_t{1} << leaver) << "its data partition, to machine " << r;
  m_[leaver].job->Finish();  // returns at once: it has left
  // The lead: the lowest machine that stays (it never moves to a machine leaving).
  MachineGroup& lead = *m_[stay[0]].group;
  ASSERT_TRUE(WaitFor([&] { return lead.leads(); }, 5s)) << "machine " << stay[0] << " never led";
  EXPECT_FALSE(m_[leaver].group->leads());
  EXPECT_FALSE(m_[stay[1]].group->leads());
  for (int r : stay) EndTraining(r);
  ASSERT_TRUE(WaitFor([&] { return lead.holding_final() == 0; }, 10s)) << "the leader never stopped holding";
  EXPECT_EQ(lead.Reached(), 2 * kIters + leaver_done.load()) << "every iteration run, the leaver's too";
  EXPECT_TRUE(LedgerHolds(m_[stay[0]].w, Expected({0, 1, 2})) << Drops()) << "every machine's work, the leaver's too, once";
  lead.Ended(true);
  EXPECT_TRUE(WaitFor([&] { return m_[stay[1]].counters->job_done.load() == 1; }, 5s));
  for (int r : stay) m_[r].job->Finish();
}

TEST_F(NetJobTest, AMachineLeavesOnNoticeAndNothingItComputedIsLost) { LeaveMidRun(1); }

// Join as a new machine: machine 3, in none of the three machines' lists, starts with their
// list plus its own entry while they train. They admit it on its first frame (over UDP), it
// receives the weights and the global iteration and takes a share (chunks change hands among
// all four meanwhile), and every machine's work, the newcomer's too, reaches the leader's final
// snapshot once, the global iteration counting every iteration.
TEST_F(NetJobTest, ANewMachineJoinsTheRunningJobAndTakesAShare) {
  AttachAll();
  for (int r = 0; r < kMachines; ++r) Train(r, 1500, TestSeed() + r);
  ASSERT_TRUE(WaitFor([&] { return m_[0].counters->done[0].load() >= 100; }, 10s));
  UdpOptions o;
  o.job = 0x7e57;
  o.heartbeat_ms = 0;
  o.max_payload = kWireHeaderBytes + kChunk * sizeof(float);
  ports_[3] = Open(3, o);
  const std::vector<float> garbage(kFloats, 12345.f);
  Attach(3, garbage);  // returns once it has the weights
  EXPECT_TRUE(m_[3].job->joined_running());
  EXPECT_GT(m_[3].counters->iter.load(), 100) << "the global iteration taken over";
  EXPECT_EQ(std::count(m_[3].w.begin(), m_[3].w.end(), 12345.f), 0) << "the newcomer holds the job's weights";
  for (int r = 0; r < kMachines; ++r) EXPECT_EQ(m_[r].job->machines(), 4) << "machine " << r << " admitted it";
  Train(3, 300, TestSeed() + 3);
  ASSERT_TRUE(WaitFor([&] {
    uint32_t owned = 0;
    for (int r = 0; r < kSlots; ++r) owned += m_[r].job->stats().owned;
    const NetJobStats a = m_[0].job->stats();
    return m_[3].job->stats().owned > 0 && owned == a.chunks && a.peers.size() == 4 && a.peers[3].ready;
  }, 5s)) << "the newcomer never took a share";
  // Its data partition is its own once it has the weights (read by the others until then).
  EXPECT_TRUE(WaitFor([&] {
    for (int r = 0; r < kSlots; ++r)
      if (m_[r].job->dead_machines() != 0) return false;
    return true;
  }, 5s));
  for (int r = 0; r < kSlots; ++r) EndTraining(r);
  MachineGroup& lead = *m_[0].group;
  ASSERT_TRUE(WaitFor([&] { return lead.holding_final() == 0; }, 10s));
  EXPECT_EQ(lead.Reached(), 3 * 1500 + 300) << "every iteration counted";
  EXPECT_TRUE(LedgerHolds(m_[0].w, Expected({0, 1, 2, 3})) << Drops()) << "every machine's work, the newcomer's too, once";
  lead.Ended(true);
  for (int r = 1; r < kSlots; ++r) WaitFor([&] { return m_[r].counters->job_done.load() == 1; }, 5s);
  FinishAll();
}

TEST_F(NetJobTest, TheLeaderLeavesOnNoticeAndTheNextLeadsAndSnapshots) { LeaveMidRun(0); }

TEST_F(NetJobTest, TheLowestLiveMachineTakesOverWhenTheLeaderDies) {
  AttachAll();
  // (Attach returns once the job has started; the lead is chosen on the daemon's next pass.)
  EXPECT_TRUE(WaitFor([&] { return m_[0].job->leads(); }, 5s)) << "machine 0 never led";
  m_[0].job.reset();  // the leader, killed
  ASSERT_TRUE(WaitFor([&] { return m_[1].group->leads() == 1; }, 5s)) << "no takeover";
  EXPECT_EQ(m_[2].group->leads(), 0);
  EXPECT_TRUE(m_[1].job->leads());
  EXPECT_TRUE(WaitFor([&] { return m_[2].job->stats().leader == 1; }, 5s));
  for (int r = 1; r < kMachines; ++r) EndTraining(r);
  EXPECT_TRUE(WaitFor([&] { return m_[1].group->holding_final() == 0; }, 10s));
  m_[1].group->Ended(true);
  for (int r = 1; r < kMachines; ++r) m_[r].job->Finish();
}

TEST_F(NetJobTest, ARestartedMachineReceivesTheWeightsAndTakesBackAShare) {
  AttachAll();
  for (int r = 0; r < kMachines; ++r) Train(r, 100, TestSeed());
  EndTraining(2);
  m_[2].job.reset();
  ASSERT_TRUE(WaitFor([&] { return m_[0].job->stats().owned + m_[1].job->stats().owned == m_[0].job->stats().chunks; }, 5s));
  for (int r = 0; r < 2; ++r) m_[r].solver.join();
  std::this_thread::sleep_for(100ms);  // every copy settles on the same weights
  // Restarted on the same port, with weights of its own (a fresh process's fillers).
  UdpOptions o;
  o.job = 0x7e57;
  o.heartbeat_ms = 0;  // liveness is the job's
  o.max_payload = kWireHeaderBytes + kChunk * sizeof(float);
  Open(2, o, ports_[2]);
  m_[2].counters = std::make_unique<SolverGroup>();
  m_[2].group = std::make_unique<MachineGroup>(m_[2].counters.get(), false);
  std::vector<float> garbage(kFloats, 12345.f);
  Attach(2, garbage);  // returns once it has the weights
  EXPECT_TRUE(m_[2].job->joined_running());
  EXPECT_EQ(m_[2].counters->iter.load(), m_[0].counters->iter.load()) << "the global iteration taken over";
  EXPECT_EQ(Differing(m_[2].w, m_[0].w), 0u) << "the newcomer holds the job's weights";
  EXPECT_TRUE(WaitFor([&] { return m_[0].job->dead_machines() == 0 && m_[1].job->dead_machines() == 0; }, 5s))
      << "its data partition stays with the others after it is back";
  ASSERT_TRUE(WaitFor([&] {
    const NetJobStats a = m_[0].job->stats(), b = m_[1].job->stats(), c = m_[2].job->stats();
    return c.owned > 0 && a.owned + b.owned + c.owned == a.chunks && a.peers[2].ready;
  }, 5s)) << "the newcomer never took back a share";
  // It contributes: its iterations reach the others' count of the global iteration, and its
  // work the leader's weights, once (chunks that moved to it are not counted twice).
  const int64_t before = m_[0].counters->iter.load();
  std::vector<float> want = m_[0].w;
  m_[2].added.assign(kFloats, 0);
  Train(2, 50, TestSeed());
  EndTraining(2);
  EXPECT_TRUE(WaitFor([&] { return m_[0].counters->iter.load() == before + 50; }, 5s));
  for (int r = 0; r < 2; ++r) EndTraining(r);
  EXPECT_TRUE(WaitFor([&] { return m_[0].group->holding_final() == 0; }, 10s));
  for (size_t j = 0; j < kFloats; ++j) want[j] += m_[2].added[j];
  EXPECT_TRUE(LedgerHolds(m_[0].w, want)) << Drops();
  m_[0].group->Ended(true);
  for (int r = 0; r < kMachines; ++r) m_[r].job->Finish();
}

TEST_F(NetJobTest, AMachineThatNeverComesIsNamedInOneLine) {
  NetJobOptions o = Options(0);
  o.start_ms = 300;
  Connect(0);
  NetJob job(std::move(transports_[0]), o);
  SolverGroup counters;
  MachineGroup g(&counters, false);
  std::vector<float> w(kFloats, 0);
  try {
    job.Attach(&g, 1, w.data(), kFloats);
    FAIL() << "started without machines 1 and 2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("machine 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("machine 2"), std::string::npos) << e.what();
  }
}


// ---------------------------------------------------------------- a job nobody can steer

// Attaches every job at once (each blocks until the job starts or fails) on weights of its
// own; returns each one's error ("" where it started: that one is finished again at once).
std::vector<std::string> AttachAtOnce(const std::vector<std::unique_ptr<NetJob>>& jobs) {
  const size_t n = jobs.size();
  std::vector<std::string> errors(n);
  std::vector<SolverGroup> counters(n);
  std::vector<std::unique_ptr<MachineGroup>> groups;
  for (size_t r = 0; r < n; ++r) groups.push_back(std::make_unique<MachineGroup>(&counters[r], false));
  std::vector<std::vector<float>> w(n, std::vector<float>(kFloats, 0));
  std::vector<std::thread> ts;
  for (size_t r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      try {
        jobs[r]->Attach(groups[r].get(), 1, w[r].data(), kFloats);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (size_t r = 0; r < n; ++r)
    if (errors[r].empty()) jobs[r]->Finish();  // its daemon must not outlive groups and w
  return errors;
}
// Forged, replayed and implausible frames, machines that disagree, a partition and requests
// from any machine, against machines over UDP loopback (test/transport/forge.hpp crafts the
// frames: the format is ours).

// A transport that can be cut off (both ways) and healed, as a partitioned link would be.
class Cuttable final : public Transport {
 public:
  Cuttable(std::unique_ptr<Transport> inner, std::atomic<bool>* cut) : inner_(std::move(inner)), cut_(cut) {}
  PeerId self() const override { return inner_->self(); }
  Caps caps() const override { return inner_->caps(); }
  std::byte* AcquireSend() override { return inner_->AcquireSend(); }
  void CommitSend(Dest to, uint32_t length) override {
    if (!cut_->load()) inner_->CommitSend(to, length);  // cut: the slot is abandoned at the next Flush
  }
  void Flush() override { inner_->Flush(); }
  size_t Poll(Packet* out, size_t max) override {
    size_t n = inner_->Poll(out, max);
    if (n && cut_->load()) {
      inner_->Release(n);
      n = 0;
    }
    return n;
  }
  void Release(size_t n) override { inner_->Release(n); }
  int wait_fd() const override { return inner_->wait_fd(); }
  TransportCounters counters() const override { return inner_->counters(); }

 private:
  std::unique_ptr<Transport> inner_;
  std::atomic<bool>* cut_;
};

// A stranger on the wire (an address in nobody's --peers) throws NaN positions and deltas
// claiming to be each machine, and control messages saying "done", "stop" and a clock of 1e9:
// every one is refused by its source address, counted, and the job's ledger stays exact.
TEST_F(NetJobTest, FramesFromAnAddressNotInTheJobAreRefusedWhateverTheyClaim) {
  AttachAll();
  test::Forger stranger;
  ASSERT_TRUE(stranger.ok());
  const FrameFormat fmt(0x7e57);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> sent{0};
  std::thread attack([&] {
    const std::vector<float> nan(kChunk, std::numeric_limits<float>::quiet_NaN());
    NetControl body;
    body.nonce = 0x5eed;
    for (uint64_t k = 0; !stop.load() && k < 20000; ++k) {
      for (int to = 0; to < kMachines; ++to) {
        for (PeerId claim = 0; claim < kMachines; ++claim) {
          if (claim == to) continue;
          Header h;
          h.source = claim;
          h.kind = MsgKind::kPosition;
          h.epoch = 0xffffffffu;
          h.chunk = static_cast<uint32_t>(k % 79);
          h.seq = k + 1;
          h.length = kChunk * sizeof(float);
          stranger.Send(ports_[to], fmt, h, nan.data());
          h.kind = MsgKind::kDelta;
          h.epoch = static_cast<uint32_t>(k);
          stranger.Send(ports_[to], fmt, h, nan.data());
          Header c;
          c.source = claim;
          c.kind = MsgKind::kIteration;
          c.chunk = kNetReady | kNetTraining | kNetDone | kNetStop;
          c.clock = c.seq = 1000000000;
          c.length = sizeof body;
          body.counter = k + 1;
          stranger.Send(ports_[to], fmt, c, &body);
          sent.fetch_add(3);
        }
      }
      std::this_thread::sleep_for(1ms);
    }
  });
  TrainAllAndCheckTheLedger();
  stop.store(true);
  attack.join();
  ASSERT_GT(sent.load(), 100u);
  for (int r = 0; r < kMachines; ++r) {
    const NetJobStats s = m_[r].job->stats();
    EXPECT_GT(s.foreign, 0u) << "machine " << r << ": the stranger's frames were not counted";
    EXPECT_EQ(s.refused_value, 0u) << "machine " << r << ": a NaN value reached the segment";
    for (float x : m_[r].w) ASSERT_TRUE(std::isfinite(x)) << "machine " << r;
  }
  FinishAll();
}

// Machine 0 of a job with one key, and the other machines played by hand (machine 1's address
// is the forger `one`'s, the others' those of `more`): their control messages and positions
// are sealed here.
class HandPlayed {
 public:
  // The job is machine `rank` (0 or 1) of `machines`; the other of 0 and 1 is `one`, the
  // others (2 up) `more`.
  explicit HandPlayed(int machines = 2, uint32_t start_ms = 10000, int rank = 0)
      : other(rank == 0 ? 1 : 0), fmt(0x7e58, Key()) {
    UdpOptions uo;
    uo.job = 0x7e58;
    uo.key = Key();
    uo.heartbeat_ms = 0;  // liveness is the job's
    uo.max_payload = kWireHeaderBytes + kChunk * sizeof(float);
    auto t = UdpDevice(uo).Open(static_cast<PeerId>(rank));
    auto* udp = static_cast<UdpEndpoint*>(t.get());
    udp->AddPeer(other, "127.0.0.1", one.port());
    for (int r = 2; r < machines; ++r) {
      more.push_back(std::make_unique<test::Forger>());
      udp->AddPeer(static_cast<PeerId>(r), "127.0.0.1", more.back()->port());
    }
    port0 = udp->port();
    NetJobOptions o;
    o.rank = rank;
    o.machines = machines;
    o.chunk_floats = kChunk;
    o.heartbeat_ms = 10;
    o.dead_ms = 2000;
    o.start_ms = start_ms;
    o.log = false;
    job = std::make_unique<NetJob>(std::move(t), o);
    w.assign(kFloats, 1.f);
    attach = std::thread([this] {
      try {
        job->Attach(&g, 1, w.data(), kFloats);
        attached.store(true);
      } catch (const std::exception& e) {
        attach_error = e.what();
      }
    });
  }
  ~HandPlayed() {
    if (attach.joinable()) attach.join();  // Attach ends by its start_ms at the latest
    counters.finished[0].store(1);
    job->Finish();
  }
  static JobKey Key() {
    JobKey key{};
    key[0] = 42;
    return key;
  }
  // A control message of machine `from`'s run `nonce` (default: `other`'s), echoing the job's
  // `echo`; `epoch`: the first master epoch of that run; `view`: its view of the global
  // iteration (default: clock).
  std::vector<std::byte> Control(uint64_t nonce, uint64_t echo, uint32_t flags, uint64_t clock, uint32_t epoch = 0,
                                 PeerId from = kNoPeer, int64_t view = -1) {
    NetControl b;
    b.nonce = nonce;
    b.echo[0] = echo;
    b.counter = ++counter;
    Header h;
    h.source = from == kNoPeer ? other : from;
    h.kind = MsgKind::kIteration;
    h.epoch = epoch;
    h.chunk = flags;
    h.clock = clock;
    h.seq = view < 0 ? clock : static_cast<uint64_t>(view);
    h.length = sizeof b;
    return test::Forger::Seal(fmt, h, &b);
  }
  // A position of chunk c from machine 1 (every value `value`).
  std::vector<std::byte> Position(uint32_t c, uint32_t epoch, uint64_t seq, float value) const {
    std::vector<float> v(std::min<size_t>(kChunk, kFloats - static_cast<size_t>(c) * kChunk), value);
    Header h;
    h.source = 1;
    h.kind = MsgKind::kPosition;
    h.epoch = epoch;
    h.chunk = c;
    h.seq = seq;
    h.length = static_cast<uint32_t>(v.size() * sizeof(float));
    return test::Forger::Seal(fmt, h, v.data());
  }
  uint64_t Refused(ControlRefusal r) const { return job->stats().control_refusals[static_cast<size_t>(r)]; }
  // Machine 0's nonce, read off the control messages it sends machine 1 (0: none came).
  uint64_t MachineZeroNonce() {
    for (int tries = 0; tries < 50; ++tries)
      for (const auto& f : one.Receive(fmt, 100ms, 16))
        if (f.h.kind == MsgKind::kIteration && f.payload.size() == sizeof(NetControl)) {
          NetControl b;
          std::memcpy(&b, f.payload.data(), sizeof b);
          return b.nonce;
        }
    return 0;
  }
  // Machine 1's run `mine` proves itself (echoes `nonce0`) until machine 0's Attach returns
  // (5 s at most). Returns the first message it sent (for a replay).
  std::vector<std::byte> Prove(uint64_t mine, uint64_t nonce0, uint32_t flags, uint32_t epoch = 0) {
    const std::vector<std::byte> hello = Control(mine, nonce0, flags, 0, epoch);
    WaitFor([&] {
      one.SendBytes(port0, hello);
      one.SendBytes(port0, Control(mine, nonce0, flags, 0, epoch));
      return attached.load() || !attach_error.empty();
    }, 5s);
    return hello;
  }

  test::Forger& From(PeerId r) { return r == 1 ? one : *more.at(r - 2); }

  PeerId other;
  test::Forger one;
  std::vector<std::unique_ptr<test::Forger>> more;
  FrameFormat fmt;
  uint16_t port0 = 0;
  std::unique_ptr<NetJob> job;
  SolverGroup counters;
  MachineGroup g{&counters, false};
  std::vector<float> w;
  std::thread attach;
  std::atomic<bool> attached{false};
  std::string attach_error;
  uint64_t counter = 0;
};

// Control messages of an earlier run (a valid MAC, another run's nonce) are never believed;
// once proven, a repeated counter is a replay, "done" from a machine that does not lead is
// refused, and a clock of 1e9 is taken only as far as the machine could have run.
TEST(NetJobSteerTest, ControlOfAnotherRunReplayedOrImplausibleIsRefused) {
  HandPlayed m;
  ASSERT_TRUE(m.one.ok());
  // 1. An earlier run's messages: its nonce, echoing machine 0's nonce of that run.
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(m.one.SendBytes(m.port0, m.Control(0x01d, 0xbad, kNetReady | kNetTraining | kNetDone | kNetStop, 1000000000)));
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(WaitFor([&] { return m.Refused(ControlRefusal::kUnproven) >= 50; }, 5s)) << m.Refused(ControlRefusal::kUnproven);
  EXPECT_FALSE(m.attached.load()) << "an earlier run's messages made machine 1 count as started";
  EXPECT_EQ(m.counters.job_done.load(), 0);
  EXPECT_EQ(m.counters.stop_requested.load(), 0);
  EXPECT_EQ(m.counters.iter.load(), 0);
  // 2. Machine 1 proves itself: it echoes the nonce machine 0 sends it now.
  const uint64_t nonce0 = m.MachineZeroNonce();
  ASSERT_NE(nonce0, 0u) << "machine 0 sent no control message";
  const uint64_t mine = 0x1234567;
  const std::vector<std::byte> hello = m.Prove(mine, nonce0, kNetReady);
  m.attach.join();
  ASSERT_EQ(m.attach_error, "");
  // 3. A replay within the run: the first proven message again.
  const uint64_t replays = m.Refused(ControlRefusal::kReplay);
  ASSERT_TRUE(m.one.SendBytes(m.port0, hello));
  EXPECT_TRUE(WaitFor([&] { return m.Refused(ControlRefusal::kReplay) > replays; }, 5s)) << "a replayed message was taken";
  // 4. "done" and "stop" from machine 1, which does not lead: done is refused; stop is a request.
  ASSERT_TRUE(m.one.SendBytes(m.port0, m.Control(mine, nonce0, kNetReady | kNetTraining | kNetDone, 0)));
  EXPECT_TRUE(WaitFor([&] { return m.Refused(ControlRefusal::kNotLeader) > 0; }, 5s));
  EXPECT_EQ(m.counters.job_done.load(), 0) << "a machine that does not lead ended the job";
  // 5. A clock of 1e9: taken only as far as a machine could have run (64 + 4 x 1 000 it/s while
  // no rate is known), and counted as not borne out once kClockBearOut has passed.
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(m.one.SendBytes(m.port0, m.Control(mine, nonce0, kNetReady | kNetTraining, 1000000000)));
  EXPECT_TRUE(WaitFor([&] { return m.job->stats().clock_unbacked > 0; }, kClockBearOut + 5s));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() + 10;
  EXPECT_LT(m.counters.iter.load(), 64 + 4000 * secs) << "a forged clock moved the global iteration";
  // 6. An earlier run's "stop", now: refused (counted), and still not believed.
  auto earlier_run = [&] { return m.Refused(ControlRefusal::kOldRun) + m.Refused(ControlRefusal::kUnproven); };
  const uint64_t refused = earlier_run();
  ASSERT_TRUE(m.one.SendBytes(m.port0, m.Control(0x01d, 0xbad, kNetReady | kNetStop, 0)));
  EXPECT_TRUE(WaitFor([&] { return earlier_run() > refused; }, 5s)) << "the earlier run's stop was never seen";
  EXPECT_EQ(m.counters.stop_requested.load(), 0);
}

// A follower whose job the leader's "done" ends knows on whose word and at which global
// iteration (FinishRun says so in one line where that is before the run's last iteration; a
// stop request is told apart): here the leader is played by hand, its "done" at 144.
TEST(NetJobSteerTest, AFollowerEndedByTheLeaderKnowsWhoEndedItAndWhen) {
  HandPlayed m(2, 10000, 1);
  ASSERT_TRUE(m.one.ok());
  const uint64_t nonce1 = m.MachineZeroNonce();  // (the job's, machine 1's here)
  ASSERT_NE(nonce1, 0u) << "the job sent no control message";
  const uint64_t mine = 0x5eed;
  m.Prove(mine, nonce1, kNetReady);
  m.attach.join();
  ASSERT_EQ(m.attach_error, "");
  EXPECT_EQ(m.job->ended_by(), -1);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(m.one.SendBytes(m.port0, m.Control(mine, nonce1, kNetReady | kNetTraining, 100 + i)));
  ASSERT_TRUE(m.one.SendBytes(m.port0, m.Control(mine, nonce1, kNetReady | kNetTraining | kNetDone, 144)));
  ASSERT_TRUE(WaitFor([&] { return m.counters.job_done.load() != 0; }, 5s)) << "the leader's done was not taken";
  EXPECT_EQ(m.job->ended_by(), 0);
  EXPECT_FALSE(m.job->stopped()) << "no stop request came";
  EXPECT_GE(m.job->ended_at(), 100);
  EXPECT_LE(m.job->ended_at(), 144);
  EXPECT_EQ(m.job->Name(m.job->ended_by()), "machine 0");
}

// Positions are bound to the run of their sender that proved itself: before any run of
// machine 1 is proven none is taken, and then only those of epochs above the first one its run
// announced, even for a chunk that has not yet heard that run (a recording of an earlier run,
// with a valid MAC, is stale).
TEST(NetJobSteerTest, PositionsOfAnUnprovenOrEarlierRunAreStale) {
  HandPlayed m;
  ASSERT_TRUE(m.one.ok());
  const uint32_t chunks = (kFloats + kChunk - 1) / kChunk;
  const uint32_t first = 1800000000;  // machine 1's run announces its masters' epochs start here
  auto send_all = [&](uint32_t epoch, uint64_t seq) {
    for (uint32_t c = 0; c < chunks; ++c)
      if (!m.one.SendBytes(m.port0, m.Position(c, epoch, seq, 7.f))) return false;
    return true;
  };
  auto stats = [&] { return m.job->stats(); };
  // Before machine 1 has proved any run: nothing of it is taken.
  ASSERT_TRUE(send_all(first + 1, 1));
  ASSERT_TRUE(WaitFor([&] { return stats().stale >= chunks; }, 5s)) << stats().stale;
  const uint64_t nonce0 = m.MachineZeroNonce();
  ASSERT_NE(nonce0, 0u) << "machine 0 sent no control message";
  m.Prove(0x5eed, nonce0, kNetReady, first);
  m.attach.join();
  ASSERT_EQ(m.attach_error, "");
  // Machine 1 masters some chunks now; an earlier run's positions of them (epochs below
  // `first`) are stale, though those chunks have heard no position of this run yet.
  ASSERT_TRUE(WaitFor([&] { return stats().owned > 0 && stats().owned < stats().chunks; }, 5s));
  const uint32_t theirs = stats().chunks - stats().owned;
  const uint64_t stale0 = stats().stale;
  ASSERT_TRUE(send_all(first - 100, 1));
  EXPECT_TRUE(WaitFor([&] { return stats().stale >= stale0 + theirs; }, 5s)) << stats().stale - stale0 << " of " << theirs;
  EXPECT_EQ(stats().positions_answered, 0u) << "a position of an earlier run was taken";
  for (float x : m.w) ASSERT_EQ(x, 1.f) << "an earlier run's values reached the weights";
  // This run's positions are taken.
  ASSERT_TRUE(send_all(first + 1, 1));
  EXPECT_TRUE(WaitFor([&] { return stats().positions_answered >= theirs; }, 5s)) << stats().positions_answered;
}

// A machine joining a running job takes the global iteration from the members it hears: the
// median of their views once it hears a majority, so one member's absurd view (a lie, or a
// mistake) does not set it.
TEST(NetJobSteerTest, AJoinerTakesTheMedianOfTheMembersViews) {
  HandPlayed m(4, 1500);  // machine 0 joins; its start gives up after 1.5 s (no weights come)
  ASSERT_TRUE(m.one.ok());
  const uint64_t nonce0 = m.MachineZeroNonce();
  ASSERT_NE(nonce0, 0u) << "machine 0 sent no control message";
  const int64_t views[] = {0, 5000, 5200, int64_t{1} << 40};  // machine 3's view is absurd
  const bool joined = WaitFor([&] {
    for (PeerId r : {3, 1, 2})  // the absurd one first
      m.From(r).SendBytes(m.port0, m.Control(0xa0 + r, nonce0, kNetReady | kNetTraining, 10, 0, r, views[r]));
    return m.counters.iter.load() != 0 || !m.attach_error.empty();
  }, 5s);
  ASSERT_TRUE(joined);
  EXPECT_TRUE(m.counters.iter.load() == 5000 || m.counters.iter.load() == 5200) << m.counters.iter.load() << " " << m.attach_error;
  EXPECT_TRUE(m.job->joined_running());
}

// Machines that disagree are named at the start, in one line on each: another net here; a
// list given in another order (both think they are machine 0) shows as frames claiming another
// machine's rank from a listed address.
TEST_F(NetJobTest, MachinesThatDisagreeAreNamedInOneLineAtTheStart) {
  for (const bool reversed : {false, true}) {
    SCOPED_TRACE(reversed ? "reversed list" : "another net");
    // In order, machine r's other is 1 - r; reversed, each is told it is machine 0 (its own
    // endpoint stamps 0, as bin/peers opens it at its place in its list).
    UdpOptions uo;
    uo.job = 0x7e57;
    uo.heartbeat_ms = 0;  // liveness is the job's
    uo.max_payload = kWireHeaderBytes + kChunk * sizeof(float);
    for (int r = 0; r < 2; ++r) {
      transports_[r] = UdpDevice(uo).Open(static_cast<PeerId>(reversed ? 0 : r));
      ports_[r] = static_cast<UdpEndpoint*>(transports_[r].get())->port();
    }
    std::vector<std::unique_ptr<NetJob>> jobs;
    for (int r = 0; r < 2; ++r) {
      const int rank = reversed ? 0 : r;
      static_cast<UdpEndpoint*>(transports_[r].get())->AddPeer(static_cast<PeerId>(1 - rank), "127.0.0.1", ports_[1 - r]);
      NetJobOptions o = Options(rank);
      o.machines = 2;
      o.start_ms = 1500;
      jobs.push_back(std::make_unique<NetJob>(std::move(transports_[r]), o));
      if (!reversed) jobs.back()->set_agreement(kAgreeNet, 100 + r);
    }
    const std::vector<std::string> errors = AttachAtOnce(jobs);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(errors[r].find('\n'), std::string::npos) << errors[r];
      if (reversed) {
        EXPECT_NE(errors[r].find("claiming another machine's rank"), std::string::npos) << "[" << errors[r] << "]";
      } else {
        EXPECT_NE(errors[r].find("in its net"), std::string::npos) << "[" << errors[r] << "]";
      }
    }
  }
}

// A partition: the leader cut off from the other two loses its quorum and stops leading at
// once (one leader, on the majority's side); healed, it re-takes the majority's weights.
TEST_F(NetJobTest, APartitionedMachineDoesNotLeadAndRetakesTheWeightsWhenHealed) {
  std::atomic<bool> cut{false};
  Connect(0);
  transports_[0] = std::make_unique<Cuttable>(std::move(transports_[0]), &cut);
  AttachAll();
  for (int r = 0; r < kMachines; ++r) Train(r, 2000, TestSeed() + r);
  // (Attach returns once the job has started; the lead is chosen on the daemon's next pass.)
  ASSERT_TRUE(WaitFor([&] { return m_[0].job->leads(); }, 5s)) << "machine 0 never led";
  cut.store(true);
  EXPECT_TRUE(WaitFor([&] { return m_[0].group->leads() == 0; }, 3s)) << "the cut-off leader still leads";
  EXPECT_TRUE(WaitFor([&] { return m_[1].group->leads() == 1; }, 3s)) << "the majority has no leader";
  // (The lead is a lease: it stops a quarter of dead_ms before the quorum is found lost.)
  EXPECT_TRUE(WaitFor([&] { return !m_[0].job->stats().quorum; }, 3s)) << "the cut-off machine still has a quorum";
  EXPECT_TRUE(WaitFor([&] { return m_[0].group->paused() == 1; }, 3s))
      << "its solvers train on, on work that will be dropped";
  EXPECT_EQ(m_[1].group->paused(), 0);
  EXPECT_EQ(m_[2].group->leads(), 0);
  EXPECT_EQ(m_[0].group->leads(), 0) << "two leaders";
  cut.store(false);
  EXPECT_TRUE(WaitFor([&] { return m_[0].job->stats().recoveries == 1 && m_[0].job->stats().quorum; }, 5s))
      << "healed, the machine did not re-take the job's weights";
  EXPECT_TRUE(WaitFor([&] { return m_[0].job->leads() && m_[1].group->leads() == 0; }, 5s));
  EXPECT_TRUE(WaitFor([&] { return m_[0].group->paused() == 0; }, 5s)) << "its solvers never resumed";
  for (int r = 0; r < kMachines; ++r) m_[r].counters->stop.store(1);
  for (int r = 0; r < kMachines; ++r) EndTraining(r);
  m_[0].group->Ended(true);
  FinishAll();
}

// Every machine's copy lost at once (a runaway that took them all): none has sound weights to
// re-take, so each one's recovery ends with the one line within a few dead_ms.
TEST_F(NetJobTest, WhenEveryCopyIsLostEachRecoveryEndsInOneLine) {
  AttachAll();
  for (int r = 0; r < kMachines; ++r) m_[r].pause.store(true);
  for (int r = 0; r < kMachines; ++r) Train(r, 1000000, TestSeed() + r);
  for (int r = 0; r < kMachines; ++r) std::fill(m_[r].w.begin(), m_[r].w.end(), std::nanf(""));
  std::vector<std::future<std::pair<bool, std::string>>> recovered;
  for (int r = 0; r < kMachines; ++r)
    recovered.push_back(std::async(std::launch::async, [this, r] {
      std::string why;
      const bool ok = m_[r].job->Recover(&why);
      return std::make_pair(ok, why);
    }));
  for (int r = 0; r < kMachines; ++r) {
    ASSERT_EQ(recovered[r].wait_for(10s), std::future_status::ready) << "machine " << r << "'s recovery never ended";
    const auto [ok, why] = recovered[r].get();
    EXPECT_FALSE(ok) << "machine " << r << " re-took non-finite weights";
    EXPECT_NE(why.find("every machine's copy of the weights diverged"), std::string::npos) << why;
  }
  for (int r = 0; r < kMachines; ++r) {
    m_[r].counters->stop.store(1);
    m_[r].pause.store(false);
  }
  for (int r = 0; r < kMachines; ++r) EndTraining(r);
  FinishAll();
}

// Cut off for good: after quorum_ms without a majority the machine gives up with one line
// (error()) and its solvers are let go; the others go on.
TEST_F(NetJobTest, AMachineWithoutAMajorityForTooLongGivesUpInOneLine) {
  std::atomic<bool> cut{false};
  Connect(2);
  transports_[2] = std::make_unique<Cuttable>(std::move(transports_[2]), &cut);
  quorum_ms_ = 400;
  AttachAll();
  cut.store(true);
  ASSERT_TRUE(WaitFor([&] { return !m_[2].job->error().empty(); }, 5s)) << "it never gave up";
  const std::string why = m_[2].job->error();
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  EXPECT_NE(why.find("no majority"), std::string::npos) << why;
  EXPECT_EQ(m_[2].counters->job_done.load(), 1) << "its solvers were not let go";
  EXPECT_TRUE(m_[0].job->error().empty());
  EXPECT_TRUE(m_[0].job->leads());
  m_[0].group->Ended(true);
  for (int r = 0; r < kMachines; ++r) EndTraining(r);
  FinishAll();
}

// The last machine standing (two of three killed, nothing said): it reports the lost quorum in
// its figures at once, and after quorum_ms gives up with one line and lets its solvers go; no
// call on it blocks meanwhile.
TEST_F(NetJobTest, TheLastMachineStandingGivesUpInOneLine) {
  quorum_ms_ = 400;
  AttachAll();
  for (int r = 0; r < kMachines; ++r) Train(r, 1000000, TestSeed() + r);
  for (int r = 1; r < kMachines; ++r) {  // killed: their stand-in solvers first, then the daemons
    m_[r].counters->stop.store(1);
    m_[r].solver.join();
    m_[r].job.reset();
  }
  ASSERT_TRUE(WaitFor([&] { return !m_[0].job->stats().quorum; }, 5s)) << "it never saw the quorum lost";
  ASSERT_TRUE(WaitFor([&] { return !m_[0].job->error().empty(); }, 5s)) << "it never gave up";
  const std::string why = m_[0].job->error();
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  EXPECT_NE(why.find("no majority"), std::string::npos) << why;
  EXPECT_EQ(m_[0].counters->job_done.load(), 1) << "its solvers were not let go";
  m_[0].counters->stop.store(1);
  EndTraining(0);
  m_[0].job->Finish();
}

// Machines with different --job-key files: the start fails naming the key, not a silence.
TEST(NetJobSteerTest, ADifferentKeyIsNamedAsSuch) {
  UdpOptions uo;
  uo.job = 0x7e59;
  uo.heartbeat_ms = 0;  // liveness is the job's
  uo.max_payload = kWireHeaderBytes + kChunk * sizeof(float);
  std::unique_ptr<Transport> t[2];
  uint16_t port[2];
  for (int r = 0; r < 2; ++r) {
    JobKey key{};
    key[0] = static_cast<uint8_t>(r + 1);
    uo.key = key;
    t[r] = UdpDevice(uo).Open(static_cast<PeerId>(r));
    port[r] = static_cast<UdpEndpoint*>(t[r].get())->port();
  }
  for (int r = 0; r < 2; ++r) static_cast<UdpEndpoint*>(t[r].get())->AddPeer(static_cast<PeerId>(1 - r), "127.0.0.1", port[1 - r]);
  NetJobOptions o;
  o.machines = 2;
  o.chunk_floats = kChunk;
  o.heartbeat_ms = 10;
  o.start_ms = 500;
  o.log = false;
  std::vector<std::unique_ptr<NetJob>> jobs;
  for (int r = 0; r < 2; ++r) {
    o.rank = r;
    jobs.push_back(std::make_unique<NetJob>(std::move(t[r]), o));
  }
  const std::vector<std::string> errors = AttachAtOnce(jobs);
  for (int r = 0; r < 2; ++r) EXPECT_NE(errors[r].find("failed the MAC"), std::string::npos) << "[" << errors[r] << "]";
}

// A stop request (a signal) on a follower reaches the leader, whose stop then tells every
// machine to stop training now; a snapshot request (SIGHUP) on a follower reaches the leader
// once, and is not echoed back and forth.
TEST_F(NetJobTest, RequestsOnAnyMachineReachTheLeaderAndItsStopEndsTraining) {
  AttachAll();
  for (int r = 0; r < kMachines; ++r) Train(r, 100000, TestSeed() + r);
  std::this_thread::sleep_for(100ms);
  m_[2].counters->snapshot_requests.fetch_add(1);
  EXPECT_TRUE(WaitFor([&] { return m_[0].counters->snapshot_requests.load() == 1; }, 3s)) << "the leader never heard the request";
  std::this_thread::sleep_for(200ms);
  for (int r = 0; r < kMachines; ++r) EXPECT_EQ(m_[r].counters->snapshot_requests.load(), 1) << "machine " << r;
  m_[2].counters->stop_requested.store(1);
  EXPECT_TRUE(WaitFor([&] { return m_[0].counters->stop_requested.load() == 1; }, 3s)) << "the leader never heard the stop";
  m_[0].counters->stop.store(1);  // what the leader's solver does on its stop request
  for (int r = 1; r < kMachines; ++r)
    EXPECT_TRUE(WaitFor([&] { return m_[r].counters->stop.load() == 1; }, 3s)) << "machine " << r << " trains on";
  for (int r = 0; r < kMachines; ++r) m_[r].counters->stop.store(1);  // (where the test failed: bounded)
  for (int r = 0; r < kMachines; ++r) EndTraining(r);
  EXPECT_TRUE(WaitFor([&] { return m_[0].group->holding_final() == 0; }, 3s)) << "the drain waited for its deadline";
  m_[0].group->Ended(true);
  FinishAll();
}

}  // namespace
}  // namespace hogstream
