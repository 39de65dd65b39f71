// Frames: header packing, XXH3 / keyed-MAC trailers, and the parser (see frame.hpp).
#include "transport/frame.hpp"

#include <sodium.h>

#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "base/bytes.hpp"
#include "base/hash.hpp"

namespace hogstream {

static_assert(std::endian::native == std::endian::little, "frames are packed for little-endian hosts");

namespace {
constexpr uint8_t kKeyed = 1;

void InitSodium() {
  HS_CHECK(sodium_init() >= 0) << "libsodium failed to initialise";  // idempotent, thread-safe
}
}  // namespace

uint64_t JobIdOf(const std::string& name) { return Digest64(name); }

JobKey LoadJobKey(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HS_REQUIRE(in) << "--job-key: cannot read " << path;
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  HS_REQUIRE(!bytes.empty()) << "--job-key: " << path << " is empty";
  InitSodium();
  JobKey key;
  crypto_generichash(key.data(), key.size(), reinterpret_cast<const unsigned char*>(bytes.data()),
                     bytes.size(), nullptr, 0);
  return key;
}

FrameFormat::FrameFormat(uint64_t job, std::optional<JobKey> key) : job_(job), key_(key) {
  if (key_) {
    InitSodium();
    randombytes_buf(&prefix_, sizeof prefix_);
  }
}

FrameFormat::FrameFormat(const FrameFormat& other) : FrameFormat(other.job_, other.key_) {}

namespace {
// The AEAD's 24-byte nonce from the trailer's 16 (zero-extended).
void Nonce24(const std::byte* nonce16, unsigned char* out) {
  std::memset(out, 0, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
  std::memcpy(out, nonce16, 16);
}
}  // namespace

size_t FrameFormat::Seal(std::byte* f, const FrameHeader& h) const {
  PutBytes<uint32_t>(f + 0, kMagic);
  PutBytes<uint8_t>(f + 4, kVersion);
  PutBytes<uint8_t>(f + 5, static_cast<uint8_t>(h.type));
  PutBytes<uint8_t>(f + 6, 0);
  PutBytes<uint8_t>(f + 7, keyed() ? kKeyed : 0);
  PutBytes<uint64_t>(f + 8, job_);
  PutBytes<uint16_t>(f + 16, h.source);
  PutBytes<uint16_t>(f + 18, 0);
  PutBytes<uint32_t>(f + kLengthAt, h.length);
  PutBytes<uint64_t>(f + 24, 0);
  const size_t body = kHeaderBytes + h.length;
  std::byte* trailer = f + body;
  if (key_) {
    const uint64_t n = counter_.fetch_add(1, std::memory_order_relaxed);
    std::memcpy(trailer, &prefix_, 8);
    std::memcpy(trailer + 8, &n, 8);
    unsigned char nonce[crypto_aead_xchacha20poly1305_ietf_NPUBBYTES];
    Nonce24(trailer, nonce);
    unsigned long long tag_bytes = 0;
    unsigned char none = 0;  // the message: empty (libsodium wants pointers all the same)
    crypto_aead_xchacha20poly1305_ietf_encrypt_detached(
        &none, reinterpret_cast<unsigned char*>(trailer + 16), &tag_bytes, &none, 0,
        reinterpret_cast<const unsigned char*>(f), body, nullptr, nonce, key_->data());
  } else {
    const uint64_t sum = Digest64(f, body);
    std::memcpy(trailer, &sum, sizeof sum);
  }
  return body + trailer_bytes();
}

size_t FrameFormat::Unpadded(const std::byte* f, size_t bytes) const {
  if (bytes < kHeaderBytes) return bytes;
  const uint64_t frame = kHeaderBytes + uint64_t{GetBytes<uint32_t>(f + kLengthAt)} + trailer_bytes();
  return frame <= bytes && bytes - frame < 16 ? static_cast<size_t>(frame) : bytes;
}

std::optional<Reject> FrameFormat::Parse(const std::byte* f, size_t bytes, uint32_t max_payload,
                                         FrameHeader* out, const std::byte** payload) const {
  if (bytes < kHeaderBytes) return Reject::kShort;
  if (GetBytes<uint32_t>(f) != kMagic) return Reject::kMagic;
  if (GetBytes<uint8_t>(f + 4) != kVersion) return Reject::kVersion;
  if (GetBytes<uint8_t>(f + 7) != (keyed() ? kKeyed : 0) || GetBytes<uint64_t>(f + 8) != job_) return Reject::kJob;
  if (bytes < overhead()) return Reject::kShort;
  const uint32_t length = GetBytes<uint32_t>(f + kLengthAt);
  if (length > max_payload || kHeaderBytes + size_t{length} + trailer_bytes() != bytes) return Reject::kLength;
  const size_t body = kHeaderBytes + length;
  if (key_) {
    unsigned char nonce[crypto_aead_xchacha20poly1305_ietf_NPUBBYTES];
    Nonce24(f + body, nonce);
    unsigned char none = 0;  // the message: empty
    if (crypto_aead_xchacha20poly1305_ietf_decrypt_detached(
            &none, nullptr, &none, 0, reinterpret_cast<const unsigned char*>(f + body + 16),
            reinterpret_cast<const unsigned char*>(f), body, nonce, key_->data()) != 0)
      return Reject::kMac;
  } else {
    const uint64_t sum = Digest64(f, body);
    if (std::memcmp(&sum, f + body, sizeof sum) != 0) return Reject::kChecksum;
  }
  // The sender checksummed these fields; out-of-range values are still not ours to take.
  const uint8_t type = GetBytes<uint8_t>(f + 5);
  if ((type != static_cast<uint8_t>(FrameType::kData) && type != static_cast<uint8_t>(FrameType::kHeartbeat)) ||
      GetBytes<uint8_t>(f + 6) != 0 || GetBytes<uint16_t>(f + 18) != 0 || GetBytes<uint64_t>(f + 24) != 0)
    return Reject::kHeader;
  FrameHeader h;
  h.type = static_cast<FrameType>(type);
  h.source = GetBytes<uint16_t>(f + 16);
  h.length = length;
  *out = h;
  *payload = f + kHeaderBytes;
  return std::nullopt;
}

}  // namespace hogstream
