// What every program in bin/ shares: the edge where errors become one line and an exit
// status, Caffe-format logging, and the translation of common flags (--input, the Hogwild
// flags) into library options.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bin/commands.hpp"
#include "bin/flags.hpp"
#include "bin/peers.hpp"
#include "bin/rendezvous.hpp"
#include "observe/sink.hpp"
#include "sync/hogwild.hpp"

namespace hogstream {

// Sets up glog in Caffe's log format on stderr, runs `body`, and turns any exception into one
// line "NAME: message" and exit status 1 (ProgramExit, after --help or --version: its code).
int RunProgram(const char* name, const char* argv0, const std::function<int()>& body);

// --input=TOP:N,C,H,W (repeatable): stand-in shapes for Data layers without a source.
std::map<std::string, std::vector<int>> InputShapes(const Flags& f);

// --metrics=[HOST:]PORT or --ui=[HOST:]PORT (the page, observe/web.hpp; --ui_control its
// buttons) and --stats_json=FILE: the sink the leader reports to and the network daemon sends
// the exchange's figures to (null when none is given). The server starts here, so a port in
// use fails before any training.
std::shared_ptr<FiguresSink> StatsFromFlags(const Flags& f);
// The token the page's control requests carry in a job with a --job-key: an HMAC of a fixed
// text under the key (hex, 32 characters), so the key itself never crosses HTTP
// (`hogstream ui-token --job-key=FILE` prints it).
std::string UiControlToken(const JobKey& key);
// HogwildOptions from the Hogwild flags (bin/commands.cpp), for the SOLVERS spec `solvers`;
// `mine` (a job across machines) adds this machine's own settings from its --peers entry
// (private).
HogwildOptions HogwildFromFlags(const Flags& f, const std::string& solvers, const PeerEntry* mine = nullptr);

// This machine's network daemon from the flags of a job across machines (bin/commands.cpp):
// `peers` is the --peers text (or raw.bin's MAC1:MAC2:... when `raw_form`). Finds this machine's rank, opens its transport and says so
// in the log; `mine` receives this machine's entry (its own settings, from a topology file).
// --iface overrides the entry's iface=. Errors (a bad list, no local entry, a port in use) are
// one line. `solver` is the run's (its max_iter the run's global iterations): --aggregate's
// defaults and shares of the run follow it.
// `met` (a job started through the rendezvous store, bin/rendezvous.hpp): this machine's rank
// and the session key its frames are sealed with come from the store.
std::unique_ptr<NetJob> NetJobFromFlags(const Flags& f, const std::string& peers, bool raw_form,
                                        const pb::SolverParameter& solver, PeerEntry* mine = nullptr,
                                        Rendezvoused* met = nullptr);
// `hogstream train`'s job across machines: --peers, else the rendezvous store (--rendezvous or
// a launcher's environment, PlanRendezvous); null for a job on this host alone. `store`: the
// store this machine serves for a keyed job's new machines, to hold while the job runs.
std::unique_ptr<NetJob> TrainNetJob(const Flags& f, const pb::SolverParameter& solver, PeerEntry* mine,
                                    std::shared_ptr<void>* store);

}  // namespace hogstream
