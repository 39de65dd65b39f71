// Rendezvous: a job across machines started without --peers. Every machine reports the address
// it will train on to a small store (TCP, served by the job's rank 0) and gets back the job's
// list in rank order, its rank, and, unless the job has a --job-key, a fresh session key for
// its frames, sealed to this machine alone (so a job started this way is keyed by default).
// The store's address comes from --rendezvous=[SCHEME://]HOST:PORT or from a launcher's
// environment: torchrun's MASTER_ADDR/MASTER_PORT, Slurm's node list, Open MPI's or MPICH's
// launcher address (see PlanRendezvous).
// Not for: training or liveness (the store closes once the list is out, or, for a keyed job,
// takes only new machines (--join) from then on; the job's own control messages take over).
//
// Threads: Rendezvous runs on the caller's thread; the machine that serves the store serves it
// from a thread of its own until every machine has its answer. Every error a user can cause (a
// bad or missing variable, a store that refuses, a wrong --job-key, nobody there in time) is one
// line: an Error.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "transport/frame.hpp"
#include "transport/open.hpp"

namespace hogstream {

// Where the store is and what this machine knows of itself before it asks.
struct RendezvousPlan {
  std::string scheme = "udp";  // the transport the job trains on (a registered scheme)
  std::string host;                      // the store's address
  uint16_t port = 0;
  int rank = -1;      // -1: not known; the store gives ranks in the order machines come
  int machines = 0;   // the job's size
  std::string how;    // where the store's address came from, for the log and for errors
};

// The default port where a launcher names only the store's host (Slurm, mpirun): this plus a
// number drawn from the launcher's job id, below 600, so that two jobs on one host differ.
constexpr uint16_t kRendezvousBasePort = 29400;

// The plan, from (in this order) `flag` (--rendezvous), torchrun's MASTER_ADDR and MASTER_PORT
// (MASTER_PORT + 1 where torchrun's agent holds MASTER_PORT: TORCHELASTIC_USE_AGENT_STORE),
// srun's SLURM_STEP_NODELIST (the first node; SLURM_STEP_RESV_PORTS's first port, else a port
// from SLURM_JOB_ID; a batch script's own environment starts no rendezvous), Open MPI's OMPI_MCA_orte_hnp_uri (mpirun's host)
// or MPICH's PMI_PORT (mpiexec's host). nullopt: none of them is given (the job needs --peers).
// The rank is `forced` (--rank) or a launcher's (FindSelf's variables); the size `machines`
// (--machines; 0: not given) or a launcher's, which must agree; a new machine (`join`) needs
// neither. Errors, one line each: a variable that is set but bad or whose partner is missing,
// no size known.
std::optional<RendezvousPlan> PlanRendezvous(const std::string& flag, int forced, int machines,
                                             const std::map<std::string, std::string>& env, bool join = false);
// The launcher variables PlanRendezvous reads (FindSelf's and the store's address), from this
// process's environment.
std::map<std::string, std::string> RendezvousEnv();

// HMAC-SHA-256 of `text` under `key`, in hex (the store's proofs; the page's control token).
std::string Hmac(const JobKey& key, const std::string& text);

struct RendezvousOptions {
  std::string job;              // the job's name: a store serves one job, and refuses others
  std::optional<JobKey> key;    // --job-key: the store admits only machines that hold it
  std::chrono::milliseconds timeout{60000};  // every machine reports within it
  bool join = false;            // --join: a new machine of the running job (a keyed job's store takes it)
};

struct Rendezvoused {
  std::string job;          // the job's name (RendezvousOptions::job)
  std::string peers;        // the job's list, in rank order (--peers' grammar)
  int rank = -1;            // this machine's
  std::optional<JobKey> session;  // the session key its frames are sealed with (nullopt: the job's --job-key)
  std::shared_ptr<void> port_hold;  // keeps this machine's udp port taken until its endpoint opens
  std::shared_ptr<void> store;      // the store this machine serves for a keyed job's new machines
                                    // (--join), open until this is let go (at the job's end)
};

// Reports this machine to the store (serving it first where this machine is rank 0, or, with
// no rank known, where it can take the store's address) and waits for the job's list.
Rendezvoused Rendezvous(const RendezvousPlan& plan, const RendezvousOptions& opt);

}  // namespace hogstream
