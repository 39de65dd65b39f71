// LMDB cursor and writer (see lmdb.hpp): every LMDB failure becomes an Error naming the path.
// Nothing here knows about Datums.
#include "data/lmdb.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <lmdb.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <system_error>

#include "base/common.hpp"

namespace hogstream {

namespace {
constexpr size_t kMapSize = size_t{1} << 40;  // 1 TiB of address space; the file stays sparse
constexpr int kCommitEvery = 1000;

std::string_view View(const MDB_val& v) { return {static_cast<const char*>(v.mv_data), v.mv_size}; }
}  // namespace

// ---------------------------------------------------------------- cursor

LmdbCursor::LmdbCursor(const std::string& path) : path_(path) {
  // The destructor does not run when a constructor throws, so close what was opened first.
  try {
    int rc = mdb_env_create(&env_);
    if (!rc) rc = mdb_env_open(env_, path.c_str(), MDB_RDONLY | MDB_NOTLS | MDB_NOLOCK, 0664);
    HS_REQUIRE(rc == 0) << "cannot open LMDB '" << path << "': " << mdb_strerror(rc);
    CheckSize();  // before anything reads a page through the map
    rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn_);
    MDB_dbi dbi = 0;
    if (!rc) rc = mdb_dbi_open(txn_, nullptr, 0, &dbi);
    if (!rc) rc = mdb_cursor_open(txn_, dbi, &cursor_);
    HS_REQUIRE(rc == 0) << "cannot open LMDB '" << path << "': " << mdb_strerror(rc);
    MDB_stat stat;
    mdb_stat(txn_, dbi, &stat);
    size_ = stat.ms_entries;
    HS_REQUIRE(size_ > 0) << "LMDB '" << path << "' is empty";
    Get(MDB_FIRST);
  } catch (...) {
    Close();
    throw;
  }
}

LmdbCursor::~LmdbCursor() { Close(); }

void LmdbCursor::CheckSize() const {
  // The map is read straight from data.mdb: a page past the end of a truncated file is a
  // SIGBUS at the first touch. LMDB's two meta pages (the first two pages, which LMDB reads
  // through the map too) say how many pages the last transaction uses; the file must hold
  // them all.
  const char* dir = nullptr;
  unsigned flags = 0;
  mdb_env_get_path(env_, &dir);
  mdb_env_get_flags(env_, &flags);
  const std::string file = (flags & MDB_NOSUBDIR) || !dir ? path_ : std::string(dir) + "/data.mdb";
  std::error_code ec;
  const uintmax_t have = std::filesystem::file_size(file, ec);
  HS_REQUIRE(!ec) << "cannot read the size of '" << file << "': " << ec.message();
  const uintmax_t metas = 2 * static_cast<uintmax_t>(sysconf(_SC_PAGESIZE));
  HS_REQUIRE(have >= metas) << "LMDB '" << file << "' is truncated: " << have
                            << " bytes, the database needs at least " << metas;
  MDB_envinfo info;
  MDB_stat stat;
  int rc = mdb_env_info(env_, &info);
  if (!rc) rc = mdb_env_stat(env_, &stat);
  HS_REQUIRE(rc == 0) << "cannot open LMDB '" << path_ << "': " << mdb_strerror(rc);
  const uintmax_t need = (static_cast<uintmax_t>(info.me_last_pgno) + 1) * stat.ms_psize;
  HS_REQUIRE(have >= need) << "LMDB '" << file << "' is truncated: " << have
                           << " bytes, the database needs " << need;
}

void LmdbCursor::Close() {
  if (cursor_) mdb_cursor_close(cursor_);
  if (txn_) mdb_txn_abort(txn_);
  if (env_) mdb_env_close(env_);
}

