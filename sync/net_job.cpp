// The network daemon of one machine (see net_job.hpp for the topology, control, liveness and
// the end of a job): the loop and the glue between its three rooms (control_: what is said and
// believed, sync/net_control.hpp; members_: who is live and leads, sync/net_members.hpp;
// shares_: who masters which chunk, sync/net_shares.hpp), the endpoints, the transport and the
// machine's group. Everything below Run() happens on the daemon thread; other threads see only
// the atomics, the figures under their mutex, and the group's fields.
#include "sync/net_job.hpp"

#include <glog/logging.h>
#include <poll.h>

#include <algorithm>
#include <iterator>
#include <cstring>
#include <limits>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "base/common.hpp"
#include "core/context.hpp"
#include "sync/svb.hpp"

namespace hogstream {

namespace {
using Clock = std::chrono::steady_clock;
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
// What the transport refused or lost, by kind: lost on the way (injected drops, a frame of
// ours corrupted: bad checksum), not this job's (another job's id, or from an address that is
// not a machine of the job), a failed MAC (another key, or a forgery), and datagrams that are
// no frame of ours at all.
struct Losses {
  uint64_t lost, foreign, mac, malformed, kernel;
};

// Adds a master's figures to a sum over masters (a maximum for staleness_max).
void Accumulate(MasterEndpoint::Stats& sum, const MasterEndpoint::Stats& s) {
  sum.sweeps += s.sweeps;
  sum.positions_sent += s.positions_sent;
  sum.deltas_applied += s.deltas_applied;
  sum.unanswered += s.unanswered;
  sum.staleness_sum += s.staleness_sum;
  sum.staleness_max = std::max(sum.staleness_max, s.staleness_max);
  sum.weight_milli += s.weight_milli;
  sum.refused_nonfinite += s.refused_nonfinite;
  sum.refused_absurd += s.refused_absurd;
  sum.deltas_duplicate += s.deltas_duplicate;
  sum.deltas_too_old += s.deltas_too_old;
  sum.deltas_other_epoch += s.deltas_other_epoch;
  sum.malformed += s.malformed;
}
// "3 foreign, 2 bad MAC, 0 malformed, 5 control (4 unproven, 1 replayed), 0 by value": what a
// machine refused, by reason, for its log lines.
std::string RefusedText(const NetJobStats& s) {
  std::ostringstream os;
  uint64_t control = 0;
  for (uint64_t c : s.control_refusals) control += c;
  os << s.foreign << " foreign, " << s.refused_mac << " bad MAC, " << s.malformed << " malformed, " << control << " control";
  if (control) {
    os << " (";
    const char* sep = "";
    for (size_t i = 0; i < std::size(s.control_refusals); ++i) {
      if (!s.control_refusals[i]) continue;
      os << sep << s.control_refusals[i] << " " << ControlRefusalName(static_cast<ControlRefusal>(i));
      sep = ", ";
    }
    os << ")";
  }
  os << ", " << s.refused_value << " by value, " << s.stale << " stale data";
  if (s.clock_unbacked) os << ", " << s.clock_unbacked << " clocks not borne out";
  if (s.kernel_dropped) os << "; " << s.kernel_dropped << " datagrams dropped by the kernel (receive buffer full)";
  return os.str();
}

// Drops (injected) and refusals by reason, as a machine's figures class them, for the whole
// transport or one peer. `not_sync`: good frames of the job whose payload is not one of sync's
// messages (Wire).
Losses Classify(uint64_t dropped, const std::array<uint64_t, static_cast<size_t>(Reject::kCount)>& rejected,
                uint64_t not_sync = 0) {
  auto r = [&](Reject why) { return rejected[static_cast<size_t>(why)]; };
  uint64_t total = 0;
  for (uint64_t n : rejected) total += n;
  Losses l;
  l.lost = dropped + r(Reject::kChecksum);
  l.foreign = r(Reject::kJob) + r(Reject::kSender);
  l.mac = r(Reject::kMac);
  l.malformed = total - r(Reject::kChecksum) - l.foreign - l.mac + not_sync;
  l.kernel = 0;
  return l;
}
Losses LossesOf(const TransportCounters& tc, uint64_t not_sync) {
  Losses l = Classify(tc.dropped, tc.rejected, not_sync);
  l.kernel = tc.kernel_dropped;
  return l;
}
}  // namespace

float GspWeightScale(int machines) {
  return static_cast<float>(std::max(1.0, std::min<double>(machines - 1, kJobSolverSpeed - 1)));
}

double EasgdSpeed(int machines, int solvers, double weight) {
  const int copies = machines * solvers;
  if (copies < 2) return 1;
  const double k = solvers * (1 + (machines - 1) * weight);
  return std::min(copies, kEasgdSpeed) * (1 + k) / k;
}

std::string EasgdSpeedUp(int copies, double speed, pb::SolverParameter* param) {
  if (speed == 1) return "";
  std::ostringstream os;
  os << std::setprecision(3) << "easgd: the centre is the mean of its " << copies
     << " copies and trails them, so each solver's base_lr " << param->base_lr() << " -> "
     << param->base_lr() * speed << " (the centre moves as one solver on " << std::min(copies, kEasgdSpeed)
     << " batches together)";
  param->set_base_lr(static_cast<float>(param->base_lr() * speed));
  return os.str();
}

NetJobOptions NetJob::Checked(NetJobOptions opt, const Transport* t) {
  HS_REQUIRE(t != nullptr) << "a networked job needs a transport";
  HS_REQUIRE(opt.machines >= 1 && opt.machines < kNoPeer)
      << "a job of " << opt.machines << " machines";
  HS_REQUIRE(opt.rank >= 0 && opt.rank < opt.machines)
      << "machine rank " << opt.rank << " outside a job of " << opt.machines;
  HS_REQUIRE(!opt.multicast || t->caps().multicast)
      << "this transport cannot multicast; leave out --multicast";
  HS_REQUIRE(opt.heartbeat_ms > 0 && opt.dead_ms > 2 * opt.heartbeat_ms)
      << "the dead-machine timeout (" << opt.dead_ms << " ms) must exceed two heartbeats ("
      << opt.heartbeat_ms << " ms)";
  if (!opt.quorum_ms) opt.quorum_ms = 30 * opt.dead_ms;
  HS_REQUIRE(opt.quorum_ms > opt.dead_ms) << "a machine cut off gives up after " << opt.quorum_ms
                                          << " ms, sooner than the others take it for dead (" << opt.dead_ms
                                          << " ms): make --quorum_ms longer than --dead_ms";
  return opt;
}

namespace {
// The first master epoch of a run: the second it started (newer than any earlier run's).
uint32_t WallSeconds() {
  return static_cast<uint32_t>(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}
}  // namespace

NetJob::NetJob(std::unique_ptr<Transport> transport, NetJobOptions opt)
    : transport_(std::move(transport)),
      wire_(transport_.get()),
      opt_(Checked(std::move(opt), transport_.get())),
      control_(opt_.rank, opt_.machines, FreshNonce()),
      members_(opt_.rank, opt_.machines),
      shares_(opt_.rank, opt_.machines, opt_.multicast, WallSeconds()) {
  const uint64_t nonce = control_.nonce();
  incarnation_ = static_cast<uint32_t>(nonce ^ (nonce >> 32)) | 1;
  machines_now_.store(opt_.machines);
  if (!opt_.job_machines) opt_.job_machines = opt_.machines;
  if (!opt_.rule.aggregate) opt_.rule.aggregate = DefaultAggregate();
  shares_.set_weights(opt_.share_weights);
}

NetJob::~NetJob() {
  quit_.store(true);
  if (thread_.joinable()) thread_.join();
}

std::string NetJob::Name(int r) const {
  std::ostringstream os;
  os << "machine " << r;
  if (static_cast<size_t>(r) < opt_.names.size() && !opt_.names[r].empty()) os << " (" << opt_.names[r] << ")";
  return os.str();
}

void NetJob::set_machine_group(std::vector<int> groups) {
  HS_REQUIRE(!thread_.joinable()) << "NetJob::set_machine_group after Attach";
  HS_CHECK(groups.empty() || static_cast<int>(groups.size()) == opt_.machines) << groups.size() << " groups";
  opt_.machine_group = std::move(groups);
  opt_.track_fresh = opt_.track_fresh || !opt_.machine_group.empty();
}

void NetJob::set_agreement(Agree which, uint64_t hash) {
  HS_REQUIRE(!thread_.joinable()) << "NetJob::set_agreement after Attach";
  opt_.agree[which] = hash;
}

std::string NetJob::error() const {
  std::lock_guard<std::mutex> lock(figures_mu_);
  return fatal_;
}

void NetJob::Attach(MachineGroup* group, int local_solvers, float* weights, size_t n,
                    const std::vector<size_t>& params, const std::function<bool()>& stop) {
  HS_REQUIRE(!thread_.joinable() && !finished_called_) << "NetJob::Attach called twice";
  if (!opt_.agree[kAgreeNet]) {  // the buffer's layout, at least
    std::vector<uint64_t> shape{n};
    shape.insert(shape.end(), params.begin(), params.end());
    opt_.agree[kAgreeNet] = Digest64(shape.data(), shape.size() * sizeof(uint64_t));
  }
  control_.set_agreement(opt_.agree);
  g_ = group;
  local_ = local_solvers;
  w_ = weights;
  n_ = n;
  const uint32_t most = t_->caps().max_payload / sizeof(float) / 4 * 4;
  chunk_floats_ = opt_.chunk_floats ? opt_.chunk_floats : most;
  HS_REQUIRE(chunk_floats_ > 0 && chunk_floats_ <= most)
      << "chunks of " << chunk_floats_ << " floats do not fit this transport's messages ("
      << most << " floats at most)";
  layout_ = std::make_unique<ChunkLayout>(n_, chunk_floats_, opt_.chunk_at_params || svb_ ? params : std::vector<size_t>{});
  shares_.set_chunks(layout_->count, svb_ ? SkippedChunks(*layout_, svb_skip_) : std::vector<bool>{});
  slave_ = std::make_unique<SlaveEndpoint>(w_, *layout_, transport_.get());
  slave_->set_codec(opt_.rule.codec);
  slave_->set_on_refused([this](PeerId from, uint32_t c, Refusal why) { Refused(from, c, why, "position"); });
  // Data frames are bound to the sender's run: positions count only once that run has proved
  // itself (OnControl lowers the floor to the first epoch it announced).
  for (int r = 0; r < opt_.machines; ++r)
    if (r != opt_.rank) slave_->set_min_epoch(static_cast<PeerId>(r), std::numeric_limits<uint32_t>::max());
  named_.assign(static_cast<size_t>(opt_.machines) * 2, 0);
  // Shared by every master endpoint; a synchronous group's machines share their staleness.
  opt_.rule.updates = std::make_shared<ChunkUpdates>(layout_->count, opt_.machine_group);
  g_->HoldFinal();
  attached_at_ = Clock::now();
  g_->SetLeads(opt_.machines == 1);
  if (opt_.admit) transport_->set_admit([this](PeerId r, const std::string& address) { return Admit(r, address); });
  thread_ = std::thread([this] {
    NameThisThread("hs-net");
    Run();
    News();  // (whoever waits on it learns it has ended)
  });
  // The daemon ends its start within start_ms (start_failed_, then its thread); the deadline
  // here is for a daemon that stopped answering at all.
  const auto limit = std::chrono::milliseconds(2 * uint64_t{opt_.start_ms} + 60000);
  const bool told = AwaitNews([&] { return start_ok_.load() || start_failed_.load() || (stop && stop()); },
                              Clock::now() + limit);
  if (!told || (!start_ok_.load() && !start_failed_.load())) {
    quit_.store(true);
    thread_.join();
    HS_REQUIRE(told) << "the network daemon did not start within " << limit.count() / 1000 << " s";
    HS_REQUIRE(false) << "stopped while waiting for the other machines";
  }
  if (start_failed_.load()) {
    thread_.join();
    HS_REQUIRE(false) << start_error_;
  }
}

void NetJob::Finish() {
  if (finished_called_) return;
  finished_called_ = true;
  if (!thread_.joinable()) return;
  // A machine leaving on notice first hands its chunks over (within the daemon's own
  // deadlines: the drain, then dead_ms for the others to say they hold its finals).
  if (g_ && g_->leaving()) {
    const Clock::time_point handed = Clock::now() + std::chrono::milliseconds(opt_.drain_ms + 2 * opt_.dead_ms);
    AwaitNews([&] { return left_.load() || all_done_.load() || quit_.load(); }, handed);
  }
  // The others hear this machine's last state a few times; the leader's "done" until every
  // live machine has said it back (a lost "done" would make one of them take over and end
  // the job again), or dead_ms.
  const Clock::time_point until = Clock::now() + std::chrono::milliseconds(opt_.dead_ms);
  std::this_thread::sleep_for(std::chrono::milliseconds(5 * opt_.heartbeat_ms));
  AwaitNews([&] { return !leads() || all_done_.load(); }, until);
  quit_.store(true);
  thread_.join();
  if (!g_) return;
  Figures(/*report=*/false);  // the last figures (the daemon has stopped: this thread may)
  const NetJobStats s = stats();
  if (stats_) stats_->OnNetwork(s);
  if (!opt_.log) return;
  // What this machine did over the whole job, for the log (and tools that read it).
  const int64_t mine = LocalIterations();
  const double secs = std::max(1e-9, Seconds(Clock::now() - attached_at_));
  const TransportCounters tc = t_->counters();
  LOG(INFO) << std::fixed << std::setprecision(1) << "Network: " << Name(opt_.rank) << " ran " << mine
            << " iterations in " << secs << " s (" << mine / secs << " iter/s); sent "
            << std::setprecision(3) << tc.bytes_sent * 1e-9 << " GB, received " << tc.bytes_received * 1e-9
            << " GB (" << (tc.bytes_sent + tc.bytes_received) * 8e-9 / secs << " Gbit/s); " << s.lost
            << " frames lost (" << std::setprecision(2) << (tc.sent ? 100.0 * s.lost / tc.sent : 0.0)
            << "% of sent); " << shares_.reshares() << " re-shares; refused: " << RefusedText(s);
}

bool NetJob::leads() const { return lead_.load() == opt_.rank; }

int64_t NetJob::LocalIterations() const {
  int64_t n = 0;
  for (int r = 0; g_ && r < local_; ++r) n += g_->shared().done[r].load(std::memory_order_relaxed);
  return n;
}

uint32_t NetJob::Flags() const {
  uint32_t f = 0;
  if (members_.ready()) f |= kNetReady;
  if (phase_ == Phase::kTraining) f |= kNetTraining;
  if (finished_) f |= kNetFinished;
  if (flushed_) f |= kNetFlushed;
  if (done_) f |= kNetDone;
  if (done_ && g_ && g_->final_failed()) f |= kNetKeep;
  if (stop_) f |= kNetStop;
  if (g_ && g_->shared().testing.load(std::memory_order_relaxed) > 0) f |= kNetTesting;
  if (leave_ != Leave::kNone) f |= kNetLeaving;
  if (leave_ == Leave::kLeft) f |= kNetLeft;
  return f;
}

// ---------------------------------------------------------------- the daemon

void NetJob::Run() {
  started_ = Clock::now();
  last_post_ = last_figures_ = started_;
  last_control_ = started_ - std::chrono::hours(1);
  const int fd = t_->wait_fd();
  bool reported_status = false;
  while (!quit_.load(std::memory_order_relaxed)) {
    const Clock::time_point now = Clock::now();
    const size_t received = Receive();
    if (disagreed_ && phase_ == Phase::kStart && now - disagreed_at_ > std::chrono::milliseconds(5 * opt_.heartbeat_ms)) {
      start_failed_.store(true);  // a machine that disagrees (OnControl named it)
      return;
    }
    // An answer due at once goes out at most every 2 ms: forged hellos (new nonces without a
    // key) must not make this machine send a message for each.
    if (now - last_control_ >= std::chrono::milliseconds(opt_.heartbeat_ms) ||
        (answer_now_ && now - last_control_ >= std::chrono::milliseconds(2))) {
      answer_now_ = false;
      SendControl();
    }
    CheckLiveness();
    if (phase_ == Phase::kStart) {
      if (!Start(now)) return;
    } else {
      if (phase_ == Phase::kJoining && !Join(now)) return;
      if (phase_ == Phase::kTraining && recover_asked_.load() > recover_done_.load() && !recovering_) BeginRecovery("lost its copy of the weights (non-finite)");
      Reshare();
      Bridge();
      Post();
      if (svb_) SendFactors();
    }
    t_->Flush();
    if (g_ && g_->shared().testing.load(std::memory_order_relaxed) > 0) members_[opt_.rank].tested = true;
    if (now - last_figures_ >= std::chrono::milliseconds(100)) Figures();
    if (now - last_clocks_ >= std::chrono::milliseconds(2)) {
      last_clocks_ = now;
      Clocks();
    }
    const Status st = t_->status();
    if (!st.ok() && !reported_status) {
      reported_status = true;
      LOG(ERROR) << "Network: " << st.what;
    }
    // Idle (nothing came in): sleep on the transport until something does, 1 ms at most, so
    // pacing, heartbeats and the group are looked at often enough.
    if (received == 0 && fd >= 0) {
      pollfd p{fd, POLLIN, 0};
      ::poll(&p, 1, 1);
    } else if (received == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

bool NetJob::Start(Clock::time_point now) {
  // A newcomer to a running job joins it; otherwise a new job starts once every machine
  // is heard from and ready (each is ready as soon as it has heard every other one).
  const bool running = members_.AnyTraining();
  if (running && !members_.ready() && svb_) {
    start_error_ = "--svb: this machine cannot join a running job (the InnerProduct weights travel only as gradients)";
    start_failed_.store(true);
    return false;
  }
  // (Once ready, this machine is one of a new job's first.) A joiner waits until it hears
  // a strict majority of the job, whose views it takes (Quorum's tie rule, exactly half
  // with machine 0, would let machine 0 join on one other's view alone). The global iteration
  // it starts from: the median of the members' views (NetMembers::MedianView); every member's
  // own count only grows by what it could have run (BoundClock).
  const std::vector<bool> reached = members_.Reached(now);
  if (running && !members_.ready() && 2 * std::count(reached.begin(), reached.end(), true) > opt_.machines) {
    JoinRunning(members_.MedianView());
  } else if (members_.AllOthersLive()) {
    members_.set_ready(true);
    if (members_.AllLiveOthers(kNetReady) || running) StartTraining();
  } else if (now - started_ > std::chrono::milliseconds(opt_.start_ms)) {
    start_error_ = NoWordLine();
    start_failed_.store(true);
    return false;
  }
  return true;
}

void NetJob::JoinRunning(int64_t view) {
  phase_ = Phase::kJoining;
  joined_running_.store(true);
  g_->shared().iter.store(view);
  members_.CountAllAsTaken();  // their past is in `view` already
  LOG_IF(INFO, opt_.log) << "Network: " << Name(opt_.rank) << " joins a running job at iteration "
                         << view << "; receiving the weights";
  Reshare();
}

void NetJob::StartTraining() {
  phase_ = Phase::kTraining;
  Reshare();
  LOG_IF(INFO, opt_.log) << "Network: all " << opt_.machines << " machines heard from; "
                         << Name(opt_.rank) << " masters " << shares_.owned().size() << " of "
                         << slave_->layout().count << " chunks of " << chunk_floats_ << " floats"
                         << (opt_.chunk_at_params ? " at most, cut at parameter boundaries" : "");
  start_ok_.store(true);
  News();
}

std::string NetJob::NoWordLine() const {
  std::ostringstream os;
  os << "no word from";
  for (int r = 0; r < opt_.machines; ++r)
    if (r != opt_.rank && !members_[r].live) os << " " << Name(r);
  os << " after " << opt_.start_ms / 1000.0 << " s";
  const Losses l = LossesOf(t_->counters(), t_->malformed());
  const uint64_t unproven = control_.refused(ControlRefusal::kUnproven);
  if (l.mac) os << "; " << l.mac << " frames failed the MAC: does every machine have the same --job-key?";
  if (l.foreign) os << "; " << l.foreign << " frames came from another job, or from an address not in --peers "
                    << "(or claiming another machine's rank): is every machine given the same --peers, in the same order, and --job?";
  if (!l.mac && !l.foreign && unproven)
    os << "; its messages arrive but never echo this run (do its frames come back to it?)";
  if (!l.mac && !l.foreign && !unproven) os << " (is it started, with the same --peers list and job?)";
  return os.str();
}

bool NetJob::Join(Clock::time_point now) {
  // Another machine has the weights (a recovery takes them from it).
  const bool owner = members_.AnyLiveOther(kNetReady);
  if (owner) owner_seen_ = now;
  // A recovery is done once every chunk came from another machine's sound copy: where no other
  // machine is ready (all of them lost theirs too, or are gone), this machine would master every
  // chunk itself and "re-take" its own non-finite weights, over and over.
  if (slave_->chunks_heard() == slave_->layout().count && slave_->retaking() == 0 && (owner || !recovering_)) {
    Joined(now);
  } else if (recovering_) {
    if (now - owner_seen_ > std::chrono::milliseconds(opt_.dead_ms)) {
      recover_error_ = "every machine's copy of the weights diverged (non-finite) and none is left to recover "
                       "from: the job cannot go on (lower base_lr, or check the data)";
      recover_failed_.store(true);
      News();
      return false;
    }
  } else if (now - started_ > std::chrono::milliseconds(opt_.start_ms)) {
    std::ostringstream os;
    os << "joining a running job: only " << slave_->chunks_heard() << " of " << slave_->layout().count
       << " chunks received after " << opt_.start_ms / 1000.0 << " s";
    start_error_ = os.str();
    start_failed_.store(true);
    return false;
  }
  return true;
}

void NetJob::Joined(Clock::time_point now) {
  members_.set_ready(true);
  phase_ = Phase::kTraining;
  if (recovering_) {
    recovering_ = false;
    ++recoveries_;
    g_->SetPaused(false);
    LOG_IF(INFO, opt_.log) << "Network: " << Name(opt_.rank) << " re-took the job's weights in "
                           << std::setprecision(3) << Seconds(now - recover_began_) << " s; training on";
    recover_done_.store(recover_target_);
    News();
  } else {
    LOG_IF(INFO, opt_.log) << "Network: " << Name(opt_.rank) << " has the weights after "
                           << std::setprecision(3) << Seconds(now - started_) << " s; taking a share";
    start_ok_.store(true);
    News();
  }
}

size_t NetJob::Receive() {
  size_t handled = 0;
  for (;; ++handled) {
    if (next_ == polled_) {
      if (polled_) t_->Release(polled_);
      next_ = polled_ = 0;
      polled_ = t_->Poll(batch_, std::size(batch_));
      if (polled_ == 0) return handled;
    }
    const Message& m = batch_[next_];
    const PeerId src = m.h.source;
    // Not one of the job's machines (the transport knows only them: defensive) is skipped.
    if (src < opt_.machines && src != opt_.rank && !Dispatch(m)) return handled;  // this batch waits
    ++next_;
  }
}

bool NetJob::Dispatch(const Message& m) {
  switch (m.h.kind) {
    case MsgKind::kPosition:
      return TakeData(m, *slave_, nullptr, *t_);  // false: no slot for its delta yet
    case MsgKind::kDelta:
      return TakeData(m, *slave_, MasterFor(m), *t_);
    case MsgKind::kIteration:
      OnControl(m);
      break;
    case MsgKind::kFactors:
      if (svb_) svb_->OnMessage(m);
      break;
    case MsgKind::kFinal:
      slave_->TakeFinal(m);
      break;
    default:
      break;
  }
  return true;
}

void NetJob::OnControl(const Message& m) {
  const PeerId src = m.h.source;
  const Clock::time_point now = Clock::now();
  const ControlNews news = control_.Decode(m, src == members_.leader() || done_);
  answer_now_ = answer_now_ || news.answer_now;
  if (news.disagree >= 0 && news.first_disagree) Disagreed(src, news.disagree, now);
  if (!news.taken) return;
  if (news.new_run) {
    TakeNewRun(src, news);
    // Its positions count from here, and only those of this run (epochs above the one it
    // announces): a position recorded in an earlier run is stale even for a chunk that has
    // not yet heard this run's master.
    slave_->set_min_epoch(src, news.told.first_epoch);
  }
  const NetMember& p = members_[src];
  if (!p.live && p.heard && !p.left && !(news.told.flags & kNetLeft) && phase_ == Phase::kTraining)
    LOG_IF(INFO, opt_.log) << "Network: " << Name(src) << " is back";
  const uint32_t flags_before = p.flags;
  const bool left_before = p.left;
  // Its clock only grows, and by no more than it could have run since (BoundClock): a jump
  // beyond that is taken in part (the rest comes with its next messages).
  // A claim clamped and never borne out is counted (NetMembers::unbacked).
  members_.Hear(src, now, news.told, joined_running_.load(std::memory_order_relaxed));
  HeardOf(src, flags_before, left_before);
}

void NetJob::HeardOf(int r, uint32_t flags_before, bool left_before) {
  const NetMember& p = members_[r];
  if (!opt_.log || phase_ != Phase::kTraining) return;
  if ((p.flags & kNetLeaving) && !(flags_before & kNetLeaving))
    LOG(INFO) << "Network: " << Name(r) << " leaves the job on notice at iteration " << p.view
              << "; its progress and its chunks' last values come to every machine";
  if (p.left && !left_before)
    LOG(INFO) << "Network: " << Name(r) << " has left the job after " << p.count << " iterations"
              << "; its chunks are re-shared (from its last values) and its data read by the others";
}

void NetJob::TakeNewRun(PeerId src, const ControlNews& news) {
  if (news.restarted) {  // its numbering starts again, and its iterations count from zero
    LOG_IF(INFO, opt_.log) << "Network: " << Name(src) << " restarted; it rejoins";
    slave_->ForgetOwner(src);
    // The last run's claim, settled and counted before its count starts again.
    if (members_.Settle(src) > 0 && g_) CountOthers();
  }
  members_.NewRun(src, news.restarted, attached_at_);
}

void NetJob::Disagreed(PeerId src, int agree, Clock::time_point now) {
  std::ostringstream os;
  os << Name(src) << " differs from " << Name(opt_.rank) << " in its " << AgreeName(static_cast<Agree>(agree))
     << ": every machine of a job needs the same";
  if (phase_ == Phase::kStart) {
    // Ends the start after a few more control messages, so that the other machine hears this
    // one (proven) and names the difference too.
    if (!disagreed_) start_error_ = os.str();
    disagreed_ = true;
    disagreed_at_ = now;
  } else {
    LOG_IF(ERROR, opt_.log) << "Network: " << os.str() << "; its messages are refused";
  }
}

ControlState NetJob::Told() const {
  ControlState s;
  s.flags = Flags();
  s.first_epoch = shares_.first_epoch();  // every master epoch of this run is above it
  s.clock = LocalIterations();
  s.view = g_ ? g_->shared().iter.load(std::memory_order_relaxed) : 0;
  // How many of its iterations have gone out (what a synchronous round waits for).
  s.flushed = opt_.track_fresh ? flushed_iter_.load(std::memory_order_relaxed) : 0;
  s.snapshots = g_ ? g_->shared().snapshot_requests.load(std::memory_order_relaxed) - snapshots_passed_ : 0;
  s.solvers = std::max(1, local_);
  s.held = Held();
  return s;
}

void NetJob::SendControl() {
  const Clock::time_point now = Clock::now();
  auto [h, b] = control_.Round(Told());
  for (int r = 0; r < opt_.machines; ++r) {
    if (r == opt_.rank) continue;
    std::byte* slot = t_->AcquireSend();
    if (!slot) {
      t_->Flush();
      if (!(slot = t_->AcquireSend())) return;  // try again next turn (last_control_ not moved)
    }
    control_.EchoTo(r, &b);
    std::memcpy(slot, &b, sizeof b);
    t_->CommitSend(Dest::Peer(static_cast<PeerId>(r)), h);
  }
  t_->Flush();
  last_control_ = now;
}

void NetJob::CheckLiveness() {
  for (int r : members_.CheckLiveness(Clock::now(), opt_.dead_ms))
    if (phase_ != Phase::kStart && !(members_[r].flags & kNetDone))
      LOG_IF(INFO, opt_.log) << "Network: " << Name(r) << " silent for " << opt_.dead_ms / 1000.0
                             << " s: taken for dead; its chunks are re-shared and its data read by the others";
  // Once training, a machine heard and gone (not one that finished the job) leaves its data
  // partition to the others.
  dead_.store(phase_ == Phase::kTraining ? members_.DeadMask() : 0, std::memory_order_relaxed);
}

void NetJob::Reshare() {
  // A machine leaving keeps its shares until it has gone: its chunks' values are the job's
  // until its finals are held.
  if (leave_ != Leave::kNone) return;
  const std::vector<PeerId> ready = members_.ReadyRanks();
  if (ready.empty()) return;  // nobody has the weights (cannot happen once started)
  const std::vector<uint32_t> owned_before = shares_.owned();
  const NetShares::Change ch = shares_.Reshare(ready, members_.LiveRanks());
  if (!ch.masters) {
    if (opt_.multicast && !masters_.empty()) masters_[0]->set_receivers(ch.receivers);
    return;
  }
  // The masters made anew keep taking, for a while, the answers to the positions they posted:
  // a delta in flight at a re-share is applied to this copy, where a chunk still this
  // machine's has it, and one that moved goes out with this machine's next answer to its new
  // owner (once a slave of it, w - last carries it).
  // The chunks that leave this machine go with their values: each master sends their finals
  // (MsgKind::kFinal), which the new owner takes as its start and every other machine as a
  // position it need not answer; without them the deltas applied here since the new owner's
  // last position would be lost. (Its last_ set first: what came before is the job's.)
  std::vector<uint32_t> lost;
  if (ch.owners) {
    slave_->set_owners(shares_.owners(), static_cast<PeerId>(opt_.rank));
    std::set_difference(owned_before.begin(), owned_before.end(), shares_.owned().begin(), shares_.owned().end(),
                        std::back_inserter(lost));
  }
  const Clock::time_point until = Clock::now() + RetiredMasterGrace(opt_.dead_ms);
  for (auto& m : masters_) {
    if (!m) continue;
    if (!lost.empty()) m->PostFinals(lost, slave_->last());  // what set_owners made `last`, exactly
    retired_masters_.push_back({until, std::move(m)});
  }
  masters_.clear();
  if (ch.owners) {
    if (shares_.reshares() > 0 && opt_.log) {
      std::ostringstream os;
      os << "Network: chunks re-shared among machines";
      for (PeerId r : ready) os << " " << r;
      os << "; " << Name(opt_.rank) << " masters " << shares_.owned().size() << " of " << shares_.owners().size();
      LOG(INFO) << os.str();
    }
  }
  if (!shares_.owned().empty()) MakeMasters(ch.make, ch.receivers);
}

void NetJob::MakeMasters(const std::vector<NetShares::Master>& make, uint32_t receivers) {
  FlowOptions flow;
  flow.window = opt_.window;
  if (!opt_.multicast) masters_.resize(opt_.machines);
  for (const NetShares::Master& to : make) {
    auto m = std::make_unique<MasterEndpoint>(w_, *layout_, transport_.get(), to.to, Access::kPlain, flow);
    m->set_owned(shares_.owned());
    m->set_rule(opt_.rule);
    m->set_epoch(to.epoch);  // newer than any this machine used: slaves take it at once
    m->set_on_refused([this](PeerId from, uint32_t c, Refusal why) { Refused(from, c, why, "delta"); });
    if (opt_.multicast) {
      m->set_receivers(receivers);  // a window per receiver
      masters_.push_back(std::move(m));
    } else {
      masters_[to.to.id] = std::move(m);
    }
  }
  pacers_.assign(masters_.size(), SweepPacer(opt_.sweep_ms, opt_.sweeps_per_iter));
}

size_t SweepPacer::Allow(size_t chunks, double seconds, int64_t iterations) {
  const double sweep = static_cast<double>(chunks);
  by_time_ = sweep_ms_ ? std::min(sweep, by_time_ + sweep * seconds * 1000.0 / sweep_ms_) : sweep;
  if (!per_iteration_) return static_cast<size_t>(by_time_);
  const double sweeps = std::max(static_cast<double>(iterations) * per_iteration_, seconds * 1000.0 / kIdleMs);
  by_iterations_ = std::min(sweep * per_iteration_, by_iterations_ + sweep * sweeps);
  return static_cast<size_t>(std::min(by_time_, by_iterations_));
}

void SweepPacer::Spent(size_t posted) {
  by_time_ -= static_cast<double>(posted);
  by_iterations_ -= static_cast<double>(posted);
}

void NetJob::Post() {
  if (leave_ >= Leave::kQuiet) return;  // leaving: the finals alone go out now
  const Clock::time_point now = Clock::now();
  const double dt = Seconds(now - last_post_);
  last_post_ = now;
  const uint64_t clock = static_cast<uint64_t>(g_->shared().iter.load(std::memory_order_relaxed));
  const int64_t local = LocalIterations();
  const int64_t stepped = std::max<int64_t>(0, local - posted_at_iterations_);
  posted_at_iterations_ = local;
  for (auto& [until, m] : retired_masters_) m->set_clock(clock);  // (their answers' staleness)
  ExpireRetiredMasters(now);
  for (size_t i = 0; i < masters_.size(); ++i) {
    MasterEndpoint* m = masters_[i].get();
    if (!m) continue;
    const size_t allowed = pacers_[i].Allow(shares_.owned().size(), dt, stepped);
    m->set_clock(clock);
    if (allowed > 0) pacers_[i].Spent(m->PostPositions(allowed));
  }
}

void NetJob::Bridge() {
  const Clock::time_point now = Clock::now();
  CountOthers();
  if (!WatchQuorum(now)) return;
  ChooseLeader(now);
  PassRequests();
  Drain(now);
  LeaveOnNotice(now);
  if (g_->shared().job_done.load() && members_.leader() == opt_.rank) done_ = true;
}

void NetJob::CountOthers() {
  // The others' new iterations join this machine's count of the global iteration.
  const int64_t more = members_.TakeNewIterations();
  if (more > 0) g_->shared().iter.fetch_add(more, std::memory_order_relaxed);
}

bool NetJob::WatchQuorum(Clock::time_point now) {
  // Quorum: a machine cut off from most of the job neither leads nor tests nor snapshots (two
  // sides of a partition would each write the job's files) and its solvers wait; back with the
  // others, it re-takes their weights as a joiner does, so that the two sides' chunks are
  // never spliced.
  switch (members_.WatchQuorum(now)) {
    case QuorumChange::kLost: {
      g_->SetPaused(true);  // cut off, its solvers wait: their work would be dropped
      lost_quorum_ = true;
      const std::vector<bool> reached = members_.Reached(now);
      LOG_IF(WARNING, opt_.log) << "Network: " << Name(opt_.rank) << " reaches " << std::count(reached.begin(), reached.end(), true)
                                << " of " << opt_.machines << " machines, not a majority: it does not lead, test or "
                                << "snapshot, its solvers wait, and it re-takes the job's weights once the others are back";
      break;
    }
    case QuorumChange::kRegained:
      if (lost_quorum_ && phase_ == Phase::kTraining && !recovering_) {
        lost_quorum_ = false;
        BeginRecovery("is back with a majority of the job");  // its solvers wait until it has the weights
      } else {
        g_->SetPaused(false);
      }
      break;
    case QuorumChange::kNone:
      break;
  }
  if (phase_ != Phase::kStart && members_.CutOffFor(now, opt_.quorum_ms)) return GiveUp();
  return true;
}

bool NetJob::GiveUp() {
  std::ostringstream os;
  os << Name(opt_.rank) << " has reached no majority of the job's " << opt_.machines << " machines for "
     << opt_.quorum_ms / 1000.0 << " s: it gives up (the others go on without it)";
  LOG_IF(ERROR, opt_.log) << "Network: " << os.str();
  {
    std::lock_guard<std::mutex> lock(figures_mu_);
    fatal_ = os.str();
  }
  g_->EndJob();  // its solvers return; the caller reports error()
  quit_.store(true);
  return false;
}

void NetJob::ChooseLeader(Clock::time_point now) {
  const int before = members_.leader();
  const int leader = members_.ChooseLeader(now, opt_.dead_ms);
  if (leader == before) return;
  if (before >= 0 && leader >= 0 && opt_.log)
    LOG(INFO) << "Network: " << Name(leader) << " leads the job now (tests, display, snapshots)";
  lead_.store(leader);
  g_->SetLeads(leader == opt_.rank);
  News();
}

void NetJob::PassRequests() {
  // Requests and the end of the job, to and from the others. A signal on any machine is a
  // request (its stop flag) to the leader; the leader's own stop flag tells every machine to
  // stop training now, so that the job ends at one global iteration and the leader's drain
  // finds everyone's last deltas at once.
  if (g_->shared().stop_requested.load()) stop_ = true;
  for (int r = 0; r < opt_.machines; ++r)
    if (r != opt_.rank && members_[r].live) PassRequestsOf(r);
  const bool all_done = done_ && members_.AllLiveOthers(kNetDone);
  if (all_done_.exchange(all_done) != all_done) News();
}

void NetJob::PassRequestsOf(int r) {
  NetMember& p = members_[r];
  if (p.flags & kNetStop) {
    if (r == members_.leader()) stopped_.store(true);  // a stop request ends the job early
    g_->Request(SolverAction::STOP);
    if (r == members_.leader()) g_->Stop();
  }
  if (p.snapshots > p.snapshots_taken) {  // a snapshot request (SIGHUP) on that machine
    if (p.snapshots_taken >= 0) {
      g_->shared().snapshot_requests.fetch_add(p.snapshots - p.snapshots_taken);
      snapshots_passed_ += p.snapshots - p.snapshots_taken;  // not this machine's own: never echoed
    }
    p.snapshots_taken = p.snapshots;
  }
  if (p.flags & kNetDone) {  // the leader has finished the job: whatever still trains stops
    if (!done_ && ended_by_.load() < 0) {  // who ended it, and where (FinishRun says so if early)
      ended_at_.store(g_->shared().iter.load());
      ended_by_.store(r);
    }
    if (p.flags & kNetKeep) g_->SetFailedElsewhere();  // before job_done: Finish reads it then
    g_->EndJob();
    done_ = true;  // and says so back, so the leader knows it was heard
  }
}

std::vector<uint64_t> NetJob::Answers() const {
  std::vector<uint64_t> at(shares_.owners().size());
  for (uint32_t c = 0; c < at.size(); ++c) at[c] = slave_->answers(c);
  return at;
}

bool NetJob::AnsweredSince(const std::vector<uint64_t>& at, uint64_t more) const {
  for (uint32_t c = 0; c < shares_.owners().size(); ++c)
    if (shares_.Theirs(c) && slave_->answers(c) < at[c] + more) return false;
  return true;
}

void NetJob::Drain(Clock::time_point now) {
  // This machine's solvers done: its progress goes out (flushed once every chunk it does not
  // own has been answered since). The leader's final snapshot waits for the others' last
  // deltas: every live machine flushed, then each chunk it does not own answered twice more
  // (the owners' values with those deltas in), or drain_ms.
  bool local_done = local_ > 0;
  for (int r = 0; r < local_; ++r) local_done = local_done && g_->shared().finished[r].load();
  if (local_done && !finished_) {
    finished_ = true;
    finished_at_ = now;
    answers_at_finish_ = Answers();
  }
  if (finished_ && !flushed_)
    flushed_ = AnsweredSince(answers_at_finish_, 1) || now - finished_at_ > std::chrono::milliseconds(opt_.drain_ms);
  if (!finished_ || !g_->holding_final() || members_.leader() != opt_.rank) return;
  if (members_.AllLiveOthers(kNetFlushed) && flushed_ && !draining_) {
    draining_ = true;
    answers_at_drain_ = Answers();
  }
  const bool drained = draining_ && AnsweredSince(answers_at_drain_, 2);
  if (drained || now - finished_at_ > std::chrono::milliseconds(opt_.drain_ms)) {
    if (!drained) LOG_IF(INFO, opt_.log) << "Network: the others' last deltas not all in after "
                                         << opt_.drain_ms / 1000.0 << " s; snapshotting what is here";
    g_->ReleaseFinal();
  }
}

bool NetJob::Admit(PeerId r, const std::string& address) {
  // One at a time, the next rank, while training; not where every machine's part is fixed
  // (bsp and gsp's groups, --svb's factors), and not while an earlier one is still unproven.
  if (phase_ != Phase::kTraining || r != static_cast<PeerId>(opt_.machines) || !opt_.machine_group.empty() ||
      svb_ || leave_ != Leave::kNone)
    return false;
  for (int q = 0; q < opt_.machines; ++q)
    if (members_[q].admitted && !members_[q].heard && !members_[q].left) return false;
  Grow(opt_.machines + 1);
  NetMember& p = members_[static_cast<int>(r)];
  p.admitted = true;
  p.admitted_at = Clock::now();
  opt_.names.resize(static_cast<size_t>(r), "");
  opt_.names.push_back("udp://" + address);
  LOG_IF(INFO, opt_.log) << "Network: " << Name(static_cast<int>(r)) << " asks to join the running job as a new machine: "
                         << "admitted as machine " << r << " of " << opt_.machines << "; it receives the weights, then takes a share";
  return true;
}

void NetJob::Grow(int machines) {
  opt_.machines = machines;
  members_.Grow(machines);
  control_.Grow(machines);
  shares_.Grow(machines);
  named_.resize(static_cast<size_t>(machines) * 2, 0);
  if (!opt_.multicast && !masters_.empty()) {
    masters_.resize(static_cast<size_t>(machines));
    pacers_.resize(masters_.size(), SweepPacer(opt_.sweep_ms, opt_.sweeps_per_iter));
  }
  // Its data frames count once its run has proved itself (OnControl lowers the floor).
  slave_->set_min_epoch(static_cast<PeerId>(machines - 1), std::numeric_limits<uint32_t>::max());
  machines_now_.store(machines);
}

void NetJob::LeaveOnNotice(Clock::time_point now) {
  switch (leave_) {
    case Leave::kNone: {
      if (!g_->leave_asked() || phase_ != Phase::kTraining || recovering_) return;  // (asked again later)
      const char* cannot = finished_ || done_ ? "its solvers are done already (the job is ending)"
                           : members_.ReadyRanks().size() < 2 ? "no other machine has the weights to go on with"
                                                              : nullptr;
      if (cannot) {
        g_->ForgetLeave();
        LOG_IF(WARNING, opt_.log) << "Network: " << Name(opt_.rank) << " cannot leave the job on notice: " << cannot;
        return;
      }
      leave_ = Leave::kDraining;
      leave_at_ = now;
      leave_iter_ = g_->shared().iter.load();
      members_.set_leaving(true);
      ChooseLeader(now);  // the lead passes on before the solvers stop: none of them takes the final snapshot
      g_->SetLeaving();   // they stop after their iteration and return
      LOG_IF(INFO, opt_.log) << "Network: " << Name(opt_.rank) << " leaves the job on notice at iteration "
                             << leave_iter_ << ": its solvers stop, its progress goes out, then the last values of its "
                             << shares_.owned().size() << " chunks";
      return;
    }
    case Leave::kDraining:
      if (!flushed_) return;  // (Drain: every chunk it does not own answered since its solvers returned)
      leave_ = Leave::kQuiet;
      quiet_at_ = now;
      return;
    case Leave::kQuiet: {
      // No position goes out now: the answers to those out come in (a delta applied after the
      // finals would be lost: its sender took the final as its own values), or, lost, are given
      // up on after a while; without a window (nothing counted) a few heartbeats are waited.
      bool awaited = opt_.window == 0 && now - quiet_at_ < std::chrono::milliseconds(4 * opt_.heartbeat_ms);
      for (const auto& m : masters_) awaited = awaited || (m && m->in_flight() > 0);
      // (A quarter of dead_ms, at least 50 ms: a slow machine's answers, not only a fast one's.)
      const auto patience = std::chrono::milliseconds(std::max<uint32_t>(opt_.dead_ms / 4, 50));
      if (awaited && now - quiet_at_ < patience) return;
      leave_ = Leave::kHanding;
      finals_at_ = now - std::chrono::hours(1);
      [[fallthrough]];
    }
    case Leave::kHanding: {
      const bool held = EveryoneHolds();
      const bool late = now - quiet_at_ > std::chrono::milliseconds(opt_.dead_ms);
      if (held || late) {
        leave_ = Leave::kLeft;
        left_.store(true);
        News();
        LOG_IF(INFO, opt_.log) << "Network: " << Name(opt_.rank) << " has left the job "
                               << std::setprecision(3) << Seconds(now - leave_at_) << " s after the notice ("
                               << final_sweeps_ << " sweeps of finals; "
                               << (held ? "every machine holds them" : "not every machine said it holds them") << ")";
        return;
      }
      if (now - finals_at_ < std::chrono::milliseconds(opt_.heartbeat_ms)) return;
      bool all = true;
      for (const auto& m : masters_) all = (!m || m->PostFinals()) && all;
      if (all) {
        finals_at_ = now;
        ++final_sweeps_;
      }
      return;
    }
    case Leave::kLeft:
      return;
  }
}

bool NetJob::EveryoneHolds() const {
  for (int r = 0; r < opt_.machines && r < 64; ++r)
    if (r != opt_.rank && members_[r].live && !(members_[r].held >> opt_.rank & 1)) return false;
  return true;
}

uint64_t NetJob::Held() const {
  uint64_t held = 0;
  if (!slave_ || shares_.owners().empty()) return 0;
  for (int r = 0; r < opt_.machines && r < 64; ++r) {
    if (r == opt_.rank || !members_[r].live || !(members_[r].flags & kNetLeaving)) continue;
    const auto owned = std::count(shares_.owners().begin(), shares_.owners().end(), static_cast<PeerId>(r));
    if (slave_->finals_from(static_cast<PeerId>(r)) >= owned) held |= uint64_t{1} << r;
  }
  return held;
}

void NetJob::BeginRecovery(const char* why) {
  recover_target_ = recover_asked_.load();
  recovering_ = true;
  recover_began_ = owner_seen_ = Clock::now();
  members_.set_ready(false);  // the others stop taking this machine's positions and share its chunks out
  phase_ = Phase::kJoining;
  LOG_IF(WARNING, opt_.log) << "Network: " << Name(opt_.rank) << " " << why << " at iteration "
                            << g_->shared().iter.load() << "; it hands over its chunks and re-takes the job's weights";
  Reshare();            // owns nothing now
  slave_->RetakeAll();  // every chunk's next position taken whole
}

bool NetJob::Recover(std::string* why) {
  const uint64_t ticket = recover_asked_.fetch_add(1) + 1;
  // The daemon ends a recovery within dead_ms of finding no sound copy (recover_failed_); the
  // deadline is for a daemon that stopped answering at all.
  const auto limit = std::chrono::milliseconds(20 * uint64_t{opt_.dead_ms} + 60000);
  const bool ended = AwaitNews(
      [&] { return recover_done_.load() >= ticket || recover_failed_.load() || quit_.load() || !thread_.joinable(); },
      Clock::now() + limit);
  if (recover_done_.load() >= ticket) return true;
  if (why)
    *why = !ended ? "the network daemon did not end the re-take within " + std::to_string(limit.count() / 1000) + " s"
           : recover_failed_.load() ? recover_error_
                                    : "the network daemon has stopped";
  return false;
}

void NetJob::Refused(PeerId from, uint32_t chunk, Refusal why, const char* what) {
  if (from >= opt_.machines) return;
  uint8_t& named = named_[static_cast<size_t>(from) * 2 + (why == Refusal::kAbsurd)];
  if (named || !opt_.log) return;
  named = 1;
  LOG(WARNING) << "Network: refused a" << (why == Refusal::kAbsurd ? "n absurd " : " non-finite ") << what << " from "
               << Name(from) << " (chunk " << chunk << (why == Refusal::kAbsurd ? ", RMS over the bound" : "")
               << "); further refusals are counted in the Network line";
}

void NetJob::Clocks() {
  const int64_t mine = LocalIterations() / std::max(1, local_);  // per solver, as the others' clocks
  const int64_t slowest = members_.SlowestOther(opt_.machine_group, mine);
  const bool moved = slowest_other_.exchange(slowest, std::memory_order_relaxed) != slowest;
  const uint64_t rounds = fresh_rounds_.load(std::memory_order_relaxed);
  if (opt_.track_fresh && slave_ && !shares_.owners().empty()) FreshRound();
  if (moved || fresh_rounds_.load(std::memory_order_relaxed) != rounds) News();
}

void NetJob::News() {
  { std::lock_guard<std::mutex> lock(news_mu_); }  // a waiter between its check and its sleep hears it
  news_cv_.notify_all();
}

bool NetJob::AwaitNews(const std::function<bool()>& done, Clock::time_point deadline) const {
  std::unique_lock<std::mutex> lock(news_mu_);
  while (!done()) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    news_cv_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(50)));
  }
  return true;
}

void NetJob::FreshRound() {
  // A fresh round: every chunk this machine does not own answered since the last one ended
  // (each one, not merely the count of the least answered). The iterations run when a round
  // began have gone out when it ends.
  const int64_t mine = LocalIterations();
  const size_t chunks = shares_.owners().size();
  const bool first = mark_answers_.size() != chunks;
  bool round = !first;
  for (uint32_t c = 0; round && c < chunks; ++c) round = !shares_.Theirs(c) || slave_->answers(c) > mark_answers_[c];
  if (!round && !first) return;
  mark_answers_ = Answers();
  if (first) {
    mark_iter_ = mine;
    return;
  }
  flushed_iter_.store(mark_iter_, std::memory_order_relaxed);
  mark_iter_ = mine;
  fresh_rounds_.fetch_add(1, std::memory_order_relaxed);
  if (!opt_.machine_group.empty()) SendControl();  // the group waits for this: tell it now, not at the heartbeat
}

void NetJob::UseSvb(std::shared_ptr<SvbLink> link, std::vector<std::pair<size_t, size_t>> skip) {
  HS_REQUIRE(!thread_.joinable()) << "NetJob::UseSvb after Attach";
  svb_ = std::move(link);
  svb_skip_ = std::move(skip);
}

void NetJob::SendFactors() {
  svb_->Expire();
  std::vector<Dest> to;
  if (opt_.multicast) to.push_back(Dest::Group(0));
  for (int r = 0; r < opt_.machines && !opt_.multicast; ++r)
    if (r != opt_.rank && members_[r].live) to.push_back(Dest::Peer(static_cast<PeerId>(r)));
  svb_->Send(t_, to, incarnation_);
}

void NetJob::PeerFigures(NetJobStats* s, double lapse, bool rates) {
  const int64_t mine = LocalIterations();
  std::vector<PeerCounters> traffic(static_cast<size_t>(opt_.machines));
  for (const PeerCounters& c : t_->peer_counters())
    if (c.peer < opt_.machines) traffic[c.peer] = c;
  for (int r = 0; r < opt_.machines; ++r) {
    NetMember& p = members_[r];
    NetPeerFigures f;
    f.rank = r;
    f.name = opt_.names.size() > static_cast<size_t>(r) ? opt_.names[r] : "";
    f.self = r == opt_.rank;
    f.live = members_.Live(r);
    f.ready = members_.Ready(r);
    f.left = f.self ? leave_ == Leave::kLeft : p.left;
    f.leader = r == members_.leader();
    f.iterations = f.self ? mine : p.count;
    f.iter_per_s = figures_.peers.size() > static_cast<size_t>(r) ? figures_.peers[r].iter_per_s : 0;
    const PeerCounters& t = traffic[static_cast<size_t>(r)];
    const Losses l = Classify(t.dropped, t.rejected);  // as the job's totals are classed
    f.bytes_in = t.bytes_received;
    f.bytes_out = t.bytes_sent;
    f.frames_lost = l.lost;
    f.frames_foreign = l.foreign;
    f.frames_bad_mac = l.mac;
    f.frames_malformed = l.malformed;
    if (figures_.peers.size() > static_cast<size_t>(r)) {
      f.gbit_in = figures_.peers[r].gbit_in;
      f.gbit_out = figures_.peers[r].gbit_out;
    }
    if (rates) {
      f.iter_per_s = (f.iterations - p.rate_count) / lapse;
      p.rate_count = f.iterations;
      p.rate = std::max(p.rate, f.iter_per_s);  // the fastest it has shown (bounds its clock's jumps)
      f.gbit_in = (f.bytes_in - std::min(p.rate_in, f.bytes_in)) * 8e-9 / lapse;
      f.gbit_out = (f.bytes_out - std::min(p.rate_out, f.bytes_out)) * 8e-9 / lapse;
      p.rate_in = f.bytes_in;
      p.rate_out = f.bytes_out;
    }
    s->peers.push_back(f);
  }
  if (rates) Stragglers(s);
  for (NetPeerFigures& f : s->peers) f.straggler = lags_.size() > static_cast<size_t>(f.rank) && lags_[f.rank];
  s->median_iter_per_s = median_;  // of the last window
}

bool NetJob::Training(int r) const {
  if (r == opt_.rank) return phase_ == Phase::kTraining && !finished_;
  const NetMember& p = members_[r];
  return p.live && (p.flags & kNetTraining) && !(p.flags & (kNetFinished | kNetDone));
}

void NetJob::Stragglers(NetJobStats* s) {
  below_.resize(static_cast<size_t>(opt_.machines), 0);
  lags_.resize(static_cast<size_t>(opt_.machines), 0);
  // A machine that tested within the window (its rate fell for that) is left out of it: not
  // counted for the median, nor for or against its own lag.
  std::vector<uint8_t> tested(static_cast<size_t>(opt_.machines), 0);
  for (int r = 0; r < opt_.machines; ++r) {
    tested[r] = members_[r].tested;
    members_[r].tested = false;
  }
  std::vector<double> rates;
  for (const NetPeerFigures& f : s->peers)
    if (Training(f.rank) && !tested[f.rank]) rates.push_back(f.iter_per_s);
  median_ = 0;
  if (!rates.empty()) {
    std::sort(rates.begin(), rates.end());
    const size_t n = rates.size();
    median_ = n % 2 ? rates[n / 2] : (rates[n / 2 - 1] + rates[n / 2]) / 2;
  }
  const bool leader = leads() && opt_.log;
  for (const NetPeerFigures& f : s->peers) {
    const size_t r = static_cast<size_t>(f.rank);
    if (tested[r]) continue;
    // Two machines training at least: one alone has nobody to lag behind.
    const bool below = opt_.straggler > 0 && rates.size() >= 2 && median_ > 0 && Training(f.rank) &&
                       f.iter_per_s < opt_.straggler * median_;
    below_[r] = below ? below_[r] + 1 : 0;
    if (!lags_[r] && below_[r] >= kStragglerSeconds) {
      lags_[r] = 1;
      LOG_IF(WARNING, leader) << std::fixed << std::setprecision(1) << "Network: " << Name(f.rank) << " lags: "
                              << f.iter_per_s << " iter/s against the median " << median_ << " of the "
                              << rates.size() << " machines training (below " << opt_.straggler << " of it for "
                              << below_[r] << " s)";
    } else if (lags_[r] && !below) {
      lags_[r] = 0;
      // (Said only while others train: at the job's end the last machine training is alone.)
      LOG_IF(INFO, leader && rates.size() >= 2) << std::fixed << std::setprecision(1) << "Network: " << Name(f.rank)
                           << " no longer lags (" << f.iter_per_s << " iter/s, median " << median_ << ")";
    }
  }
}

MasterEndpoint* NetJob::MasterFor(const Message& m) {
  MasterEndpoint* now = masters_.empty() ? nullptr : opt_.multicast ? masters_[0].get() : masters_[m.h.source].get();
  if (now && now->epoch() == m.h.epoch) return now;
  for (auto& [until, r] : retired_masters_)
    if (r->epoch() == m.h.epoch) return r.get();
  return now;  // (it counts the delta as another incarnation's)
}

void NetJob::ExpireRetiredMasters(Clock::time_point now) {
  for (auto it = retired_masters_.begin(); it != retired_masters_.end();) {
    if (it->first > now) {
      ++it;
      continue;
    }
    Accumulate(retired_, it->second->stats());
    RetireSources(*it->second);
    it = retired_masters_.erase(it);
  }
}

void NetJob::RetireSources(const MasterEndpoint& m) {
  retired_sources_.resize(static_cast<size_t>(opt_.machines));
  for (const auto& [from, f] : m.source_stats())
    if (from < opt_.machines) retired_sources_[from].Add(f);
}

void NetJob::EndpointFigures(NetJobStats* s) const {
  MasterEndpoint::Stats all = retired_;
  // Per sender: its deltas to this machine's masters, the retired ones' included.
  std::vector<MasterEndpoint::SourceStats> from = retired_sources_;
  from.resize(static_cast<size_t>(opt_.machines));
  auto add = [&](const MasterEndpoint& m) {
    Accumulate(all, m.stats());
    for (const auto& [r, f] : m.source_stats())
      if (r < opt_.machines) from[r].Add(f);
  };
  for (const auto& m : masters_)
    if (m) add(*m);
  for (const auto& [until, m] : retired_masters_) add(*m);
  for (NetPeerFigures& p : s->peers) {
    const MasterEndpoint::SourceStats& f = from[static_cast<size_t>(p.rank)];
    p.deltas_applied = f.applied;
    p.refused = f.refused;
    p.staleness_sum = f.staleness_sum;
    std::copy(std::begin(f.staleness), std::end(f.staleness), std::begin(p.staleness));
  }
  s->sweeps = all.sweeps;
  s->positions_sent = all.positions_sent;
  s->deltas_applied = all.deltas_applied;
  s->unanswered = all.unanswered;
  s->staleness_max = all.staleness_max;
  s->staleness = all.deltas_applied ? static_cast<double>(all.staleness_sum) / all.deltas_applied : 0;
  const SlaveEndpoint::Stats slave = slave_ ? slave_->stats() : SlaveEndpoint::Stats{};
  s->positions_answered = slave.positions_applied;
  s->refused_value = all.refused_nonfinite + all.refused_absurd + slave.positions_refused;
  s->stale = all.deltas_duplicate + all.deltas_too_old + all.deltas_other_epoch + all.malformed + slave.positions_stale +
             slave.positions_foreign + slave.malformed;
  s->weight = all.deltas_applied ? all.weight_milli / 1000.0 / static_cast<double>(all.deltas_applied) : 0;
  s->owned = static_cast<uint32_t>(shares_.owned().size());
  s->chunks = static_cast<uint32_t>(shares_.owners().size());
  s->reshares = shares_.reshares();
}

void NetJob::Figures(bool report) {
  // Rates over a second at least (a machine's iterations come in heartbeats).
  const Clock::time_point now = Clock::now();
  const double lapse = std::max(1e-9, Seconds(now - last_figures_));
  const bool rates = lapse >= 1.0 || figures_chunks_ == 0;
  if (rates) last_figures_ = now;
  NetJobStats s;
  s.machine = opt_.rank;
  s.leader = members_.leader();
  s.global_iter = g_ ? g_->shared().iter.load() : 0;
  PeerFigures(&s, lapse, rates);
  EndpointFigures(&s);
  s.recoveries = recoveries_;
  if (svb_) s.svb_bytes_sent = svb_->figures().bytes_sent;
  {
    std::lock_guard<std::mutex> lock(policy_mu_);
    if (policy_figures_) {
      s.policy = policy_name_;
      s.policy_figures = policy_figures_();
    }
  }
  const TransportCounters tc = t_->counters();
  const Losses losses = LossesOf(tc, t_->malformed());
  s.lost = losses.lost;
  s.foreign = losses.foreign;
  s.refused_mac = losses.mac;
  s.malformed = losses.malformed;
  s.kernel_dropped = losses.kernel;
  std::copy(control_.refusals(), control_.refusals() + std::size(s.control_refusals), s.control_refusals);
  for (uint64_t n : s.control_refusals) s.control_refused += n;
  s.clock_unbacked = members_.unbacked();
  s.quorum = members_.quorum();
  s.messages_sent = tc.sent;
  s.bytes_sent = tc.bytes_sent;
  s.bytes_received = tc.bytes_received;
  figures_chunks_ = s.chunks;
  std::unique_lock<std::mutex> lock(figures_mu_);
  s.sweeps_per_s = figures_.sweeps_per_s;
  s.gbit_out = figures_.gbit_out;
  s.gbit_in = figures_.gbit_in;
  if (rates) {
    // Sweeps per destination: each master sweeps its chunks once for its machine (or group).
    size_t destinations = 0;
    for (const auto& m : masters_) destinations += m != nullptr;
    s.sweeps_per_s = (s.sweeps - last_sweeps_) / lapse / static_cast<double>(std::max<size_t>(1, destinations));
    s.gbit_out = (tc.bytes_sent - last_bytes_sent_) * 8e-9 / lapse;
    s.gbit_in = (tc.bytes_received - last_bytes_received_) * 8e-9 / lapse;
    last_sweeps_ = s.sweeps;
    last_bytes_sent_ = tc.bytes_sent;
    last_bytes_received_ = tc.bytes_received;
  }
  figures_ = s;
  lock.unlock();
  if (stats_ && rates && report) stats_->OnNetwork(s);
}

void NetJob::set_policy_figures(std::string name, std::function<PolicyFigures()> figures) {
  std::lock_guard<std::mutex> lock(policy_mu_);
  policy_name_ = std::move(name);
  policy_figures_ = std::move(figures);
}

void NetJob::set_stats(std::shared_ptr<StatsSink> sink) {
  HS_REQUIRE(!thread_.joinable()) << "NetJob::set_stats after Attach";
  stats_ = std::move(sink);
}

NetJobStats NetJob::stats() const {
  std::lock_guard<std::mutex> lock(figures_mu_);
  return figures_;
}

std::string NetJob::Line() const {
  const NetJobStats s = stats();
  std::ostringstream os;
  os << std::fixed << std::setprecision(0) << "Network: machine " << s.leader << " leads; iter/s:";
  for (const NetPeerFigures& p : s.peers) {
    os << " m" << p.rank << " ";
    if (p.left) os << "left";
    else if (!p.live) os << "dead";
    else if (!p.ready) os << "joining";
    else os << p.iter_per_s << (p.straggler ? " (lags)" : "");
  }
  os << std::setprecision(1) << "; " << s.sweeps_per_s << " sweeps/s, " << std::setprecision(3) << s.gbit_out
     << "/" << s.gbit_in << " Gbit/s out/in, " << s.lost << " frames lost ("
     << std::setprecision(2) << (s.messages_sent ? 100.0 * s.lost / s.messages_sent : 0.0) << "% of sent), " << s.unanswered
     << " positions unanswered in time, staleness " << std::setprecision(0) << s.staleness << " it (max "
     << s.staleness_max << "), weight " << std::setprecision(2) << s.weight << ", " << s.reshares << " re-shares; refused: "
     << RefusedText(s);
  if (!s.quorum) os << "; NO QUORUM";
  if (s.recoveries) os << ", " << s.recoveries << " recoveries";
  if (svb_) {
    const SvbFigures f = svb_->figures();
    os << std::setprecision(1) << "; SVB: " << f.bytes_sent / 1048576.0 << " MiB of factors out, " << f.sets_applied
       << " sets in, " << f.sets_dropped << " dropped incomplete, " << f.sets_unsent << " unsent";
  }
  return os.str();
}

}  // namespace hogstream
