// Converters and the mean computation (see convert.hpp). Input files are read whole: the
// largest (MNIST's 47 MB of training images) fits comfortably in memory. Not a general IDX
// reader: only the 3-d image and 1-d label files MNIST uses.
#include "data/convert.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <random>

#include "core/blob.hpp"
#include "base/common.hpp"
#include "core/io.hpp"
#include "core/proto/hogstream.pb.h"
#include "data/image.hpp"
#include "data/lmdb.hpp"
#include "data/records.hpp"
#include "data/transform.hpp"

namespace hogstream {

namespace {

// The whole file. gzread recognises the gzip magic (1f 8b) and inflates such files, and
// passes any other file through unchanged; a truncated gzip stream is an error.
std::string ReadFile(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  HS_REQUIRE(f) << "cannot open '" << path << "': " << ErrnoText(errno);
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, n);
  int err = Z_OK;
  const std::string msg = gzerror(f, &err);
  gzclose(f);
  HS_REQUIRE(n == 0 && err == Z_OK) << "cannot read '" << path << "': " << msg;
  return out;
}

uint32_t BigEndian32(const std::string& s, size_t offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data() + offset);
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

// Checks an IDX file's header and size; returns the item count. `dims` values follow the count.
size_t CheckIdx(const std::string& path, const std::string& file, uint32_t magic, int dims,
                const char* what) {
  const uint32_t found = file.size() >= 4 ? BigEndian32(file, 0) : 0;
  HS_REQUIRE(found == magic) << path << ": not an IDX " << what << " file (magic number " << found
                             << ", expected " << magic << ")";
  const size_t header = 8 + 4 * dims;
  HS_REQUIRE(file.size() >= header)
      << path << ": truncated IDX header (" << file.size() << " bytes)";
  const size_t count = BigEndian32(file, 4);
  size_t item = 1;
  for (int d = 0; d < dims; ++d) item *= BigEndian32(file, 8 + 4 * d);
  const size_t body = file.size() - header;
  HS_REQUIRE(item > 0 && body % item == 0 && body / item == count)
      << path << ": the header promises " << count << " " << what << "s of " << item
      << " byte(s) but the file holds " << body << " bytes after it"
      << (body < count * item ? " (truncated)" : "");
  return count;
}

std::string Key(const char* format, size_t index) {
  char key[32];
  std::snprintf(key, sizeof key, format, static_cast<int>(index));
  return key;
}

}  // namespace

size_t ConvertMnist(const std::string& images_path, const std::string& labels_path,
                    const std::string& out_lmdb) {
  const std::string images = ReadFile(images_path), labels = ReadFile(labels_path);
  const size_t n = CheckIdx(images_path, images, 2051, 2, "image");
  const size_t n_labels = CheckIdx(labels_path, labels, 2049, 0, "label");
  HS_REQUIRE(n == n_labels) << images_path << " holds " << n << " images but " << labels_path
                            << " holds " << n_labels << " labels";
  const int rows = static_cast<int>(BigEndian32(images, 8));
  const int cols = static_cast<int>(BigEndian32(images, 12));
  const size_t pixels = static_cast<size_t>(rows) * cols;

  LmdbWriter db(out_lmdb);
  pb::Datum datum;
  datum.set_channels(1);
  datum.set_height(rows);
  datum.set_width(cols);
  std::string value;
  for (size_t i = 0; i < n; ++i) {
    datum.set_data(images.data() + 16 + i * pixels, pixels);
    datum.set_label(static_cast<uint8_t>(labels[8 + i]));
    datum.SerializeToString(&value);
    db.Put(Key("%08d", i), value);
  }
  db.Commit();
  return n;
}

size_t ConvertCifar10(const std::vector<std::string>& batch_paths, const std::string& out_lmdb) {
  constexpr size_t kPixels = 3 * 32 * 32, kRecord = 1 + kPixels;
  HS_REQUIRE(!batch_paths.empty()) << "no CIFAR-10 batch files given";
  std::vector<std::string> files;
  for (const std::string& path : batch_paths) {
    files.push_back(ReadFile(path));
    const size_t size = files.back().size();
    HS_REQUIRE(size > 0 && size % kRecord == 0)
        << path << ": " << size << " bytes is not a whole number of CIFAR-10 records (" << kRecord
        << " bytes each)";
  }

  LmdbWriter db(out_lmdb);
  pb::Datum datum;
  datum.set_channels(3);
  datum.set_height(32);
  datum.set_width(32);
  std::string value;
  size_t index = 0;
  for (const std::string& file : files) {
    for (size_t off = 0; off < file.size(); off += kRecord, ++index) {
      datum.set_label(static_cast<uint8_t>(file[off]));
      datum.set_data(file.data() + off + 1, kPixels);
      datum.SerializeToString(&value);
      db.Put(Key("%05d", index), value);
    }
  }
  db.Commit();
  return index;
}

