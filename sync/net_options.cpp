// The settings of one machine's part of a job across machines, checked (see net_options.hpp).
#include "sync/net_options.hpp"

#include "base/common.hpp"
#include "base/hash.hpp"
#include "transport/transport.hpp"

namespace hogstream {

NetJobOptions CheckNetJobOptions(NetJobOptions opt, bool can_multicast) {
  HS_REQUIRE(opt.machines >= 1 && opt.machines < kNoPeer)
      << "a job of " << opt.machines << " machines";
  HS_REQUIRE(opt.rank >= 0 && opt.rank < opt.machines)
      << "machine rank " << opt.rank << " outside a job of " << opt.machines;
  HS_REQUIRE(!opt.multicast || can_multicast)
      << "this transport cannot multicast; leave out --multicast";
  HS_REQUIRE(opt.heartbeat_ms > 0 && opt.dead_ms > 2 * opt.heartbeat_ms)
      << "the dead-machine timeout (" << opt.dead_ms << " ms) must exceed two heartbeats ("
      << opt.heartbeat_ms << " ms)";
  if (!opt.quorum_ms) opt.quorum_ms = 30 * opt.dead_ms;
  HS_REQUIRE(opt.quorum_ms > opt.dead_ms) << "a machine cut off gives up after " << opt.quorum_ms
                                          << " ms, sooner than the others take it for dead (" << opt.dead_ms
                                          << " ms): make --quorum_ms longer than --dead_ms";
  return opt;
}

uint64_t BufferDigest(size_t n, const std::vector<size_t>& params) {
  std::vector<uint64_t> shape{n};
  shape.insert(shape.end(), params.begin(), params.end());
  return Digest64(shape.data(), shape.size() * sizeof(uint64_t));
}

ChunkLayout JobChunks(const NetJobOptions& opt, size_t n, const std::vector<size_t>& params, bool cut_at_params,
                      uint32_t max_payload) {
  const uint32_t most = max_payload / sizeof(float) / 4 * 4;
  const uint32_t chunk_floats = opt.chunk_floats ? opt.chunk_floats : most;
  HS_REQUIRE(chunk_floats > 0 && chunk_floats <= most)
      << "chunks of " << chunk_floats << " floats do not fit this transport's messages (" << most
      << " floats at most)";
  return ChunkLayout(n, chunk_floats, cut_at_params ? params : std::vector<size_t>{});
}

}  // namespace hogstream
