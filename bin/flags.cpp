// bin/flags.hpp over CLI11: CLI11 splits the command line (the three flag forms, repeats,
// positionals in order, `--` and short flags); the Command table says what is declared, and the
// errors and the help are ours, so that each is one line and every flag shows its default.
#include "bin/flags.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <sstream>

#ifndef HS_VERSION
#define HS_VERSION "unknown"
#endif
#ifndef HS_GIT_COMMIT
#define HS_GIT_COMMIT ""
#endif

namespace hogstream {
namespace {

std::string Dashed(const std::string& name) { return name[0] == '-' ? name : "--" + name; }

// The name of a command-line word that looks like a flag ("--name=v" -> "--name"); "" if not.
std::string FlagWord(const std::string& word) {
  if (word.size() < 2 || word[0] != '-' || word == "--") return "";
  return word.substr(0, word.find('='));
}

// A table of names only, no help: the older constructor's.
Command Bare(const std::vector<std::string>& known, const std::vector<std::string>& boolean) {
  Command c;
  for (const std::string& n : known) {
    const bool is_bool = std::find(boolean.begin(), boolean.end(), n) != boolean.end();
    c.flags.push_back({n, is_bool ? "" : "VALUE", "", ""});
  }
  return c;
}

}  // namespace

std::string Version() {
  const std::string commit = HS_GIT_COMMIT;
  return std::string(HS_VERSION) + (commit.empty() ? "" : " (git " + commit + ")");
}

std::string HelpText(const Command& c) {
  std::ostringstream os;
  os << "usage: " << c.name << " [flags]" << (c.args.empty() ? "" : " " + c.args) << "\n";
  if (!c.about.empty()) os << c.about << (c.about.back() == '\n' ? "" : "\n");
  os << "flags:\n";
  // "  --name=VALUE  help (default: ...)"; a long --name=VALUE has the help on a line of its own.
  constexpr size_t kColumn = 28;
  auto row = [&](const std::string& left, const std::string& help) {
    os << "  " << left;
    if (left.size() + 2 > kColumn) os << "\n  ";
    os << std::string(left.size() + 2 > kColumn ? kColumn : kColumn - left.size(), ' ') << help << "\n";
  };
  for (const FlagSpec& f : c.flags) {
    std::string help = f.help;
    if (help.find("(default") == std::string::npos && help.find("(required") == std::string::npos)
      help += f.value.empty() ? " (default: off)" : " (default: " + (f.fallback.empty() ? "none" : f.fallback) + ")";
    row(Dashed(f.name) + (f.value.empty() ? "" : (f.name[0] == '-' ? " " : "=") + f.value), help);
  }
  row("-h, --help", "this help, then exit");
  row("--version", "the version, then exit");
  return os.str();
}

Flags::Flags(int argc, char** argv, int first, const std::vector<std::string>& known,
             const std::vector<std::string>& boolean)
    : Flags(Bare(known, boolean), argc, argv, first) {}

Flags::Flags(const Command& command, int argc, char** argv, int first) : specs_(command.flags) {
  std::vector<std::string> words(argv + std::min(first, argc), argv + argc);
  // --help and --version win wherever they stand (before a flag's value: `--job --help` asks
  // for help), and over any other mistake on the line.
  bool help = false, version = false, rest = false;  // rest: after `--`, arguments only
  for (const std::string& w : words) {
    rest = rest || w == "--";
    help = help || (!rest && (w == "--help" || w == "-h"));
    version = version || (!rest && w == "--version");
  }
  if (help || version) {  // (--version: "hogstream 0.1 ...", for `hogstream train` too)
    std::cout << (help ? HelpText(command) : command.name.substr(0, command.name.find(' ')) + " " + Version() + "\n");
    throw ProgramExit{0};
  }
  // CLI11 would take a value-less last flag for a mistake of its own wording; ours names it.
  if (!words.empty() && !rest) {
    const std::string last = words.back();
    for (const FlagSpec& f : specs_)
      HS_REQUIRE(f.value.empty() || last != Dashed(f.name)) << "flag " << last << " needs a value";
  }

  CLI::App app;
  app.set_help_flag();  // ours, above
  app.allow_extras();   // unknown flags come back in remaining(): one line below names the first
  // One list per flag, every value in order; a value never spills over into the positionals.
  std::vector<std::vector<std::string>> got(specs_.size());
  for (size_t i = 0; i < specs_.size(); ++i) {
    const FlagSpec& f = specs_[i];
    HS_CHECK(!f.name.empty() && (f.name[0] != '-' || f.name.size() == 2)) << "flag name '" << f.name << "'";
    if (f.value.empty())
      app.add_flag(Dashed(f.name) + "{true}", got[i]);
    else
      app.add_option(Dashed(f.name), got[i])->allow_extra_args(false);
  }
  app.add_option("positional", positional_);
  std::vector<const char*> cargs{"program"};
  for (const std::string& w : words) cargs.push_back(w.c_str());
  try {
    app.parse(static_cast<int>(cargs.size()), cargs.data());
  } catch (const CLI::ParseError& e) {
    HS_FAIL() << e.what();
  }
  for (const std::string& w : app.remaining()) {
    const std::string flag = FlagWord(w);
    HS_REQUIRE(flag.empty()) << "unknown flag " << flag;
    if (w != "--") positional_.push_back(w);  // a word CLI11 left unplaced: an argument
  }
  for (size_t i = 0; i < specs_.size(); ++i)
    if (!got[i].empty()) values_[specs_[i].name] = std::move(got[i]);
}

const FlagSpec& Flags::Declared(const std::string& name) const {
  for (const FlagSpec& f : specs_)
    if (f.name == name) return f;
  throw Bug("flag --" + name + " is read but not declared (bin/commands.cpp)");
}

long Flags::get_int(const std::string& name, long fallback, long min, long max) const {
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

long Flags::int_in(const std::string& name, long min, long max) const {
  const std::string& d = Declared(name).fallback;
  char* end = nullptr;
  const long fallback = std::strtol(d.c_str(), &end, 10);
  HS_CHECK(!d.empty() && *end == 0) << "--" << name << "'s default '" << d << "' is no integer";
  return get_int(name, fallback, min, max);
}

}  // namespace hogstream
