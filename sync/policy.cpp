// Sharing policies (see policy.hpp).
#include "sync/policy.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <set>
#include <sstream>
#include <thread>

#include "base/common.hpp"

namespace hogstream {

namespace {

// A whole number in [lo, hi] written in digits, for --policy=NAME:N; else a one-line Error.
uint32_t Count(const std::string& text, const std::string& spec, uint32_t lo, uint32_t hi, const char* want) {
  const bool digits = !text.empty() && text.size() < 10 && text.find_first_not_of("0123456789") == std::string::npos;
  const long v = digits ? std::strtol(text.c_str(), nullptr, 10) : -1;
  HS_REQUIRE(digits && v >= lo && v <= hi) << "--policy=" << spec << ": want " << want;
  return static_cast<uint32_t>(v);
}

// gsp's GROUPS: "0,1;2,3" or @FILE (one group per line, '#' comments).
std::vector<std::vector<int>> ParseGroups(const std::string& text, const std::string& spec) {
  std::string all = text;
  if (!text.empty() && text[0] == '@') {
    std::ifstream in(text.substr(1));
    HS_REQUIRE(in) << "--policy=" << spec << ": cannot read " << text.substr(1);
    std::ostringstream os;
    for (std::string line; std::getline(in, line);) os << line.substr(0, line.find('#')) << ";";
    all = os.str();
  }
  std::vector<std::vector<int>> groups;
  std::istringstream parts(all);
  for (std::string part; std::getline(parts, part, ';');) {
    if (part.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::vector<int> g;
    std::istringstream items(part);
    for (std::string item; std::getline(items, item, ',');) {
      const size_t b = item.find_first_not_of(" \t\r"), e = item.find_last_not_of(" \t\r");
      const std::string t = b == std::string::npos ? "" : item.substr(b, e + 1 - b);
      g.push_back(static_cast<int>(Count(t, spec, 0, 65535, "GROUPS as solver indices, like gsp:0,1;2,3")));
    }
    groups.push_back(std::move(g));
  }
  HS_REQUIRE(!groups.empty()) << "--policy=" << spec << ": names no group (want gsp:0,1;2,3 or gsp:@FILE)";
  return groups;
}

}  // namespace

Policy Policy::Parse(const std::string& text, bool staleness_weight, const std::string& compress) {
  Policy p;
  p.staleness_weight = staleness_weight;
  p.codec = Codec::Parse(compress);
  const size_t colon = text.find(':');
  const std::string name = text.substr(0, colon), arg = colon == std::string::npos ? "" : text.substr(colon + 1);
  const bool has_arg = colon != std::string::npos;
  if (text.empty() || text == "async") return p;
  if (name == "bsp" && !has_arg) {
    p.kind = Kind::kBsp;
  } else if (name == "ssp") {
    p.kind = Kind::kSsp;
    p.bound = Count(arg, text, 0, 1000000, "ssp:S, S >= 0 iterations ahead of the slowest");
  } else if (name == "max-advance") {
    p.kind = Kind::kMaxAdvance;
    p.bound = Count(arg, text, 1, 1000000, "max-advance:K, K >= 1 iterations");
  } else if (name == "weedout") {
    p.kind = Kind::kWeedout;
    p.bound = Count(arg, text, 1, 1000000, "weedout:N, N >= 1 reports");
  } else if (name == "easgd") {
    p.kind = Kind::kEasgd;
    const size_t c = arg.find(':');
    const std::string a = arg.substr(0, c);
    char* end = nullptr;
    p.alpha = std::strtof(a.c_str(), &end);
    HS_REQUIRE(!a.empty() && end && *end == 0 && p.alpha > 0 && p.alpha <= 1)
        << "--policy=" << text << ": want easgd:ALPHA[:PERIOD] with ALPHA in (0, 1], like easgd:0.1:4";
    if (c != std::string::npos) p.period = Count(arg.substr(c + 1), text, 1, 1000000, "easgd:ALPHA:PERIOD, PERIOD >= 1");
  } else if (name == "gsp") {
    p.kind = Kind::kGsp;
    p.groups = ParseGroups(arg, text);
  } else {
    HS_FAIL() << "--policy=" << text
              << ": want async, bsp, ssp:S, max-advance:K, weedout:N, easgd:ALPHA[:PERIOD] or gsp:GROUPS";
  }
  return p;
}

std::string Policy::name() const {
  std::ostringstream os;
  switch (kind) {
    case Kind::kAsync: os << "async"; break;
    case Kind::kBsp: os << "bsp"; break;
    case Kind::kSsp: os << "ssp:" << bound; break;
    case Kind::kMaxAdvance: os << "max-advance:" << bound; break;
    case Kind::kWeedout: os << "weedout:" << bound; break;
    case Kind::kEasgd: os << "easgd:" << alpha << ":" << period; break;
    case Kind::kGsp:
      os << "gsp:";
      for (size_t g = 0; g < groups.size(); ++g)
        for (size_t k = 0; k < groups[g].size(); ++k) os << (k ? "," : g ? ";" : "") << groups[g][k];
      break;
  }
  if (staleness_weight) os << " --staleness-weight";
  if (codec.compresses()) os << " --compress=" << codec.name();
  if (svb) os << " --svb";
  return os.str();
}

bool Policy::needs_private() const { return kind != Kind::kAsync || staleness_weight || codec.compresses() || svb; }

SegmentRule Policy::Rule(std::shared_ptr<ChunkUpdates> updates) const {
  SegmentRule r;
  r.codec = codec;
  r.aggregate = DefaultAggregate(weights());
  r.weedout = kind == Kind::kWeedout ? bound : 0;
  r.updates = std::move(updates);
  return r;
}

void Policy::CheckGroups(int solvers) const {
  if (kind != Kind::kGsp) return;
  std::vector<int> seen(solvers, 0);
  for (const auto& g : groups) {
    HS_REQUIRE(!g.empty()) << "--policy=" << name() << ": an empty group";
    for (int s : g) {
      HS_REQUIRE(s < solvers) << "--policy=" << name() << ": solver " << s << " does not exist (" << solvers
                              << " solvers: 0.." << solvers - 1 << ")";
      HS_REQUIRE(!seen[s]++) << "--policy=" << name() << ": solver " << s << " is in two groups";
    }
  }
  for (int s = 0; s < solvers; ++s)
    HS_REQUIRE(seen[s]) << "--policy=" << name() << ": solver " << s << " is in no group";
}

std::vector<int> Policy::MachineGroups(int machines, int per_machine) const {
  if (kind == Kind::kBsp) return std::vector<int>(machines, 0);
  if (kind != Kind::kGsp) return {};
  CheckGroups(machines * per_machine);
  std::vector<int> of(machines, -1);
  for (size_t g = 0; g < groups.size(); ++g)
    for (int s : groups[g]) {
      const int m = s / per_machine;
      HS_REQUIRE(of[m] < 0 || of[m] == static_cast<int>(g))
          << "--policy=" << name() << ": machine " << m << "'s solvers (" << m * per_machine << ".."
          << (m + 1) * per_machine - 1 << ") are in two groups; across machines a group is a set of whole machines";
      of[m] = static_cast<int>(g);
    }
  return of;
}

// ---------------------------------------------------------------- PolicyRun

PolicyRun::PolicyRun(const Policy& policy, const SharedGroup* group, std::vector<int> ranks, std::vector<float*> copies,
                     std::vector<float*> targets, size_t floats, std::function<bool(int)> live)
    : policy_(policy),
      group_(group),
      ranks_(std::move(ranks)),
      copies_(std::move(copies)),
      targets_(std::move(targets)),
      floats_(floats),
      live_(std::move(live)),
      arrived_(new std::atomic<int64_t>[ranks_.size()]()),
      ended_(new std::atomic<int32_t>[ranks_.size()]()),
      sound_(new std::atomic<int32_t>[ranks_.size()]()),
      rounds_done_(ranks_.size(), 0) {
  const int n = static_cast<int>(ranks_.size());
  for (int i = 0; i < n; ++i) sound_[i].store(1);
  HS_CHECK(copies_.size() == ranks_.size()) << copies_.size() << " copies for " << n << " solvers";
  group_of_.assign(n, 0);
  if (policy_.kind == Policy::Kind::kBsp) {
    groups_.push_back({});
    for (int i = 0; i < n; ++i) groups_[0].push_back(i);
  } else if (policy_.kind == Policy::Kind::kGsp) {
    policy_.CheckGroups(n);
    groups_ = policy_.groups;
    for (size_t g = 0; g < groups_.size(); ++g)
      for (int i : groups_[g]) group_of_[i] = static_cast<int>(g);
  }
  if (!groups_.empty()) {
    HS_CHECK(targets_.size() == groups_.size()) << targets_.size() << " targets for " << groups_.size() << " groups";
    base_.resize(n);
    for (int i = 0; i < n; ++i) base_[i].assign(copies_[i], copies_[i] + floats_);
  }
}

void PolicyRun::set_machines(std::function<int64_t()> slowest_other, std::function<uint64_t()> fresh_rounds,
                             Await await) {
  HS_CHECK(slowest_other && fresh_rounds && await) << "set_machines wants all three";
  slowest_other_ = std::move(slowest_other);
  await_ = std::move(await);
  refresh_ = [this, fresh = std::move(fresh_rounds)](int i) {
    (void)i;
    const uint64_t want = fresh() + 2;
    // (Past the deadline it reads the weights as they are: the rounds are for freshness, and
    // a job whose other machines have ended answers no more.)
    await_([&] { return fresh() >= want || group_->Stopping(); }, std::chrono::steady_clock::now() + policy_.timeout);
  };
}

void PolicyRun::set_machine_rounds(float scale, std::string shown) {
  HS_CHECK(slowest_other_ && !groups_.empty() && targets_.size() == 1) << "machine rounds need set_machines and bsp";
  machine_rounds_ = true;
  scale_ = scale;
  shown_ = std::move(shown);
}

bool PolicyRun::Blocked(int i) const {
  const bool gated = policy_.kind == Policy::Kind::kSsp || policy_.kind == Policy::Kind::kMaxAdvance || machine_rounds_;
  if (!gated) return false;
  int64_t lead = 0, bound = machine_rounds_ ? 0 : policy_.bound;
  if (slowest_other_) {  // per solver: this machine's solvers against the slowest other machine's
    int64_t mine = 0;
    if (machine_rounds_) {
      // In lockstep this solver's count stands for the machine's: a mate that has already
      // finished this iteration's step is waiting in Round for this solver, so counting its
      // step here would make each wait for the other until the timeout.
      mine = group_->DoneBy(ranks_[i]);
    } else {
      for (int r : ranks_) mine += group_->DoneBy(r);
      mine /= static_cast<int64_t>(ranks_.size());
    }
    lead = mine - slowest_other_();
  } else {
    const int64_t mine = group_->DoneBy(ranks_[i]);
    int64_t slowest = mine;
    for (size_t j = 0; j < ranks_.size(); ++j) {
      if (static_cast<int>(j) == i || ended_[j].load() || !live_(static_cast<int>(j))) continue;
      slowest = std::min(slowest, group_->DoneBy(ranks_[j]));
    }
    lead = mine - slowest;
  }
  return policy_.kind == Policy::Kind::kMaxAdvance ? lead >= bound : lead > bound;
}

void PolicyRun::Waited(std::chrono::steady_clock::time_point since) {
  waits_.fetch_add(1, std::memory_order_relaxed);
  wait_us_.fetch_add(std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - since).count(),
                     std::memory_order_relaxed);
}

bool PolicyRun::Before(int i) {
  if (!Wait(i)) return false;
  if (machine_rounds_) {  // the group's steps are in the host copy: start from it
    refresh_(i);
    std::memcpy(copies_[i], targets_[0], floats_ * sizeof(float));
    std::memcpy(base_[i].data(), copies_[i], floats_ * sizeof(float));
  }
  return !group_->Stopping();
}

bool PolicyRun::Wait(int i) {
  if (!Blocked(i)) return true;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + policy_.timeout;
  if (slowest_other_) {
    // Across machines only the others' clocks (NetJob's news) unblock it (more steps of this
    // machine's own solvers would not), or the stop.
    const bool passed = await_([&] { return !Blocked(i) || group_->Stopping(); }, deadline);
    Waited(start);
    if (group_->Stopping()) return false;
    if (!passed)
      HS_FAIL() << "--policy=" << shown() << ": solver " << ranks_[i] << " waited " << policy_.timeout.count() / 1000.0
                << " s at iteration " << group_->DoneBy(ranks_[i]) << " for a machine that stopped progressing";
    if (policy_.kind == Policy::Kind::kSsp && refresh_) refresh_(i);
    return true;
  }
  {
    std::unique_lock<std::mutex> lk(mu_);
    while (Blocked(i)) {
      if (group_->Stopping()) return false;
      if (std::chrono::steady_clock::now() > deadline) {
        lk.unlock();
        Waited(start);
        HS_FAIL() << "--policy=" << shown() << ": solver " << ranks_[i] << " waited "
                  << policy_.timeout.count() / 1000.0 << " s at iteration "
                  << group_->DoneBy(ranks_[i]) << " for a "
                  << (slowest_other_ ? "machine" : "solver") << " that stopped progressing";
      }
      cv_.wait_for(lk, std::chrono::milliseconds(20));
    }
  }
  Waited(start);
  if (policy_.kind == Policy::Kind::kSsp && refresh_) refresh_(i);
  return true;
}

bool PolicyRun::Arrive(int i, const std::vector<int>& members, int64_t phase) {
  std::unique_lock<std::mutex> lk(mu_);
  arrived_[i].store(phase);
  cv_.notify_all();
  const auto start = std::chrono::steady_clock::now();
  bool waited = false;
  for (;;) {
    int late = -1;
    for (int j : members) {
      if (j == i || ended_[j].load() || !live_(j)) continue;
      if (arrived_[j].load() < phase) {
        late = j;
        break;
      }
    }
    if (late < 0) break;
    if (group_->Stopping()) return false;
    waited = true;
    if (std::chrono::steady_clock::now() - start > policy_.timeout) {
      lk.unlock();
      Waited(start);
      HS_FAIL() << "--policy=" << shown() << ": solver " << ranks_[late] << " did not reach round "
                << (phase + 1) / 2 << " within " << policy_.timeout.count() / 1000.0 << " s (solver " << ranks_[i]
                << " waited for it)";
    }
    cv_.wait_for(lk, std::chrono::milliseconds(20));
  }
  lk.unlock();
  if (waited) Waited(start);
  return true;
}

void PolicyRun::Round(int i) {
  const std::vector<int>& members = groups_[group_of_[i]];
  float* target = targets_[group_of_[i]];
  const int64_t phase = 2 * rounds_done_[i] + 1;
  // A step with a non-finite element (a copy that diverged) is left out of the round, as if its
  // solver had not come: the others' mean moves the target, and every copy, this one included,
  // starts the next iteration from the target.
  bool sound = true;
  for (size_t x = 0; x < floats_ && sound; ++x) sound = std::isfinite(copies_[i][x] - base_[i][x]);
  sound_[i].store(sound ? 1 : 0);
  if (!sound) unsound_.fetch_add(1, std::memory_order_relaxed);
  if (!Arrive(i, members, phase)) return;
  // Everyone who arrived takes a stripe: the same list for all of them, since a member that
  // has not arrived by now has ended and never will.
  std::vector<int> in, sound_in;
  for (int j : members)
    if (arrived_[j].load() >= phase) {
      in.push_back(j);
      if (sound_[j].load()) sound_in.push_back(j);
    }
  const size_t k = std::find(in.begin(), in.end(), i) - in.begin(), stripes = in.size();
  const size_t lo = floats_ * k / stripes, hi = floats_ * (k + 1) / stripes, p = sound_in.size();
  // bsp in one process moves the master by twice the copies' mean step (at most their sum),
  // as private copies' asynchronous deltas do (min(1, 2/staleness) each): the mean alone is
  // one copy's step with less noise, and fell short at equal global iterations (docs/experiments/2026-11-2x-private-copies-rule.md).
  // gsp's groups average; across machines, the machine's share of the round (set_machine_rounds).
  const bool twice = policy_.kind == Policy::Kind::kBsp && !machine_rounds_;
  const float inv = p ? (twice ? std::min(2.f, static_cast<float>(p)) : scale_) / static_cast<float>(p) : 0.f;
  for (size_t x = lo; x < hi && p; ++x) {
    float step = 0;
    for (int j : sound_in) step += copies_[j][x] - base_[j][x];
    target[x] += step * inv;
  }
  if (!Arrive(i, members, phase + 1)) return;
  // (Across machines the copy is reloaded before the next iteration, once the others' are in.)
  if (!machine_rounds_) std::memcpy(copies_[i], target, floats_ * sizeof(float));
  std::memcpy(base_[i].data(), copies_[i], floats_ * sizeof(float));
  ++rounds_done_[i];
  if (k == 0) rounds_.fetch_add(1, std::memory_order_relaxed);
}

void PolicyRun::After(int i) {
  switch (policy_.kind) {
    case Policy::Kind::kBsp:
    case Policy::Kind::kGsp:
      Round(i);
      break;
    case Policy::Kind::kEasgd:
      if (++rounds_done_[i] % policy_.period == 0 && exchange_) {
        exchange_(i);
        rounds_.fetch_add(1, std::memory_order_relaxed);
      }
      break;
    case Policy::Kind::kSsp:
    case Policy::Kind::kMaxAdvance: {
      std::lock_guard<std::mutex> lk(mu_);  // a waiting solver re-checks the clocks
      cv_.notify_all();
      break;
    }
    default: break;
  }
}

bool PolicyRun::End(int i) {
  std::lock_guard<std::mutex> lk(mu_);
  ended_[i].store(1);
  cv_.notify_all();
  if (groups_.empty()) return true;
  for (int j : groups_[group_of_[i]])
    if (!ended_[j].load()) return false;
  return true;
}

PolicyFigures PolicyRun::figures() const {
  PolicyFigures f;
  f.waits = waits_.load();
  f.wait_seconds = wait_us_.load() / 1e6;
  f.rounds = rounds_.load();
  f.unsound = unsound_.load();
  return f;
}

std::string PolicyRun::Line() const {
  const PolicyFigures f = figures();
  std::ostringstream os;
  os << "Policy " << shown() << ": " << f.waits << " waits (" << std::fixed << std::setprecision(1)
     << f.wait_seconds << " s)";
  if (f.rounds) os << ", " << f.rounds << (policy_.kind == Policy::Kind::kEasgd ? " exchanges" : " rounds");
  if (f.unsound) os << ", " << f.unsound << " non-finite steps left out";
  return os.str();
}

}  // namespace hogstream
