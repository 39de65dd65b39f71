#include "bin/program.hpp"

#include "core/signals.hpp"
#include "observe/metrics.hpp"
#include "observe/stats_json.hpp"

#include <glog/logging.h>

#include <algorithm>
#include <iostream>

namespace hogstream {

int RunProgram(const char* name, const char* argv0, const std::function<int()>& body) {
  // Caffe's log format on stderr, so Caffe's log parsers read our logs.
  FLAGS_logtostderr = true;
  FLAGS_colorlogtostderr = false;
  FLAGS_log_year_in_prefix = false;  // "I1121 ...", as Caffe's logs and parsers have it
  google::InitGoogleLogging(argv0);
  try {
    return body();
  } catch (const Error& e) {
    std::cerr << name << ": " << e.what() << "\n";
  } catch (const Bug& e) {
    std::cerr << name << ": internal error: " << e.what() << "\n";
  } catch (const std::bad_alloc&) {
    std::cerr << name << ": out of memory\n";
  } catch (const std::exception& e) {
    std::cerr << name << ": " << e.what() << "\n";
  }
  return 1;
}

std::map<std::string, std::vector<int>> InputShapes(const Flags& f) {
  std::map<std::string, std::vector<int>> shapes;
  for (const std::string& spec : f.all("input")) {
    const auto colon = spec.find(':');
    HS_REQUIRE(colon != std::string::npos && colon > 0)
        << "--input wants TOP:N,C,H,W, got '" << spec << "'";
    std::vector<int> dims;
    const std::string rest = spec.substr(colon + 1);
    size_t pos = 0;
    while (pos <= rest.size()) {
      const size_t comma = std::min(rest.find(',', pos), rest.size());
      const std::string d = rest.substr(pos, comma - pos);
      HS_REQUIRE(!d.empty() && d.find_first_not_of("0123456789") == std::string::npos)
          << "--input wants TOP:N,C,H,W with positive integers, got '" << spec << "'";
      HS_REQUIRE(d.size() <= 9) << "--input dimension " << d << " is too large in '" << spec << "'";
      dims.push_back(std::stoi(d));
      HS_REQUIRE(dims.back() > 0) << "--input dimensions must be > 0 in '" << spec << "'";
      pos = comma + 1;
    }
    shapes[spec.substr(0, colon)] = dims;
  }
  return shapes;
}

std::shared_ptr<StatsSink> StatsFromFlags(const Flags& f) {
  std::vector<std::shared_ptr<StatsSink>> sinks;
  if (f.has("metrics")) sinks.push_back(StartMetrics(f.get("metrics")));
  if (f.has("stats_json")) sinks.push_back(std::make_shared<JsonLinesSink>(f.get("stats_json")));
  if (sinks.empty()) return nullptr;
  if (sinks.size() == 1) return sinks[0];
  return std::make_shared<TeeSink>(std::move(sinks));
}

HogwildOptions HogwildFromFlags(const Flags& f, const std::string& solvers) {
  HS_REQUIRE(!(f.has("snapshot") && f.has("weights")))
      << "give --snapshot (resume) or --weights (fine-tune), not both";
  HogwildOptions h;
  h.solvers = ParseSolverSpec(solvers);
  h.shm = f.get("shm");
  h.private_copies = f.has("private");
  const long chunk = f.get_int("chunk", 16384, 1, INT_MAX);
  HS_REQUIRE(chunk > 0) << "--chunk must be > 0";
  h.chunk_floats = static_cast<size_t>(chunk);
  h.resume = f.get("snapshot");
  h.weights = f.get("weights");
  h.input_shapes = InputShapes(f);
  // Before any solver thread exists, so that every thread inherits the blocked signals.
  h.action = InstallSignalActions(f.get("sigint_effect", "stop"), f.get("sighup_effect", "snapshot"));
  // After the signals are blocked: the metrics server's threads must not take a SIGINT (it
  // would kill the process instead of stopping the job cleanly).
  h.stats = StatsFromFlags(f);
  return h;
}

}  // namespace hogstream
