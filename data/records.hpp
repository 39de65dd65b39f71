// Where the Data layers' records come from: one source read in order, round and round, each
// record handed out as a raw Datum. Three kinds: an LMDB or a LevelDB of Datums (encoded ones
// decoded), and
// ImageData's list file of "PATH LABEL" lines whose images are read, decoded and resized on
// the reader thread. A Records object belongs to one thread at a time.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/proto/hogstream.pb.h"
#include "data/image.hpp"

namespace hogstream {

class Records {
 public:
  virtual ~Records() = default;
  virtual size_t size() const = 0;
  // The next record, or the first again after the last.
  virtual void Next() = 0;
  // The current record as a raw Datum. Errors say what is wrong; callers add Where().
  virtual void Read(pb::Datum* datum) = 0;
  // The source and the current record, for messages: "source 'PATH', key 'KEY'".
  virtual std::string Where() const = 0;
  // The reader's seed, given when its thread starts (sources that draw their records at random).
  virtual void Seed(uint64_t seed) {}
};

// Errors: the LMDB cannot be opened or holds no records (see LmdbCursor).
std::unique_ptr<Records> OpenLmdbRecords(const std::string& path, ColorMode color);
// A LevelDB of Datums (Caffe's default backend). Readers in one process share the database;
// another process holding it is an Error (LevelDB locks it). Errors as for LMDB.
std::unique_ptr<Records> OpenLevelDbRecords(const std::string& path, ColorMode color);

struct ImageListOptions {
  std::string root;                    // prefixed to every PATH
  int new_height = 0, new_width = 0;   // both > 0: every image resized to this
  ColorMode color = ColorMode::kColor;
  // Shuffled when opened and again at each pass's end, by a seed that depends only on the
  // pass: every solver reading the list sees the same order, so disjoint partitions of it
  // stay disjoint.
  bool shuffle = false;
};
// A list file of "PATH LABEL" lines (Caffe's ImageData and convert_imageset): PATH may hold
// spaces (the label follows the last one); blank lines are skipped. Errors: unreadable or
// empty list, a line that is not "PATH LABEL" (named by its number).
struct ListedImage {
  std::string path;
  int label;
  size_t line;
};
std::vector<ListedImage> ReadImageList(const std::string& list);

// Reads the whole list now (ReadImageList's errors).
std::unique_ptr<Records> OpenImageList(const std::string& list, const ImageListOptions& options);

// R-CNN's window file (Caffe's WindowData): blocks of
//   # INDEX / IMAGE_PATH / CHANNELS / HEIGHT / WIDTH / NUM_WINDOWS / then per window
//   CLASS OVERLAP X1 Y1 X2 Y2 (inclusive pixel corners).
// Windows with overlap >= fg_threshold are foreground (their class), those below
// bg_threshold background (label 0), the rest unused. Records are drawn at random: of each
// batch_size in a row, the first round(batch_size * fg_fraction) foreground, the others
// background. Each is cut from its image with context_pad pixels of context at the output
// scale (the box grown by crop_size / (crop_size - 2 context_pad), made square first with
// crop_mode "square"), warped to crop_size x crop_size; context beyond the image is black.
struct WindowOptions {
  std::string root;
  int crop_size = 0, context_pad = 0, batch_size = 0;
  bool square = false, cache_images = false;
  float fg_threshold = 0.5f, bg_threshold = 0.5f, fg_fraction = 0.25f;
};
// Reads the whole window file now. Errors: unreadable, malformed (the line named), no
// foreground or no background window where the batch needs them.
std::unique_ptr<Records> OpenWindowFile(const std::string& path, const WindowOptions& options);

}  // namespace hogstream
