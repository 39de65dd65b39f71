// Fingerprints that are the same on every machine, build and tool: XXH3-64 (xxHash) of bytes.
// What machines and processes compare (a job's id on the wire, the agreement hashes of a
// job's control messages, the shape of a net's weights in a /dev/shm segment) and what frames
// checksum with. Not for: anything an attacker must not be able to forge (transport/frame.hpp
// MACs with the job key for that). Pure functions: any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hogstream {

// XXH3-64 of `n` bytes at `data`, seed 0.
uint64_t Digest64(const void* data, size_t n);
inline uint64_t Digest64(const std::string& s) { return Digest64(s.data(), s.size()); }

}  // namespace hogstream
