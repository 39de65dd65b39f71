// LMDB cursor and writer: key order, wrap-around, batched commits, and the errors for a
// missing, empty or already existing database.
#include "data/lmdb.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>

#include "test/data/data_test_util.hpp"

namespace hogstream {
namespace {

using testing::ErrorOf;
using testing::Key8;
using testing::TempDir;

// 2500 records put in shuffled order span three commit batches; the cursor walks them in key
// order and starts again after the last.
TEST(LmdbTest, CursorWalksKeysInOrderAndWraps) {
  TempDir dir;
  std::mt19937 gen(7);
  std::map<std::string, std::string> records;
  for (int i = 0; i < 2500; ++i) records[Key8(i)] = testing::RandomBytes(1 + i % 37, gen);
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
  std::mt19937 gen(std::random_device{}());
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

}  // namespace
}  // namespace hogstream
