// --stats_json=FILE: the figures as JSON lines, one object per display interval ("type":"train":
// the leader's, or across machines this machine's own solvers' with "leads": false), one per
// test pass ("type":"test") and, across machines, one about every second ("type":"network":
// this machine's exchange and what it sees of every other machine), appended and flushed each time so
// `tail -f FILE | jq` follows a job. The field names are stable; README.md lists them.
//
// Not a JSON library: it writes these three records (with nlohmann-json) and nothing else.
#pragma once

#include <cstdio>
#include <mutex>
#include <string>

#include "observe/sink.hpp"

namespace hogstream {

// The double nearest `v` written with `significant` digits (not finite: v itself), for figures
// in JSON that read as they were measured (nlohmann-json writes every digit of a double).
double RoundedTo(double v, int significant);

class JsonLinesSink : public FiguresSink {
 public:
  // Opens FILE for appending (created if absent); Error when it cannot be.
  explicit JsonLinesSink(const std::string& path);
  ~JsonLinesSink() override;
  JsonLinesSink(const JsonLinesSink&) = delete;
  JsonLinesSink& operator=(const JsonLinesSink&) = delete;

  void OnTrain(TrainFigures& f) override;
  void OnTest(const TestFigures& f) override;
  void OnNetwork(const NetworkFigures& f) override;

  // The records as text (one line, no newline), for tests and for the sink itself.
  static std::string TrainLine(const TrainFigures& f, double unix_time);
  static std::string TestLine(const TestFigures& f, double unix_time);
  static std::string NetworkLine(const NetworkFigures& f, double unix_time);

 private:
  void Write(const std::string& line);
  std::string path_;
  std::FILE* file_ = nullptr;
  std::mutex mu_;  // a leader that dies mid-write is replaced by another thread
};

}  // namespace hogstream
