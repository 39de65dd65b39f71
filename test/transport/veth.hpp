// Test networks made of network namespaces and veth links, created with `ip` (each call a child
// process with a deadline) and deleted again by the destructor: the wire for raw-Ethernet tests,
// and for UDP between namespaces. Needs root; tests skip with Unavailable()'s reason elsewhere.
//   VethPair:   ns(0) [iface(0)] <--veth--> [iface(1)] ns(1)
//   VethBridge: ns(i) [iface(i)] <--veth--> a port p<i> of one bridge, br0 in namespace bridge()
// Every host end has the address 10.77.0.(i+1)/24 and is up. Names carry the pid and a counter,
// so parallel test processes and several networks in one process never collide. Only the process
// that made a network deletes it (a forked child that exits leaves it alone).
// Not for: anything outside the namespaces it makes (it never touches the caller's own).
#pragma once

#include <string>
#include <vector>

namespace hogstream::test {

class TestNet {
 public:
  // Why this machine cannot make test networks ("" = it can): not root, no `ip`, or the kernel
  // refused a namespace. Probed once per process.
  static std::string Unavailable();

  TestNet(const TestNet&) = delete;
  TestNet& operator=(const TestNet&) = delete;
  virtual ~TestNet();

  int hosts() const { return static_cast<int>(ns_.size()); }
  const std::string& ns(int i) const { return ns_.at(i); }
  std::string iface(int i) const { return "hs" + std::to_string(i); }
  std::string address(int i) const { return "10.77.0." + std::to_string(i + 1); }
  int mtu() const { return mtu_; }

  // Takes host i's link down (its cable cut: the host's routes over it go, its sends fail) or
  // up again (its address and routes come back). Throws std::runtime_error like Ip().
  void SetLink(int i, bool up);

 protected:
  TestNet(int hosts, int mtu);  // names the namespaces; the subclass builds
  // Runs `ip ARGS...` with a 10 s deadline; a failure throws std::runtime_error with its stderr.
  static void Ip(const std::vector<std::string>& args);
  void AddNamespace(const std::string& name);
  void ConfigureHost(int i);  // MTU, address, up (and lo up)
  void DeleteAll() noexcept;  // every namespace made so far, last first

  std::vector<std::string> ns_;      // host namespaces
  std::vector<std::string> made_;    // every namespace made, deleted in reverse
  std::string prefix_;
  int mtu_;
  int owner_pid_;
};

class VethPair final : public TestNet {
 public:
  explicit VethPair(int mtu = 1500);
};

class VethBridge final : public TestNet {
 public:
  explicit VethBridge(int hosts, int mtu = 1500);
  // The bridge's own namespace: a packet socket there sees every host's frames (on the ports).
  const std::string& bridge() const { return bridge_; }

 private:
  std::string bridge_;
};

}  // namespace hogstream::test
