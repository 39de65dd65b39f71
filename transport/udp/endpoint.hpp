// UDP endpoint: one non-blocking socket serves every peer (unicast) plus one socket per joined
// multicast group; frames (transport/frame.hpp) in preallocated slots; sendmmsg / recvmmsg in
// batches; a token-bucket pacer; heartbeats and a peer timeout for "peer down".
// Not for: reliability (a lost datagram is lost; the delta rule tolerates it).
// GSO: runs of equal-size frames to one destination go as one send with UDP_SEGMENT where the
// kernel takes it (probed at set-up; turned off for good at the first EIO, as a path that
// cannot segment answers). GRO: with UDP_GRO on (where the kernel has it) one receive slot takes
// a whole coalesced run, up to 64 KiB, as GSO sent it over veth or loopback or as a NIC
// coalesced it, and Poll hands out each frame in it: one recvmmsg entry instead of one per
// datagram, the half of the GSO gain a receiver can take (network.md §2.2). A slot goes back to
// the kernel once every message in it is released.
// Alignment: every datagram is padded after its trailer to a multiple of 16 bytes (zeros the
// receiver ignores; the frame's length field says where it ends), so frames back to back in a
// coalesced run keep their payloads 16-aligned.
//
// Threads: as transport.hpp (one sender thread, one receiver thread). Set-up calls (AddPeer,
// AddGroup) come from the owner before either thread uses the endpoint.
// Liveness: the sender thread sends a heartbeat to every peer from Flush() / AcquireSend() at
// least every heartbeat_ms while it is called that often (an idle daemon: poll(wait_fd) with a
// timeout <= heartbeat_ms, then Flush). The receiver thread latches kPeerDown in Poll() once a
// peer it has heard from is silent for peer_timeout_ms. Heartbeats never reach the caller.
// Teardown: the destructor closes the sockets; nothing is in flight in user memory (slots are
// ours), so any order of destroying endpoints is safe.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/frame.hpp"
#include "transport/send_queue.hpp"
#include "transport/transport.hpp"
#include "transport/udp/device.hpp"

namespace hogstream {

class UdpEndpoint final : public Transport {
 public:
  UdpEndpoint(PeerId self, const UdpOptions& opt);
  ~UdpEndpoint() override;
  UdpEndpoint(const UdpEndpoint&) = delete;
  UdpEndpoint& operator=(const UdpEndpoint&) = delete;

  // Set-up (owner thread, before traffic). A bad address is a one-line Error.
  void AddPeer(PeerId peer, const std::string& ip, uint16_t port);
  // Sends to Dest::Group(group) go to ip:port (a 239.0.0.0/8 address); with `join`, this
  // endpoint also receives the group. false: the kernel refused the membership (no multicast
  // here); the group is then unusable and nothing else changed.
  bool AddGroup(uint16_t group, const std::string& ip, uint16_t port, bool join);
  uint16_t port() const { return port_; }
  int rcvbuf_bytes() const { return rcvbuf_; }  // what the kernel granted
  bool gro() const { return gro_; }             // UDP_GRO on the receive sockets
  bool gso() const { return gso_; }             // sender thread: UDP GSO in use
  uint64_t gso_sends() const { return gso_sends_; }  // sender thread: datagrams sent as GSO runs
  uint64_t gro_runs() const { return gro_runs_.load(std::memory_order_relaxed); }  // coalesced receives

  PeerId self() const override { return self_; }
  Caps caps() const override;
  std::byte* AcquireSend() override;
  void CommitSend(Dest to, uint32_t length) override;
  void Flush() override;
  size_t Poll(Packet* out, size_t max) override;
  void Release(size_t n) override;
  int wait_fd() const override { return epoll_; }
  void set_admit(AdmitFn admit) override { admit_ = std::move(admit); }

