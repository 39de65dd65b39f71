// Image files for the data path: JPEG (libjpeg-turbo) and PNG (libpng) decoded into 8-bit
// pixels, resized, encoded again, and turned into Caffe's Datums. Pixels are kept as Caffe's
// OpenCV-based tools keep them: rows of interleaved pixels, colour in B, G, R order, so a
// Datum made here (channel-major, channel 0 = blue) matches one made by convert_imageset.
// Every function is safe to call from several threads at once (the Data layer's readers).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/proto/hogstream.pb.h"

namespace hogstream {

struct Image {
  int height = 0, width = 0, channels = 0;  // channels: 1 (gray) or 3 (B, G, R)
  std::vector<uint8_t> pixels;              // height rows of width * channels bytes
};

// How colour is taken from a file: as stored (a gray file stays 1 channel, anything else
// becomes 3), always 3 channels, or always gray (Y = 0.299 R + 0.587 G + 0.114 B, as
// OpenCV converts).
enum class ColorMode { kNative, kColor, kGray };

// Whether `bytes` start like a JPEG or a PNG file.
bool IsImageFile(std::string_view bytes);

// Decodes a JPEG or PNG held in memory. `what` names it in errors (a file name, a record):
// anything else, a truncated or corrupt file, or an unsupported kind (CMYK JPEG) is one line.
Image DecodeImage(std::string_view bytes, ColorMode mode, const std::string& what);

// Bilinear resize with pixel centres aligned (OpenCV's INTER_LINEAR: source x = (x + 0.5) *
// in / out - 0.5, clamped at the edges), rounded to the nearest value.
Image ResizeImage(const Image& in, int height, int width);

// "jpg" (quality 95, as OpenCV's default) or "png"; anything else is an Error.
std::string EncodeImage(const Image& image, const std::string& type);

// A raw Datum: channels x height x width bytes, channel-major.
void ImageToDatum(const Image& image, int label, pb::Datum* datum);

// An encoded Datum (datum.encoded(), data = a JPEG or PNG file) becomes the raw Datum of its
// decoded image, label kept; a raw one is left as it is.
void DecodeDatum(pb::Datum* datum, ColorMode mode, const std::string& what);

}  // namespace hogstream
