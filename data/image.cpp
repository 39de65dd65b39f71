// Image decoding, resizing and encoding (see image.hpp). JPEG goes through libjpeg's classic
// API with libjpeg-turbo's B, G, R output; its errors long-jump back here (the only frames
// skipped are libjpeg's own) and become one Error. PNG goes through libpng's simplified API,
// which reports errors as a message and a zero return. An alpha channel is composited onto
// black (the buffer starts zeroed).
#include "data/image.hpp"

#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "base/common.hpp"

namespace hogstream {

namespace {

bool IsJpeg(std::string_view b) {
  return b.size() >= 3 && static_cast<uint8_t>(b[0]) == 0xFF && static_cast<uint8_t>(b[1]) == 0xD8 &&
         static_cast<uint8_t>(b[2]) == 0xFF;
}
bool IsPng(std::string_view b) { return b.size() >= 8 && b.substr(0, 8) == std::string_view("\x89PNG\r\n\x1a\n", 8); }

// OpenCV's fixed-point luma: (4899 R + 9617 G + 1868 B + 2^13) >> 14.
uint8_t Luma(const uint8_t* bgr) {
  return static_cast<uint8_t>((1868u * bgr[0] + 9617u * bgr[1] + 4899u * bgr[2] + 8192u) >> 14);
}

Image ToGray(Image in) {
  if (in.channels == 1) return in;
  Image out{in.height, in.width, 1, std::vector<uint8_t>(static_cast<size_t>(in.height) * in.width)};
  for (size_t i = 0; i < out.pixels.size(); ++i) out.pixels[i] = Luma(&in.pixels[3 * i]);
  return out;
}

Image ToColor(Image in) {
  if (in.channels == 3) return in;
  Image out{in.height, in.width, 3, std::vector<uint8_t>(3 * in.pixels.size())};
  for (size_t i = 0; i < in.pixels.size(); ++i) std::fill_n(&out.pixels[3 * i], 3, in.pixels[i]);
  return out;
}

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = "";
};
void JpegFail(j_common_ptr info) {
  auto* e = reinterpret_cast<JpegError*>(info->err);
  (*info->err->format_message)(info, e->message);
  std::longjmp(e->jump, 1);
}
void JpegQuiet(j_common_ptr, int) {}  // warnings (a premature end, extra bytes) are not errors

// The pixel counts a header promises, checked before anything is allocated.
void CheckSize(uint64_t height, uint64_t width, const std::string& what) {
  HS_REQUIRE(height > 0 && width > 0 && height <= (1u << 16) && width <= (1u << 16))
      << what << ": an image of " << width << "x" << height << " pixels is out of range";
}

Image DecodeJpeg(std::string_view bytes, ColorMode mode, const std::string& what) {
  Image img;
  jpeg_decompress_struct info;
  JpegError err;
  info.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = JpegFail;
  err.mgr.emit_message = JpegQuiet;
  jpeg_create_decompress(&info);
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&info);
    HS_FAIL() << what << ": not a readable JPEG (" << err.message << ")";
  }
  jpeg_mem_src(&info, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  jpeg_read_header(&info, TRUE);
  const bool gray_file = info.jpeg_color_space == JCS_GRAYSCALE;
  if (info.jpeg_color_space == JCS_CMYK || info.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&info);
    HS_FAIL() << what << ": a CMYK JPEG; convert it to RGB first";
  }
  const bool gray = mode == ColorMode::kGray || (mode == ColorMode::kNative && gray_file);
  info.out_color_space = gray ? JCS_GRAYSCALE : JCS_EXT_BGR;
  const uint64_t h = info.image_height, w = info.image_width;
  if (h == 0 || w == 0 || h > (1u << 16) || w > (1u << 16)) {
    jpeg_destroy_decompress(&info);
    CheckSize(h, w, what);
  }
  jpeg_start_decompress(&info);
  img.height = static_cast<int>(info.output_height);
  img.width = static_cast<int>(info.output_width);
  img.channels = info.output_components;
  const size_t row = static_cast<size_t>(img.width) * img.channels;
  img.pixels.assign(row * img.height, 0);
  while (info.output_scanline < info.output_height) {
    JSAMPROW rows[1] = {img.pixels.data() + row * info.output_scanline};
    jpeg_read_scanlines(&info, rows, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  return img;
}

Image DecodePng(std::string_view bytes, ColorMode mode, const std::string& what) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  HS_REQUIRE(png_image_begin_read_from_memory(&png, bytes.data(), bytes.size()))
      << what << ": not a readable PNG (" << png.message << ")";
  const bool gray_file = !(png.format & PNG_FORMAT_FLAG_COLOR);
  if (png.height == 0 || png.width == 0 || png.height > (1u << 16) || png.width > (1u << 16)) {
    png_image_free(&png);
    CheckSize(png.height, png.width, what);
  }
  // A gray file is read as gray; colour as B, G, R (and made gray by OpenCV's weights here).
  png.format = gray_file ? PNG_FORMAT_GRAY : PNG_FORMAT_BGR;
  Image img{static_cast<int>(png.height), static_cast<int>(png.width), gray_file ? 1 : 3, {}};
  img.pixels.assign(PNG_IMAGE_SIZE(png), 0);
  const bool ok = png_image_finish_read(&png, nullptr, img.pixels.data(), 0, nullptr);
  const std::string message = png.message;
  png_image_free(&png);
  HS_REQUIRE(ok) << what << ": not a readable PNG (" << message << ")";
  if (mode == ColorMode::kGray) return ToGray(std::move(img));
  if (mode == ColorMode::kColor) return ToColor(std::move(img));
  return img;
}

