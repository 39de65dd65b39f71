// Minimal RAII access to LMDB databases of serialized records (Caffe's Datum LMDBs): a
// read-only cursor that walks the keys in order and wraps around, and a writer that refuses
// to touch an existing database and commits in batches. Not a general LMDB binding: one
// unnamed database per environment, no concurrent writers, no random access by key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

struct MDB_env;
struct MDB_txn;
struct MDB_cursor;

namespace hogstream {

// Reads an LMDB directory from start to end, again and again. Opens without a lock file
// (MDB_NOLOCK), so nothing may write the database while it is read. One cursor belongs to one
// thread at a time; it may be handed to another thread (MDB_NOTLS) but not shared.
class LmdbCursor {
 public:
  // Positions on the first record. Error "cannot open LMDB 'PATH': reason" when the database
  // cannot be opened, an Error when it holds no records, and one when data.mdb is shorter
  // than the pages LMDB says are in use (reading those would be a SIGBUS, not an error).
  explicit LmdbCursor(const std::string& path);
  ~LmdbCursor();
  LmdbCursor(const LmdbCursor&) = delete;
  LmdbCursor& operator=(const LmdbCursor&) = delete;

  // The current record; the views stay valid until the next call to Next().
  std::string_view key() const { return key_; }
  std::string_view value() const { return value_; }
  // Moves to the next record in key order, or back to the first after the last. Every few
  // thousand records the pages already read are dropped from this process's mapping
  // (MADV_DONTNEED on the read-only map): a streaming reader need not keep the whole dataset
  // resident; the kernel's page cache still holds it for the next epoch.
  void Next();
  // Number of records.
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void Get(int op);
  void Close();
  void CheckSize() const;

  std::string path_;
  MDB_env* env_ = nullptr;
  MDB_txn* txn_ = nullptr;
  MDB_cursor* cursor_ = nullptr;
  std::string_view key_, value_;
  size_t size_ = 0;
  size_t since_release_ = 0;  // records read since the map's pages were last dropped
  uintptr_t lowest_ = UINTPTR_MAX, highest_ = 0;  // mapped addresses read since then
};

// Creates a new LMDB directory and fills it. Records are committed every 1000 Puts and by
// Commit(); whatever was put after the last commit is dropped by the destructor. A writer
// destroyed by an exception (a failed Put, an unreadable input in a converter) removes the
// directory it created: a half-written dataset would only block the next attempt ("exists").
class LmdbWriter {
 public:
  // Error "PATH exists" if anything is already at `path`.
  explicit LmdbWriter(const std::string& path);
  ~LmdbWriter();
  LmdbWriter(const LmdbWriter&) = delete;
  LmdbWriter& operator=(const LmdbWriter&) = delete;

  void Put(std::string_view key, std::string_view value);
  void Commit();

 private:
  std::string path_;
  MDB_env* env_ = nullptr;
  MDB_txn* txn_ = nullptr;
  unsigned dbi_ = 0;
  int pending_ = 0;
  int uncaught_ = 0;  // std::uncaught_exceptions() at construction
};

}  // namespace hogstream
