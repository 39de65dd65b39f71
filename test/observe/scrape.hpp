// For tests that talk to a program's ports: free TCP and UDP ports on 127.0.0.1, GET /metrics
// and other HTTP exchanges with socket timeouts, and one sample's value from Prometheus' text
// format.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace hogstream::test {

// A listening socket on 127.0.0.1 and a free port; closed (or kept, to make the port busy).
struct Listener {
  int fd = -1;
  int port = 0;
  Listener() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 1) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      return;
    port = ntohs(a.sin_port);
  }
  ~Listener() { Close(); }
  void Close() {
    if (fd >= 0) close(fd);
    fd = -1;
  }
};

// A UDP port on 127.0.0.1 free a moment ago (bound and closed again).
inline uint16_t FreeUdpPort() {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// Sends `request` to HOST:PORT (an IPv4 address) over TCP and returns all it answers until it
// closes; "" when nothing answers within `seconds` (the socket timeouts).
inline std::string Exchange(int port, const std::string& request, const std::string& host = "127.0.0.1",
                            int seconds = 2) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval tv{seconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  std::string text;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
    char buf[4096];
    for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

// GET /metrics over plain HTTP/1.0, the answer whole (headers too); "" when nothing answers.
inline std::string Scrape(int port) { return Exchange(port, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"); }

// One HTTP/1.0 exchange with HOST:PORT: the status and the body; status 0 when nothing answers
// within 10 s (a sanitizer build on a busy host is slow to write a long answer).
struct HttpReply {
  int status = 0;
  std::string body;
};
inline HttpReply Http(int port, const std::string& method, const std::string& path,
                      const std::string& headers = "", const std::string& host = "127.0.0.1") {
  const std::string text =
      Exchange(port,
               method + " " + path + " HTTP/1.0\r\nHost: " + host + "\r\n" + headers +
                   (method == "POST" ? "Content-Length: 0\r\n" : "") + "\r\n",
               host, 10);
  HttpReply r;
  if (text.rfind("HTTP/1.", 0) == 0 && text.size() > 12) r.status = std::atoi(text.c_str() + 9);
  const size_t body = text.find("\r\n\r\n");
  if (body != std::string::npos) r.body = text.substr(body + 4);
  return r;
}

// The value of an unlabelled or labelled sample ("hogstream_iteration", or
// "hogstream_solver_iteration{solver=\"1\"}"); -1 when absent.
inline double Sample(const std::string& text, const std::string& name) {
  const size_t p = text.find("\n" + name + " ");
  return p == std::string::npos ? -1 : std::stod(text.substr(p + name.size() + 2));
}

}  // namespace hogstream::test
