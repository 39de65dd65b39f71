// --metrics=[HOST:]PORT: a Prometheus text endpoint (GET /metrics) with this process's figures,
// kept in prometheus-cpp's registry and served by the process's one web server (observe/web.hpp,
// beside the live page). Values change only
// when a solver reports (the leader's display interval and test pass; across machines also
// each machine's own solvers) and, across machines, when the network daemon reports (about
// once a second: the exchange, per peer); a scrape reads the last ones.
//
// Binds to 127.0.0.1 unless HOST is given (0.0.0.0 for every interface): training figures are
// not for the whole network by default. Not for: pushing to a gateway, or per-layer timings.
#pragma once

#include <memory>
#include <string>

#include "observe/sink.hpp"

namespace hogstream {

// "[HOST:]PORT" -> "HOST:PORT" for the server, 127.0.0.1 by default; Error naming --FLAG when
// malformed.
std::string MetricsAddress(const std::string& spec, const char* flag = "metrics");

// The figures as Prometheus' text format (the body of GET /metrics).
class MetricsText : public FiguresSink {
 public:
  virtual std::string Text() const = 0;
};
// Error when this build has no prometheus-cpp.
std::unique_ptr<MetricsText> MakeMetricsText();

// Whether this build serves metrics and the page (prometheus-cpp and civetweb were found at
// configure time).
bool MetricsAvailable();

}  // namespace hogstream
