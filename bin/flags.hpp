// Command-line flags for hogstream's programs: `--name=value`, `--name value`, or a bare
// `--name` for booleans; flags may repeat (--input ... --input ...). Positional arguments are
// kept in order. A flag the command does not know is an Error naming it.
#pragma once

#include <algorithm>
#include <climits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/common.hpp"

namespace hogstream {

class Flags {
 public:
  // `known`: the flag names this command accepts; `boolean`: those that take no value.
  Flags(int argc, char** argv, int first, const std::vector<std::string>& known,
        const std::vector<std::string>& boolean = {}) {
    for (int i = first; i < argc; ++i) {
      std::string a = argv[i];
      if (a.rfind("--", 0) != 0 || a == "--") {
        positional_.push_back(a);
        continue;
      }
      std::string name = a.substr(2), value;
      const auto eq = name.find('=');
      const bool is_bool = std::find(boolean.begin(), boolean.end(), name) != boolean.end();
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      } else if (is_bool) {
        value = "true";
      } else {
        HS_REQUIRE(i + 1 < argc) << "flag --" << name << " needs a value";
        value = argv[++i];
      }
      HS_REQUIRE(std::find(known.begin(), known.end(), name) != known.end())
          << "unknown flag --" << name;
      values_[name].push_back(value);
    }
  }

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback = "") const {
    auto it = values_.find(name);
    return it == values_.end() ? fallback : it->second.back();
  }
  std::vector<std::string> all(const std::string& name) const {
    auto it = values_.find(name);
    return it == values_.end() ? std::vector<std::string>{} : it->second;
  }
  // An integer flag that must lie in [min, max]; `fallback` when absent. Out of range (or not
  // a whole number) is one Error: "--iterations must be between 0 and 2147483647, got
  // 4294967297" — never a silent wrap when the caller narrows it.
  long get_int(const std::string& name, long fallback, long min, long max) const {
    if (!has(name)) return fallback;
    const std::string v = get(name);
    size_t pos = 0;
    long n = 0;
    bool range = false;
    try {
      n = std::stol(v, &pos);
    } catch (const std::out_of_range&) {
      range = true;  // digits, but beyond long
    } catch (...) {
      pos = 0;
    }
    HS_REQUIRE(range || (pos == v.size() && !v.empty()))
        << "--" << name << " wants an integer, got '" << v << "'";
    HS_REQUIRE(!range && n >= min && n <= max)
        << "--" << name << " must be between " << min << " and " << max << ", got " << v;
    return n;
  }
  // Every caller narrows to int, so the default range is int's.
  long get_int(const std::string& name, long fallback) const {
    return get_int(name, fallback, INT_MIN, INT_MAX);
  }
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

}  // namespace hogstream
