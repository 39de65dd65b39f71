#include "core/signals.hpp"

#include <glog/logging.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "core/context.hpp"

namespace hogstream {

namespace {
std::atomic<int> g_stop_pending{0}, g_snapshot_pending{0}, g_leave_pending{0};
std::atomic<int> g_on_int{static_cast<int>(SolverAction::STOP)};
std::atomic<int> g_on_hup{static_cast<int>(SolverAction::SNAPSHOT)};

SolverAction Effect(const std::string& name, const char* flag) {
  if (name == "stop") return SolverAction::STOP;
  if (name == "snapshot") return SolverAction::SNAPSHOT;
  if (name == "none") return SolverAction::NONE;
  HS_FAIL() << "--" << flag << " must be stop, snapshot or none, got '" << name << "'";
}

sigset_t TrainingSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGUSR1);
  return set;
}

// The one thread that takes the signals: it only turns them into pending requests.
void WaitForSignals() {
  NameThisThread("hs-signals");
  const sigset_t set = TrainingSignals();
  int stops = 0;
  while (true) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (sig == SIGUSR1) {
      LOG(INFO) << "SIGUSR1 received: this machine leaves the job on notice";
      g_leave_pending.store(1);
      continue;
    }
    const auto effect = static_cast<SolverAction>((sig == SIGHUP ? g_on_hup : g_on_int).load());
    const char* name = sig == SIGHUP ? "SIGHUP" : sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (effect == SolverAction::STOP) {
      if (++stops >= 3) {
        LOG(ERROR) << name << " a third time while stopping: exiting now, without a snapshot";
        _exit(128 + sig);
      }
      LOG(INFO) << name << " received: snapshot and stop requested";
      g_stop_pending.store(1);
    } else if (effect == SolverAction::SNAPSHOT) {
      LOG(INFO) << name << " received: snapshot requested";
      g_snapshot_pending.fetch_add(1);
    } else {
      LOG(INFO) << name << " received: ignored (effect none)";
    }
  }
}
}  // namespace

void RequestAction(SolverAction action, const std::string& from) {
  if (action == SolverAction::STOP) {
    LOG(INFO) << "Stop requested by " << from << ": snapshot and stop requested";
    g_stop_pending.store(1);
  } else if (action == SolverAction::SNAPSHOT) {
    LOG(INFO) << "Snapshot requested by " << from;
    g_snapshot_pending.fetch_add(1);
  } else {
    HS_CHECK(false) << "RequestAction: only STOP or SNAPSHOT";
  }
}

std::function<SolverAction()> InstallSignalActions(const std::string& sigint_effect,
                                                   const std::string& sighup_effect) {
  g_on_int.store(static_cast<int>(Effect(sigint_effect, "sigint_effect")));
  g_on_hup.store(static_cast<int>(Effect(sighup_effect, "sighup_effect")));
  static std::once_flag started;
  std::call_once(started, [] {
    const sigset_t set = TrainingSignals();
    const int rc = pthread_sigmask(SIG_BLOCK, &set, nullptr);
    HS_CHECK(rc == 0) << "pthread_sigmask: " << ErrnoText(rc);
    std::thread(WaitForSignals).detach();  // inherits the mask: sigwait needs them blocked
  });
  return []() {
    if (g_stop_pending.exchange(0)) return SolverAction::STOP;
    // Requests that arrive within one iteration coalesce into one snapshot.
    if (g_snapshot_pending.exchange(0)) return SolverAction::SNAPSHOT;
    if (g_leave_pending.exchange(0)) return SolverAction::LEAVE;
    return SolverAction::NONE;
  };
}

}  // namespace hogstream
