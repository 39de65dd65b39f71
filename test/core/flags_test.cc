// bin/flags.hpp's integer flags: values that do not fit the range the caller can hold are one
// clear Error, never a silent wrap (--iterations=4294967297 once ran 1 iteration).
#include "bin/flags.hpp"

#include <gtest/gtest.h>

#include <climits>
#include <string>
#include <vector>

namespace hogstream {
namespace HS_UNITY_ID {

// Flags from literal arguments (argv[0] is the program).
Flags Parse(std::vector<std::string> args) {
  std::vector<char*> argv;
  static std::string prog = "prog";
  argv.push_back(prog.data());
  for (auto& a : args) argv.push_back(a.data());
  return Flags(static_cast<int>(argv.size()), argv.data(), 1, {"iterations", "n"});
}

TEST(Flags, IntOutsideIntRangeIsAnError) {
  for (const char* v : {"4294967297", "2147483648", "-2147483649", "99999999999999999999"}) {
    const Flags f = Parse({std::string("--iterations=") + v});
    try {
      f.get_int("iterations", 0);
      ADD_FAILURE() << v << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--iterations"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(v), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(Parse({"--iterations=2147483647"}).get_int("iterations", 0), INT_MAX);
  EXPECT_EQ(Parse({"--iterations=-5"}).get_int("iterations", 0), -5);
  EXPECT_EQ(Parse({}).get_int("iterations", 17), 17);
  EXPECT_THROW(Parse({"--iterations=12x"}).get_int("iterations", 0), Error);
}

TEST(Flags, IntWithBounds) {
  const Flags f = Parse({"--iterations=4294967297", "--n=7"});
  try {
    f.get_int("iterations", 0, 0, INT_MAX);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--iterations must be between 0 and 2147483647, got 4294967297");
  }
  EXPECT_EQ(f.get_int("n", 0, 1, 10), 7);
  EXPECT_THROW(f.get_int("n", 0, 8, 10), Error);
  EXPECT_EQ(Parse({}).get_int("n", -3, 0, 10), -3);  // the fallback is the caller's business
}

}  // namespace
}  // namespace hogstream
