// Compressed deltas and positions on a segment (--compress=fp16|int8|topk:FRACTION): how a
// chunk of floats becomes the payload of one message and back. Not for: the rule that decides
// what is sent (sync/segment.hpp), the frame around the payload (transport/frame.hpp).
//
// Every encoding is lossy except float32; Encode therefore also writes back, in place, exactly
// what the receiver will decode. The segment's slave sends e = decode(encode(d)) of its
// progress d = w - last and sets last = pos + e, so the part of d that did not survive the
// encoding (d - e) stays in w - last and goes out with the next delta of that chunk: error
// feedback with no extra buffer, and no progress is lost to quantisation.
//
// Formats (n = the chunk's floats):
//   float32  n floats                                        4n bytes
//   fp16     n IEEE halves (round to nearest; |x| > 65504 clamps)  2n bytes
//   int8     ceil(n/64) float scales (max |x| of the block / 127), then n signed bytes,
//            x = q * scale                                   n + 4 ceil(n/64) bytes
//   topk:F   k = ceil(F n) uint32 indices, then k floats (the k largest |x|); the rest 0
//                                                            8k bytes
// Positions (the master's values) may also be encoded: a slave's `last` then holds
// decode(pos) + e, and w - last is still exactly its progress (w moves by pos' - last, last
// becomes pos' + e), so a coarse position costs precision of that one copy until the next
// position, never drift or lost progress. fp16 and int8 encode positions as they do deltas;
// topk sends positions whole (a position is not sparse).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "sync/wire.hpp"

namespace hogstream {

struct Codec {
  Encoding delta = Encoding::kFloat32;
  Encoding position = Encoding::kFloat32;
  float fraction = 0;  // topk: the share of each delta's values kept, in (0, 0.5]

  // "" or "none" (float32), "fp16", "int8", "topk:F"; anything else is a one-line user Error.
  static Codec Parse(const std::string& text);
  std::string name() const;
  bool compresses() const { return delta != Encoding::kFloat32 || position != Encoding::kFloat32; }

  // Payload bytes of n values in encoding e (at most 4n, but for int8 of a single value: 5).
  size_t Bytes(Encoding e, uint32_t n) const;
  // Encodes x[0, n) as e into out (Bytes(e, n) bytes) and overwrites x with what the receiver
  // will decode. Returns the bytes written.
  size_t Encode(Encoding e, float* x, uint32_t n, std::byte* out) const;
  // Decodes a payload of `bytes` bytes in encoding e into x[0, n). false: not a valid payload
  // of n values (wrong length, an index out of range, a scale not finite); x is then undefined.
  bool Decode(Encoding e, const std::byte* in, size_t bytes, uint32_t n, float* x) const;
};

}  // namespace hogstream
