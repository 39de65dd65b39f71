// For tests of jobs across machines in one process: each machine's NetJob over UDP on
// 127.0.0.1, every other machine its peer.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "sync/net_job.hpp"
#include "transport/udp/device.hpp"
#include "transport/udp/endpoint.hpp"

namespace hogstream::test {

// `machines` NetJobs of job `job` (liveness the job's, not the transport's: a heartbeat every
// 10 ms, dead after 5 s; 20 s to start, sweeps every 5 ms, a 3 s drain; quiet), datagrams of
// `max_payload` bytes.
inline std::vector<std::unique_ptr<NetJob>> LoopbackJobs(int machines, uint64_t job, uint32_t max_payload = 4096) {
  std::vector<std::unique_ptr<Transport>> transports(static_cast<size_t>(machines));
  std::vector<uint16_t> ports(static_cast<size_t>(machines));
  for (int r = 0; r < machines; ++r) {
    UdpOptions o;
    o.job = job;
    o.heartbeat_ms = 0;
    o.max_payload = max_payload;
    transports[r] = UdpDevice(o).Open(static_cast<PeerId>(r));
    ports[r] = static_cast<UdpEndpoint*>(transports[r].get())->port();
  }
  std::vector<std::unique_ptr<NetJob>> jobs(static_cast<size_t>(machines));
  for (int r = 0; r < machines; ++r) {
    for (int q = 0; q < machines; ++q)
      if (q != r) static_cast<UdpEndpoint*>(transports[r].get())->AddPeer(static_cast<PeerId>(q), "127.0.0.1", ports[q]);
    NetJobOptions n;
    n.rank = r;
    n.machines = machines;
    n.heartbeat_ms = 10;
    n.dead_ms = 5000;
    n.start_ms = 20000;
    n.sweep_ms = 5;
    n.drain_ms = 3000;
    n.log = false;
    jobs[r] = std::make_unique<NetJob>(std::move(transports[r]), n);
  }
  return jobs;
}

}  // namespace hogstream::test
