// What watches a job (--metrics, --stats_json) takes both kinds of figures: the solvers'
// (core/stats.hpp: StatsSink) and each machine's exchange (sync/figures.hpp: NetworkSink).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "core/stats.hpp"
#include "sync/figures.hpp"

namespace hogstream {

class FiguresSink : public StatsSink, public NetworkSink {};

// Hands every record to several sinks in order (--metrics and --stats_json together).
class TeeSink final : public FiguresSink {
 public:
  explicit TeeSink(std::vector<std::shared_ptr<FiguresSink>> sinks) : sinks_(std::move(sinks)) {}
  void OnTrain(TrainFigures& f) override {
    for (auto& s : sinks_) s->OnTrain(f);
  }
  void OnTest(const TestFigures& f) override {
    for (auto& s : sinks_) s->OnTest(f);
  }
  void OnNetwork(const NetworkFigures& f) override {
    for (auto& s : sinks_) s->OnNetwork(f);
  }

 private:
  std::vector<std::shared_ptr<FiguresSink>> sinks_;
};

}  // namespace hogstream
