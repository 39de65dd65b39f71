// The chunk shares of a job across machines (see net_shares.hpp): owners, this machine's
// chunks, and the masters a re-share makes.
#include "sync/net_shares.hpp"

#include <utility>

#include "base/common.hpp"
#include "sync/segment.hpp"

namespace hogstream {

std::vector<PeerId> ShareStreamed(const std::vector<bool>& skipped, uint32_t count, const std::vector<PeerId>& peers,
                                  const std::vector<double>& weights) {
  if (skipped.empty()) return ShareChunks(count, peers, weights);
  std::vector<uint32_t> streamed;
  for (uint32_t c = 0; c < count; ++c)
    if (!skipped[c]) streamed.push_back(c);
  const std::vector<PeerId> share = ShareChunks(static_cast<uint32_t>(streamed.size()), peers, weights);
  std::vector<PeerId> owners(count, kNoPeer);
  for (size_t i = 0; i < streamed.size(); ++i) owners[streamed[i]] = share[i];
  return owners;
}

NetShares::NetShares(int rank, int machines, bool multicast, uint32_t first_epoch)
    : rank_(rank),
      machines_(machines),
      multicast_(multicast),
      first_epoch_(first_epoch),
      epoch_(first_epoch),
      masters_to_(static_cast<size_t>(machines), false) {}

void NetShares::Grow(int machines) {
  HS_CHECK(machines >= machines_) << machines << " machines after " << machines_;
  machines_ = machines;
  masters_to_.resize(static_cast<size_t>(machines), false);
}

void NetShares::set_chunks(uint32_t count, std::vector<bool> skipped) {
  HS_CHECK(skipped.empty() || skipped.size() == count) << skipped.size() << " skip marks for " << count << " chunks";
  count_ = count;
  skipped_ = std::move(skipped);
}

bool NetShares::SameMasters(const std::vector<bool>& live) const {
  for (int r = 0; r < machines_; ++r)
    if (r != rank_ && masters_to_[r] != static_cast<bool>(live[r])) return false;
  return true;
}

std::vector<NetShares::Master> NetShares::Masters(const std::vector<bool>& live) {
  std::vector<Master> make;
  if (multicast_) {
    make.push_back({Dest::Group(0), ++epoch_});  // newer than any this machine used: slaves take it at once
  } else {
    for (int r = 0; r < machines_; ++r) {
      if (r == rank_ || !live[r]) continue;
      make.push_back({Dest::Peer(static_cast<PeerId>(r)), ++epoch_});
      masters_to_[r] = true;
    }
  }
  masters_made_ = true;
  return make;
}

NetShares::Change NetShares::Reshare(const std::vector<PeerId>& ready, const std::vector<bool>& live) {
  Change ch;
  for (int r = 0; r < machines_; ++r) ch.receivers += r != rank_ && live[r];
  if (ready.empty()) return ch;  // nobody has the weights (cannot happen once started)
  std::vector<double> weights;  // the ready machines' share weights (none given: equal shares)
  for (PeerId r : ready)
    if (!weights_.empty()) weights.push_back(r < weights_.size() ? weights_[r] : 1.0);
  std::vector<PeerId> owners = ShareStreamed(skipped_, count_, ready, weights);
  // Masters go to the live machines (a newcomer receives positions before it owns anything).
  const bool same = owners == owners_ && (multicast_ || owned_.empty() || SameMasters(live));
  if (same && masters_made_ != owned_.empty()) return ch;
  ch.masters = true;
  masters_made_ = false;
  masters_to_.assign(static_cast<size_t>(machines_), false);
  if (owners != owners_) {
    if (!owners_.empty()) ++reshares_;
    ch.owners = true;
    owners_ = std::move(owners);
    owned_.clear();
    for (uint32_t c = 0; c < owners_.size(); ++c)
      if (owners_[c] == rank_) owned_.push_back(c);
  }
  if (!owned_.empty()) ch.make = Masters(live);
  return ch;
}

}  // namespace hogstream
