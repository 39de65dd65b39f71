// --stats_json=FILE: the figures as JSON lines, one object per display interval ("type":"train":
// the leader's, or across machines this machine's own solvers' with "leads": false), one per
// test pass ("type":"test") and, across machines, one about every second ("type":"network":
// this machine's exchange and what it sees of every other machine), appended and flushed each time so
// `tail -f FILE | jq` follows a job. The field names are stable; README.md lists them.
//
// Not a JSON library: it writes these three records (with nlohmann-json) and nothing else.
#pragma once

#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

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

// The last records, as JsonLinesSink writes them, for whoever asks (the page, observe/web.hpp):
// every test pass (up to kTests), the last kTrains display records and the last kNetworks
// network records, each numbered in the order they came (from 1), so a reader that has
// everything up to N asks for what came after it.
class RecentRecords : public FiguresSink {
 public:
  static constexpr size_t kTests = 20000, kTrains = 20000, kNetworks = 300;
  void OnTrain(TrainFigures& f) override;
  void OnTest(const TestFigures& f) override;
  void OnNetwork(const NetworkFigures& f) override;
  // The records numbered above `after`, in order, and the number of the last one (0: none yet).
  std::vector<std::string> After(uint64_t after, uint64_t* last) const;

 private:
  void Keep(std::deque<std::pair<uint64_t, std::string>>& q, size_t cap, std::string line);
  mutable std::mutex mu_;
  uint64_t count_ = 0;
  std::deque<std::pair<uint64_t, std::string>> tests_, trains_, networks_;
};

}  // namespace hogstream
