// ShmRegion: the weights and the SolverGroup of a Hogwild job in a /dev/shm segment, so that
// solver processes started in separate shells train one copy of the weights (--shm=NAME).
//
// Layout: a header (magic, version, state, parameter count, a hash of the net's parameter
// shapes, the solver settings every process must share, the pids of attached processes), the
// SolverGroup, then the weights, 64-byte aligned. The first process creates the segment (mode
// 0600) and fills the weights; later ones check the header against their net and solver and
// attach. Not for crossing machines (that is the net segment's job).
//
// Membership and liveness are open-file-description (OFD) locks on the segment's file, never
// pids: each attached process holds a write lock on the byte of its slot (far past the end of
// the file), and the kernel drops it when the process dies however it dies. So PID reuse
// cannot make a crashed job look alive, and a process in another PID namespace is seen alive.
// Attaching and leaving hold a "membership" lock byte, so a joiner and the last process out
// never race: the last member out removes the file; a file whose members are all gone is a
// crashed job, reported and never reused or removed by an attacher.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/solver.hpp"
#include "sync/group.hpp"

namespace hogstream {

// What every process of a job must agree on.
struct JobIdentity {
  size_t floats = 0;        // the flat weight buffer's length
  uint64_t shape_hash = 0;  // ParamShapeHash of the net
  // SolverSettings(param): the update rule and schedule, serialised; empty = not checked.
  std::string solver_settings;
};

class ShmRegion {
 public:
  // Creates /dev/shm/hogstream.NAME for the job, or attaches to it when another process made
  // it (then its header must match `id`). `*created` says which.
  // Errors (one line each): a crashed job's segment, a header mismatch (another net or other
  // solver settings, with the first differing field), a segment of another user, a corrupt
  // header, a creator that died before it finished.
  static std::unique_ptr<ShmRegion> CreateOrAttach(const std::string& name, const JobIdentity& id,
                                                   bool* created);
  static std::unique_ptr<ShmRegion> CreateOrAttach(const std::string& name, size_t floats,
                                                   uint64_t shape_hash, bool* created) {
    JobIdentity id;
    id.floats = floats;
    id.shape_hash = shape_hash;
    return CreateOrAttach(name, id, created);
  }
  ~ShmRegion();  // detaches; the last member out unlinks the segment
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  float* weights() const { return weights_; }
  SolverGroup* group() const;
  // Creator only: the weights are initialised; attachers may start.
  void MarkReady();
  const std::string& path() const { return path_; }
  // Members (attached, live processes), this one included.
  int Members() const;

 private:
  ShmRegion() = default;
  struct Header;
  bool SlotHeld(int slot) const;  // by another process's open file description
  void LockMembership(bool on) const;
  Header* header_ = nullptr;
  float* weights_ = nullptr;
  size_t bytes_ = 0;
  int fd_ = -1;
  std::string name_, path_;
  int slot_ = -1;  // this process's slot; -1 until it is a member
};

// Digest64 (base/hash.hpp) of the shapes of a net's learnable params: two nets that would lay out the flat
// buffer differently get different hashes.
uint64_t ParamShapeHash(const Net& net);

// The fields of a solver that decide what an update does (type, lr schedule, momentum, decay,
// clipping, iter_size, max_iter), serialised deterministically: solvers of one job must agree
// on them, or a joiner with another base_lr would silently make the job diverge.
std::string SolverSettings(const pb::SolverParameter& param);
// The first field where two SolverSettings differ, as "base_lr: 0.01 (job) vs 0.02 (this
// solver)"; empty when they are equal.
std::string SolverSettingsDiff(const std::string& job, const std::string& mine);

}  // namespace hogstream
