// LMDB cursor and writer: key order, wrap-around, batched commits, and the errors for a
// missing, empty or already existing database.
#include "data/lmdb.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>
#include <cstdio>
#include <map>
#include <random>

#include "test/data/data_test_util.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using test::ErrorOf;
using test::Key8;
using test::TempDir;

// 2500 records put in shuffled order span three commit batches; the cursor walks them in key
// order and starts again after the last.
TEST(LmdbTest, CursorWalksKeysInOrderAndWraps) {
  TempDir dir;
  std::mt19937 gen(7);
  std::map<std::string, std::string> records;
  for (int i = 0; i < 2500; ++i) records[Key8(i)] = test::RandomBytes(1 + i % 37, gen);
  std::vector<std::pair<std::string, std::string>> shuffled(records.begin(), records.end());
  std::shuffle(shuffled.begin(), shuffled.end(), gen);
  {
    LmdbWriter db(dir / "db");
    for (const auto& [k, v] : shuffled) db.Put(k, v);
    db.Commit();
  }
  LmdbCursor cursor(dir / "db");
  ASSERT_EQ(cursor.size(), records.size());
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& [k, v] : records) {
      ASSERT_EQ(cursor.key(), k);
      ASSERT_EQ(cursor.value(), v);
      cursor.Next();
    }
  }
}

// Long reads drop the pages already read from the mapping every few thousand records; the
// records read after each drop, and after wrapping, must still be exact.
TEST(LmdbTest, LongReadsStayExactAcrossPageReleases) {
  TempDir dir;
  std::mt19937 gen(::hogstream::TestSeed());
  const int n = 9000;
  std::vector<std::string> values(n);
  {
    LmdbWriter db(dir / "db");
    char key[16];
    for (int i = 0; i < n; ++i) {
      values[i].resize(100 + gen() % 700);
      for (auto& c : values[i]) c = static_cast<char>(gen());
      std::snprintf(key, sizeof(key), "%08d", i);
      db.Put(key, values[i]);
    }
    db.Commit();
  }
  LmdbCursor cursor(dir / "db");
  for (int step = 0; step < 3 * n; ++step) {
    const int i = step % n;
    char key[16];
    std::snprintf(key, sizeof(key), "%08d", i);
    ASSERT_EQ(cursor.key(), key);
    ASSERT_EQ(cursor.value(), values[i]) << "record " << i << " at step " << step;
    cursor.Next();
  }
}

TEST(LmdbTest, UncommittedPutsAreDropped) {
  TempDir dir;
  {
    LmdbWriter db(dir / "db");
    db.Put("a", "1");
    db.Commit();
    db.Put("b", "2");
  }
  LmdbCursor cursor(dir / "db");
  EXPECT_EQ(cursor.size(), 1u);
  EXPECT_EQ(cursor.key(), "a");
}

TEST(LmdbTest, MissingEmptyAndExistingAreErrors) {
  TempDir dir;
  const std::string missing = dir / "missing";
  std::string e = ErrorOf([&] { LmdbCursor c(missing); });
  EXPECT_NE(e.find("cannot open LMDB '" + missing + "': "), std::string::npos) << e;

  { LmdbWriter db(dir / "empty"); }
  e = ErrorOf([&] { LmdbCursor c(dir / "empty"); });
  EXPECT_NE(e.find(dir / "empty"), std::string::npos) << e;
  EXPECT_NE(e.find("empty"), std::string::npos) << e;

  e = ErrorOf([&] { LmdbWriter db(dir / "empty"); });
  EXPECT_NE(e.find(dir / "empty" + " exists"), std::string::npos) << e;
}


// A writer that fails (here: an empty key, which LMDB refuses) removes the directory it
// created, so that a failed conversion leaves nothing behind to block the next attempt.
TEST(LmdbTest, FailedWriteRemovesTheDirectory) {
  TempDir dir;
  const std::string path = dir / "db";
  EXPECT_THROW(
      {
        LmdbWriter db(path);
        db.Put(Key8(0), "value");
        db.Commit();
        db.Put("", "no key");
      },
      Error);
  EXPECT_FALSE(std::filesystem::exists(path)) << "a failed write left " << path;
  // A writer that finishes normally keeps its database.
  test::WriteLmdb(path, {test::MakeDatum(1, 1, 1, "x", 0)});
  EXPECT_TRUE(std::filesystem::exists(path));
}

// Runs `f` in a forked child (a crash there must not take the test binary down) and returns
// its wait status, or -1 when it outlives the deadline (the child is then killed).
template <class F>
int StatusOfChild(F&& f, std::chrono::seconds deadline) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 3;
    try {
      code = f();
    } catch (...) {
    }
    ::_exit(code);
  }
  const auto until = std::chrono::steady_clock::now() + deadline;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status;
}

// LMDB maps data.mdb: reading pages past the end of a truncated file was a SIGBUS with no
// message. Now opening it is one Error naming the file and both sizes.
TEST(LmdbTest, TruncatedDataFileIsAnError) {
  TempDir dir;
  const std::string path = dir / "db";
  std::mt19937 gen(::hogstream::TestSeed());
  {
    LmdbWriter db(path);
    for (int i = 0; i < 300; ++i) db.Put(Key8(i), test::RandomBytes(700, gen));
    db.Commit();
  }
  const std::string file = path + "/data.mdb";
  const auto full = std::filesystem::file_size(file);
  std::filesystem::resize_file(file, full / 2);
  std::string message;
  const int status = StatusOfChild(
      [&] {
        try {
          LmdbCursor cursor(path);
          for (size_t i = 0; i < cursor.size(); ++i) cursor.Next();
        } catch (const Error& e) {
          const std::string m = e.what();
          const bool ok = m.find(file) != std::string::npos &&
                          m.find("truncated") != std::string::npos &&
                          m.find(std::to_string(full / 2)) != std::string::npos &&
                          m.find('\n') == std::string::npos;
          if (!ok) std::fprintf(stderr, "unexpected message: %s\n", m.c_str());
          return ok ? 0 : 4;
        }
        return 5;  // read through without an error
      },
      std::chrono::seconds(60));
  ASSERT_NE(status, -1) << "reading the truncated LMDB hung";
  ASSERT_FALSE(WIFSIGNALED(status)) << "reading the truncated LMDB died of signal "
                                    << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "4: wrong message, 5: no error";
  // And in this process, where it no longer crashes: the same Error.
  const std::string e = ErrorOf([&] { LmdbCursor cursor(path); });
  EXPECT_NE(e.find("is truncated"), std::string::npos) << e;
}

}  // namespace
}  // namespace hogstream
