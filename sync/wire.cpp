// sync's header in a payload, and the Wire over a Transport (see wire.hpp).
#include "sync/wire.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "base/bytes.hpp"

namespace hogstream {

static_assert(std::endian::native == std::endian::little, "sync's header is packed for little-endian hosts");

namespace {

bool KnownKind(uint8_t k) {
  switch (static_cast<MsgKind>(k)) {
    case MsgKind::kPosition:
    case MsgKind::kDelta:
    case MsgKind::kIteration:
    case MsgKind::kFactors:
    case MsgKind::kFinal:
      return true;
  }
  return false;
}
}  // namespace

const char* MsgKindName(MsgKind k) {
  switch (k) {
    case MsgKind::kPosition: return "position";
    case MsgKind::kDelta: return "delta";
    case MsgKind::kIteration: return "iteration";
    case MsgKind::kFactors: return "factors";
    case MsgKind::kFinal: return "final";
  }
  return "unknown";
}

void PutHeader(std::byte* at, const Header& h) {
  PutBytes<uint8_t>(at + 0, static_cast<uint8_t>(h.kind));
  PutBytes<uint8_t>(at + 1, static_cast<uint8_t>(h.encoding));
  PutBytes<uint16_t>(at + 2, 0);
  PutBytes<uint32_t>(at + 4, h.epoch);
  PutBytes<uint32_t>(at + 8, h.chunk);
  PutBytes<uint32_t>(at + 12, 0);
  PutBytes<uint64_t>(at + 16, h.seq);
  PutBytes<uint64_t>(at + 24, h.clock);
}

bool GetHeader(const std::byte* p, uint32_t length, PeerId source, Header* out) {
  if (length < kWireHeaderBytes) return false;
  const uint8_t kind = GetBytes<uint8_t>(p), encoding = GetBytes<uint8_t>(p + 1);
  const uint32_t values = length - kWireHeaderBytes;
  if (!KnownKind(kind) || encoding == 0 || encoding > kMaxEncoding ||
      (encoding == static_cast<uint8_t>(Encoding::kFloat32) && values % sizeof(float) != 0) ||
      GetBytes<uint16_t>(p + 2) != 0 || GetBytes<uint32_t>(p + 12) != 0)
    return false;
  Header h;
  h.kind = static_cast<MsgKind>(kind);
  h.encoding = static_cast<Encoding>(encoding);
  h.source = source;
  h.epoch = GetBytes<uint32_t>(p + 4);
  h.chunk = GetBytes<uint32_t>(p + 8);
  h.seq = GetBytes<uint64_t>(p + 16);
  h.clock = GetBytes<uint64_t>(p + 24);
  h.length = values;
  *out = h;
  return true;
}

std::function<bool(const std::byte*, uint32_t)> FaultsOn(uint32_t kinds) {
  return [kinds](const std::byte* payload, uint32_t length) {
    if (length < kWireHeaderBytes) return false;
    const uint8_t kind = GetBytes<uint8_t>(payload);
    return kind < 32 && (kinds & (1u << kind)) != 0;  // a byte of someone else's: no kind of ours
  };
}

Message MessageOf(const Packet& p) {
  Message m;
  if (GetHeader(p.payload, p.length, p.source, &m.h)) m.payload = p.payload + kWireHeaderBytes;
  return m;
}

Caps Wire::caps() const {
  Caps c = t_->caps();
  c.max_payload = c.max_payload > kWireHeaderBytes ? c.max_payload - kWireHeaderBytes : 0;
  c.alignment = std::min(c.alignment, kWireHeaderBytes);  // the values start 32 bytes into a slot
  return c;
}

void Wire::CommitSend(Dest to, const Header& h) {
  // (The transport's CommitSend checks the length against its slots.) AcquireSend again hands out the same slot (transport.hpp): where the values went, less ours.
  std::byte* slot = t_->AcquireSend();
  HS_CHECK(slot != nullptr) << "CommitSend without AcquireSend";
  PutHeader(slot, h);
  t_->CommitSend(to, kWireHeaderBytes + h.length);
}

bool Wire::PostSend(Dest to, const Header& h, const void* values) {
  HS_CHECK_LE(h.length, caps().max_payload) << "PostSend: message longer than a slot";
  std::byte* slot = AcquireSend();
  if (!slot) return false;
  if (h.length) std::memcpy(slot, values, h.length);  // no values may come as nullptr
  CommitSend(to, h);
  return true;
}

size_t Wire::Poll(Message* out, size_t max) {
  if (packets_.size() < max) packets_.resize(max);
  for (;;) {
    const size_t got = t_->Poll(packets_.data(), max);
    if (got == 0) return 0;
    size_t n = 0;
    for (size_t i = 0; i < got; ++i) {
      const Packet& p = packets_[i];
      ++trailing_;
      Message& m = out[n];
      if (!GetHeader(p.payload, p.length, p.source, &m.h)) {
        malformed_.store(malformed_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        continue;
      }
      m.payload = p.payload + kWireHeaderBytes;
      held_.push_back(trailing_);
      trailing_ = 0;
      ++n;
    }
    // Nothing of ours, and nothing held before them: the refused ones go back now, and the
    // wire is polled again. (Behind held messages they wait for those: releases are in order.)
    if (n > 0 || held_first_ < held_.size()) return n;
    t_->Release(trailing_);
    trailing_ = 0;
  }
}

void Wire::Release(size_t n) {
  HS_CHECK_LE(n, held_.size() - held_first_) << "Release of more messages than Poll handed out";
  size_t packets = 0;
  for (; n > 0; --n) packets += held_[held_first_++];
  if (held_first_ == held_.size()) {  // all handed back: the refused ones after the last too
    packets += trailing_;
    trailing_ = 0;
    held_.clear();
    held_first_ = 0;
  }
  if (packets) t_->Release(packets);
}

}  // namespace hogstream
