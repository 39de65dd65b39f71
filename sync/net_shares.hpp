// The chunk shares of a job across machines (sync/net_job.hpp): which machine masters each
// chunk (ShareChunks over the machines that are live and have the weights, in rank order; the
// chunks --svb takes out of streaming have no owner), which chunks this machine masters and
// which it is a slave of, and to which machines this machine's masters post, each master with
// an epoch of its own, newer than any this machine used before (the first one is its run's
// floor, told in its control messages). Reshare decides, from who is ready and who is live,
// whether the owners change and whether the masters must be made anew, and counts re-shares.
// Not for: the endpoints themselves (the daemon makes a MasterEndpoint per destination that
// Reshare names, and tells the SlaveEndpoint the owners), pacing, liveness (sync/net_members.hpp).
// Threads: none of its own; one owner (the network daemon) calls everything; not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/transport.hpp"

namespace hogstream {

// ShareChunks over the chunks not skipped (--svb; empty: none skipped); a skipped chunk has no
// owner (kNoPeer).
std::vector<PeerId> ShareStreamed(const std::vector<bool>& skipped, uint32_t count, const std::vector<PeerId>& peers,
                                  const std::vector<double>& weights = {});

class NetShares {
 public:
  // This machine (`rank` of `machines`); `multicast`: one master posts to the group; `first_epoch`:
  // the floor of this run's master epochs (every one given is above it).
  NetShares(int rank, int machines, bool multicast, uint32_t first_epoch);
  // A new machine joined the running job (NetJob's admission): `machines` now, rank order kept.
  void Grow(int machines);
  // The buffer's `count` chunks, and those never streamed (--svb; per chunk, empty: none).
  void set_chunks(uint32_t count, std::vector<bool> skipped = {});
  // Each machine's share weight, by rank (--share_weights; a machine beyond the list: 1; empty:
  // equal shares). Before the first Reshare; every machine must give the same.
  void set_weights(std::vector<double> by_rank) { weights_ = std::move(by_rank); }

  // A master to make: where it posts, and its epoch.
  struct Master {
    Dest to;
    uint32_t epoch = 0;
  };
  struct Change {
    bool owners = false;   // the owners changed (owners() and owned() are new)
    bool masters = false;  // the masters are made anew: `make` (empty: this machine owns nothing)
    std::vector<Master> make;
    uint32_t receivers = 0;  // the live machines a multicast position reaches
  };
  // One re-share: the owners among `ready` (rank order), the masters to the `live` machines
  // (per rank; a newcomer receives positions before it owns anything). Nothing changes where
  // nobody is ready.
  Change Reshare(const std::vector<PeerId>& ready, const std::vector<bool>& live);

  uint32_t chunks() const { return count_; }
  bool skipped(uint32_t c) const { return !skipped_.empty() && skipped_[c]; }
  const std::vector<PeerId>& owners() const { return owners_; }  // per chunk (empty before the first)
  const std::vector<uint32_t>& owned() const { return owned_; }  // the chunks this machine masters
  // Chunk c is mastered by another machine (this one is its slave).
  bool Theirs(uint32_t c) const { return owners_[c] != rank_ && owners_[c] != kNoPeer; }
  uint64_t reshares() const { return reshares_; }  // ownership changes after the first share
  uint32_t first_epoch() const { return first_epoch_; }
  uint32_t epoch() const { return epoch_; }  // the last given to a master

 private:
  bool SameMasters(const std::vector<bool>& live) const;
  std::vector<Master> Masters(const std::vector<bool>& live);

  int rank_, machines_;
  bool multicast_;
  uint32_t first_epoch_, epoch_;
  uint32_t count_ = 0;
  std::vector<bool> skipped_;
  std::vector<double> weights_;  // per rank (set_weights)
  std::vector<PeerId> owners_;
  std::vector<uint32_t> owned_;
  bool masters_made_ = false;     // the masters exist (this machine owns chunks)
  std::vector<bool> masters_to_;  // per rank, where they do (not multicast)
  uint64_t reshares_ = 0;
};

}  // namespace hogstream
