// The two kinds of Records (see records.hpp).
#include "data/records.hpp"

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <leveldb/db.h>

#include <map>
#include <mutex>

#include "base/common.hpp"
#include "data/lmdb.hpp"

namespace hogstream {

namespace {

// Reads an image file whole (for ImageList and WindowFile).
std::string ReadImageFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HS_REQUIRE(in) << "cannot open '" << path << "': " << ErrnoText(errno);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  HS_REQUIRE(!in.bad()) << "cannot read '" << path << "'";
  return bytes.str();
}

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
    // Look before opening: LevelDB's Open makes the folder and writes LOCK and LOG into it
    // before it finds no database there, even when told not to create one.
    std::error_code ec;
    HS_REQUIRE(std::filesystem::is_directory(path, ec)) << "cannot open LevelDB '" << path << "': no such folder";
    HS_REQUIRE(std::filesystem::is_regular_file(std::filesystem::path(path) / "CURRENT", ec))
        << "cannot open LevelDB '" << path << "': not a LevelDB database (no CURRENT file)";
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
    Image image = DecodeImage(ReadImageFile(path), opt_.color, "'" + path + "'");
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

class WindowFile : public Records {
 public:
  struct ImageInfo {
    std::string path;
    int channels, height, width;
  };
  struct Window {
    int image, label;
    float x1, y1, x2, y2;
  };
  WindowFile(std::string path, std::vector<ImageInfo> images, std::vector<Window> fg, std::vector<Window> bg,
             WindowOptions opt)
      : path_(std::move(path)), images_(std::move(images)), fg_(std::move(fg)), bg_(std::move(bg)), opt_(std::move(opt)) {
    fg_per_batch_ = static_cast<int>(std::lround(opt_.batch_size * opt_.fg_fraction));
    HS_REQUIRE(fg_per_batch_ == 0 || !fg_.empty()) << "window file '" << path_ << "' has no foreground window (overlap >= "
                                                   << opt_.fg_threshold << ")";
    HS_REQUIRE(fg_per_batch_ == opt_.batch_size || !bg_.empty())
        << "window file '" << path_ << "' has no background window (overlap < " << opt_.bg_threshold << ")";
    Draw();
  }
  size_t size() const override { return fg_.size() + bg_.size(); }
  void Seed(uint64_t seed) override {
    std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), 11u};
    rng_.seed(seq);
    Draw();
  }
  void Next() override {
    ++at_;
    Draw();
  }
  void Read(pb::Datum* datum) override {
    const ImageInfo& info = images_[window_.image];
    const Image* image = nullptr;
    Image loaded;
    if (opt_.cache_images) {
      auto it = cache_.find(window_.image);
      if (it == cache_.end()) it = cache_.emplace(window_.image, Load(info)).first;
      image = &it->second;
    } else {
      loaded = Load(info);
      image = &loaded;
    }
    ImageToDatum(Crop(*image), window_.label, datum);
  }
  std::string Where() const override {
    return "source '" + path_ + "', image '" + images_[window_.image].path + "'";
  }

 private:
  void Draw() {
    const bool fg = static_cast<int>(at_ % opt_.batch_size) < fg_per_batch_;
    const std::vector<Window>& from = fg ? fg_ : bg_;
    window_ = from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng_)];
  }
  Image Load(const ImageInfo& info) const {
    const std::string path = opt_.root + info.path;
    Image img = DecodeImage(ReadImageFile(path), info.channels == 1 ? ColorMode::kGray : ColorMode::kColor, "'" + path + "'");
    HS_REQUIRE(img.height == info.height && img.width == info.width)
        << "'" << path << "' is " << img.width << "x" << img.height << " but the window file says " << info.width
        << "x" << info.height;
    return img;
  }
  // The window with its context, warped to crop_size; the part beyond the image stays black.
  Image Crop(const Image& img) const {
    const int S = opt_.crop_size;
    float x1 = window_.x1, y1 = window_.y1, x2 = window_.x2, y2 = window_.y2;
    if (opt_.context_pad > 0 || opt_.square) {
      const float scale = static_cast<float>(S) / (S - 2 * opt_.context_pad);
      float half_w = (x2 - x1 + 1) / 2, half_h = (y2 - y1 + 1) / 2;
      const float cx = x1 + half_w, cy = y1 + half_h;
      if (opt_.square) half_w = half_h = std::max(half_w, half_h);
      x1 = std::round(cx - half_w * scale);
      x2 = std::round(cx + half_w * scale);
      y1 = std::round(cy - half_h * scale);
      y2 = std::round(cy + half_h * scale);
    }
    const float box_w = x2 - x1 + 1, box_h = y2 - y1 + 1;
    const int cx1 = std::max(0, static_cast<int>(x1)), cy1 = std::max(0, static_cast<int>(y1));
    const int cx2 = std::min(img.width - 1, static_cast<int>(x2)), cy2 = std::min(img.height - 1, static_cast<int>(y2));
    Image out{S, S, img.channels, std::vector<uint8_t>(static_cast<size_t>(S) * S * img.channels, 0)};
    if (cx2 < cx1 || cy2 < cy1) return out;  // the box lies wholly outside the image
    // Where the clipped region lands in the output, at the box's scale.
    const int ox = static_cast<int>(std::lround((cx1 - x1) * S / box_w));
    const int oy = static_cast<int>(std::lround((cy1 - y1) * S / box_h));
    const int ow = std::clamp(static_cast<int>(std::lround((cx2 - cx1 + 1) * S / box_w)), 1, S - ox);
    const int oh = std::clamp(static_cast<int>(std::lround((cy2 - cy1 + 1) * S / box_h)), 1, S - oy);
    Image region{cy2 - cy1 + 1, cx2 - cx1 + 1, img.channels, {}};
    region.pixels.resize(static_cast<size_t>(region.height) * region.width * img.channels);
    for (int r = 0; r < region.height; ++r)
      std::copy_n(&img.pixels[(static_cast<size_t>(cy1 + r) * img.width + cx1) * img.channels],
                  static_cast<size_t>(region.width) * img.channels,
                  &region.pixels[static_cast<size_t>(r) * region.width * img.channels]);
    const Image warped = ResizeImage(region, oh, ow);
    for (int r = 0; r < oh; ++r)
      std::copy_n(&warped.pixels[static_cast<size_t>(r) * ow * img.channels], static_cast<size_t>(ow) * img.channels,
                  &out.pixels[(static_cast<size_t>(oy + r) * S + ox) * img.channels]);
    return out;
  }

  std::string path_;
  std::vector<ImageInfo> images_;
  std::vector<Window> fg_, bg_;
  WindowOptions opt_;
  int fg_per_batch_ = 0;
  uint64_t at_ = 0;
  Window window_{};
  std::mt19937 rng_{1701};
  std::map<int, Image> cache_;
};

}  // namespace