 private:
  struct Queued {
    uint32_t slot;
    uint32_t bytes;  // frame bytes
    sockaddr_in to;
  };
  std::byte* SendSlot(uint32_t s) { return send_mem_.get() + size_t{s} * frame_stride_; }
  std::byte* RecvSlot(uint32_t s) { return recv_mem_.get() + size_t{s} * recv_stride_; }
  void Heartbeats();  // sender thread
  size_t Receive(int fd, size_t room);  // receiver thread: datagrams into free slots, how many
  // Receiver thread: the frames of datagram j of the last Receive (at ring position `pos`) into
  // ready_; returns how many.
  size_t Frames(size_t j, size_t pos, std::chrono::steady_clock::time_point now);
  void Handout(Packet* out, size_t max, size_t* n);  // receiver thread: ready_ -> out
  PeerId PeerAt(const sockaddr_in& addr) const;    // the peer at that address, kNoPeer if none
  // Receiver thread: a good frame from an unknown address offered to admit_; returns the peer
  // whose address it now is (its claimed one), kNoPeer if refused.
  PeerId Admit(const sockaddr_in& src, const std::byte* frame, size_t bytes);

  const PeerId self_;
  const UdpOptions opt_;
  const FrameFormat fmt_;
  const size_t frame_stride_;  // bytes per send slot: max frame rounded up to a cache line
  size_t recv_stride_ = 0;     // bytes per receive slot: a frame, or a 64 KiB GRO run
  int fd_ = -1, epoll_ = -1;
  uint16_t port_ = 0;
  sockaddr_in me_{};  // the bound address (its port is port_)
  int rcvbuf_ = 0;
  std::map<PeerId, sockaddr_in> peers_;
  AdmitFn admit_;  // a new peer's first frame (set_admit)
  std::map<uint16_t, sockaddr_in> groups_;
  std::vector<int> group_fds_;
  SlotMemory send_mem_{nullptr, nullptr}, recv_mem_{nullptr, nullptr};

  // Sender thread. The queue: committed, not yet taken by the kernel; its pacer counts frame
  // bytes.
  SendQueue<Queued> sq_;
  Interval beat_;
  std::vector<::mmsghdr> send_msgs_;
  std::vector<::iovec> send_iov_;
  std::vector<std::array<char, CMSG_SPACE(sizeof(uint16_t))>> send_cmsg_;  // UDP_SEGMENT per entry
  std::vector<size_t> run_frames_;  // frames per entry of the batch being sent
  bool gso_ = false;
  size_t gso_too_big_ = SIZE_MAX;  // frames of this many bytes or more go without GSO (EMSGSIZE)
  uint64_t gso_sends_ = 0;

  // Receiver thread. ring_ holds slot indices; [first_, first_ + held_) hold frames handed out
  // or ready to be; msgs_[ring position] counts a held slot's frames not yet released.
  // ready_[ready_head_..] are frames parsed and not yet handed out, oldest first.
  std::vector<uint32_t> ring_;
  std::vector<uint32_t> msgs_;
  size_t first_ = 0, held_ = 0;
  std::vector<Packet> ready_;
  size_t ready_head_ = 0;
  size_t out_ = 0;  // handed out and not released
  bool gro_ = false;
  std::atomic<uint64_t> gro_runs_{0};
  std::vector<::mmsghdr> recv_msgs_;
  std::vector<::iovec> recv_iov_;
  std::vector<sockaddr_in> recv_from_;
  // UDP_GRO's segment size and SO_RXQ_OVFL's drop count
  std::vector<std::array<char, CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(uint32_t))>> recv_cmsg_;
  std::vector<uint32_t> overflow_;  // per socket (unicast, then groups): the last SO_RXQ_OVFL count
  void CountKernelDrops(int fd);    // set-up: SO_RXQ_OVFL on, a counter for the socket
  Liveness live_{opt_.heartbeat_ms, opt_.peer_timeout_ms};
  size_t next_fd_ = 0;  // round-robin over the unicast and group sockets
};

}  // namespace hogstream
