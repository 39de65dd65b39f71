// --metrics=[HOST:]PORT: a Prometheus text endpoint (GET /metrics) with this process's figures,
// served by prometheus-cpp's own HTTP server (civetweb) on its threads. Values change only
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

// "[HOST:]PORT" -> "HOST:PORT" for the server, 127.0.0.1 by default; Error when malformed.
std::string MetricsAddress(const std::string& spec);

// Starts the endpoint; Error when the port cannot be bound (in use, say) or when this build
// has no prometheus-cpp. The server stops when the last reference goes.
std::shared_ptr<FiguresSink> StartMetrics(const std::string& spec);

// Whether this build serves metrics (prometheus-cpp was found at configure time).
bool MetricsAvailable();

}  // namespace hogstream
