// DataTransformer (see transform.hpp): the same arithmetic and crop geometry as Caffe's
// DataTransformer for Datums; the random draws are our own (std::mt19937), not Caffe's stream.
#include "data/transform.hpp"

#include <cstdint>

#include "core/blob.hpp"
#include "base/common.hpp"
#include "core/io.hpp"

namespace hogstream {

namespace {
std::string Dims(int c, int h, int w) {
  return std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
}
}  // namespace

DataTransformer::DataTransformer(const pb::TransformationParameter& param, pb::Phase phase)
    : param_(param), phase_(phase) {
  const std::string& path = param.mean_file();
  if (path.empty()) return;
  HS_REQUIRE(param.mean_value_size() == 0)
      << "give mean_file or mean_value, not both (mean_file '" << path << "')";
  pb::BlobProto blob;
  ReadBinaryProto(path, &blob);
  std::vector<int> dims;
  if (blob.has_shape()) {
    for (int64_t d : blob.shape().dim()) dims.push_back(static_cast<int>(d));
  } else {
    dims = {blob.num(), blob.channels(), blob.height(), blob.width()};
  }
  size_t count = 1;
  for (int d : dims) count *= d > 0 ? d : 0;
  HS_REQUIRE(dims.size() == 4 && dims[0] == 1 && count > 0 &&
             count == static_cast<size_t>(blob.data_size()))
      << "mean_file '" << path << "' must hold one 1 x C x H x W blob; it is " << ShapeString(dims)
      << " with " << blob.data_size() << " values";
  mean_shape_ = {dims[1], dims[2], dims[3]};
  mean_.assign(blob.data().begin(), blob.data().end());
}

std::vector<int> DataTransformer::OutputShape(const pb::Datum& datum) const {
  HS_REQUIRE(!datum.encoded()) << "an encoded image reached the transformer undecoded";
  const int c = datum.channels(), h = datum.height(), w = datum.width();
  HS_REQUIRE(c > 0 && h > 0 && w > 0) << "datum has shape " << Dims(c, h, w);
  const size_t want = static_cast<size_t>(c) * h * w;
  const bool bytes = !datum.data().empty();
  const size_t have = bytes ? datum.data().size() : datum.float_data_size();
  HS_REQUIRE(have == want) << "corrupt datum: " << have << (bytes ? " bytes" : " float values")
                           << " of data for shape " << Dims(c, h, w) << " (" << want << ")";
  HS_REQUIRE(mean_.empty() || mean_shape_ == std::vector<int>({c, h, w}))
      << "mean_file '" << param_.mean_file() << "' is 1x"
      << Dims(mean_shape_[0], mean_shape_[1], mean_shape_[2]) << " but the data is 1x"
      << Dims(c, h, w);
  const int means = param_.mean_value_size();
  HS_REQUIRE(means <= 1 || means == c)
      << means << " mean_value entries for " << c << " channel(s); give one, or one per channel";
  const int crop = static_cast<int>(param_.crop_size());
  if (crop == 0) return {c, h, w};
  HS_REQUIRE(crop <= h && crop <= w)
      << "crop_size " << crop << " is larger than the " << h << "x" << w << " image";
  return {c, crop, crop};
}

void DataTransformer::Transform(const pb::Datum& datum, float* out, std::mt19937& rng) const {
  const std::vector<int> shape = OutputShape(datum);
  const int channels = shape[0], oh = shape[1], ow = shape[2];
  const int h = datum.height(), w = datum.width();
  int h_off = (h - oh) / 2, w_off = (w - ow) / 2;  // TEST: Caffe's centre
  // Caffe mirrors at random whenever `mirror` is set, in TEST too; only the crop depends on
  // the phase.
  const bool mirror = param_.mirror() && std::uniform_int_distribution<int>(0, 1)(rng);
  if (phase_ == pb::TRAIN) {
    if (param_.crop_size()) {
      h_off = std::uniform_int_distribution<int>(0, h - oh)(rng);
      w_off = std::uniform_int_distribution<int>(0, w - ow)(rng);
    }
  }
  const std::string& bytes = datum.data();
  const bool u8 = !bytes.empty();
  const float scale = param_.scale();
  const int means = param_.mean_value_size();
  for (int c = 0; c < channels; ++c) {
    const float mean_c = means == 0 ? 0.f : param_.mean_value(means == 1 ? 0 : c);
    for (int y = 0; y < oh; ++y) {
      const int src_row = (c * h + h_off + y) * w + w_off;  // the mean is indexed like the source
      float* dst = out + (c * oh + y) * ow;
      for (int x = 0; x < ow; ++x) {
        const int src = src_row + x;
        const float v =
            u8 ? static_cast<float>(static_cast<uint8_t>(bytes[src])) : datum.float_data(src);
        dst[mirror ? ow - 1 - x : x] = (v - (mean_.empty() ? mean_c : mean_[src])) * scale;
      }
    }
  }
}

}  // namespace hogstream