void LmdbCursor::Next() {
  Get(MDB_NEXT);
  const auto k = reinterpret_cast<uintptr_t>(key_.data());
  const auto v = reinterpret_cast<uintptr_t>(value_.data());
  lowest_ = std::min({lowest_, k, v});
  highest_ = std::max({highest_, k + key_.size(), v + value_.size()});
  if (++since_release_ < 4096) return;
  // Drop the pages read since the last release, except those of the current record, whose
  // views are still in use.
  since_release_ = 0;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t keep_lo = std::min(k, v) & ~(page - 1);
  const uintptr_t keep_hi = (std::max(k + key_.size(), v + value_.size()) + page - 1) & ~(page - 1);
  const uintptr_t lo = lowest_ & ~(page - 1), hi = (highest_ + page - 1) & ~(page - 1);
  if (keep_lo > lo) madvise(reinterpret_cast<void*>(lo), keep_lo - lo, MADV_DONTNEED);
  if (hi > keep_hi) madvise(reinterpret_cast<void*>(keep_hi), hi - keep_hi, MADV_DONTNEED);
  lowest_ = UINTPTR_MAX;
  highest_ = 0;
}

void LmdbCursor::Get(int op) {
  MDB_val k, v;
  int rc = mdb_cursor_get(cursor_, &k, &v, static_cast<MDB_cursor_op>(op));
  if (rc == MDB_NOTFOUND && op == MDB_NEXT) rc = mdb_cursor_get(cursor_, &k, &v, MDB_FIRST);
  HS_REQUIRE(rc == 0) << "reading LMDB '" << path_ << "': " << mdb_strerror(rc);
  key_ = View(k);
  value_ = View(v);
}

// ---------------------------------------------------------------- writer

LmdbWriter::LmdbWriter(const std::string& path)
    : path_(path), uncaught_(std::uncaught_exceptions()) {
  std::error_code ec;
  HS_REQUIRE(!std::filesystem::exists(path, ec)) << path << " exists; refusing to overwrite it";
  HS_REQUIRE(std::filesystem::create_directory(path, ec))
      << "cannot create LMDB '" << path << "': " << ec.message();
  int rc = mdb_env_create(&env_);
  if (!rc) rc = mdb_env_set_mapsize(env_, kMapSize);
  if (!rc) rc = mdb_env_open(env_, path.c_str(), 0, 0664);
  if (rc) {
    if (env_) mdb_env_close(env_);
    std::filesystem::remove_all(path, ec);  // created just above, so ours to remove
    HS_FAIL() << "cannot open LMDB '" << path << "': " << mdb_strerror(rc);
  }
}

LmdbWriter::~LmdbWriter() {
  if (txn_) mdb_txn_abort(txn_);
  mdb_env_close(env_);
  // Unwinding from an exception thrown while this writer was alive: the output is
  // incomplete. The constructor refused an existing path, so the directory is ours.
  if (std::uncaught_exceptions() > uncaught_) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
}

void LmdbWriter::Put(std::string_view key, std::string_view value) {
  int rc = 0;
  if (!txn_) {
    rc = mdb_txn_begin(env_, nullptr, 0, &txn_);
    if (!rc) rc = mdb_dbi_open(txn_, nullptr, 0, &dbi_);
    if (rc) {
      if (txn_) mdb_txn_abort(txn_);
      txn_ = nullptr;
      HS_FAIL() << "writing LMDB '" << path_ << "': " << mdb_strerror(rc);
    }
  }
  MDB_val k{key.size(), const_cast<char*>(key.data())};
  MDB_val v{value.size(), const_cast<char*>(value.data())};
  rc = mdb_put(txn_, dbi_, &k, &v, 0);
  HS_REQUIRE(rc == 0) << "writing LMDB '" << path_ << "': " << mdb_strerror(rc);
  if (++pending_ == kCommitEvery) Commit();
}

void LmdbWriter::Commit() {
  if (!txn_) return;
  const int rc = mdb_txn_commit(txn_);  // frees the transaction even when it fails
  txn_ = nullptr;
  pending_ = 0;
  HS_REQUIRE(rc == 0) << "committing LMDB '" << path_ << "': " << mdb_strerror(rc);
}

}  // namespace hogstream
