// The schemes of the transport factory (see registry.hpp).
#include "transport/registry.hpp"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "base/common.hpp"

namespace hogstream {

namespace {
struct Registry {
  std::mutex mu;
  std::map<std::string, TransportScheme> schemes;
};
Registry& TheRegistry() {
  static Registry* r = new Registry();  // never destroyed: lookups may come while others unload
  return *r;
}
}  // namespace

void RegisterTransport(TransportScheme scheme) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  HS_CHECK(!scheme.name.empty() && scheme.parse && scheme.text && scheme.open_here) << "transport scheme '" << scheme.name << "' is incomplete";
  const std::string name = scheme.name;
  HS_CHECK(r.schemes.emplace(name, std::move(scheme)).second) << "transport scheme '" << name << "' registered twice";
}

const TransportScheme* FindTransport(const std::string& name) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto it = r.schemes.find(name);
  return it == r.schemes.end() ? nullptr : &it->second;  // (a map's nodes stay put)
}

std::vector<const TransportScheme*> Transports() {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<const TransportScheme*> all;
  for (const auto& [name, s] : r.schemes) all.push_back(&s);
  return all;
}

std::string TransportList(bool machines) {
  std::vector<std::string> names;
  for (const TransportScheme* s : Transports())
    if (!machines || s->machines) names.push_back(s->name + "://");
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

std::string TransportUsage() {
  std::string out;
  for (const TransportScheme* s : Transports())
    if (s->machines) out += (out.empty() ? "" : "|") + s->name + "://" + s->address + ",...";
  return out;
}

namespace {
struct HeldFd {
  explicit HeldFd(int f) : fd(f) {}
  HeldFd(const HeldFd&) = delete;
  HeldFd& operator=(const HeldFd&) = delete;
  ~HeldFd() {
    if (fd >= 0) close(fd);
  }
  int fd;
};
}  // namespace

std::string HeldUdpEntry(const sockaddr_in& local, std::shared_ptr<void>* hold) {
  char ip[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &local.sin_addr, ip, sizeof ip);
  auto fd = std::make_shared<HeldFd>(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_in a = local;
  a.sin_port = 0;
  HS_REQUIRE(fd->fd >= 0 && bind(fd->fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0)
      << "rendezvous: no udp port free on " << ip << ": " << std::strerror(errno);
  socklen_t len = sizeof a;
  getsockname(fd->fd, reinterpret_cast<sockaddr*>(&a), &len);
  *hold = fd;
  return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

}  // namespace hogstream
