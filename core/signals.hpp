// Signals of a training process: SIGINT, SIGTERM and SIGHUP become requests that solvers poll
// between iterations (stop, snapshot, or nothing, per --sigint_effect / --sighup_effect;
// SIGTERM, what batch schedulers send first, takes SIGINT's effect); SIGUSR1 asks one machine
// of a job across machines to leave it on notice (SolverAction::LEAVE; the job goes on).
//
// No compute thread ever runs a signal handler: the signals are blocked in the thread that
// installs them — which must be main, before any other thread starts, so every thread inherits
// the mask — and one dedicated thread takes them with sigwait. (oneDNN 2.6's AVX-512 GEMM
// kernels point rsp into the heap while they run; a handler's frame pushed there corrupted it,
// and training aborted with exit 134.) Process-wide by nature (signals are): the first call
// starts the thread, later calls change the effects.
#pragma once

#include <functional>
#include <string>

#include "core/solver.hpp"

namespace hogstream {

// Returns the poll function a Solver calls once per iteration (SolverOptions::action): each
// request is handed out once per process, to whichever solver polls first; in a Hogwild group
// that solver posts it to the group, where the leader acts on it. A third SIGINT/SIGTERM
// while a stop is pending ends the process at once (exit 128 + signal), without a snapshot.
std::function<SolverAction()> InstallSignalActions(const std::string& sigint_effect,
                                                   const std::string& sighup_effect);

// The same requests from elsewhere than a signal (the page's buttons, observe/web.hpp): STOP
// (snapshot and stop) or SNAPSHOT, logged with `from` (who asked) as a signal's are, and handed
// out by InstallSignalActions' poll function. Any other action is a Bug.
void RequestAction(SolverAction action, const std::string& from);

}  // namespace hogstream
