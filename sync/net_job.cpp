// The network daemon of one machine (see net_job.hpp for the topology, control, liveness and
// the end of a job): the loop, the dispatch, and the glue between its rooms (net_job.hpp lists
// them), the transport and the machine's group. Everything below Run() happens on the daemon
// thread; other threads see only the atomics, the rooms' figures and words for them, and the
// group's fields.
#include "sync/net_job.hpp"

#include <glog/logging.h>

#include <algorithm>
#include <iomanip>
#include <limits>
#include <sstream>

#include "base/common.hpp"
#include "core/context.hpp"
#include "sync/svb.hpp"

namespace hogstream {

namespace {
using Clock = std::chrono::steady_clock;
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
// The first master epoch of a run: the second it started (newer than any earlier run's).
uint32_t WallSeconds() {
  return static_cast<uint32_t>(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}
bool Multicasts(const Transport* t) {
  HS_REQUIRE(t != nullptr) << "a networked job needs a transport";
  return t->caps().multicast;
}
}  // namespace

NetJob::NetJob(std::unique_ptr<Transport> transport, NetJobOptions opt)
    : transport_(std::move(transport)),
      wire_(transport_.get()),
      opt_(CheckNetJobOptions(std::move(opt), Multicasts(transport_.get()))),
      control_(opt_.rank, opt_.machines, FreshNonce()),
      members_(opt_.rank, opt_.machines),
      shares_(opt_.rank, opt_.machines, opt_.multicast, WallSeconds()),
      endpoints_(transport_.get(), {opt_.multicast, opt_.window, opt_.sweep_ms, opt_.sweeps_per_iter, opt_.dead_ms}),
      leave_(opt_.heartbeat_ms, opt_.dead_ms, opt_.window),
      end_(opt_.drain_ms),
      figures_(opt_.straggler),
      start_(opt_.start_ms, opt_.heartbeat_ms),
      bridge_(opt_.rank, opt_.dead_ms, opt_.quorum_ms) {
  machines_now_.store(opt_.machines);
  if (!opt_.job_machines) opt_.job_machines = opt_.machines;
  if (!opt_.rule.aggregate) opt_.rule.aggregate = DefaultAggregate();
  figures_.set_aggregation(opt_.rule.aggregate->Line());
  shares_.set_weights(opt_.share_weights);
}

NetJob::~NetJob() {
  quit_.store(true);
  if (thread_.joinable()) thread_.join();
}

std::string NetJob::Name(int r) const { return MachineName(r, opt_.names); }

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

std::string NetJob::error() const { return figures_.error(); }

void NetJob::Attach(MachineGroup* group, int local_solvers, float* weights, size_t n,
                    const std::vector<size_t>& params, const std::function<bool()>& stop) {
  HS_REQUIRE(!thread_.joinable() && !finished_called_) << "NetJob::Attach called twice";
  if (!opt_.agree[kAgreeNet]) opt_.agree[kAgreeNet] = BufferDigest(n, params);  // the buffer's layout, at least
  control_.set_agreement(opt_.agree);
  g_ = group;
  bridge_.set_group(group);
  local_ = local_solvers;
  const ChunkLayout layout = JobChunks(opt_, n, params, opt_.chunk_at_params || svb_, wire_.caps().max_payload);
  shares_.set_chunks(layout.count, svb_ ? SkippedChunks(layout, svb_skip_) : std::vector<bool>{});
  // Shared by every master endpoint; a synchronous group's machines share their staleness.
  opt_.rule.updates = std::make_shared<ChunkUpdates>(layout.count, opt_.machine_group);
  endpoints_.Open(weights, layout, opt_.rule,
                  [this](PeerId from, uint32_t c, Refusal why, const char* what) { Refused(from, c, why, what); });
  // Data frames are bound to the sender's run: positions count only once that run has proved
  // itself (OnControl lowers the floor to the first epoch it announced).
  for (int r = 0; r < opt_.machines; ++r)
    if (r != opt_.rank) endpoints_.slave().set_min_epoch(static_cast<PeerId>(r), std::numeric_limits<uint32_t>::max());
  g_->HoldFinal();
  // (The daemon gives up after quorum_ms cut off, and a re-take ends within start_ms; it
  // releases the hold within drain_ms of the end. Past those and twice dead_ms, it has failed.)
  g_->set_wait_limits(std::chrono::milliseconds(opt_.quorum_ms + uint64_t{opt_.start_ms} + 2 * uint64_t{opt_.dead_ms}),
                      std::chrono::milliseconds(opt_.drain_ms + 2 * uint64_t{opt_.dead_ms}));
  attached_at_ = Clock::now();
  g_->SetLeads(opt_.machines == 1);
  if (opt_.admit) transport_->set_admit([this](PeerId r, const std::string& address) { return Admit(r, address); });
  thread_ = std::thread([this] {
    NameThisThread("hs-net");
    Run();
    News();  // (whoever waits on it learns it has ended)
  });
  // The daemon ends its start within start_ms (start_.failed, then its thread); the deadline
  // here is for a daemon that stopped answering at all.
  const auto limit = std::chrono::milliseconds(2 * uint64_t{opt_.start_ms} + 60000);
  const bool told = AwaitNews([&] { return start_.ok() || start_.failed() || (stop && stop()); },
                              Clock::now() + limit);
  if (start_.ok()) return;
  if (!start_.failed()) quit_.store(true);  // (a failed start ends the daemon by itself)
  thread_.join();
  HS_REQUIRE(told) << "the network daemon did not start within " << limit.count() / 1000 << " s";
  HS_REQUIRE(!start_.failed()) << start_.error();
  HS_REQUIRE(false) << "stopped while waiting for the other machines";
}

void NetJob::Finish() {
  if (finished_called_) return;
  finished_called_ = true;
  if (!thread_.joinable()) return;
  // A machine leaving on notice first hands its chunks over (within the daemon's own
  // deadlines: the drain, then dead_ms for the others to say they hold its finals).
  if (g_ && g_->leaving()) {
    const Clock::time_point handed = Clock::now() + std::chrono::milliseconds(opt_.drain_ms + 2 * opt_.dead_ms);
    AwaitNews([&] { return leave_.left() || end_.all_done() || quit_.load(); }, handed);
  }
  // The others hear this machine's last state a few times; the leader's "done" until every
  // live machine has said it back (a lost "done" would make one of them take over and end
  // the job again), or dead_ms.
  const Clock::time_point until = Clock::now() + std::chrono::milliseconds(opt_.dead_ms);
  std::this_thread::sleep_for(std::chrono::milliseconds(5 * opt_.heartbeat_ms));
  AwaitNews([&] { return !leads() || end_.all_done(); }, until);
  quit_.store(true);
  thread_.join();
  if (!g_) return;
  Figures(/*report=*/false);  // the last figures (the daemon has stopped: this thread may)
  const NetJobStats s = stats();
  if (figures_.sink()) figures_.sink()->OnNetwork(s);
  if (!opt_.log) return;
  // What this machine did over the whole job, for the log (and tools that read it).
  LOG(INFO) << JobLine(Name(opt_.rank), LocalIterations(), Seconds(Clock::now() - attached_at_), wire_.counters(), s);
}

bool NetJob::leads() const { return bridge_.leader() == opt_.rank; }

int64_t NetJob::LocalIterations() const {
  int64_t n = 0;
  for (int r = 0; g_ && r < local_; ++r) n += g_->DoneBy(r);
  return n;
}

uint32_t NetJob::Flags() const {
  uint32_t f = 0;
  if (members_.ready()) f |= kNetReady;
  if (phase_ == Phase::kTraining) f |= kNetTraining;
  if (end_.finished()) f |= kNetFinished;
  if (end_.flushed()) f |= kNetFlushed;
  if (end_.done()) f |= kNetDone;
  if (end_.done() && g_ && g_->final_failed()) f |= kNetKeep;
  if (end_.stop()) f |= kNetStop;
  if (g_ && g_->Testing()) f |= kNetTesting;
  if (leave_.leaving()) f |= kNetLeaving;
  if (leave_.left()) f |= kNetLeft;
  return f;
}

// ---------------------------------------------------------------- the daemon

void NetJob::Run() {
  started_ = last_figures_ = Clock::now();
  bool reported_status = false;
  while (!quit_.load(std::memory_order_relaxed)) {
    const Clock::time_point now = Clock::now();
    const size_t received = Receive();
    if (control_.Due(now, opt_.heartbeat_ms)) SendControl();
    CheckLiveness();
    if (phase_ == Phase::kStart) {
      if (!Start(now)) return;
    } else {
      if (phase_ == Phase::kJoining && !Join(now)) return;
      if (phase_ == Phase::kTraining && recovery_.pending()) BeginRecovery("lost its copy of the weights (non-finite)");
      Reshare();
      Bridge();
      Post();
      if (svb_) SendFactors();
    }
    wire_.Flush();
    if (g_ && g_->Testing()) members_[opt_.rank].tested = true;
    if (now - last_figures_ >= std::chrono::milliseconds(100)) Figures();
    if (now - last_clocks_ >= std::chrono::milliseconds(2)) {
      last_clocks_ = now;
      Clocks();
    }
    const Status st = wire_.status();
    if (!st.ok() && !reported_status) {
      reported_status = true;
      LOG(ERROR) << "Network: " << st.what;
    }
    // Idle (nothing came in): sleep on the transport until something does, 1 ms at most, so
    // pacing, heartbeats and the group are looked at often enough.
    if (received == 0) wire_.Idle(std::chrono::milliseconds(1), std::chrono::microseconds(200));
  }
}

bool NetJob::Start(Clock::time_point now) {
  switch (start_.Decide(now, started_, members_, svb_ != nullptr)) {
    case NetStart::Go::kWait:
      return true;
    case NetStart::Go::kJoinRunning:
      JoinRunning(members_.MedianView());
      return true;
    case NetStart::Go::kTrain:
      StartTraining();
      return true;
    case NetStart::Go::kSilent:
      start_.Fail(NoWordLine(members_, opt_.names, opt_.start_ms, FrameLossesOf(wire_.counters(), wire_.malformed()),
                             control_.refused(ControlRefusal::kUnproven)));
      return false;
    case NetStart::Go::kFailed:
      return false;
  }
  return true;
}

void NetJob::JoinRunning(int64_t view) {
  phase_ = Phase::kJoining;
  joined_running_.store(true);
  g_->TakeGlobalIteration(view);
  members_.CountAllAsTaken();  // their past is in `view` already
  LOG_IF(INFO, opt_.log) << "Network: " << Name(opt_.rank) << " joins a running job at iteration "
                         << view << "; receiving the weights";
  Reshare();
}

void NetJob::StartTraining() {
  phase_ = Phase::kTraining;
  Reshare();
  LOG_IF(INFO, opt_.log) << "Network: " << TrainingLine(opt_.machines, Name(opt_.rank), shares_.owned().size(),
                                                         endpoints_.layout().count, endpoints_.layout().chunk_floats,
                                                         opt_.chunk_at_params);
  start_.Ok();
  News();
}

bool NetJob::Join(Clock::time_point now) {
  switch (start_.Join(now, started_, endpoints_.slave(), members_.AnyLiveOther(kNetReady), recovery_, opt_.dead_ms)) {
    case NetStart::Joining::kWait: return true;
    case NetStart::Joining::kJoined: Joined(now); return true;
    case NetStart::Joining::kFailed: News(); return false;
  }
  return true;
}

void NetJob::Joined(Clock::time_point now) {
  members_.set_ready(true);
  phase_ = Phase::kTraining;
  if (recovery_.under_way()) {
    const double took = recovery_.Done(now);
    g_->SetPaused(false);
    LOG_IF(INFO, opt_.log) << "Network: " << Name(opt_.rank) << " re-took the job's weights in "
                           << std::setprecision(3) << took << " s; training on";
  } else {
    LOG_IF(INFO, opt_.log) << "Network: " << Name(opt_.rank) << " has the weights after "
                           << std::setprecision(3) << Seconds(now - started_) << " s; taking a share";
    start_.Ok();
  }
  News();
}

size_t NetJob::Receive() {
  size_t handled = 0;
  for (const Message* m; (m = inbox_.Next(wire_)) != nullptr; ++handled) {
    const PeerId src = m->h.source;
    // Not one of the job's machines (the transport knows only them: defensive) is skipped.
    if (src < opt_.machines && src != opt_.rank && !Dispatch(*m)) return handled;  // this one waits
    inbox_.Handled();
  }
  return handled;
}

bool NetJob::Dispatch(const Message& m) {
  switch (m.h.kind) {
    case MsgKind::kPosition:
      return TakeData(m, endpoints_.slave(), nullptr, wire_);  // false: no slot for its delta yet
    case MsgKind::kDelta:
      return TakeData(m, endpoints_.slave(), endpoints_.MasterFor(m), wire_);
    case MsgKind::kIteration:
      OnControl(m);
      break;
    case MsgKind::kFactors:
      if (svb_) svb_->OnMessage(m);
      break;
    case MsgKind::kFinal:
      endpoints_.slave().TakeFinal(m);
      break;
    default:
      break;
  }
  return true;
}

void NetJob::OnControl(const Message& m) {
  const PeerId src = m.h.source;
  const Clock::time_point now = Clock::now();
  const ControlNews news = control_.Decode(m, src == members_.leader() || end_.done());
  if (news.answer_now) control_.AnswerSoon();
  if (news.disagree >= 0 && news.first_disagree) Disagreed(src, news.disagree, now);
  if (!news.taken) return;
  if (news.new_run) {
    TakeNewRun(src, news);
    // Its positions count from here, and only those of this run (epochs above the one it
    // announces): a position recorded in an earlier run is stale even for a chunk that has
    // not yet heard this run's master.
    endpoints_.slave().set_min_epoch(src, news.told.first_epoch);
  }
  const NetMember& p = members_[src];
  if (!p.live && p.heard && !p.left && !(news.told.flags & kNetLeft) && phase_ == Phase::kTraining)
    LOG_IF(INFO, opt_.log) << "Network: " << Name(src) << " is back";
  const uint32_t flags_before = p.flags;
  const bool left_before = p.left;
  // (Its clock only grows, by no more than it could have run since: NetMembers::Hear.)
  members_.Hear(src, now, news.told, joined_running_.load(std::memory_order_relaxed));
  HeardOf(src, flags_before, left_before);
}

void NetJob::HeardOf(int r, uint32_t flags_before, bool left_before) {
  const NetMember& p = members_[r];
  if (!opt_.log || phase_ != Phase::kTraining) return;
  const bool began = (p.flags & kNetLeaving) && !(flags_before & kNetLeaving);
  if (began) LOG(INFO) << "Network: " << OtherLeaveLine(Name(r), true, p.view, p.count);
  if (p.left && !left_before) LOG(INFO) << "Network: " << OtherLeaveLine(Name(r), false, p.view, p.count);
}

void NetJob::TakeNewRun(PeerId src, const ControlNews& news) {
  if (news.restarted) {  // its numbering starts again, and its iterations count from zero
    LOG_IF(INFO, opt_.log) << "Network: " << Name(src) << " restarted; it rejoins";
    endpoints_.slave().ForgetOwner(src);
    // The last run's claim, settled and counted before its count starts again.
    if (members_.Settle(src) > 0 && g_) bridge_.CountOthers(members_);
  }
  members_.NewRun(src, news.restarted, attached_at_);
}

void NetJob::Disagreed(PeerId src, int agree, Clock::time_point now) {
  const std::string line = DisagreementLine(Name(src), Name(opt_.rank), static_cast<Agree>(agree));
  // At the start, it ends it after a few more control messages (so that the other machine
  // hears this one, proven, and names the difference too).
  if (phase_ == Phase::kStart) return start_.Disagreed(now, line);
  LOG_IF(ERROR, opt_.log) << "Network: " << line << "; its messages are refused";
}

ControlState NetJob::Told() const {
  ControlState s;
  s.flags = Flags();
  s.first_epoch = shares_.first_epoch();  // every master epoch of this run is above it
  s.clock = LocalIterations();
  s.view = g_ ? g_->Reached() : 0;
  // How many of its iterations have gone out (what a synchronous round waits for).
  s.flushed = opt_.track_fresh ? rounds_.flushed_iter() : 0;
  s.snapshots = g_ ? g_->SnapshotRequests() - bridge_.snapshots_passed() : 0;
  s.solvers = std::max(1, local_);
  s.held = endpoints_.open() && !shares_.owners().empty() ? HeldFinals(members_, shares_.owners(), endpoints_.slave()) : 0;
  return s;
}

void NetJob::SendControl() { control_.Send(wire_, Told(), Clock::now()); }

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
  if (leave_.leaving()) return;
  const std::vector<PeerId> ready = members_.ReadyRanks();
  if (ready.empty()) return;  // nobody has the weights (cannot happen once started)
  const std::vector<uint32_t> owned_before = shares_.owned();
  const NetShares::Change ch = shares_.Reshare(ready, members_.LiveRanks());
  endpoints_.Reshare(shares_, ch, owned_before, static_cast<PeerId>(opt_.rank), opt_.machines, Clock::now());
  LOG_IF(INFO, ch.masters && ch.owners && shares_.reshares() > 0 && opt_.log)
      << "Network: " << ReshareLine(ready, Name(opt_.rank), shares_.owned().size(), shares_.owners().size());
}

void NetJob::Post() {
  if (leave_.quiet()) return;  // leaving: the finals alone go out now
  const uint64_t clock = static_cast<uint64_t>(g_->Reached());
  endpoints_.Post(shares_.owned().size(), clock, LocalIterations(), Clock::now());
}

void NetJob::Bridge() {
  const Clock::time_point now = Clock::now();
  bridge_.CountOthers(members_);
  if (!WatchQuorum(now)) return;
  ChooseLeader(now);
  if (bridge_.PassRequests(members_, end_)) News();
  Drain(now);
  LeaveOnNotice(now);
  if (g_->JobDone() && members_.leader() == opt_.rank) end_.set_done();
}

bool NetJob::WatchQuorum(Clock::time_point now) {
  switch (bridge_.WatchQuorum(now, members_, phase_ != Phase::kStart, phase_ == Phase::kTraining,
                              recovery_.under_way())) {
    case NetBridge::Quorum::kLost: {
      const std::vector<bool> reached = members_.Reached(now);
      LOG_IF(WARNING, opt_.log) << "Network: " << QuorumLostLine(Name(opt_.rank), static_cast<int>(std::count(
                                                                     reached.begin(), reached.end(), true)),
                                                                 opt_.machines);
      return true;
    }
    case NetBridge::Quorum::kRetake:
      BeginRecovery("is back with a majority of the job");
      return true;
    case NetBridge::Quorum::kGaveUp:
      return GiveUp();
    case NetBridge::Quorum::kHeld:
      return true;
  }
  return true;
}

bool NetJob::GiveUp() {
  const std::string line = GaveUpLine(Name(opt_.rank), opt_.machines, opt_.quorum_ms);
  LOG_IF(ERROR, opt_.log) << "Network: " << line;
  figures_.set_error(line);
  g_->EndJob();  // its solvers return; the caller reports error()
  quit_.store(true);
  return false;
}

void NetJob::ChooseLeader(Clock::time_point now) {
  const int before = bridge_.ChooseLeader(now, members_);
  if (before == -2) return;
  if (before >= 0 && bridge_.leader() >= 0 && opt_.log)
    LOG(INFO) << "Network: " << Name(bridge_.leader()) << " leads the job now (tests, display, snapshots)";
  News();
}

void NetJob::Drain(Clock::time_point now) {
  bool local_done = local_ > 0;
  for (int r = 0; r < local_; ++r) local_done = local_done && g_->FinishedRank(r);
  end_.Step(now, local_done, endpoints_, shares_);
  if (!end_.finished() || !g_->holding_final() || members_.leader() != opt_.rank) return;
  bool late = false;
  if (!end_.Drained(now, members_.AllLiveOthers(kNetFlushed), endpoints_, shares_, &late)) return;
  LOG_IF(INFO, opt_.log && late) << "Network: the others' last deltas not all in after " << opt_.drain_ms / 1000.0
                                 << " s; snapshotting what is here";
  g_->ReleaseFinal();
}

bool NetJob::Admit(PeerId r, const std::string& address) {
  // One at a time, the next rank, while training; not where every machine's part is fixed
  // (bsp and gsp's groups, --svb's factors), and not while an earlier one is still unproven.
  if (phase_ != Phase::kTraining || r != static_cast<PeerId>(opt_.machines) || !opt_.machine_group.empty() ||
      svb_ || leave_.leaving() || members_.AnyAdmittedUnheard())
    return false;
  Grow(opt_.machines + 1);
  members_.Admitted(static_cast<int>(r), Clock::now());
  opt_.names.resize(static_cast<size_t>(r), "");
  opt_.names.push_back(address);
  LOG_IF(INFO, opt_.log) << "Network: " << Name(static_cast<int>(r)) << " asks to join the running job as a new machine: "
                         << "admitted as machine " << r << " of " << opt_.machines << "; it receives the weights, then takes a share";
  return true;
}

void NetJob::Grow(int machines) {
  opt_.machines = machines;
  members_.Grow(machines);
  control_.Grow(machines);
  shares_.Grow(machines);
  endpoints_.Grow(machines);
  machines_now_.store(machines);
}

void NetJob::LeaveOnNotice(Clock::time_point now) {
  if (!leave_.leaving()) {
    if (!g_->leave_asked() || phase_ != Phase::kTraining || recovery_.under_way()) return;  // (asked again later)
    if (const char* cannot = NetLeave::Refusal(end_.finished() || end_.done(), members_.ReadyRanks().size())) {
      g_->ForgetLeave();
      LOG_IF(WARNING, opt_.log) << "Network: " << Name(opt_.rank) << " cannot leave the job on notice: " << cannot;
      return;
    }
    leave_.Begin(now, g_->Reached());
    members_.set_leaving(true);
    ChooseLeader(now);  // the lead passes on before the solvers stop: none of them takes the final snapshot
    g_->SetLeaving();   // they stop after their iteration and return
    LOG_IF(INFO, opt_.log) << "Network: " << leave_.NoticeLine(Name(opt_.rank), shares_.owned().size());
    return;
  }
  // (flushed: every chunk it does not own answered since its solvers returned; Drain.)
  switch (leave_.Next(now, {end_.flushed(), endpoints_.InFlight(), EveryoneHolds(members_)})) {
    case NetLeave::Do::kWait:
      return;
    case NetLeave::Do::kPostFinals:
      if (endpoints_.PostFinals()) leave_.FinalsOut(now);
      return;
    case NetLeave::Do::kLeft:
      News();
      LOG_IF(INFO, opt_.log) << "Network: " << leave_.LeftLine(Name(opt_.rank), now);
      return;
  }
}

void NetJob::BeginRecovery(const char* why) {
  recovery_.Begin(Clock::now());
  members_.set_ready(false);  // the others stop taking this machine's positions and share its chunks out
  phase_ = Phase::kJoining;
  LOG_IF(WARNING, opt_.log) << "Network: " << Name(opt_.rank) << " " << why << " at iteration "
                            << g_->Reached() << "; it hands over its chunks and re-takes the job's weights";
  Reshare();                        // owns nothing now
  endpoints_.slave().RetakeAll();   // every chunk's next position taken whole
}

bool NetJob::Recover(std::string* why) {
  const uint64_t ticket = recovery_.Ask();
  // The daemon ends a recovery within dead_ms of finding no sound copy (a failure); the
  // deadline is for a daemon that stopped answering at all.
  const auto limit = std::chrono::milliseconds(20 * uint64_t{opt_.dead_ms} + 60000);
  const bool ended = AwaitNews(
      [&] { return recovery_.answered(ticket) || recovery_.failed() || quit_.load() || !thread_.joinable(); },
      Clock::now() + limit);
  if (recovery_.answered(ticket)) return true;
  if (why)
    *why = !ended ? "the network daemon did not end the re-take within " + std::to_string(limit.count() / 1000) + " s"
           : recovery_.failed() ? recovery_.error()
                                : "the network daemon has stopped";
  return false;
}

void NetJob::Refused(PeerId from, uint32_t chunk, Refusal why, const char* what) {
  if (from >= opt_.machines || !opt_.log || !figures_.FirstRefusal(from, why == Refusal::kAbsurd)) return;
  LOG(WARNING) << "Network: " << RefusalLine(Name(from), why == Refusal::kAbsurd, what, chunk);
}

void NetJob::Clocks() {
  const int64_t mine = LocalIterations() / std::max(1, local_);  // per solver, as the others' clocks
  const int64_t slowest = members_.SlowestOther(opt_.machine_group, mine);
  bool moved = slowest_other_.exchange(slowest, std::memory_order_relaxed) != slowest;
  if (opt_.track_fresh && endpoints_.open() && !shares_.owners().empty() &&
      rounds_.Step(endpoints_, shares_, LocalIterations())) {
    moved = true;
    if (!opt_.machine_group.empty()) SendControl();  // the group waits for this: tell it now, not at the heartbeat
  }
  if (moved) News();
}

void NetJob::News() { news_.Tell(); }

bool NetJob::AwaitNews(const std::function<bool()>& done, Clock::time_point deadline) const {
  return news_.Await(done, deadline);
}

void NetJob::UseSvb(std::shared_ptr<SvbLink> link, std::vector<std::pair<size_t, size_t>> skip) {
  HS_REQUIRE(!thread_.joinable()) << "NetJob::UseSvb after Attach";
  svb_ = std::move(link);
  svb_skip_ = std::move(skip);
}

void NetJob::SendFactors() {
  svb_->Expire();
  const uint64_t nonce = control_.nonce();  // this run's, as its factor sets' incarnation
  svb_->Send(&wire_, members_.LiveDests(opt_.multicast), static_cast<uint32_t>(nonce ^ (nonce >> 32)) | 1);
}

void NetJob::Figures(bool report) {
  figures_.Take({.rank = opt_.rank, .machines = opt_.machines, .leader = members_.leader(), .leads = leads(),
                 .log = opt_.log, .names = &opt_.names, .global_iter = g_ ? g_->Reached() : 0, .mine = LocalIterations(),
                 .self_left = leave_.left(), .self_training = phase_ == Phase::kTraining && !end_.finished(),
                 .transport = transport_.get(), .not_sync = wire_.malformed(), .endpoints = &endpoints_,
                 .shares = &shares_, .control = &control_, .recoveries = recovery_.count(),
                 .svb_bytes_sent = svb_ ? svb_->figures().bytes_sent : 0},
                members_, report);
}

void NetJob::set_policy_figures(std::string name, std::function<PolicyFigures()> figures) {
  figures_.set_policy(std::move(name), std::move(figures));
}

void NetJob::set_stats(std::shared_ptr<NetworkSink> sink) {
  HS_REQUIRE(!thread_.joinable()) << "NetJob::set_stats after Attach";
  figures_.set_sink(std::move(sink));
}

NetJobStats NetJob::stats() const { return figures_.last(); }

std::string NetJob::Line() const {
  return NetLine(stats()) + (svb_ ? "; " + svb_->Line() : "");
}

}  // namespace hogstream