size_t ConvertImageset(const std::string& root, const std::string& list, const std::string& out_lmdb,
                       const ImagesetOptions& opt) {
  HS_REQUIRE(opt.encode_type.empty() || opt.encode_type == "jpg" || opt.encode_type == "png")
      << "--encode_type must be jpg or png, got '" << opt.encode_type << "'";
  HS_REQUIRE(opt.encode_type.empty() || opt.encoded) << "--encode_type needs --encoded";
  HS_REQUIRE((opt.resize_height > 0) == (opt.resize_width > 0))
      << "give both --resize_height and --resize_width, or neither";
  // The list, checked whole before any image is read.
  std::vector<ListedImage> lines = ReadImageList(list);
  if (opt.shuffle) {
    std::mt19937 rng(opt.seed);
    std::shuffle(lines.begin(), lines.end(), rng);
  }
  const bool resize = opt.resize_height > 0;
  const std::string prefix = root.empty() || root.back() == '/' ? root : root + "/";
  LmdbWriter db(out_lmdb);
  pb::Datum datum;
  std::string value;
  int first_h = -1, first_w = -1;
  for (size_t i = 0; i < lines.size(); ++i) {
    const ListedImage& l = lines[i];
    const std::string path = prefix + l.path;
    const std::string what = path + " (" + list + ":" + std::to_string(l.line) + ")";
    std::string bytes;
    try {
      bytes = ReadFile(path);
    } catch (const Error& e) {
      HS_FAIL() << e.what() << " (" << list << ":" << l.line << ")";
    }
    Image image = DecodeImage(bytes, opt.gray ? ColorMode::kGray : ColorMode::kColor, what);
    if (resize) image = ResizeImage(image, opt.resize_height, opt.resize_width);
    if (opt.check_size) {
      if (first_h < 0) first_h = image.height, first_w = image.width;
      HS_REQUIRE(image.height == first_h && image.width == first_w)
          << what << ": " << image.width << "x" << image.height << " pixels, but the first image is "
          << first_w << "x" << first_h << " (--check_size)";
    }
    if (opt.encoded) {
      const std::string kind = bytes.size() > 1 && static_cast<uint8_t>(bytes[0]) == 0xFF ? "jpg" : "png";
      const std::string type = opt.encode_type.empty() ? kind : opt.encode_type;
      datum.Clear();
      datum.set_label(l.label);
      datum.set_encoded(true);
      // The file as it is, when nothing would change it (its gray/colour kind included).
      const bool as_is = !resize && !opt.gray && type == kind && DecodeImage(bytes, ColorMode::kNative, what).channels == 3;
      datum.set_data(as_is ? bytes : EncodeImage(image, type));
    } else {
      ImageToDatum(image, l.label, &datum);
    }
    datum.SerializeToString(&value);
    char key[24];
    std::snprintf(key, sizeof key, "%08d_", static_cast<int>(i));
    db.Put(key + l.path, value);
  }
  db.Commit();
  return lines.size();
}

size_t ComputeMean(const std::string& lmdb_path, const std::string& out_binaryproto) {
  LmdbCursor cursor(lmdb_path);
  // A transformer with no mean, scale 1 and no crop turns a Datum into its raw pixel values
  // and checks it on the way.
  const DataTransformer raw(pb::TransformationParameter(), pb::TEST);
  std::mt19937 unused;
  pb::Datum datum;
  std::vector<int> shape;
  std::vector<float> pixels;
  std::vector<double> sum;
  for (size_t i = 0; i < cursor.size(); ++i, cursor.Next()) {
    try {
      HS_REQUIRE(
          datum.ParseFromArray(cursor.value().data(), static_cast<int>(cursor.value().size())))
          << "not a Datum";
      DecodeDatum(&datum, ColorMode::kNative, "an encoded image");
      const std::vector<int> s = raw.OutputShape(datum);
      if (i == 0) {
        shape = s;
        pixels.resize(static_cast<size_t>(s[0]) * s[1] * s[2]);
        sum.assign(pixels.size(), 0.0);
      }
      HS_REQUIRE(s == shape) << "datum is " << ShapeString(s) << " but the first is "
                             << ShapeString(shape);
      raw.Transform(datum, pixels.data(), unused);
    } catch (const Error& e) {
      HS_FAIL() << "LMDB '" << lmdb_path << "', key '" << cursor.key() << "': " << e.what();
    }
    for (size_t j = 0; j < sum.size(); ++j) sum[j] += pixels[j];
  }
  pb::BlobProto mean;
  mean.set_num(1);
  mean.set_channels(shape[0]);
  mean.set_height(shape[1]);
  mean.set_width(shape[2]);
  for (double v : sum) mean.add_data(static_cast<float>(v / cursor.size()));
  WriteBinaryProtoAtomic(out_binaryproto, mean);
  return cursor.size();
}

}  // namespace hogstream
