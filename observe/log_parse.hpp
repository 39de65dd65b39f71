// Reads a training log in Caffe's format — ours, or real Caffe's — or a --stats_json file into
// series of (iteration, seconds, value) points, for `hogstream plot`. The log lines it understands:
//
//   I1123 12:14:59.489733 12192 solver.cpp:238] Iteration 100 (12 iter/s, 8s/100 iters), loss = 0.3
//   ...] Iteration 100, loss = 0.3                       (Caffe's older display, the final one)
//   ...] Iteration 100, lr = 0.01
//   ...] Iteration 500, Testing net (#0)
//   ...]     Test net output #0: accuracy = 0.87
//   ...]     Test net output #1: loss = 0.4 (* 1 = 0.4 loss)
//   ...]     Train net output #0: loss = 0.3 (* 1 = 0.3 loss)
//   ...] Progress: 200/600 iterations, 1234 img/s, ETA 0h00m10s   (ours only)
//
// Seconds count from the first "Solving" line (as Caffe's extract_seconds does), else from the
// first timestamped line; the glog date (MMDD, or YYYYMMDD) carries a run across midnight and
// New Year. Other lines are skipped: a log is a stream of many programs' chatter.
#pragma once

#include <cstdint>
#include <istream>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace hogstream {

struct LogPoint {
  int64_t iter = 0;
  double seconds = 0;
  double value = 0;
};

struct TrainingLog {
  std::vector<LogPoint> train_loss;  // the smoothed "Iteration N ..., loss = X"
  std::vector<LogPoint> lr;
  std::vector<LogPoint> img_per_s;   // our Progress lines
  // Test outputs by name ("accuracy"; "accuracy (net 1)" for a second test net's), and which
  // of them are losses (they carry Caffe's "(* w = ... loss)" suffix, or are named *loss*).
  std::map<std::string, std::vector<LogPoint>> test;
  std::set<std::string> test_losses;
  std::map<std::string, std::vector<LogPoint>> train_outputs;
  size_t points() const;
};

TrainingLog ParseTrainingLog(std::istream& in);
// The same series from a --stats_json file (observe/stats_json.hpp): its "train" records (loss,
// lr, img/s, outputs) and "test" records (outputs; net k > 0 as "NAME (net k)"), seconds from
// their "elapsed"; other records and lines that are no record of ours are skipped.
TrainingLog ParseStatsJson(std::istream& in);
// Error when the file cannot be read. A file whose first character is '{' is read as a
// --stats_json file, any other as a log.
TrainingLog ParseTrainingLogFile(const std::string& path);

// Seconds since 0000-03-01 of a glog line's "MMDD HH:MM:SS.uuuuuu" (or "YYYYMMDD ..."), with
// `year` used when the line has none; false when the line does not start with a glog prefix.
bool GlogTime(const std::string& line, int year, double* seconds, int* month);

}  // namespace hogstream