std::string EncodeJpeg(const Image& img) {
  jpeg_compress_struct info;
  JpegError err;
  info.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = JpegFail;
  err.mgr.emit_message = JpegQuiet;
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_create_compress(&info);
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&info);
    std::free(out);
    HS_FAIL() << "JPEG encoding failed: " << err.message;
  }
  jpeg_mem_dest(&info, &out, &size);
  info.image_width = img.width;
  info.image_height = img.height;
  info.input_components = img.channels;
  info.in_color_space = img.channels == 1 ? JCS_GRAYSCALE : JCS_EXT_BGR;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, 95, TRUE);
  jpeg_start_compress(&info, TRUE);
  const size_t row = static_cast<size_t>(img.width) * img.channels;
  while (info.next_scanline < info.image_height) {
    JSAMPROW rows[1] = {const_cast<uint8_t*>(img.pixels.data()) + row * info.next_scanline};
    jpeg_write_scanlines(&info, rows, 1);
  }
  jpeg_finish_compress(&info);
  std::string bytes(reinterpret_cast<const char*>(out), size);
  jpeg_destroy_compress(&info);
  std::free(out);
  return bytes;
}

std::string EncodePng(const Image& img) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = img.width;
  png.height = img.height;
  png.format = img.channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_BGR;
  png_alloc_size_t size = 0;
  HS_REQUIRE(png_image_write_get_memory_size(png, size, 0, img.pixels.data(), 0, nullptr))
      << "PNG encoding failed: " << png.message;
  std::string bytes(size, '\0');
  HS_REQUIRE(png_image_write_to_memory(&png, bytes.data(), &size, 0, img.pixels.data(), 0, nullptr))
      << "PNG encoding failed: " << png.message;
  bytes.resize(size);
  return bytes;
}

}  // namespace

bool IsImageFile(std::string_view bytes) { return IsJpeg(bytes) || IsPng(bytes); }

Image DecodeImage(std::string_view bytes, ColorMode mode, const std::string& what) {
  if (IsJpeg(bytes)) return DecodeJpeg(bytes, mode, what);
  if (IsPng(bytes)) return DecodePng(bytes, mode, what);
  HS_FAIL() << what << ": neither a JPEG nor a PNG file (" << bytes.size() << " bytes)";
}

Image ResizeImage(const Image& in, int height, int width) {
  HS_REQUIRE(height > 0 && width > 0 && height <= (1 << 16) && width <= (1 << 16))
      << "cannot resize to " << width << "x" << height;
  if (height == in.height && width == in.width) return in;
  // Source position and weight of each output column and row.
  auto axis = [](int out, int in, std::vector<int>* at, std::vector<float>* frac) {
    const double scale = static_cast<double>(in) / out;
    at->resize(out);
    frac->resize(out);
    for (int i = 0; i < out; ++i) {
      double f = (i + 0.5) * scale - 0.5;
      int k = static_cast<int>(std::floor(f));
      f -= k;
      if (k < 0) k = 0, f = 0;
      if (k >= in - 1) k = in - 1, f = 0;
      (*at)[i] = k;
      (*frac)[i] = static_cast<float>(f);
    }
  };
  std::vector<int> xs, ys;
  std::vector<float> fx, fy;
  axis(width, in.width, &xs, &fx);
  axis(height, in.height, &ys, &fy);
  const int c = in.channels;
  Image out{height, width, c, std::vector<uint8_t>(static_cast<size_t>(height) * width * c)};
  const size_t in_row = static_cast<size_t>(in.width) * c;
  for (int y = 0; y < height; ++y) {
    const uint8_t* r0 = in.pixels.data() + ys[y] * in_row;
    const uint8_t* r1 = ys[y] + 1 < in.height ? r0 + in_row : r0;
    for (int x = 0; x < width; ++x) {
      const int x0 = xs[x] * c, x1 = (xs[x] + 1 < in.width ? xs[x] + 1 : xs[x]) * c;
      for (int k = 0; k < c; ++k) {
        const float top = r0[x0 + k] + fx[x] * (r0[x1 + k] - r0[x0 + k]);
        const float bottom = r1[x0 + k] + fx[x] * (r1[x1 + k] - r1[x0 + k]);
        const float v = top + fy[y] * (bottom - top);
        out.pixels[(static_cast<size_t>(y) * width + x) * c + k] =
            static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
      }
    }
  }
  return out;
}

std::string EncodeImage(const Image& image, const std::string& type) {
  if (type == "jpg" || type == "jpeg") return EncodeJpeg(image);
  if (type == "png") return EncodePng(image);
  HS_FAIL() << "unknown encode type '" << type << "' (jpg or png)";
}

void ImageToDatum(const Image& image, int label, pb::Datum* datum) {
  datum->Clear();
  datum->set_channels(image.channels);
  datum->set_height(image.height);
  datum->set_width(image.width);
  datum->set_label(label);
  std::string* data = datum->mutable_data();
  const size_t plane = static_cast<size_t>(image.height) * image.width;
  data->assign(plane * image.channels, '\0');
  for (int c = 0; c < image.channels; ++c)
    for (size_t i = 0; i < plane; ++i) (*data)[c * plane + i] = static_cast<char>(image.pixels[i * image.channels + c]);
}

void DecodeDatum(pb::Datum* datum, ColorMode mode, const std::string& what) {
  if (!datum->encoded()) return;
  const Image image = DecodeImage(datum->data(), mode, what);
  ImageToDatum(image, datum->label(), datum);
}

}  // namespace hogstream
