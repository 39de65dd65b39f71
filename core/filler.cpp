#include "core/filler.hpp"

#include <cmath>

#include "core/math.hpp"

namespace hogstream {

void CheckFiller(const pb::FillerParameter& p) {
  const std::string& t = p.type();
  HS_REQUIRE(t == "constant" || t == "uniform" || t == "gaussian" || t == "xavier" ||
             t == "msra" || t == "bilinear" || t == "positive_unitball")
      << "unknown filler type '" << t << "'";
  if (t == "uniform") HS_REQUIRE(p.min() <= p.max()) << "uniform filler with min > max";
  if (t == "gaussian") HS_REQUIRE(p.std() > 0) << "gaussian filler needs std > 0";
}

static float FanScale(const pb::FillerParameter& p, const Blob& blob) {
  HS_REQUIRE(blob.num_axes() >= 1 && blob.count() > 0) << "cannot fill an empty blob";
  const float fan_in = static_cast<float>(blob.count()) / blob.shape(0);
  const float fan_out = blob.num_axes() > 1 ? static_cast<float>(blob.count()) / blob.shape(1)
                                            : static_cast<float>(blob.count());
  switch (p.variance_norm()) {
    case pb::FillerParameter::FAN_OUT: return fan_out;
    case pb::FillerParameter::AVERAGE: return (fan_in + fan_out) / 2;
    default: return fan_in;
  }
}

void Fill(const pb::FillerParameter& p, Blob* blob) {
  CheckFiller(p);
  const int n = blob->count();
  if (n == 0) return;
  float* d = blob->mutable_cpu_data();
  const std::string& t = p.type();
  if (t == "constant") {
    set(n, p.value(), d);
  } else if (t == "uniform") {
    rng_uniform(n, p.min(), p.max(), d);
  } else if (t == "gaussian") {
    rng_gaussian(n, p.mean(), p.std(), d);
    if (p.sparse() >= 0) {
      // Keep each weight with probability sparse / num_outputs (num_outputs = shape(0)).
      HS_REQUIRE(blob->num_axes() >= 1) << "sparse gaussian filler needs a shaped blob";
      const float keep = std::min(1.f, static_cast<float>(p.sparse()) / blob->shape(0));
      std::vector<int> mask(n);
      rng_bernoulli(n, keep, mask.data());
      for (int i = 0; i < n; ++i) d[i] *= mask[i];
    }
  } else if (t == "xavier") {
    const float s = std::sqrt(3.f / FanScale(p, *blob));
    rng_uniform(n, -s, s, d);
  } else if (t == "msra") {
    rng_gaussian(n, 0.f, std::sqrt(2.f / FanScale(p, *blob)), d);
  } else if (t == "bilinear") {
    // Upsampling kernel for deconvolution: separable triangle, same for every channel pair.
    HS_REQUIRE(blob->num_axes() == 4 && blob->shape(2) == blob->shape(3))
        << "bilinear filler needs a square 4-d kernel, got " << blob->shape_string();
    const int k = blob->shape(3);
    const int f = (k + 1) / 2;
    const float c = (2 * f - 1 - f % 2) / (2.f * f);
    for (int i = 0; i < n; ++i) {
      const float x = i % k, y = (i / k) % k;
      d[i] = (1 - std::fabs(x / f - c)) * (1 - std::fabs(y / f - c));
    }
  } else if (t == "positive_unitball") {
    // Uniform in [0, 1), then each row (all but the first axis) rescaled to sum to one.
    rng_uniform(n, 0.f, 1.f, d);
    const int rows = blob->shape(0), dim = n / rows;
    for (int r = 0; r < rows; ++r) {
      double s = 0;
      for (int j = 0; j < dim; ++j) s += d[r * dim + j];
      for (int j = 0; j < dim; ++j) d[r * dim + j] = static_cast<float>(d[r * dim + j] / s);
    }
  }
}

}  // namespace hogstream
