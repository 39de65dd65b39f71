// bin/flags.hpp against a declared table: the three flag forms, repeats, positionals, one-line
// errors, defaults from the table, --help made from it; and every program and subcommand
// answering --help (every flag it accepts, with its default) and --version with exit status 0.
#include "bin/flags.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "bin/commands.hpp"
#include "test/program_runner.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

const Command kDemo = {"demo", "A B", "a command for the tests",
                       {{"n", "N", "7", "a number"},
                        {"name", "TEXT", "", "a text"},
                        {"each", "X", "", "repeatable"},
                        {"on", "", "", "a boolean"},
                        {"-o", "OUT", "", "a short flag"}}};

Flags Parse(std::vector<std::string> args, const Command& c = kDemo) {
  static std::string prog = "demo";
  std::vector<char*> argv{prog.data()};
  for (auto& a : args) argv.push_back(a.data());
  return Flags(c, static_cast<int>(argv.size()), argv.data(), 1);
}

// The Error `run` throws, or "(no error)".
template <typename F>
std::string ErrorOf(F run) {
  try {
    run();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
std::string ErrorOf(const std::vector<std::string>& args) {
  return ErrorOf([&] { Parse(args); });
}

TEST(FlagsTable, TheThreeFormsRepeatsAndPositionals) {
  const Flags f = Parse({"a", "--n=3", "--name", "x y", "b", "--on", "--each", "1", "--each=2", "c", "-o", "p.png"});
  EXPECT_EQ(f.get("n"), "3");
  EXPECT_EQ(f.get("name"), "x y");
  EXPECT_TRUE(f.has("on"));
  EXPECT_EQ(f.get("on"), "true");
  EXPECT_EQ(f.all("each"), (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(f.get("each"), "2");  // the last one wins where one value is read
  EXPECT_EQ(f.get("-o"), "p.png");
  EXPECT_EQ(f.positional(), (std::vector<std::string>{"a", "b", "c"}));
  // A value never takes the next word with it; a value may start with a dash; -oOUT; `--`.
  const Flags g = Parse({"--each=1", "p", "--n", "-5", "-oq.svg", "--", "--n"});
  EXPECT_EQ(g.all("each"), std::vector<std::string>{"1"});
  EXPECT_EQ(g.get_int("n", 0), -5);
  EXPECT_EQ(g.get("-o"), "q.svg");
  EXPECT_EQ(g.positional(), (std::vector<std::string>{"p", "--n"}));
}

TEST(FlagsTable, DefaultsComeFromTheTable) {
  const Flags f = Parse({});
  EXPECT_FALSE(f.has("n"));
  EXPECT_EQ(f.get("n"), "7");
  EXPECT_EQ(f.int_in("n", 0, 10), 7);
  EXPECT_EQ(f.get("name"), "");
  EXPECT_EQ(f.get("name", "fallback"), "fallback");
  EXPECT_EQ(Parse({"--n=9"}).int_in("n", 0, 10), 9);
  EXPECT_EQ(ErrorOf([] { Parse({"--n=11"}).int_in("n", 0, 10); }), "--n must be between 0 and 10, got 11");
}

TEST(FlagsTable, MistakesAreOneLine) {
  EXPECT_EQ(ErrorOf({"--nope"}), "unknown flag --nope");
  EXPECT_EQ(ErrorOf({"--nope=3", "a"}), "unknown flag --nope");
  EXPECT_EQ(ErrorOf({"a", "--nope", "3"}), "unknown flag --nope");
  EXPECT_EQ(ErrorOf({"-z"}), "unknown flag -z");
  EXPECT_EQ(ErrorOf({"--name"}), "flag --name needs a value");
  EXPECT_EQ(ErrorOf({"a", "-o"}), "flag -o needs a value");
  EXPECT_EQ(ErrorOf({"--n=3", "a"}), "(no error)");
  EXPECT_EQ(ErrorOf([] { Parse({"--n=x"}).int_in("n", 0, 10); }), "--n wants an integer, got 'x'");
}

// Code that reads a flag its table does not declare is a bug, caught wherever it runs: no flag
// the code reads can be missing from --help.
TEST(FlagsTable, ReadingAnUndeclaredFlagIsABug) {
  const Flags f = Parse({});
  EXPECT_THROW(f.has("undeclared"), Bug);
  EXPECT_THROW(f.get("undeclared"), Bug);
  EXPECT_THROW(f.all("undeclared"), Bug);
  EXPECT_THROW(f.get_int("undeclared", 0), Bug);
  EXPECT_THROW(f.int_in("name", 0, 1), Bug);  // a default that is no integer
}

TEST(FlagsTable, HelpAndVersionPrintAndExitZero) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--help"}, {"-h"}, {"a", "--n=3", "--help"}, {"--nope", "-h"}, {"--name", "--help"}}) {
    testing::internal::CaptureStdout();
    try {
      Parse(args);
      ADD_FAILURE() << args[0] << ": no exit";
    } catch (const ProgramExit& e) {
      EXPECT_EQ(e.code, 0);
    }
    EXPECT_EQ(testing::internal::GetCapturedStdout(), HelpText(kDemo)) << args[0];
  }
  testing::internal::CaptureStdout();
  EXPECT_THROW(Parse({"a", "--version"}), ProgramExit);
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "demo " + Version() + "\n");
  EXPECT_EQ(Version().rfind(HS_PROJECT_VERSION, 0), 0u) << Version();
  // After `--`, --help is an argument like any other.
  EXPECT_EQ(Parse({"--", "--help"}).positional(), std::vector<std::string>{"--help"});
}

TEST(FlagsTable, HelpShowsEveryFlagWithItsDefault) {
  const std::string help = HelpText(kDemo);
  EXPECT_EQ(help.rfind("usage: demo [flags] A B\na command for the tests\n", 0), 0u) << help;
  for (const char* line : {"  --n=N ", "a number (default: 7)\n", "  --name=TEXT ", "a text (default: none)\n",
                           "  --on ", "a boolean (default: off)\n", "  -o OUT ", "  -h, --help ", "  --version "})
    EXPECT_NE(help.find(line), std::string::npos) << line << " not in\n" << help;
}

// ------------------------------------------------------------------------------- programs

struct Program {
  std::string binary;              // the executable
  std::vector<std::string> prefix;  // the subcommand, if any
  Command command;
};

std::vector<Program> AllPrograms() {
  std::vector<Program> all = {{HS_HOGWILD_BIN, {}, HogwildBinCommand("hogwild.bin")},
                              {HS_GPUS_BIN, {}, HogwildBinCommand("gpus.bin")},
                              {HS_RAW_BIN, {}, RawBinCommand()}};
  for (const Command& c : HogstreamCommands())
    all.push_back({HS_HOGSTREAM_BIN, {c.name.substr(c.name.find(' ') + 1)}, c});
  return all;
}

class ProgramHelp : public ::testing::Test {
 protected:
  test::Finished Run(const Program& p, const std::vector<std::string>& args) {
    std::vector<std::string> all = p.prefix;
    all.insert(all.end(), args.begin(), args.end());
    return test::RunProgram(p.binary, all, scratch_, 60);
  }
  test::ScratchDir scratch_{"help"};
};

// The flag names a --help lists: "  --name=..." or "  -o ..." at the start of a line.
std::set<std::string> Listed(const std::string& help) {
  std::set<std::string> names;
  const std::regex row(R"(^  (--?[A-Za-z][A-Za-z0-9_-]*))", std::regex::multiline);
  for (auto it = std::sregex_iterator(help.begin(), help.end(), row); it != std::sregex_iterator(); ++it)
    names.insert((*it)[1]);
  return names;
}

TEST_F(ProgramHelp, EveryProgramListsEveryFlagItAcceptsWithItsDefault) {
  for (const Program& p : AllPrograms()) {
    SCOPED_TRACE(p.command.name);
    const test::Finished r = Run(p, {"--help"});
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out.rfind("usage: " + p.command.name + " [flags]", 0), 0u) << r.out;
    const size_t table = r.out.find("\nflags:\n");
    ASSERT_NE(table, std::string::npos) << r.out;
    const std::string rows = r.out.substr(table + 7);  // from the newline before the first row
    std::set<std::string> declared = {"-h", "--version"};
    for (const FlagSpec& f : p.command.flags) {
      const std::string name = f.name[0] == '-' ? f.name : "--" + f.name;
      declared.insert(name);
      // Its row, to the next flag's: says the default (or that the flag is required).
      const size_t at = rows.find("\n  " + name + (f.value.empty() ? "" : name[1] == '-' ? "=" : " "));
      ASSERT_NE(at, std::string::npos) << name << " not in:\n" << r.out;
      const std::string row = rows.substr(at + 1, rows.find("\n  -", at + 1) - at - 1);
      EXPECT_TRUE(row.find("(default") != std::string::npos || row.find("(required") != std::string::npos)
          << row;
    }
    EXPECT_EQ(Listed(rows), declared) << r.out;
    EXPECT_EQ(Run(p, {"-h"}).out, r.out);
    // Each flag it lists is one it accepts: every flag at once (and no argument, or file, that
    // works) fails on something else, in one line.
    std::vector<std::string> every;
    for (const FlagSpec& f : p.command.flags) every.push_back(f.name[0] == '-' ? f.name + "x" : "--" + f.name + "=1");
    const test::Finished all = Run(p, every);
    EXPECT_EQ(all.rc, 1) << all.err;
    for (const char* bad : {"unknown flag", "needs a value", "internal error"})
      EXPECT_EQ(all.err.find(bad), std::string::npos) << all.err;
  }
}

