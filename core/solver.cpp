#include "core/solver.hpp"

#include <glog/logging.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <cmath>
#include <sys/stat.h>
#include <unistd.h>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <thread>

#include "core/context.hpp"
#include "core/gpu_engine.hpp"
#include "core/io.hpp"
#include "core/math.hpp"

namespace hogstream {

#define SLOG LOG_IF(INFO, options_.log)

Solver::Solver(const pb::SolverParameter& param, const SolverOptions& options,
               int history_per_param)
    : param_(param), options_(options) {
  group_ = options_.group ? options_.group : &lone_;
  if (param_.solver_mode() == pb::SolverParameter::GPU) {
#ifndef HOGSTREAM_CUDA
    HS_FAIL() << "solver_mode: GPU but this hogstream was built without CUDA; pass --cpu (or set "
                 "solver_mode: CPU in the solver file)";
#else
    HS_REQUIRE(GpuAvailable()) << "solver_mode: GPU but no CUDA device is visible; pass --cpu (or set "
                                  "solver_mode: CPU in the solver file)";
#endif
  }
  HS_REQUIRE(param_.iter_size() >= 1) << "iter_size must be >= 1";
  HS_REQUIRE(param_.average_loss() >= 1) << "average_loss must be >= 1";
  HS_REQUIRE(param_.has_base_lr()) << "the solver needs base_lr";
  HS_REQUIRE(options_.norm_guard == 0 || options_.norm_guard > 1) << "a norm guard's factor must exceed 1";
  if (options_.norm_guard > 0) guard_ = std::make_unique<NormGuard>(options_.norm_guard);
  HS_REQUIRE(param_.regularization_type() == "L2" || param_.regularization_type() == "L1")
      << "regularization_type must be L2 or L1, got '" << param_.regularization_type() << "'";
  if (options_.reseed && param_.random_seed() >= 0)
    Context::Get().set_seed(static_cast<uint64_t>(param_.random_seed()));
  InitNets();
  const auto& params = net_->learnable_params();
  const int P = static_cast<int>(params.size());
  size_t largest = 0;
  for (int k = 0; k < history_per_param; ++k)
    for (int i = 0; i < P; ++i) history_.push_back(std::make_shared<Blob>(params[i]->shape()));
  for (Blob* b : params) largest = std::max<size_t>(largest, b->count());
  scratch_.resize(largest);
  (void)GetLearningRate();  // an unknown lr_policy fails here, not at iteration 1
}

Solver::~Solver() = default;

void Solver::InitNets() {
  // Where the train net comes from: exactly one of net_param, net, train_net_param, train_net.
  const int sources = param_.has_net_param() + param_.has_net() + param_.has_train_net_param() +
                      param_.has_train_net();
  HS_REQUIRE(sources == 1) << "the solver must name exactly one train net (net, net_param, "
                              "train_net or train_net_param); it names "
                           << sources;
  auto load = [&](const pb::NetParameter* inline_param, const std::string& file, pb::Phase phase,
                  const pb::NetState* state) {
    NetOptions o;
    o.phase = phase;
    o.input_shapes = options_.input_shapes;
    if (state) {
      o.level = state->level();
      o.stages.assign(state->stage().begin(), state->stage().end());
    }
    const pb::NetParameter p = inline_param ? *inline_param : ReadNetText(file, &o.source);
    return std::make_unique<Net>(p, o);
  };
  const pb::NetState* train_state = param_.has_train_state() ? &param_.train_state() : nullptr;
  if (param_.has_net_param()) net_ = load(&param_.net_param(), "", pb::TRAIN, train_state);
  if (param_.has_net()) net_ = load(nullptr, param_.net(), pb::TRAIN, train_state);
  if (param_.has_train_net_param()) net_ = load(&param_.train_net_param(), "", pb::TRAIN, train_state);
  if (param_.has_train_net()) net_ = load(nullptr, param_.train_net(), pb::TRAIN, train_state);

  // Test nets: explicit ones first, then the generic net once per remaining test_iter.
  const bool generic = param_.has_net() || param_.has_net_param();
  const int explicit_nets = param_.test_net_param_size() + param_.test_net_size();
  const int total = generic ? param_.test_iter_size() : explicit_nets;
  HS_REQUIRE(param_.test_iter_size() == total && total >= explicit_nets)
      << "test_iter must be given once per test net (" << total << " test net(s), "
      << param_.test_iter_size() << " test_iter value(s))";
  HS_REQUIRE(param_.test_state_size() == 0 || param_.test_state_size() == total)
      << "test_state must be given for every test net or for none";
  if (total > 0) HS_REQUIRE(param_.test_interval() > 0) << "test_iter is set but test_interval is not";
  for (int i = 0; i < total; ++i) {
    const pb::NetState* st = param_.test_state_size() ? &param_.test_state(i) : nullptr;
    if (i < param_.test_net_param_size()) {
      test_nets_.push_back(load(&param_.test_net_param(i), "", pb::TEST, st));
    } else if (i < explicit_nets) {
      test_nets_.push_back(load(nullptr, param_.test_net(i - param_.test_net_param_size()), pb::TEST, st));
    } else if (param_.has_net_param()) {
      test_nets_.push_back(load(&param_.net_param(), "", pb::TEST, st));
    } else {
      test_nets_.push_back(load(nullptr, param_.net(), pb::TEST, st));
    }
    test_nets_.back()->ShareWeightsFrom(*net_);
  }
}

float Solver::GetLearningRate() const {
  const double rate = PolicyRate();
  return static_cast<float>(options_.lr_factor ? rate * options_.lr_factor(iter_) : rate);
}

double Solver::PolicyRate() const {
  const std::string& policy = param_.lr_policy();
  const double base = param_.base_lr(), gamma = param_.gamma(), power = param_.power();
  const double it = iter_;
  if (policy == "fixed") return base;
  if (policy == "step") {
    HS_REQUIRE(param_.stepsize() > 0) << "lr_policy step needs stepsize > 0";
    return base * std::pow(gamma, std::floor(it / param_.stepsize()));
  }
  if (policy == "exp") return base * std::pow(gamma, it);
  if (policy == "inv") return base * std::pow(1 + gamma * it, -power);
  if (policy == "multistep") return base * std::pow(gamma, current_step_);
  if (policy == "poly") {
    HS_REQUIRE(param_.max_iter() > 0) << "lr_policy poly needs max_iter > 0";
    // Past max_iter (a Step beyond it) the base would go negative and the power NaN.
    return base * std::pow(std::max(0.0, 1.0 - it / param_.max_iter()), power);
  }
  if (policy == "sigmoid")
    return base / (1 + std::exp(-gamma * (it - param_.stepsize())));
  HS_FAIL() << "unknown lr_policy '" << policy
            << "' (fixed, step, exp, inv, multistep, poly, sigmoid)";
}

void Solver::Regularize(int id) {
  Blob* p = net_->learnable_params()[id];
  const float decay = param_.weight_decay() * net_->params_weight_decay()[id];
  if (decay == 0.f) return;
  const int n = p->count();
  const float* w = p->cpu_data();
  float* g = p->mutable_cpu_diff();
  if (param_.regularization_type() == "L2") {
    axpy(n, decay, w, g);
  } else {
    for (int i = 0; i < n; ++i) g[i] += decay * static_cast<float>((w[i] > 0) - (w[i] < 0));
  }
}

void Solver::ClipGradients() {
  const float clip = param_.clip_gradients();
  if (clip < 0) return;
  const double norm = GradientNorm();
  if (norm > clip) {
    const float s = static_cast<float>(clip / norm);
    SLOG << "Gradient clipping: scaling down gradients (L2 norm " << norm << " > " << clip
         << ") by scale factor " << s;
    ScaleGradient(s);
  }
}

double Solver::GradientNorm() {
  double sumsq = 0;
  for (Blob* p : net_->learnable_params())
    sumsq += device_norms_ ? GpuKernelTable().sumsq(p->count(), p->gpu_diff()) : p->sumsq_diff();
  return std::sqrt(sumsq);
}

void Solver::ScaleGradient(float s) {
  for (Blob* p : net_->learnable_params()) {
    if (device_norms_) GpuKernelTable().scale(p->count(), s, p->mutable_gpu_diff());
    else p->scale_diff(s);
  }
}

void Solver::RunDeviceUpdate(int id, const DeviceUpdate& rule) {
  Blob* p = net_->learnable_params()[id];
  DeviceUpdate u = rule;
  u.scale = 1.f / param_.iter_size();
  u.decay = param_.weight_decay() * net_->params_weight_decay()[id];
  u.l1 = param_.regularization_type() != "L2";  // as Regularize
  const size_t P = net_->learnable_params().size();
  float* h2 = history_.size() >= 2 * P ? history_[P + id]->mutable_gpu_data() : nullptr;
  GpuKernelTable().update(p->count(), u, p->mutable_gpu_data(), p->mutable_gpu_diff(),
                          history_[id]->mutable_gpu_data(), h2);
}

double NormGuard::Scale(double norm) {
  if (!std::isfinite(norm)) return 1;
  ++steps_;
  if (let_go_) return 1;
  ++seen_;
  if (seen_ <= static_cast<uint64_t>(warmup_)) {  // the plain mean of the first ones
    mean_ += (norm - mean_) / static_cast<double>(seen_);
    return 1;
  }
  const double bound = factor_ * mean_;
  double scale = 1;
  if (norm > bound && norm > 0) {
    if (++in_a_row_ >= give_up_) {  // a runaway, not a spike: the divergence handling's
      let_go_ = true;
      ++let_gos_;
      return 1;
    }
    scale = bound / norm;
    ++clipped_;
  } else {
    in_a_row_ = 0;
  }
  mean_ = decay_ * mean_ + (1 - decay_) * std::min(norm, bound);
  return scale;
}

void NormGuard::Reset() {
  mean_ = 0;
  seen_ = 0;
  in_a_row_ = 0;
  let_go_ = false;
}

void Solver::GuardNorm() {
  if (!guard_) return;
  const uint64_t let_gos = guard_->let_gos();
  const double s = guard_->Scale(GradientNorm());
  if (s < 1) ScaleGradient(static_cast<float>(s));
  if (let_gos == 0 && guard_->let_gos() == 1)  // the first time; the rest are counted
    SLOG << "The norm guard let go at iteration " << iter_ << ": the gradient stayed beyond its bound "
         << guard_->give_up() << " steps in a row (a runaway the guard cannot hold; the divergence "
         << "handling takes it)";
}

void Solver::ApplyUpdate() {
  if (param_.lr_policy() == "multistep") {
    while (current_step_ < param_.stepvalue_size() && iter_ >= param_.stepvalue(current_step_)) {
      ++current_step_;
      SLOG << "MultiStep Status: Iteration " << iter_ << ", step = " << current_step_;
    }
  }
  const float rate = GetLearningRate();
  if (leader() && param_.display() && iter_ % param_.display() == 0)
    SLOG << "Iteration " << iter_ << ", lr = " << rate;
  const auto& params = net_->learnable_params();
  if (Context::Get().mode() == Mode::GPU && options_.device_update && HasDeviceUpdate()) {
    // On the device, clipping and the guard first, then one pass per blob; frozen blobs
    // (lr_mult 0) are left alone.
    device_norms_ = true;
    try {
      ClipGradients();
      GuardNorm();
    } catch (...) {
      device_norms_ = false;
      throw;
    }
    device_norms_ = false;
    for (int id = 0; id < static_cast<int>(params.size()); ++id)
      if (net_->params_lr()[id] != 0.f) UpdateOnDevice(id, rate);
    return;
  }
  ClipGradients();
  GuardNorm();
  for (int id = 0; id < static_cast<int>(params.size()); ++id) {
    if (net_->params_lr()[id] == 0.f) {
      // Frozen: no decay, no history, no step.
      set(params[id]->count(), 0.f, params[id]->mutable_cpu_diff());
      continue;
    }
    if (param_.iter_size() > 1) params[id]->scale_diff(1.f / param_.iter_size());
    Regularize(id);
    ComputeUpdateValue(id, rate);
  }
  // data -= diff over the whole flat buffer (padding is zero in both).
  axpy(static_cast<int>(net_->param_buffer_size()), -1.f, net_->param_diff(), net_->param_data());
  // The host weights are the fresh ones (in GPU mode the next pass uploads them; the test nets
  // share these memories).
  for (Blob* p : params) p->data()->host_written();
}

void Solver::UpdateSmoothedLoss(float loss) {
  // The window runs on this solver's own losses: in a group its iterations are not
  // consecutive, so (iter - start) % window would revisit some slots and never others.
  // The mean of the window, summed afresh: a running "+= (new - old) / window" keeps the
  // rounding of every loss that passed through it, so after large losses (thousands) small
  // ones averaged to about -5e-4, a negative loss.
  const int window = param_.average_loss();
  if (static_cast<int>(losses_.size()) < window) {
    losses_.push_back(loss);
  } else {
    losses_[static_cast<size_t>(losses_seen_ % window)] = loss;
  }
  double sum = 0;
  for (float l : losses_) sum += l;
  smoothed_loss_ = static_cast<float>(sum / static_cast<double>(losses_.size()));
  ++losses_seen_;
}

int Solver::BatchSize() const {
  for (size_t i = 0; i < net_->layers().size(); ++i)
    if (net_->bottom_vecs()[i].empty() && !net_->top_vecs()[i].empty() &&
        net_->top_vecs()[i][0]->num_axes() > 0)
      return net_->top_vecs()[i][0]->shape(0);
  return 0;
}

namespace {
// Caffe's " (* weight = weighted loss)" after an output that contributes to the loss.
std::string LossSuffix(float weight, float value) {
  if (weight == 0.f) return "";
  std::ostringstream os;
  os << " (* " << weight << " = " << weight * value << " loss)";
  return os.str();
}
}  // namespace

void LoneGroup::Request(SolverAction a) {
  if (a == SolverAction::STOP) stop_asked_ = true;
  if (a == SolverAction::SNAPSHOT) ++snapshots_;
  LOG_IF(WARNING, a == SolverAction::LEAVE && *log_)
      << "SIGUSR1 (leave on notice) is for one machine of a job across machines (--peers): ignored";
}

bool Solver::leader() const { return group_->Leads(options_.rank); }
bool Solver::reports() const { return group_->Reports(options_.rank); }

int64_t Solver::Claim(int64_t stop_iter) { return group_->Claim(stop_iter); }

bool Solver::Due(int64_t it, int interval, int64_t* next) {
  if (interval <= 0 || it < *next) return false;
  *next = (it / interval + 1) * static_cast<int64_t>(interval);
  return true;
}

void Solver::Display(std::chrono::steady_clock::time_point& last, int& last_iter, bool lead) {
  // Another machine's reporting solver hands its figures to the sink and logs nothing: the
  // display lines are the leader's.
  const bool talk = lead && options_.log;
  const auto now = std::chrono::steady_clock::now();
  const double lapse = std::chrono::duration<double>(now - last).count();
  const double per_s = lapse > 0 ? (iter_ - last_iter) / lapse : 0;
  LOG_IF(INFO, talk) << "Iteration " << iter_ << " (" << per_s << " iter/s, " << lapse << "s/"
       << param_.display() << " iters), loss = " << smoothed_loss_;
  TrainFigures fig;
  // Numbered as Caffe numbers them (by name), so that its log tools find each column.
  const std::vector<OutputSlot> slots = CaffeOutputOrder(*net_);
  for (size_t k = 0; k < slots.size(); ++k) {
    const float v = slots[k].blob->cpu_data()[slots[k].element];
    LOG_IF(INFO, talk) << "    Train net output #" << k << ": " << slots[k].name << " = " << v
         << LossSuffix(slots[k].loss_weight, v);
    fig.outputs.push_back({slots[k].name, v});
  }
  const int batch = BatchSize();
  // Per solver in a group: iterations done and images/s since the last display (none alone).
  {
    const std::vector<int64_t> done = group_->Completions();
    const int n = static_cast<int>(done.size());
    if (solver_done_.size() < static_cast<size_t>(n)) solver_done_.resize(n, 0);
    for (int r = 0; r < n; ++r) {
      fig.solvers.push_back({r, done[r], (done[r] - solver_done_[r]) * batch / std::max(lapse, 1e-9)});
      solver_done_[r] = done[r];
    }
  }
  // Progress: throughput since the start of this run (all solvers of a group together), per
  // solver in a group, and the time left to max_iter.
  const double total = std::chrono::duration<double>(now - start_time_).count();
  const int done = iter_ - start_iter_;
  if (done > 0 && total > 0 && param_.max_iter() > iter_) {
    const double ips = done / total;
    const long eta = static_cast<long>((param_.max_iter() - iter_) / ips);
    std::ostringstream os;
    os << "Progress: " << iter_ << "/" << param_.max_iter() << " iterations, "
       << std::fixed << std::setprecision(0) << ips * batch << " img/s, ETA "
       << eta / 3600 << "h" << std::setw(2) << std::setfill('0') << eta / 60 % 60 << "m"
       << std::setw(2) << eta % 60 << "s";
    if (!fig.solvers.empty()) {
      os << "; per solver img/s:";
      for (const SolverFigures& s : fig.solvers) os << " " << std::setprecision(0) << s.img_per_s;
    }
    LOG_IF(INFO, talk) << os.str();
  }
  if (talk)
    for (SolverCallback* c : options_.callbacks) c->OnDisplay();
  if (options_.stats) {
    fig.iter = iter_;
    fig.max_iter = param_.max_iter();
    fig.seconds = total;
    // In a group, from the solvers' own counters: the global count between two of the leader's
    // displays also holds what the others ran while the leader was testing.
    fig.img_per_s = per_s * batch;
    if (!fig.solvers.empty()) {
      fig.img_per_s = 0;
      for (const SolverFigures& s : fig.solvers) fig.img_per_s += s.img_per_s;
    }
    fig.loss = smoothed_loss_;
    fig.lr = GetLearningRate();
    fig.leader = lead ? options_.rank : -1;
    fig.leads = lead;
    options_.stats->OnTrain(fig);
  }
  last = now;
  last_iter = iter_;
}

void Solver::Step(int iters) { StepTo(group_->Reached() + static_cast<int64_t>(iters)); }

SolverAction Solver::PollAction() {
  const SolverAction a = options_.action ? options_.action() : SolverAction::NONE;
  // A request this process received goes to the group, whichever solver took it; the leader
  // (perhaps in another process) acts on it.
  if (a != SolverAction::NONE) group_->Request(a);
  return leader() ? group_->Pending(&snapshot_requests_seen_) : SolverAction::NONE;
}

// Caffe's intervals, as "the global iteration reached the next multiple": identical to
// `iter % interval == 0` for one solver, and robust to a counter that others advance too.
int64_t Solver::FirstMultiple(int interval, bool include_now) const {
  if (interval <= 0) return 0;
  const int64_t up = (static_cast<int64_t>(iter_) + interval - 1) / interval * interval;
  return up == iter_ && !include_now ? up + interval : up;
}

void Solver::StartSteps() {
  losses_.clear();
  losses_seen_ = 0;
  smoothed_loss_ = 0;
  start_time_ = std::chrono::steady_clock::now();
  start_iter_ = iter_;
  next_test_ = FirstMultiple(param_.test_interval(), iter_ > 0 || param_.test_initialization());
  next_display_ = FirstMultiple(param_.display(), true);
  next_snapshot_ = FirstMultiple(param_.snapshot(), false);
  snapshot_requests_seen_ = group_->SnapshotRequests();
  led_from_ = -1;
  was_leading_ = false;
}

// Every multiple this solver led through gets its file, even one the count passed while it
// was busy (a test pass, descheduled) or after its last iteration: scripts look for each
// _iter_<k * snapshot>. A multiple the count passed before this solver began to lead (a
// takeover, a machine back with a majority) belonged to the leader of that time: if no file
// of it was written in this run, these later weights are not passed off under its name but
// written once under the global iteration they are really of.
void Solver::SnapshotMultiples(int64_t last_periodic) {
  const int64_t reached = std::min(group_->Reached(), last_periodic);
  if (led_from_ < 0) led_from_ = reached;
  int64_t missed = -1;
  bool on_time = false;
  while (param_.snapshot() > 0 && next_snapshot_ <= reached) {
    if (next_snapshot_ >= led_from_) {
      TrySnapshot(next_snapshot_);
      on_time = true;  // a later file than the missed ones
    } else if (!WrittenByAnotherLeader(SnapshotBase(next_snapshot_) + ".caffemodel")) {
      missed = next_snapshot_;
    }
    next_snapshot_ += param_.snapshot();
  }
  if (missed >= 0 && !on_time) {
    SLOG << "The snapshot due at iteration " << missed << " was not written by the leader of that time; "
         << "these weights are saved under the global iteration they are of, " << reached;
    TrySnapshot(reached);
  }
}

void Solver::TrainIteration(int64_t it, bool lead, std::chrono::steady_clock::time_point& last, int& last_iter) {
  net_->ClearParamDiffs();
  if (lead && Due(it, param_.test_interval(), &next_test_)) OnMaster([&] { TestAll(); });
  float loss = 0;
  for (int i = 0; i < param_.iter_size(); ++i) loss += net_->ForwardBackward();
  loss /= param_.iter_size();
  if (std::isfinite(loss)) {
    UpdateSmoothedLoss(loss);
    if ((lead || (options_.stats && reports())) && Due(it, param_.display(), &next_display_))
      Display(last, last_iter, lead);
    for (SolverCallback* c : options_.callbacks) c->AfterBackward(*net_);
    ApplyUpdate();
    return;
  }
  // These weights are lost. Where the job can restore them (another machine's copy), the
  // step is skipped and the momentum of the lost trajectory forgotten; else one line.
  std::string why;
  bool restored = false;
  for (SolverCallback* c : options_.callbacks)
    if ((restored = c->Diverged(&why))) break;
  HS_REQUIRE(restored)
      << "loss is " << loss << " at iteration " << iter_
      << (why.empty() ? std::string(" (diverged: lower base_lr?)") : "; " + why);
  ForgetHistory();
  if (guard_) guard_->Reset();  // the restored weights' gradients are measured afresh
}

void Solver::ForgetHistory() {
  for (const auto& h : history_) std::fill_n(h->mutable_cpu_data(), h->count(), 0.f);
}

bool Solver::BeforeIteration() {
  for (SolverCallback* c : options_.callbacks)
    if (!c->BeforeIteration()) return false;
  return true;
}

void Solver::StepTo(int64_t stop_iter) {
  Group* g = group_;
  iter_ = static_cast<int>(std::min<int64_t>(g->Reached(), stop_iter));
  StartSteps();
  auto last = start_time_;
  int last_iter = iter_;
  // Periodic snapshots are named by the multiple of `snapshot` the count reached, as Caffe
  // names them. In a group the one at the very end waits for Solve, which takes it once every
  // solver is done (and every private copy has handed in its last deltas).
  const int64_t last_periodic = g->FinalSnapshotAtTheEnd() ? stop_iter - 1 : stop_iter;
  auto last_takeover_check = std::chrono::steady_clock::time_point{};
  while (!g->Stopping()) {
    if (!BeforeIteration()) break;
    g->AwaitGo();
    const int64_t it = Claim(stop_iter);
    if (it >= stop_iter) break;
    iter_ = static_cast<int>(it);
    if (const auto now = std::chrono::steady_clock::now(); now - last_takeover_check > std::chrono::milliseconds(500)) {
      last_takeover_check = now;
      g->TakeOverIfLeaderGone(options_.rank);
    }
    const bool lead = leader();
    if (lead && !was_leading_) led_from_ = it;
    was_leading_ = lead;
    TrainIteration(it, lead, last, last_iter);
    iter_ = static_cast<int>(it + 1);
    g->Completed(options_.rank);
    for (SolverCallback* c : options_.callbacks) c->AfterIteration();
    const SolverAction action = PollAction();
    if (lead) {
      SnapshotMultiples(last_periodic);
      if (action == SolverAction::SNAPSHOT && last_snapshot_iter_ != iter_) TrySnapshot(-1);
    }
    if (action == SolverAction::STOP) {
      stopped_early_ = true;  // Solve snapshots once everyone has stopped
      g->Stop();
      break;
    }
  }
  // The others may have run the count past a multiple after this leader's last iteration.
  if (leader() && !stopped_early_) SnapshotMultiples(last_periodic);
  iter_ = static_cast<int>(std::min<int64_t>(g->Reached(), stop_iter));
}

void Solver::Solve(const std::string& resume_file) {
  SLOG << "Solving " << net_->name();
  solve_started_ = std::filesystem::file_time_type::clock::now();
  SLOG << "Learning Rate Policy: " << param_.lr_policy();
  CheckSnapshotSettings();
  stopped_early_ = false;
  if (!resume_file.empty()) {
    SLOG << "Restoring previous solver status from " << resume_file;
    Restore(resume_file);
  }
  StepTo(param_.max_iter());
  for (SolverCallback* c : options_.callbacks) c->TrainEnd();
  Group* g = group_;
  // The group decides whether this solver takes the final snapshot, and when (core/group.hpp).
  switch (g->Finish(options_.rank)) {
    case Group::End::kFollow:
      return;
    case Group::End::kKeepCopy:
      KeepWeightsAfterTheLeadersFailure();
    case Group::End::kTakeFinal:
      break;
  }
  iter_ = static_cast<int>(std::min<int64_t>(g->Reached(), param_.max_iter()));
  if (g->StoppedEarly()) stopped_early_ = true;
  struct MarkDone {  // whatever happens below, followers stop waiting
    Group* g;
    bool ok = true;
    ~MarkDone() { g->Ended(ok); }
  } mark_done{g};
  // Caffe's final snapshot (snapshot_after_train, or the last multiple of `snapshot`), and
  // one on an early stop; never twice for one iteration.
  const bool want = stopped_early_ || param_.snapshot_after_train() ||
                    (param_.snapshot() > 0 && iter_ % param_.snapshot() == 0);
  if (want && last_snapshot_iter_ != iter_) {
    try {
      FinalSnapshot();
    } catch (const Error&) {
      mark_done.ok = false;  // the others keep theirs
      throw;
    }
  }
  if (stopped_early_) {
    SLOG << "Optimization stopped early.";
    return;
  }
  OnMaster([&] {
    if (param_.display() && iter_ % param_.display() == 0) {
      const float loss = net_->Forward();
      UpdateSmoothedLoss(loss);
      SLOG << "Iteration " << iter_ << ", loss = " << smoothed_loss_;
    }
    if (param_.test_interval() && iter_ % param_.test_interval() == 0) TestAll();
  });
  SLOG << "Optimization Done.";
}

void Solver::ViewWeights(const float* weights) {
  const auto& params = net_->learnable_params();
  float* own = net_->param_data();
  if (view_offsets_.empty())
    for (Blob* p : params) view_offsets_.push_back(p->cpu_data() - own);
  const float* base = weights ? weights : own;
  for (size_t i = 0; i < params.size(); ++i)
    params[i]->redirect_cpu_data(const_cast<float*>(base) + view_offsets_[i]);
}

void Solver::OnMaster(const std::function<void()>& f) {
  for (SolverCallback* c : options_.callbacks)
    if (c->OnMaster(f)) return;
  if (!options_.master_weights) return f();
  ViewWeights(options_.master_weights);
  try {
    f();
  } catch (...) {
    ViewWeights(nullptr);
    throw;
  }
  ViewWeights(nullptr);
}

void Solver::CheckSnapshotSettings() const {
  HS_REQUIRE(param_.snapshot_format() == pb::SolverParameter::BINARYPROTO)
      << "snapshot_format HDF5 is not supported; use BINARYPROTO";
  HS_REQUIRE(param_.snapshot() >= 0) << "snapshot must be >= 0, got " << param_.snapshot();
  if (param_.snapshot() == 0 && !param_.snapshot_after_train()) return;
  const std::string prefix = param_.snapshot_prefix().empty() ? "snapshot" : param_.snapshot_prefix();
  const auto slash = prefix.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : prefix.substr(0, slash);
  struct stat st {};
  HS_REQUIRE(stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      << "snapshot_prefix '" << prefix << "': directory '" << dir
      << "' does not exist; create it or change snapshot_prefix";
  HS_REQUIRE(access(dir.c_str(), W_OK) == 0)
      << "snapshot_prefix '" << prefix << "': directory '" << dir << "' is not writable";
}

std::vector<std::vector<float>> Solver::TestAll() {
  // The group knows a test pass is under way (a machine's rate falls meanwhile).
  struct Testing {
    Group* g;
    explicit Testing(Group* group) : g(group) {
      g->SetTesting(true);
    }
    ~Testing() {
      g->SetTesting(false);
    }
  } testing(group_);
  std::vector<std::vector<float>> all;
  for (size_t t = 0; t < test_nets_.size(); ++t) {
    SLOG << "Iteration " << iter_ << ", Testing net (#" << t << ")";
    Net& tn = *test_nets_[t];
    const int n = param_.test_iter(static_cast<int>(t));
    double loss = 0;
    const std::vector<double> mean = tn.ForwardMean(n, &loss);
    if (param_.test_compute_loss()) SLOG << "Test loss: " << loss;
    // Returned in net order; logged in Caffe's (by name), each value with its own name.
    std::vector<float> means(mean.begin(), mean.end());
    TestFigures fig;
    const std::vector<OutputSlot> slots = CaffeOutputOrder(tn);
    for (size_t k = 0; k < slots.size(); ++k) {
      const float v = means[slots[k].flat];
      SLOG << "    Test net output #" << k << ": " << slots[k].name << " = " << v
           << LossSuffix(slots[k].loss_weight, v);
      fig.outputs.push_back({slots[k].name, v});
    }
    if (options_.stats) {
      fig.iter = iter_;
      fig.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time_).count();
      fig.net = static_cast<int>(t);
      options_.stats->OnTest(fig);
    }
    all.push_back(means);
  }
  return all;
}

std::string Solver::SnapshotBase(int64_t iter) const {
  const std::string prefix = !rescue_prefix_.empty()             ? rescue_prefix_
                             : param_.snapshot_prefix().empty() ? "snapshot"
                                                                : param_.snapshot_prefix();
  return prefix + "_iter_" + std::to_string(iter);
}

bool Solver::WrittenByAnotherLeader(const std::string& model) const {
  std::error_code ec;
  return !written_.count(model) && std::filesystem::exists(model, ec) &&
         std::filesystem::last_write_time(model, ec) >= solve_started_;
}

void Solver::TrySnapshot(int64_t at) {
  const std::string model = SnapshotBase(at >= 0 ? at : iter_) + ".caffemodel";
  // A periodic snapshot another leader of this job already wrote during this run (a leader
  // that took over catches up on the multiples the count passed): its file stays as that
  // leader wrote it. (A file of an earlier run is overwritten, as Caffe does.)
  if (at >= 0 && WrittenByAnotherLeader(model)) {
    SLOG << "Snapshot " << model << " was written by another leader of this job: left as it is";
    return;
  }
  try {
    written_.insert(Snapshot(at));
    snapshot_failures_ = 0;
  } catch (const Error& e) {
    // Training goes on; the next snapshot tries again. Only the final one must succeed.
    if (snapshot_failures_++ == 0)
      LOG(WARNING) << "Snapshot failed: " << e.what() << "; training goes on and the next snapshot tries again";
  }
}

void Solver::FinalSnapshot() {
  try {
    Snapshot();
    return;
  } catch (const Error& e) {
    std::string kept;
    try {
      kept = Rescue("");
    } catch (const Error&) {
      throw e;  // neither place could be written: the first reason is the one to fix
    }
    const std::string state = kept.substr(0, kept.size() - std::string(".caffemodel").size()) + ".solverstate";
    HS_FAIL() << "the final snapshot failed (" << e.what() << "); the weights are kept in " << kept
              << " (resume with --snapshot=" << state << ")";
  }
}

std::string Solver::Rescue(const std::string& tag) {
  const std::string prefix = param_.snapshot_prefix().empty() ? "snapshot" : param_.snapshot_prefix();
  const char* tmp = std::getenv("TMPDIR");
  rescue_prefix_ = std::string(tmp && *tmp ? tmp : "/tmp") + "/" +
                   std::filesystem::path(prefix).filename().string() + "_rescued" + tag;
  try {
    std::string kept = Snapshot();
    rescue_prefix_.clear();
    return kept;
  } catch (...) {
    rescue_prefix_.clear();
    throw;
  }
}

void Solver::KeepWeightsAfterTheLeadersFailure() {
  iter_ = static_cast<int>(std::min<int64_t>(group_->Reached(), param_.max_iter()));
  // Named by this process too: machines of one job may share a host and its $TMPDIR.
  std::string kept;
  try {
    kept = Rescue("_pid" + std::to_string(getpid()));
  } catch (const Error& e) {
    HS_FAIL() << "the leader's final snapshot failed, and this machine's copy could not be kept either ("
              << e.what() << ")";
  }
  const std::string state = kept.substr(0, kept.size() - std::string(".caffemodel").size()) + ".solverstate";
  HS_FAIL() << "the leader's final snapshot failed (its log says why); this machine's weights are kept in " << kept
            << " (resume with --snapshot=" << state << ")";
}

std::string Solver::Snapshot(int64_t at) {
  HS_REQUIRE(param_.snapshot_format() == pb::SolverParameter::BINARYPROTO)
      << "snapshot_format HDF5 is not supported; use BINARYPROTO";
  const int64_t iter = at >= 0 ? at : iter_;
  const std::string base = SnapshotBase(iter);
  const std::string model = base + ".caffemodel", state_file = base + ".solverstate";
  pb::NetParameter weights;
  OnMaster([&] { net_->ToProto(&weights, param_.snapshot_diff()); });
  SLOG << "Snapshotting to binary proto file " << model;
  WriteBinaryProtoAtomic(model, weights);
  pb::SolverState state;
  state.set_iter(static_cast<int>(iter));
  state.set_learned_net(model);
  state.set_current_step(current_step_);
  for (const auto& h : history_) h->ToProto(state.add_history());
  SLOG << "Snapshotting solver state to binary proto file " << state_file;
  WriteBinaryProtoAtomic(state_file, state);
  last_snapshot_iter_ = iter;
  return model;
}

void Solver::Restore(const std::string& state_file) {
  pb::SolverState state;
  ReadBinaryProto(state_file, &state);
  HS_REQUIRE(state.iter() >= 0) << state_file << ": iteration " << state.iter() << " is negative";
  HS_REQUIRE(state.iter() <= param_.max_iter())
      << state_file << ": is at iteration " << state.iter() << ", past max_iter "
      << param_.max_iter() << "; raise max_iter (or --iterations) to train on";
  HS_REQUIRE(state.current_step() >= 0 && state.current_step() <= param_.stepvalue_size())
      << state_file << ": current_step " << state.current_step() << " does not fit the "
      << param_.stepvalue_size() << " stepvalue(s) of this solver";
  HS_REQUIRE(state.history_size() == static_cast<int>(history_.size()))
      << state_file << ": holds " << state.history_size() << " history blobs, this " << type()
      << " solver keeps " << history_.size() << " (another solver type or net?)";
  if (state.has_learned_net()) {
    pb::NetParameter weights;
    ReadBinaryProto(state.learned_net(), &weights);
    net_->CopyTrainedLayersFrom(weights, state.learned_net());
  }
  for (size_t i = 0; i < history_.size(); ++i) {
    try {
      history_[i]->FromProto(state.history(static_cast<int>(i)), /*reshape=*/false);
    } catch (const Error& e) {
      throw Error(state_file + ": history blob " + std::to_string(i) + ": " + e.what());
    }
  }
  iter_ = state.iter();
  current_step_ = state.current_step();
}

}  // namespace hogstream
