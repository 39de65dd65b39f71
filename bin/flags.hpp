// Command-line flags for hogstream's programs: `--name=value`, `--name value`, or a bare
// `--name` for booleans; flags may repeat (--input ... --input ...). Positional arguments are
// kept in order. A flag the command does not declare is an Error naming it.
//
// Every command declares its flags once, in a Command (bin/commands.cpp): name, value, default
// and a line of help. `--help` (or -h) prints the help made from that table and `--version` the
// project's version; both exit 0. Reading a flag the table does not declare is a Bug, so no flag
// the code reads can be missing from --help. CLI11 does the parsing (bin/flags.cpp).
#pragma once

#include <climits>
#include <map>
#include <string>
#include <vector>

#include "base/common.hpp"

namespace hogstream {

struct FlagSpec {
  std::string name;      // without the dashes ("iterations"), or a short flag with its dash ("-o")
  std::string value;     // what the value is (N, FILE, ...); empty: a boolean, given bare
  std::string fallback;  // what get() gives when the flag is absent ("": none)
  std::string help;      // one line; says "(default: ...)" itself where the default is no plain
                         // value (the help adds "(default: FALLBACK)", "(default: off)" otherwise)
};

struct Command {
  std::string name;   // as typed: "hogstream train", "hogwild.bin"
  std::string args;   // the positional arguments in the usage line ("SOLVER.prototxt SOLVERS")
  std::string about;  // what it does; its first line is the summary in `hogstream --help`
  std::vector<FlagSpec> flags;
};

// The project's version (CMake's) and the git commit it was configured at, if known:
// "0.1 (git 1a2b3c4)".
std::string Version();
// The usage line, `about`, and one line per flag with its value, help and default.
std::string HelpText(const Command& command);

// Thrown once --help or --version has been printed: the program ends with `code`.
struct ProgramExit {
  int code;
};

class Flags {
 public:
  // argv[first...] against `command`'s flags. --help / -h and --version print to stdout and
  // throw ProgramExit{0}.
  Flags(const Command& command, int argc, char** argv, int first);
  // `known`: the flag names accepted; `boolean`: those that take no value (no help text).
  Flags(int argc, char** argv, int first, const std::vector<std::string>& known,
        const std::vector<std::string>& boolean = {});

  bool has(const std::string& name) const { return values_.count(Declared(name).name) > 0; }
  // Whether this program takes --NAME at all (a helper shared by programs of different flags).
  bool declares(const std::string& name) const {
    for (const FlagSpec& f : specs_)
      if (f.name == name) return true;
    return false;
  }
  // The last value given, else `fallback`.
  std::string get(const std::string& name, const std::string& fallback) const {
    auto it = values_.find(Declared(name).name);
    return it == values_.end() ? fallback : it->second.back();
  }
  // The last value given, else the declared default.
  std::string get(const std::string& name) const { return get(name, Declared(name).fallback); }
  std::vector<std::string> all(const std::string& name) const {
    auto it = values_.find(Declared(name).name);
    return it == values_.end() ? std::vector<std::string>{} : it->second;
  }
  // An integer flag that must lie in [min, max]; `fallback` when absent. Out of range (or not
  // a whole number) is one Error: "--iterations must be between 0 and 2147483647, got
  // 4294967297" — never a silent wrap when the caller narrows it.
  long get_int(const std::string& name, long fallback, long min, long max) const;
  // Every caller narrows to int, so the default range is int's.
  long get_int(const std::string& name, long fallback) const {
    return get_int(name, fallback, INT_MIN, INT_MAX);
  }
  // The same with the declared default when absent.
  long int_in(const std::string& name, long min, long max) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  const FlagSpec& Declared(const std::string& name) const;

  std::vector<FlagSpec> specs_;
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

}  // namespace hogstream