std::unique_ptr<Records> OpenWindowFile(const std::string& path, const WindowOptions& options) {
  HS_REQUIRE(options.crop_size > 0) << "window_data_param.crop_size (or transform_param.crop_size) must be positive";
  HS_REQUIRE(options.context_pad >= 0 && 2 * options.context_pad < options.crop_size)
      << "context_pad " << options.context_pad << " leaves nothing of a crop of " << options.crop_size;
  HS_REQUIRE(options.batch_size > 0) << "window_data_param.batch_size must be positive";
  HS_REQUIRE(options.fg_fraction >= 0 && options.fg_fraction <= 1) << "fg_fraction must be within [0, 1]";
  std::ifstream in(path);
  HS_REQUIRE(in) << "cannot open window file '" << path << "': " << ErrnoText(errno);
  std::vector<WindowFile::ImageInfo> images;
  std::vector<WindowFile::Window> fg, bg;
  size_t line = 0;
  std::string text;
  auto next = [&](const char* what) {
    do {
      HS_REQUIRE(std::getline(in, text)) << path << ": ends where " << what << " should be (after line " << line << ")";
      ++line;
    } while (text.find_first_not_of(" \t\r") == std::string::npos);
    while (!text.empty() && (text.back() == '\r' || text.back() == ' ')) text.pop_back();
    return text;
  };
  auto number = [&](const std::string& t, const char* what) {
    char* end = nullptr;
    const double v = std::strtod(t.c_str(), &end);
    HS_REQUIRE(end != t.c_str() && *end == 0 && std::isfinite(v)) << path << ":" << line << ": expected " << what << ", got '" << t << "'";
    return v;
  };
  for (std::string head; std::getline(in, head);) {
    ++line;
    if (head.find_first_not_of(" \t\r") == std::string::npos) continue;
    HS_REQUIRE(head[0] == '#') << path << ":" << line << ": expected '# INDEX', got '" << head << "'";
    WindowFile::ImageInfo info;
    info.path = next("an image path");
    info.channels = static_cast<int>(number(next("channels"), "the channel count"));
    info.height = static_cast<int>(number(next("height"), "the height"));
    info.width = static_cast<int>(number(next("width"), "the width"));
    HS_REQUIRE((info.channels == 1 || info.channels == 3) && info.height > 0 && info.width > 0)
        << path << ":" << line << ": image '" << info.path << "' needs 1 or 3 channels and a positive size";
    const int windows = static_cast<int>(number(next("the window count"), "the window count"));
    HS_REQUIRE(windows >= 0) << path << ":" << line << ": a negative window count";
    const int image = static_cast<int>(images.size());
    images.push_back(info);
    for (int w = 0; w < windows; ++w) {
      std::istringstream fields(next("a window"));
      double v[6];
      for (double& f : v) HS_REQUIRE(fields >> f) << path << ":" << line << ": expected CLASS OVERLAP X1 Y1 X2 Y2";
      HS_REQUIRE(v[2] <= v[4] && v[3] <= v[5]) << path << ":" << line << ": the box's corners are the wrong way round";
      const WindowFile::Window win{image, static_cast<int>(v[0]), static_cast<float>(v[2]), static_cast<float>(v[3]),
                                   static_cast<float>(v[4]), static_cast<float>(v[5])};
      if (v[1] >= options.fg_threshold) {
        HS_REQUIRE(v[0] > 0) << path << ":" << line << ": a foreground window of class " << v[0] << " (0 is background)";
        fg.push_back(win);
      } else if (v[1] < options.bg_threshold) {
        bg.push_back({image, 0, win.x1, win.y1, win.x2, win.y2});
      }
    }
  }
  HS_REQUIRE(!images.empty()) << "window file '" << path << "' lists no images";
  WindowOptions opt = options;
  if (!opt.root.empty() && opt.root.back() != '/') opt.root += '/';
  return std::make_unique<WindowFile>(path, std::move(images), std::move(fg), std::move(bg), opt);
}

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
