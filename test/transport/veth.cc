// Test networks from `ip` (see veth.hpp).
#include "test/transport/veth.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include <atomic>
#include <stdexcept>

#include "test/program_runner.hpp"

namespace hogstream::test {

namespace {

std::string IpPath() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (access(p, X_OK) == 0) return p;
  return "";
}

std::atomic<int> g_nets{0};

}  // namespace

void TestNet::Ip(const std::vector<std::string>& args) {
  static const std::string ip = IpPath();
  if (ip.empty()) throw std::runtime_error("no `ip` (iproute2) found");
  ScratchDir dir("ip");
  const Finished f = Child(ip, args, dir).Wait(10);
  if (f.rc != 0) {
    std::string cmd = "ip";
    for (const auto& a : args) cmd += " " + a;
    throw std::runtime_error(cmd + (f.rc < 0 ? ": no answer in 10 s" : ": " + f.last_line()));
  }
}

std::string TestNet::Unavailable() {
  static const std::string why = [] {
    if (geteuid() != 0) return std::string("needs root (to make network namespaces and veth links)");
    if (IpPath().empty()) return std::string("no `ip` (iproute2) to make network namespaces");
    const std::string probe = "hsprobe" + std::to_string(getpid());
    try {
      Ip({"netns", "add", probe});
    } catch (const std::exception& e) {
      return std::string("cannot make a network namespace: ") + e.what();
    }
    try {
      Ip({"netns", "del", probe});
    } catch (const std::exception&) {
    }
    // Namespaces of test processes that died without their destructors (a sanitizer's halt, a
    // SIGKILL): "hst<pid>n<k>h<i>" whose pid no longer runs.
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/var/run/netns", ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("hst", 0) != 0) continue;
      const long pid = std::strtol(name.c_str() + 3, nullptr, 10);
      if (pid <= 0 || pid == getpid() || kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
      try {
        Ip({"netns", "del", name});
      } catch (const std::exception&) {
      }
    }
    return std::string();
  }();
  return why;
}

TestNet::TestNet(int hosts, int mtu) : mtu_(mtu), owner_pid_(getpid()) {
  prefix_ = "hst" + std::to_string(getpid()) + "n" + std::to_string(g_nets++);
  for (int i = 0; i < hosts; ++i) ns_.push_back(prefix_ + "h" + std::to_string(i));
}

TestNet::~TestNet() {
  if (getpid() == owner_pid_) DeleteAll();  // a forked child leaves it to the parent
}

void TestNet::DeleteAll() noexcept {
  for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
    try {
      Ip({"netns", "del", *it});  // its links go with it
    } catch (const std::exception&) {
    }
  }
  made_.clear();
}

void TestNet::AddNamespace(const std::string& name) {
  Ip({"netns", "add", name});
  made_.push_back(name);
}

void TestNet::ConfigureHost(int i) {
  Ip({"-n", ns(i), "link", "set", iface(i), "mtu", std::to_string(mtu_), "up"});
  Ip({"-n", ns(i), "addr", "add", address(i) + "/24", "dev", iface(i)});
  Ip({"-n", ns(i), "link", "set", "lo", "up"});
}

void TestNet::SetLink(int i, bool up) { Ip({"-n", ns(i), "link", "set", iface(i), up ? "up" : "down"}); }

VethPair::VethPair(int mtu) : TestNet(2, mtu) {
  try {
    for (const auto& n : ns_) AddNamespace(n);
    Ip({"link", "add", iface(0), "netns", ns(0), "type", "veth", "peer", "name", iface(1), "netns", ns(1)});
    for (int i = 0; i < 2; ++i) ConfigureHost(i);
  } catch (...) {
    DeleteAll();
    throw;
  }
}

VethBridge::VethBridge(int hosts, int mtu) : TestNet(hosts, mtu), bridge_(prefix_ + "br") {
  const std::string& br = bridge_;
  try {
    for (const auto& n : ns_) AddNamespace(n);
    AddNamespace(br);
    // No snooping: every group frame floods (network.md §2.3); no STP: ports forward at once.
    Ip({"-n", br, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0", "stp_state", "0"});
    for (int i = 0; i < hosts; ++i) {
      std::string port = "p";  // (not "p" + ...: GCC 12 warns falsely, -Wrestrict)
      port += std::to_string(i);
      Ip({"link", "add", iface(i), "netns", ns(i), "type", "veth", "peer", "name", port, "netns", br});
      Ip({"-n", br, "link", "set", port, "mtu", std::to_string(mtu), "master", "br0", "up"});
      ConfigureHost(i);
    }
    Ip({"-n", br, "link", "set", "br0", "mtu", std::to_string(mtu), "up"});
  } catch (...) {
    DeleteAll();
    throw;
  }
}

}  // namespace hogstream::test
