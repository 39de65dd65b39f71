// The segment codecs (see codec.hpp).
#include "sync/codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "base/common.hpp"

namespace hogstream {

namespace {

constexpr uint32_t kBlock = 64;  // int8: values per scale
constexpr float kHalfMax = 65504.f;

uint32_t Blocks(uint32_t n) { return (n + kBlock - 1) / kBlock; }

uint32_t Kept(float fraction, uint32_t n) {
  return std::clamp<uint32_t>(static_cast<uint32_t>(std::ceil(fraction * n)), 1, n);
}

}  // namespace

Codec Codec::Parse(const std::string& text) {
  Codec c;
  if (text.empty() || text == "none") return c;
  if (text == "fp16") {
    c.delta = c.position = Encoding::kFloat16;
  } else if (text == "int8") {
    c.delta = c.position = Encoding::kInt8;
  } else if (text.rfind("topk:", 0) == 0) {
    char* end = nullptr;
    const std::string f = text.substr(5);
    c.fraction = std::strtof(f.c_str(), &end);
    HS_REQUIRE(!f.empty() && end && *end == 0 && c.fraction > 0 && c.fraction <= 0.5f)
        << "--compress=" << text << ": want topk:FRACTION with FRACTION in (0, 0.5], like topk:0.01";
    c.delta = Encoding::kTopK;
  } else {
    HS_FAIL() << "--compress=" << text << ": want fp16, int8 or topk:FRACTION (like topk:0.01)";
  }
  return c;
}

std::string Codec::name() const {
  switch (delta) {
    case Encoding::kFloat32: return "none";
    case Encoding::kFloat16: return "fp16";
    case Encoding::kInt8: return "int8";
    case Encoding::kTopK: {
      std::string s = std::to_string(fraction);
      s.erase(s.find_last_not_of('0') + 1);
      return "topk:" + s;
    }
  }
  return "?";
}

size_t Codec::Bytes(Encoding e, uint32_t n) const {  // int8 of 1 value: 5 bytes; else <= 4n
  switch (e) {
    case Encoding::kFloat32: return size_t{n} * 4;
    case Encoding::kFloat16: return size_t{n} * 2;
    case Encoding::kInt8: return size_t{n} + 4 * size_t{Blocks(n)};
    case Encoding::kTopK: return size_t{Kept(fraction, n)} * 8;
  }
  HS_CHECK(false) << "encoding " << int(e);
  return 0;
}

size_t Codec::Encode(Encoding e, float* x, uint32_t n, std::byte* out) const {
  switch (e) {
    case Encoding::kFloat32:
      std::memcpy(out, x, size_t{n} * 4);
      break;
    case Encoding::kFloat16: {
      auto* h = reinterpret_cast<_Float16*>(out);
      for (uint32_t i = 0; i < n; ++i) {
        h[i] = static_cast<_Float16>(std::clamp(x[i], -kHalfMax, kHalfMax));
        x[i] = static_cast<float>(h[i]);
      }
      break;
    }
    case Encoding::kInt8: {
      const uint32_t blocks = Blocks(n);
      auto* q = reinterpret_cast<int8_t*>(out + 4 * size_t{blocks});
      for (uint32_t b = 0; b < blocks; ++b) {
        const uint32_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
        float top = 0;
        for (uint32_t i = lo; i < hi; ++i) top = std::max(top, std::fabs(x[i]));
        // A block whose largest value is below ~1e-36 (127 / FLT_MAX) has no finite inverse
        // scale: it goes as zeros (its values stay in w - last), never as 0 * inf = NaN.
        float scale = top / 127.f, inv = scale > 0 ? 1.f / scale : 0.f;
        if (!std::isfinite(inv)) scale = inv = 0;
        std::memcpy(out + 4 * size_t{b}, &scale, 4);
        for (uint32_t i = lo; i < hi; ++i) {
          const float v = std::clamp(std::nearbyint(x[i] * inv), -127.f, 127.f);
          q[i] = static_cast<int8_t>(v);
          x[i] = v * scale;
        }
      }
      break;
    }
    case Encoding::kTopK: {
      const uint32_t k = Kept(fraction, n);
      thread_local std::vector<uint32_t> order;
      order.resize(n);
      std::iota(order.begin(), order.end(), 0u);
      std::nth_element(order.begin(), order.begin() + (k - 1), order.end(),
                       [x](uint32_t a, uint32_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
      std::sort(order.begin(), order.begin() + k);  // ascending indices: the receiver's writes stream
      auto* idx = reinterpret_cast<uint32_t*>(out);
      auto* val = reinterpret_cast<float*>(out + 4 * size_t{k});
      for (uint32_t j = 0; j < k; ++j) {
        idx[j] = order[j];
        val[j] = x[order[j]];
      }
      std::fill(x, x + n, 0.f);
      for (uint32_t j = 0; j < k; ++j) x[idx[j]] = val[j];
      break;
    }
  }
  return Bytes(e, n);
}

bool Codec::Decode(Encoding e, const std::byte* in, size_t bytes, uint32_t n, float* x) const {
  if (bytes != Bytes(e, n)) return false;
  switch (e) {
    case Encoding::kFloat32:
      std::memcpy(x, in, bytes);
      return true;
    case Encoding::kFloat16: {
      const auto* h = reinterpret_cast<const _Float16*>(in);
      for (uint32_t i = 0; i < n; ++i) x[i] = static_cast<float>(h[i]);
      return true;
    }
    case Encoding::kInt8: {
      const uint32_t blocks = Blocks(n);
      const auto* q = reinterpret_cast<const int8_t*>(in + 4 * size_t{blocks});
      for (uint32_t b = 0; b < blocks; ++b) {
        float scale;
        std::memcpy(&scale, in + 4 * size_t{b}, 4);
        if (!std::isfinite(scale)) return false;
        const uint32_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
        for (uint32_t i = lo; i < hi; ++i) x[i] = q[i] * scale;
      }
      return true;
    }
    case Encoding::kTopK: {
      const uint32_t k = Kept(fraction, n);
      const auto* idx = reinterpret_cast<const uint32_t*>(in);
      const auto* val = reinterpret_cast<const float*>(in + 4 * size_t{k});
      std::fill(x, x + n, 0.f);
      for (uint32_t j = 0; j < k; ++j) {
        if (idx[j] >= n) return false;
        x[idx[j]] = val[j];
      }
      return true;
    }
  }
  return false;
}

}  // namespace hogstream
