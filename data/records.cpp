// The two kinds of Records (see records.hpp).
#include "data/records.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <leveldb/db.h>

#include <map>
#include <mutex>

#include "core/common.hpp"
#include "data/lmdb.hpp"

namespace hogstream {

namespace {

class LmdbRecords : public Records {
 public:
  LmdbRecords(const std::string& path, ColorMode color) : cursor_(path), color_(color) {}
  size_t size() const override { return cursor_.size(); }
  void Next() override { cursor_.Next(); }
  void Read(pb::Datum* datum) override {
    HS_REQUIRE(datum->ParseFromArray(cursor_.value().data(), static_cast<int>(cursor_.value().size())))
        << "not a Datum";
    DecodeDatum(datum, color_, "an encoded image");
  }
  std::string Where() const override {
    return "source '" + cursor_.path() + "', key '" + std::string(cursor_.key()) + "'";
  }

 private:
  LmdbCursor cursor_;
  ColorMode color_;
};

// LevelDB allows one open handle per database and process (it locks the directory), so the
// readers of one database share a handle, each with its own iterator; the handle closes with
// the last of them.
class LevelDbHandle {
 public:
  static std::shared_ptr<leveldb::DB> Open(const std::string& path) {
    static std::mutex mu;
    static std::map<std::string, std::weak_ptr<leveldb::DB>> open;
    std::lock_guard<std::mutex> lock(mu);
    if (auto db = open[path].lock()) return db;
    leveldb::Options options;
    options.create_if_missing = false;
    options.max_open_files = 100;
    leveldb::DB* raw = nullptr;
    const leveldb::Status st = leveldb::DB::Open(options, path, &raw);
    HS_REQUIRE(st.ok()) << "cannot open LevelDB '" << path << "': " << st.ToString()
                        << (st.IsIOError() ? " (another process may hold it: LevelDB admits one; LMDB any)" : "");
    std::shared_ptr<leveldb::DB> db(raw);
    open[path] = db;
    return db;
  }
};

class LevelDbRecords : public Records {
 public:
  LevelDbRecords(const std::string& path, ColorMode color) : path_(path), color_(color) {
    db_ = LevelDbHandle::Open(path);
    leveldb::ReadOptions ro;
    ro.fill_cache = false;  // a streaming reader: the OS cache keeps the files
    it_.reset(db_->NewIterator(ro));
    for (it_->SeekToFirst(); it_->Valid(); it_->Next()) ++size_;
    HS_REQUIRE(it_->status().ok()) << "cannot read LevelDB '" << path << "': " << it_->status().ToString();
    HS_REQUIRE(size_ > 0) << "LevelDB '" << path << "' holds no records";
    it_->SeekToFirst();
  }
  ~LevelDbRecords() override { it_.reset(); }  // before the handle
  size_t size() const override { return size_; }
  void Next() override {
    it_->Next();
    if (!it_->Valid()) {
      HS_REQUIRE(it_->status().ok()) << "cannot read LevelDB '" << path_ << "': " << it_->status().ToString();
      it_->SeekToFirst();
    }
  }
  void Read(pb::Datum* datum) override {
    const leveldb::Slice v = it_->value();
    HS_REQUIRE(datum->ParseFromArray(v.data(), static_cast<int>(v.size()))) << "not a Datum";
    DecodeDatum(datum, color_, "an encoded image");
  }
  std::string Where() const override {
    return "source '" + path_ + "', key '" + (it_->Valid() ? it_->key().ToString() : std::string()) + "'";
  }

 private:
  std::string path_;
  ColorMode color_;
  std::shared_ptr<leveldb::DB> db_;
  std::unique_ptr<leveldb::Iterator> it_;
  size_t size_ = 0;
};

class ImageList : public Records {
 public:
  using Entry = ListedImage;
  ImageList(std::string list, std::vector<Entry> entries, ImageListOptions opt)
      : list_(std::move(list)), entries_(std::move(entries)), opt_(std::move(opt)) {
    if (!opt_.root.empty() && opt_.root.back() != '/') opt_.root += '/';
    Shuffle();
  }
  size_t size() const override { return entries_.size(); }
  void Next() override {
    if (++at_ < entries_.size()) return;
    at_ = 0;
    ++pass_;
    Shuffle();
  }
  void Read(pb::Datum* datum) override {
    const Entry& e = entries_[at_];
    const std::string path = opt_.root + e.path;
    std::ifstream in(path, std::ios::binary);
    HS_REQUIRE(in) << "cannot open '" << path << "': " << ErrnoText(errno);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    HS_REQUIRE(!in.bad()) << "cannot read '" << path << "'";
    Image image = DecodeImage(bytes.str(), opt_.color, "'" + path + "'");
    if (opt_.new_height > 0) image = ResizeImage(image, opt_.new_height, opt_.new_width);
    ImageToDatum(image, e.label, datum);
  }
  std::string Where() const override { return "source '" + list_ + "', image '" + entries_[at_].path + "'"; }

 private:
  void Shuffle() {
    if (!opt_.shuffle) return;
    std::seed_seq seed{0x1701u, static_cast<unsigned>(pass_), static_cast<unsigned>(pass_ >> 32)};
    std::mt19937 rng(seed);
    std::shuffle(entries_.begin(), entries_.end(), rng);
  }

  std::string list_;
  std::vector<Entry> entries_;
  ImageListOptions opt_;
  size_t at_ = 0;
  uint64_t pass_ = 0;
};

}  // namespace

std::unique_ptr<Records> OpenLmdbRecords(const std::string& path, ColorMode color) {
  return std::make_unique<LmdbRecords>(path, color);
}

std::unique_ptr<Records> OpenLevelDbRecords(const std::string& path, ColorMode color) {
  return std::make_unique<LevelDbRecords>(path, color);
}

std::vector<ListedImage> ReadImageList(const std::string& list) {
  std::ifstream in(list);
  HS_REQUIRE(in) << "cannot open image list '" << list << "': " << ErrnoText(errno);
  std::vector<ListedImage> entries;
  std::string text;
  for (size_t number = 1; std::getline(in, text); ++number) {
    while (!text.empty() && (text.back() == '\r' || text.back() == ' ')) text.pop_back();
    if (text.empty()) continue;
    const size_t space = text.find_last_of(' ');
    char* end = nullptr;
    const long label = space == std::string::npos ? 0 : std::strtol(text.c_str() + space + 1, &end, 10);
    HS_REQUIRE(space != std::string::npos && space > 0 && end && *end == 0 && label >= INT_MIN && label <= INT_MAX)
        << list << ":" << number << ": expected 'PATH LABEL' (an integer label), got '" << text << "'";
    entries.push_back({text.substr(0, space), static_cast<int>(label), number});
  }
  HS_REQUIRE(!in.bad()) << "cannot read image list '" << list << "'";
  HS_REQUIRE(!entries.empty()) << "image list '" << list << "' lists no images";
  return entries;
}

std::unique_ptr<Records> OpenImageList(const std::string& list, const ImageListOptions& options) {
  HS_REQUIRE((options.new_height > 0) == (options.new_width > 0))
      << "give new_height and new_width together";
  return std::make_unique<ImageList>(list, ReadImageList(list), options);
}

}  // namespace hogstream
