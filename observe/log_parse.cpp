#include "observe/log_parse.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/common.hpp"

namespace hogstream {
namespace {

// Days since 0000-03-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
int64_t Days(int y, int m, int d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  return era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy;
}

bool Digits(const std::string& s, size_t pos, size_t n, int* out) {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

// The number at `p` (strtod's syntax); false when there is none.
bool NumberAt(const std::string& s, size_t p, double* v) {
  if (p >= s.size()) return false;
  const char* begin = s.c_str() + p;
  char* end = nullptr;
  *v = std::strtod(begin, &end);
  return end != begin;
}

// After `key` in `s`, the number; false when the key or the number is missing.
bool NumberAfter(const std::string& s, const char* key, double* v) {
  const size_t p = s.find(key);
  return p != std::string::npos && NumberAt(s, p + std::strlen(key), v);
}

}  // namespace

bool GlogTime(const std::string& line, int year, double* seconds, int* month) {
  if (line.size() < 21 || !std::strchr("IWEF", line[0])) return false;
  const size_t space = line.find(' ');
  if (space != 5 && space != 9) return false;  // I1123 or I20231123
  int y = year, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  size_t p = 1;
  if (space == 9) {
    if (!Digits(line, 1, 4, &y)) return false;
    p = 5;
  }
  if (!Digits(line, p, 2, &mo) || !Digits(line, p + 2, 2, &d)) return false;
  p = space + 1;
  if (!Digits(line, p, 2, &h) || line[p + 2] != ':' || !Digits(line, p + 3, 2, &mi) ||
      line[p + 5] != ':' || !Digits(line, p + 6, 2, &s))
    return false;
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) return false;
  double frac = 0;
  if (p + 8 < line.size() && line[p + 8] == '.') {
    double scale = 0.1;
    for (size_t i = p + 9; i < line.size() && line[i] >= '0' && line[i] <= '9'; ++i, scale /= 10)
      frac += (line[i] - '0') * scale;
  }
  *seconds = Days(y, mo, d) * 86400.0 + h * 3600.0 + mi * 60.0 + s + frac;
  *month = space == 9 ? y * 12 + mo : mo;
  return true;
}

size_t TrainingLog::points() const {
  size_t n = train_loss.size() + lr.size() + img_per_s.size();
  for (const auto& [name, pts] : test) n += pts.size();
  return n;
}

TrainingLog ParseTrainingLog(std::istream& in) {
  TrainingLog log;
  // Points carry absolute times until the end, when the origin (the first "Solving" line, or
  // the first timestamp) is known.
  int year = 2001;  // glog's default prefix has no year; any year works for differences
  int last_month = -1;
  double now = 0, first = 0, solving = 0;
  bool have_time = false, have_solving = false;
  int64_t iter = 0;
  int test_net = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    double t = 0;
    int month = 0;
    size_t msg = 0;
    if (GlogTime(line, year, &t, &month)) {
      // Without a year in the prefix, a month that goes back is New Year's Eve passing.
      if (line.find(' ') == 5 && last_month > 0 && month < last_month) {
        ++year;
        GlogTime(line, year, &t, &month);
      }
      last_month = month;
      now = t;
      if (!have_time) first = t;
      have_time = true;
      const size_t close = line.find("] ");
      msg = close == std::string::npos ? line.size() : close + 2;
    }
    const std::string m = line.substr(msg);
    if (!have_solving && m.rfind("Solving ", 0) == 0) {
      solving = now;
      have_solving = true;
    }
    double v = 0;
    const size_t it_pos = m.find("Iteration ");
    if (it_pos != std::string::npos && NumberAt(m, it_pos + 10, &v)) iter = static_cast<int64_t>(v);
    if (it_pos != std::string::npos) {
      if (NumberAfter(m, ", loss = ", &v)) log.train_loss.push_back({iter, now, v});
      if (NumberAfter(m, ", lr = ", &v)) log.lr.push_back({iter, now, v});
      if (NumberAfter(m, "Testing net (#", &v)) test_net = static_cast<int>(v);
    }
    const bool test_out = m.find("Test net output #") != std::string::npos;
    if (test_out || m.find("Train net output #") != std::string::npos) {
      // "    Test net output #0: accuracy = 0.87 (* w = ... loss)"
      const size_t colon = m.find(": ", m.find("output #"));
      const size_t eq = colon == std::string::npos ? colon : m.find(" = ", colon);
      if (eq != std::string::npos && NumberAt(m, eq + 3, &v)) {
        std::string name = m.substr(colon + 2, eq - colon - 2);
        if (test_out) {
          if (test_net > 0) name += " (net " + std::to_string(test_net) + ")";
          log.test[name].push_back({iter, now, v});
          if (m.find(" loss)", eq) != std::string::npos || name.find("loss") != std::string::npos)
            log.test_losses.insert(name);
        } else {
          log.train_outputs[name].push_back({iter, now, v});
        }
      }
    }
    const size_t progress = m.find("Progress: ");
    if (progress != std::string::npos && NumberAt(m, progress + 10, &v)) {
      const int64_t at = static_cast<int64_t>(v);
      const size_t comma = m.find(", ", progress);
      double rate = 0;
      if (comma != std::string::npos && NumberAt(m, comma + 2, &rate) &&
          m.find(" img/s", comma) != std::string::npos)
        log.img_per_s.push_back({at, now, rate});
    }
  }
  const double origin = have_solving ? solving : first;
  auto shift = [origin](std::vector<LogPoint>& pts) {
    for (LogPoint& p : pts) p.seconds -= origin;
  };
  shift(log.train_loss);
  shift(log.lr);
  shift(log.img_per_s);
  for (auto& [name, pts] : log.test) shift(pts);
  for (auto& [name, pts] : log.train_outputs) shift(pts);
  return log;
}