TEST_F(ProgramHelp, EveryProgramSaysItsVersion) {
  for (const Program& p : AllPrograms()) {
    SCOPED_TRACE(p.command.name);
    const test::Finished r = Run(p, {"--version"});
    EXPECT_EQ(r.rc, 0) << r.err;
    const std::string program = p.command.name.substr(0, p.command.name.find(' '));
    EXPECT_EQ(r.out, program + " " + Version() + "\n");
    EXPECT_EQ(r.out.find(program + " " HS_PROJECT_VERSION), 0u) << r.out;
  }
}

TEST_F(ProgramHelp, HogstreamListsItsCommands) {
  const Program top{HS_HOGSTREAM_BIN, {}, {}};
  for (const char* help : {"--help", "-h", "help"}) {
    const test::Finished r = Run(top, {help});
    EXPECT_EQ(r.rc, 0) << r.err;
    for (const Command& c : HogstreamCommands())
      EXPECT_NE(r.out.find("\n  " + c.name.substr(c.name.find(' ') + 1) + " "), std::string::npos)
          << c.name << " not in:\n" << r.out;
  }
  EXPECT_EQ(Run(top, {"help", "train"}).out, Run(top, {"train", "--help"}).out);
  const test::Finished none = Run(top, {});
  EXPECT_EQ(none.rc, 1);  // no command: the list, and a failure
  EXPECT_EQ(none.out, Run(top, {"--help"}).out);
  const test::Finished version = Run(top, {"--version"});
  EXPECT_EQ(version.rc, 0);
  EXPECT_EQ(version.out, "hogstream " + Version() + "\n");
  const test::Finished unknown = Run(top, {"help", "nope"});
  EXPECT_EQ(unknown.rc, 1);
  EXPECT_EQ(unknown.last_line(), "hogstream: unknown command 'nope' (try: hogstream help)");
}

// Every flag name the programs' code reads (f.has("x"), f.get("x"), ...) is declared in some
// command's table, also on paths no test runs (a read of an undeclared one is a Bug at run time).
TEST(FlagsTable, EveryFlagTheCodeReadsIsDeclared) {
  std::set<std::string> declared;
  for (const Program& p : AllPrograms())
    for (const FlagSpec& f : p.command.flags) declared.insert(f.name);
  const std::regex read(R"(\bf\.(has|get|all|get_int|int_in)\(\"([^\"]+)\")");
  size_t reads = 0;
  for (const char* file : {"hogstream.cpp", "hogwild.cpp", "raw.cpp", "program.cpp"}) {
    const std::string text = test::ReadFile(std::string(HS_SOURCE_DIR) + "/bin/" + file);
    ASSERT_FALSE(text.empty()) << file;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), read); it != std::sregex_iterator(); ++it, ++reads)
      EXPECT_TRUE(declared.count((*it)[2])) << file << " reads --" << (*it)[2] << ", which no table declares";
  }
  EXPECT_GT(reads, 50u);  // the pattern still matches the code
}

}  // namespace
}  // namespace hogstream
