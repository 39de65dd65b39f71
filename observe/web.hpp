// A process's one web server (civetweb, on its own threads), at --metrics=[HOST:]PORT or
// --ui=[HOST:]PORT:
//   GET  /                  the live page (observe/page.cpp: HTML, CSS and script built into the
//                           binary, nothing fetched from elsewhere): the test outputs, the losses
//                           and images/s against the global iteration, the job's machines
//   GET  /stats.json        the last records as --stats_json writes them (RecentRecords), those
//                           after ?after=N: {"next": N, "control": ..., "records": [...]}
//   GET  /metrics           Prometheus' text format (observe/metrics.hpp)
//   POST /control/stop      the same requests as SIGINT and SIGHUP (snapshot and stop; snapshot),
//   POST /control/snapshot  only with --ui_control, and then only with the job's control token
//                           (X-Hogstream-Token; a job with a --job-key) or from this host (a job
//                           without one); anything else is refused with one log line.
// It binds to 127.0.0.1 unless a HOST is given: the figures, and the page that can stop a job,
// are not for the whole network by default. The page reads /stats.json every 1.5 s; a follower
// machine's page reads the leader's test records from the leader's page (same port, its address
// from the job's list) where it answers. Not for: HTTPS, logins, writing files.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "observe/sink.hpp"

namespace hogstream {

enum class SolverAction;  // core/group.hpp

struct WebOptions {
  std::string address;   // HOST:PORT (MetricsAddress)
  const char* flag = "metrics";  // the flag that named it, for the one line of an error
  bool control = false;  // --ui_control: the page's buttons
  // Non-empty: a control request must carry this token (UiControlToken of the job's key);
  // empty: only requests from this host's loopback addresses are taken.
  std::string token;
  // Where a taken request goes (core/signals.hpp's RequestAction): the action and who asked.
  std::function<void(SolverAction, const std::string&)> request;
};

// Starts serving; Error when the address cannot be bound (a port in use) or this build has no
// civetweb. Serving stops when the last reference to the sink goes.
std::shared_ptr<FiguresSink> StartWeb(const WebOptions& options);

// The page itself (observe/page.cpp).
const std::string& LivePage();

}  // namespace hogstream
