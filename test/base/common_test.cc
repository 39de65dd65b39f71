// The check macros of base/common.hpp: each operand is evaluated once, nothing throws from a
// destructor, the thrown types and messages stay as documented (Bug: file:line; Error: the
// message alone), and the macros nest under an unbraced if/else.
#include "base/common.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "test/error_of.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

TEST(CheckMacros, ComparisonOperandsAreEvaluatedOnce) {
  int n = 0, m = 0;
  EXPECT_THROW(HS_CHECK_EQ(n++, 5), Bug);
  EXPECT_EQ(n, 1);
  EXPECT_THROW(HS_CHECK_GT(m++, 100), Bug);
  EXPECT_EQ(m, 1);
  // A passing check still evaluates each operand exactly once.
  int k = 3, calls = 0;
  auto seven = [&] { return ++calls, 7; };
  HS_CHECK_LT(k++, seven());
  HS_CHECK_LE(k, 4);
  HS_CHECK_GE(seven(), 7);
  EXPECT_EQ(k, 4);
  EXPECT_EQ(calls, 2);
}

TEST(CheckMacros, NoDestructorThrows) {
  EXPECT_TRUE(std::is_nothrow_destructible_v<detail::Raise<Error>>);
  EXPECT_TRUE(std::is_nothrow_destructible_v<detail::Raise<Bug>>);
}

TEST(CheckMacros, TypesAndMessagesAreUnchanged) {
  const std::string bug = MessageOf<Bug>([] {
    const int x = 2;
    HS_CHECK(x == 3) << "x is " << x;
  });
  EXPECT_NE(bug.find("common_test.cc:"), std::string::npos) << bug;
  EXPECT_NE(bug.find("check failed: x == 3"), std::string::npos) << bug;
  EXPECT_NE(bug.find("x is 2"), std::string::npos) << bug;
  const std::string eq = MessageOf<Bug>([] { HS_CHECK_EQ(1 + 1, 3) << "sum"; });
  EXPECT_NE(eq.find("common_test.cc:"), std::string::npos) << eq;
  EXPECT_NE(eq.find("(2 vs 3)"), std::string::npos) << eq;
  EXPECT_NE(eq.find("sum"), std::string::npos) << eq;
  EXPECT_EQ(MessageOf<Error>([] { HS_REQUIRE(1 > 2) << "bad " << 3; }), "bad 3");
  EXPECT_EQ(MessageOf<Error>([] { HS_FAIL() << "failed " << 4; }), "failed 4");
  // Bug and Error stay apart: an Error is not a Bug.
  EXPECT_THROW(HS_REQUIRE(false) << "x", Error);
  EXPECT_THROW(HS_CHECK(false), Bug);
}

// The statement forms bind like one statement under an unbraced if/else.
int Branch(bool outer, bool ok) {
  if (outer)
    HS_REQUIRE(ok) << "not ok";
  else
    return 2;
  return 1;
}

TEST(CheckMacros, NestUnderUnbracedIfElse) {
  EXPECT_EQ(Branch(false, false), 2);
  EXPECT_EQ(Branch(true, true), 1);
  EXPECT_THROW(Branch(true, false), Error);
  int evaluated = 0;
  if (evaluated > 0)
    HS_CHECK_EQ(evaluated++, 0);
  else
    ++evaluated;
  EXPECT_EQ(evaluated, 1);
}


// ErrnoText is strerror without the shared buffer: threads asking for different errors at
// once each get their own text.
TEST(ErrnoText, IsThreadSafeStrerror) {
  EXPECT_EQ(ErrnoText(ENOENT), "No such file or directory");
  EXPECT_EQ(ErrnoText(EACCES), "Permission denied");
  EXPECT_FALSE(ErrnoText(123456).empty());
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &wrong] {
      const int err = t % 2 ? ENOENT : EACCES;
      const std::string want = t % 2 ? "No such file or directory" : "Permission denied";
      for (int i = 0; i < 2000; ++i) wrong[t] += ErrnoText(err) != want;
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace hogstream
