// ShmRegion: the weights and the SolverGroup of a Hogwild job in a /dev/shm segment, so that
// solver processes started in separate shells train one copy of the weights (--shm=NAME).
//
// Layout: a header (magic, version, state, parameter count, a hash of the net's parameter
// shapes, the pids of attached processes), the SolverGroup, then the weights, 64-byte
// aligned. The first process creates the segment (mode 0600) and fills the weights; later
// ones check the header against their net and attach. A segment whose processes are all gone
// (a crashed job) is reported and never reused; the last process to leave removes it.
// Not for crossing machines (that is the net segment's job).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/solver.hpp"

namespace hogstream {

class ShmRegion {
 public:
  // Creates /dev/shm/NAME for `floats` weights, or attaches to it when another process made
  // it (then its header must match `floats` and `shape_hash`). `*created` says which.
  // Errors: a stale segment, a header mismatch, no permission, a creator that never finished.
  static std::unique_ptr<ShmRegion> CreateOrAttach(const std::string& name, size_t floats,
                                                   uint64_t shape_hash, bool* created);
  ~ShmRegion();  // detaches; the last process out unlinks the segment
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  float* weights() const { return weights_; }
  SolverGroup* group() const;
  // Creator only: the weights are initialised; attachers may start.
  void MarkReady();
  const std::string& path() const { return path_; }

 private:
  ShmRegion() = default;
  struct Header;
  Header* header_ = nullptr;
  float* weights_ = nullptr;
  size_t bytes_ = 0;
  std::string name_, path_;
  int slot_ = -1;  // this process's entry in the header's pid table
};

// FNV-1a over the shapes of a net's learnable params: two nets that would lay out the flat
// buffer differently get different hashes.
uint64_t ParamShapeHash(const Net& net);

}  // namespace hogstream