TrainingLog ParseStatsJson(std::istream& in) {
  using Json = nlohmann::json;
  TrainingLog log;
  auto number = [](const Json& j, const char* key, double* v) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_number()) return false;
    *v = it->get<double>();
    return true;
  };
  for (std::string line; std::getline(in, line);) {
    const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string() || !j.contains("iter") ||
        !j["iter"].is_number_integer())
      continue;  // not a record of ours (another program's line, a cut last line)
    const std::string type = j["type"];
    LogPoint at;
    at.iter = j["iter"].get<int64_t>();
    number(j, "elapsed", &at.seconds);
    auto add = [&at](std::vector<LogPoint>& to, double v) {
      LogPoint p = at;
      p.value = v;
      to.push_back(p);
    };
    double v = 0;
    if (type == "train") {
      if (number(j, "loss", &v)) add(log.train_loss, v);
      if (number(j, "lr", &v)) add(log.lr, v);
      if (number(j, "img_per_s", &v)) add(log.img_per_s, v);
      if (j.contains("outputs") && j["outputs"].is_object())
        for (const auto& [name, value] : j["outputs"].items())
          if (value.is_number()) add(log.train_outputs[name], value.get<double>());
    } else if (type == "test" && j.contains("outputs") && j["outputs"].is_object()) {
      const int net = j.contains("net") && j["net"].is_number_integer() ? j["net"].get<int>() : 0;
      for (const auto& [name, value] : j["outputs"].items()) {
        if (!value.is_number()) continue;
        const std::string key = net == 0 ? name : name + " (net " + std::to_string(net) + ")";
        add(log.test[key], value.get<double>());
        if (name.find("loss") != std::string::npos) log.test_losses.insert(key);
      }
    }
  }
  return log;
}

TrainingLog ParseTrainingLogFile(const std::string& path) {
  std::ifstream in(path);
  HS_REQUIRE(in.good()) << "cannot read log '" << path << "': " << ErrnoText(errno);
  // A --stats_json file (its first character a '{') or a log in Caffe's format.
  in >> std::ws;
  const bool json = in.peek() == '{';
  return json ? ParseStatsJson(in) : ParseTrainingLog(in);
}

}  // namespace hogstream
