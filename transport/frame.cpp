// Frames: header packing, XXH3 / keyed-MAC trailers, and the parser (see frame.hpp).
#include "transport/frame.hpp"

#include <sodium.h>

#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

// XXH3 compiled here, inline, for this build's target (-march: AVX2/AVX-512 where the build
// machine has them) rather than called in Debian's libxxhash.so, which is built for baseline
// x86-64 (SSE2): perf showed the shared library at 21% of all CPU of a raw-Ethernet bench at
// MTU 9000, against ~3% inline. Same function, same values (the format does not change).
// (GCC 12 warns falsely about its own AVX-512 intrinsics inside xxhash.h.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define XXH_INLINE_ALL
#include <xxhash.h>
#pragma GCC diagnostic pop

namespace hogstream {

static_assert(std::endian::native == std::endian::little, "frames are packed for little-endian hosts");

namespace {
template <class T>
void Put(std::byte* at, T v) {
  std::memcpy(at, &v, sizeof v);
}
template <class T>
T Get(const std::byte* at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}
constexpr uint8_t kKeyed = 1;

bool KnownKind(uint8_t k) { return k >= static_cast<uint8_t>(MsgKind::kPosition) && k < kMsgKinds; }

void InitSodium() {
  HS_CHECK(sodium_init() >= 0) << "libsodium failed to initialise";  // idempotent, thread-safe
}
}  // namespace

uint64_t Digest64(const void* data, size_t n) { return XXH3_64bits(data, n); }

uint64_t JobIdOf(const std::string& name) {
  uint64_t id = 1469598103934665603ULL;
  for (unsigned char ch : name) id = (id ^ ch) * 1099511628211ULL;
  return id;
}

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
  if (key_) InitSodium();
}

void FrameFormat::Trailer(const std::byte* data, size_t n, uint8_t* out) const {
  const auto* d = reinterpret_cast<const unsigned char*>(data);
  if (key_) {
    crypto_generichash(out, 16, d, n, key_->data(), key_->size());
  } else {
    const uint64_t sum = XXH3_64bits(d, n);
    std::memcpy(out, &sum, sizeof sum);
  }
}

size_t FrameFormat::Seal(std::byte* f, const Header& h) const {
  Put<uint32_t>(f + 0, kMagic);
  Put<uint8_t>(f + 4, kVersion);
  Put<uint8_t>(f + 5, static_cast<uint8_t>(h.kind));
  Put<uint8_t>(f + 6, static_cast<uint8_t>(h.encoding));
  Put<uint8_t>(f + 7, keyed() ? kKeyed : 0);
  Put<uint64_t>(f + 8, job_);
  Put<uint16_t>(f + 16, h.source);
  Put<uint16_t>(f + 18, 0);
  Put<uint32_t>(f + 20, h.epoch);
  Put<uint32_t>(f + 24, h.chunk);
  Put<uint32_t>(f + 28, h.length);
  Put<uint64_t>(f + 32, h.seq);
  Put<uint64_t>(f + 40, h.clock);
  const size_t body = kHeaderBytes + h.length;
  Trailer(f, body, reinterpret_cast<uint8_t*>(f + body));
  return body + trailer_bytes();
}

std::optional<Reject> FrameFormat::Parse(const std::byte* f, size_t bytes, uint32_t max_payload,
                                         Header* out, const std::byte** payload) const {
  if (bytes < overhead()) return Reject::kShort;
  if (Get<uint32_t>(f) != kMagic) return Reject::kMagic;
  if (Get<uint8_t>(f + 4) != kVersion) return Reject::kVersion;
  if (Get<uint8_t>(f + 7) != (keyed() ? kKeyed : 0) || Get<uint64_t>(f + 8) != job_) return Reject::kJob;
  const uint32_t length = Get<uint32_t>(f + 28);
  if (length > max_payload || kHeaderBytes + size_t{length} + trailer_bytes() != bytes) return Reject::kLength;
  const size_t body = kHeaderBytes + length;
  uint8_t want[16];
  Trailer(f, body, want);
  if (std::memcmp(want, f + body, trailer_bytes()) != 0) return keyed() ? Reject::kMac : Reject::kChecksum;
  // The sender checksummed these fields; out-of-range values are still not ours to apply.
  const uint8_t kind = Get<uint8_t>(f + 5), encoding = Get<uint8_t>(f + 6);
  if (!KnownKind(kind) || encoding == 0 || encoding > kMaxEncoding ||
      (encoding == static_cast<uint8_t>(Encoding::kFloat32) && length % sizeof(float) != 0) ||
      Get<uint16_t>(f + 18) != 0)
    return Reject::kHeader;
  Header h;
  h.kind = static_cast<MsgKind>(kind);
  h.encoding = static_cast<Encoding>(encoding);
  h.source = Get<uint16_t>(f + 16);
  h.epoch = Get<uint32_t>(f + 20);
  h.chunk = Get<uint32_t>(f + 24);
  h.length = length;
  h.seq = Get<uint64_t>(f + 32);
  h.clock = Get<uint64_t>(f + 40);
  *out = h;
  *payload = f + kHeaderBytes;
  return std::nullopt;
}

}  // namespace hogstream
