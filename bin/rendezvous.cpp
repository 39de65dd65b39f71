// Rendezvous: the store served by rank 0 and every machine's visit to it (see rendezvous.hpp).
//
// The conversation, one TCP connection per machine, lines of text:
//   store:   "hogstream-rendezvous 1 challenge=HEX16"
//   machine: "hello job=HEX16 machines=N rank=R scheme=S entry=E pk=HEX32 [join=1] [mac=HEX32]"
//            (R -1: not known; pk: a fresh X25519 public key for the session key; join: a new
//            machine of the running job; mac: with a --job-key, HMAC-SHA-256 under it of the
//            challenge line and the hello before " mac=")
//   store, once every machine has said hello (or at once, to refuse one):
//            "peers SPEC" "rank R" "session HEX|-" ["mac HEX32"] "end"
//            (session: the job's frame key sealed to pk, "-" where the job has a --job-key;
//            mac: over the challenge and every answer line before it)
//   or:      "error TEXT"
// A machine refused (another job, a wrong size or key, a rank taken) is told why and the store
// waits on for the right one; nobody there in time ends the store with an error to those who came.
// Once the list is out a keyed job's store stays open for new machines (join=1): each is
// answered at once with the list so far plus its own entry, and the next rank.
#include "bin/rendezvous.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "base/common.hpp"
#include "base/hash.hpp"
#include "bin/peers.hpp"
#include "glog/logging.h"
#include "transport/registry.hpp"

namespace hogstream {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxLine = 1 << 20;  // a list of kMaxPeers entries fits

const char* Get(const std::map<std::string, std::string>& env, const char* name) {
  const auto it = env.find(name);
  return it == env.end() ? nullptr : it->second.c_str();
}

int Number(const std::string& text, const std::string& what, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  HS_REQUIRE(!text.empty() && end && *end == 0 && errno == 0 && v >= lo && v <= hi)
      << what << "='" << text << "' is not a number in " << lo << ".." << hi;
  return static_cast<int>(v);
}

// "HOST:PORT" (the store's), named `what` in errors.
void HostPort(const std::string& text, const std::string& what, RendezvousPlan* p) {
  const size_t colon = text.rfind(':');
  HS_REQUIRE(colon != std::string::npos && colon > 0) << what << " '" << text << "' is not HOST:PORT";
  p->host = text.substr(0, colon);
  p->port = static_cast<uint16_t>(Number(text.substr(colon + 1), what + "'s port", 1, 65535));
}

// The first host of a Slurm host list: "node[07-09,12],gpu1" -> "node07".
std::string FirstSlurmHost(const std::string& list) {
  size_t i = 0;
  std::string host;
  while (i < list.size() && list[i] != ',' && list[i] != '[') host += list[i++];
  if (i < list.size() && list[i] == '[') {
    ++i;
    while (i < list.size() && std::isdigit(static_cast<unsigned char>(list[i]))) host += list[i++];
  }
  HS_REQUIRE(!host.empty() && host.find_first_of("[]-") == std::string::npos)
      << "SLURM's node list '" << list << "' names no first node";
  return host;
}

// A port below 600 above the base, from a launcher's job id (two jobs on one host differ).
uint16_t PortFrom(const std::string& id) { return static_cast<uint16_t>(kRendezvousBasePort + Digest64(id) % 600); }

// The variables that name the store's address (the launchers' rank and size: LauncherEnv).
constexpr const char* kStoreVars[] = {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE",
                                      "SLURM_STEP_NODELIST", "SLURM_STEP_RESV_PORTS",
                                      "SLURM_JOB_ID", "OMPI_MCA_orte_hnp_uri", "PMI_PORT"};

// ------------------------------------------------------------------ sockets

struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      if (fd >= 0) close(fd);
      fd = std::exchange(o.fd, -1);
    }
    return *this;
  }
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

sockaddr_in Resolve(const std::string& host, uint16_t port, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  HS_REQUIRE(rc == 0 && res) << what << ": host '" << host << "' does not resolve (" << gai_strerror(rc) << ")";
  sockaddr_in a = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
  freeaddrinfo(res);
  a.sin_port = htons(port);
  return a;
}

std::string Ip(const sockaddr_in& a) {
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
  return text;
}

double Left(Clock::time_point deadline) { return std::chrono::duration<double>(deadline - Clock::now()).count(); }

bool SendAll(int fd, const std::string& s) {
  size_t at = 0;
  while (at < s.size()) {
    const ssize_t n = send(fd, s.data() + at, s.size() - at, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, 1000) <= 0) return false;
      continue;
    }
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

// Lines from a connection, each within the deadline.
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  // false: closed, too long, or the deadline passed.
  bool Next(std::string* line, Clock::time_point deadline) {
    for (;;) {
      const size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        *line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return true;
      }
      if (buf_.size() > kMaxLine) return false;
      const double left = Left(deadline);
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      const int r = poll(&p, 1, static_cast<int>(std::min(left * 1000 + 1, 1000.0)));
      if (r < 0 && errno != EINTR) return false;
      if (r <= 0) continue;
      char chunk[4096];
      const ssize_t n = recv(fd_, chunk, sizeof chunk, 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return false;
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  int fd_;
  std::string buf_;
};

std::string Hex(const unsigned char* b, size_t n) {
  std::string s(n * 2 + 1, '\0');
  sodium_bin2hex(s.data(), s.size(), b, n);
  s.pop_back();
  return s;
}

bool Unhex(const std::string& hex, unsigned char* out, size_t n) {
  size_t got = 0;
  return hex.size() == 2 * n && sodium_hex2bin(out, n, hex.c_str(), hex.size(), nullptr, &got, nullptr) == 0 && got == n;
}

bool MacOk(const JobKey& key, const std::string& text, const std::string& hex) {
  unsigned char tag[crypto_auth_hmacsha256_BYTES];
  return Unhex(hex, tag, sizeof tag) &&
         crypto_auth_hmacsha256_verify(tag, reinterpret_cast<const unsigned char*>(text.data()), text.size(),
                                       key.data()) == 0;
}

// "k=v" words of a line after its first word.
std::map<std::string, std::string> Fields(const std::string& line) {
  std::map<std::string, std::string> f;
  std::istringstream in(line);
  std::string word;
  in >> word;
  while (in >> word) {
    const size_t eq = word.find('=');
    if (eq != std::string::npos) f[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return f;
}

std::string JobHex(const std::string& job) {
  std::ostringstream s;
  s << std::hex << JobIdOf(job);
  return s.str();
}

// ------------------------------------------------------------------ the store

class Store {
 public:
  Store(Fd listener, const RendezvousPlan& plan, const RendezvousOptions& opt)
      : listener_(std::move(listener)), plan_(plan), opt_(opt), job_(JobHex(opt.job)),
        ranks_(static_cast<size_t>(plan.machines), -1) {
    randombytes_buf(session_.data(), session_.size());
    // The process's signals are not this thread's (the program's signal thread takes them once
    // training starts; until then they keep their default action on the main thread).
    sigset_t all, before;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &before);
    thread_ = std::thread([this] { Serve(); });
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
  }
  ~Store() {
    stop_ = true;
    thread_.join();
  }

 private:
  struct Visitor {
    Fd fd;
    std::string challenge, hello, entry, peer;
    int rank = -1;
    unsigned char pk[crypto_box_PUBLICKEYBYTES] = {};
    std::unique_ptr<LineReader> in;
    bool said = false;  // hello taken
    Clock::time_point came = Clock::now();
  };
  // A visitor that says no hello within this is let go (a connection held open takes no fd
  // for long).
  static constexpr std::chrono::seconds kHelloWithin{5};

  void Serve() {
    const Clock::time_point deadline = Clock::now() + opt_.timeout;
    std::vector<Visitor> v;
    int said = 0;
    while (!stop_ && said < plan_.machines && Clock::now() < deadline) said += Poll(&v);
    if (said < plan_.machines) {
      const std::string why = "only " + std::to_string(said) + " of " + std::to_string(plan_.machines) +
                              " machines came to the store at " + plan_.host + ":" + std::to_string(plan_.port) +
                              " within " + std::to_string(opt_.timeout.count() / 1000) + " s";
      for (Visitor& x : v) SendAll(x.fd.fd, "error " + why + "\n");
      return;
    }
    // Ranks not asked for, in the order their machines came.
    int next = 0;
    for (Visitor& x : v) {
      if (x.rank >= 0) continue;
      while (ranks_[static_cast<size_t>(next)] >= 0) ++next;
      x.rank = next;
      ranks_[static_cast<size_t>(next)] = 1;
    }
    std::vector<std::string> entries(static_cast<size_t>(plan_.machines));
    for (const Visitor& x : v) entries[static_cast<size_t>(x.rank)] = x.entry;
    std::string spec = plan_.scheme + "://";
    for (size_t r = 0; r < entries.size(); ++r) spec += (r ? "," : "") + entries[r];
    const std::string bad = NotAList(spec);
    for (Visitor& x : v) {
      if (bad.empty()) {
        Answer(x, spec);
      } else {
        SendAll(x.fd.fd, "error the machines' addresses do not make a list: " + bad + "\n");
      }
    }
    if (!bad.empty() || !opt_.key) return;
    // A keyed job's store stays open for new machines (--join): each gets the list so far with
    // its own entry last, and the next rank.
    started_ = true;
    spec_ = spec;
    v.clear();
    while (!stop_) {
      if (Poll(&v) == 0) continue;
      for (Visitor& x : v) {
        if (!x.said) continue;
        const std::string list = spec_ + "," + x.entry;
        const std::string why = NotAList(list);
        if (!why.empty()) {
          SendAll(x.fd.fd, "error its entry does not join the list: " + why + "\n");
          x.fd = Fd();
          continue;
        }
        x.rank = plan_.machines + joined_++;
        spec_ = list;
        LOG(INFO) << "Rendezvous: a new machine at " << x.entry << " joins the running job as machine " << x.rank;
        Answer(x, list);
        x.fd = Fd();
      }
      v.erase(std::remove_if(v.begin(), v.end(), [](const Visitor& x) { return x.fd.fd < 0; }), v.end());
    }
  }

  // Waits up to 100 ms for visitors and their hellos; returns how many hellos it took.
  int Poll(std::vector<Visitor>* v) {
    int took = 0;
    const Clock::time_point now = Clock::now();
    v->erase(std::remove_if(v->begin(), v->end(), [&](const Visitor& x) { return !x.said && now - x.came > kHelloWithin; }),
             v->end());
    std::vector<pollfd> p{{listener_.fd, POLLIN, 0}};
    for (const Visitor& x : *v) p.push_back({x.fd.fd, static_cast<short>(x.said ? 0 : POLLIN), 0});
    if (poll(p.data(), p.size(), 100) <= 0) return 0;
    for (size_t i = 0; i < v->size(); ++i) {
      Visitor& x = (*v)[i];
      if (x.said || !(p[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      std::string line;
      // A hello is one line, sent at once: a visitor gets a second for the rest of it.
      if (!x.in->Next(&line, Clock::now() + std::chrono::seconds(1))) {
        x.fd = Fd();
        continue;
      }
      const std::string why = Take(&x, line);
      if (!why.empty()) {
        LOG(WARNING) << "Rendezvous: refused a machine at " << x.peer << ": " << why;
        SendAll(x.fd.fd, "error " + why + "\n");
        x.fd = Fd();
        continue;
      }
      x.said = true;
      ++took;
    }
    v->erase(std::remove_if(v->begin(), v->end(), [](const Visitor& x) { return x.fd.fd < 0; }), v->end());
    if (p[0].revents & POLLIN) Accept(v);
    return took;
  }

  static std::string NotAList(const std::string& spec) {
    try {
      ParsePeers(spec);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  // The list and the visitor's rank; a keyed job's answer sealed with its key, else the session
  // key sealed to the visitor.
  void Answer(const Visitor& x, const std::string& spec) {
    std::string answer = "peers " + spec + "\nrank " + std::to_string(x.rank) + "\nsession ";
    if (opt_.key) {
      answer += "-\n";
      answer += "mac " + Hmac(*opt_.key, x.challenge + "\n" + x.hello + "\n" + answer) + "\n";
    } else {
      unsigned char sealed[crypto_box_SEALBYTES + sizeof(JobKey)];
      crypto_box_seal(sealed, session_.data(), session_.size(), x.pk);
      answer += Hex(sealed, sizeof sealed) + "\n";
    }
    SendAll(x.fd.fd, answer + "end\n");
  }

  void Accept(std::vector<Visitor>* v) {
    sockaddr_in from{};
    socklen_t len = sizeof from;
    Fd fd(accept4(listener_.fd, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (fd.fd < 0) return;
    Visitor x;
    unsigned char c[8];
    randombytes_buf(c, sizeof c);
    x.challenge = "hogstream-rendezvous 1 challenge=" + Hex(c, sizeof c);
    x.peer = Ip(from) + ":" + std::to_string(ntohs(from.sin_port));
    if (!SendAll(fd.fd, x.challenge + "\n")) return;
    x.in = std::make_unique<LineReader>(fd.fd);
    x.fd = std::move(fd);
    v->push_back(std::move(x));
  }

  // The visitor's hello, or why it is refused.
  std::string Take(Visitor* x, const std::string& line) {
    if (line.rfind("hello ", 0) != 0) return "not a hogstream rendezvous hello";
    std::map<std::string, std::string> f = Fields(line);
    std::string signed_part = line;
    if (opt_.key) {
      const size_t at = line.rfind(" mac=");
      if (at == std::string::npos) return "this job has a --job-key and the machine gave none";
      signed_part = line.substr(0, at);
      if (!MacOk(*opt_.key, x->challenge + "\n" + signed_part, f["mac"])) return "its --job-key is not the job's";
    }
    if (f["job"] != job_) return "it names another job (--job) than the store's";
    if (f["scheme"] != plan_.scheme) return "it trains over " + f["scheme"] + ", the job over " + plan_.scheme;
    const bool join = f["join"] == "1";
    if (join && !started_) return "it joins a running job (--join), and this one has not started";
    if (!join && started_) return "the job has started: a new machine joins it with --join (and the job's --job-key)";
    const std::string entry = f["entry"];
    if (entry.empty() || entry.size() > 256 || entry.find_first_of(", \t") != std::string::npos)
      return "its entry '" + entry + "' is not one address";
    x->entry = entry;
    x->hello = signed_part;
    if (join) return "";  // its rank is the next one, given when it is answered
    if (f["machines"] != std::to_string(plan_.machines))
      return "it says the job has " + f["machines"] + " machines, the store " + std::to_string(plan_.machines);
    int rank = -2;
    try {
      rank = Number(f["rank"], "rank", -1, plan_.machines - 1);
    } catch (const Error&) {
      return "rank '" + f["rank"] + "' is out of range for " + std::to_string(plan_.machines) + " machines";
    }
    if (rank >= 0 && ranks_[static_cast<size_t>(rank)] >= 0) return "rank " + std::to_string(rank) + " came already";
    if (rank < 0) {
      const int free_ranks = static_cast<int>(std::count(ranks_.begin(), ranks_.end(), -1)) - unranked_;
      if (free_ranks <= 0) return "every rank is taken";
    }
    if (!Unhex(f["pk"], x->pk, sizeof x->pk)) return "its public key is malformed";
    if (rank >= 0) {
      ranks_[static_cast<size_t>(rank)] = 1;
    } else {
      ++unranked_;
    }
    x->rank = rank;
    return "";
  }

  Fd listener_;
  RendezvousPlan plan_;
  RendezvousOptions opt_;
  std::string job_;
  std::vector<int> ranks_;  // per rank: taken (1) or not (-1)
  int unranked_ = 0;        // machines that came with no rank
  bool started_ = false;    // the list is out (a keyed job's store then takes new machines)
  std::string spec_;        // ... the list so far
  int joined_ = 0;          // ... and the machines that joined
  JobKey session_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The store's listening socket on the plan's address; an empty Fd where `may_fail` and the
// address is not this machine's or is taken (another machine serves it).
Fd Listen(const RendezvousPlan& plan, bool may_fail) {
  const sockaddr_in a = Resolve(plan.host, plan.port, "the rendezvous store");
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  HS_REQUIRE(fd.fd >= 0) << "rendezvous: socket: " << std::strerror(errno);
  const int on = 1;
  setsockopt(fd.fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (bind(fd.fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || listen(fd.fd, 1024) != 0) {
    const int err = errno;
    if (may_fail && (err == EADDRINUSE || err == EADDRNOTAVAIL)) return Fd();
    HS_FAIL() << "rank 0 serves the rendezvous store (" << plan.how << ") but cannot listen on " << plan.host << ":"
              << plan.port << ": " << std::strerror(err)
              << (err == EADDRNOTAVAIL ? " (not an address of this machine: rank 0 must run there)" : "");
  }
  return fd;
}

// This machine's entry for the job, on the address it reaches the store from, as its scheme
// writes one (TransportScheme::own_entry: a port held in *hold until its endpoint opens, or an
// interface's MAC).
std::string OwnEntry(const std::string& scheme, const sockaddr_in& local, std::shared_ptr<void>* hold) {
  const TransportScheme* s = FindTransport(scheme);
  HS_REQUIRE(s && s->own_entry) << "rendezvous: " << scheme << ":// cannot name this machine for a rendezvous";
  return s->own_entry(local, hold);
}

// Connects to the store, trying again until the deadline (its machine may start later).
Fd Connect(const RendezvousPlan& plan, Clock::time_point deadline) {
  const sockaddr_in a = Resolve(plan.host, plan.port, "the rendezvous store");
  std::string last = "nothing listens there";
  while (Clock::now() < deadline) {
    Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    HS_REQUIRE(fd.fd >= 0) << "rendezvous: socket: " << std::strerror(errno);
    if (connect(fd.fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) return fd;
    last = std::strerror(errno);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  HS_FAIL() << "the rendezvous store at " << plan.host << ":" << plan.port << " (" << plan.how
            << ") did not answer in time: " << last;
}

}  // namespace

std::string Hmac(const JobKey& key, const std::string& text) {
  unsigned char tag[crypto_auth_hmacsha256_BYTES];
  crypto_auth_hmacsha256(tag, reinterpret_cast<const unsigned char*>(text.data()), text.size(), key.data());
  return Hex(tag, sizeof tag);
}

std::optional<RendezvousPlan> PlanRendezvous(const std::string& flag, int forced, int machines,
                                             const std::map<std::string, std::string>& env, bool join) {
  RendezvousPlan p;
  if (!flag.empty()) {
    std::string text = flag;
    const size_t sep = text.find("://");
    if (sep != std::string::npos) {
      const std::string scheme = text.substr(0, sep);
      const TransportScheme* known = FindTransport(scheme);
      HS_REQUIRE(known && known->machines && known->own_entry)
          << "--rendezvous: unknown scheme '" << scheme << "' (" << TransportList(true) << ")";
      p.scheme = scheme;
      text = text.substr(sep + 3);
    }
    HostPort(text, "--rendezvous", &p);
    p.how = "--rendezvous";
  } else if (Get(env, "MASTER_ADDR") || Get(env, "MASTER_PORT")) {
    HS_REQUIRE(Get(env, "MASTER_ADDR")) << "MASTER_PORT is set but MASTER_ADDR is not (torchrun sets both)";
    HS_REQUIRE(Get(env, "MASTER_PORT")) << "MASTER_ADDR is set but MASTER_PORT is not (torchrun sets both)";
    p.host = Get(env, "MASTER_ADDR");
    HS_REQUIRE(!p.host.empty()) << "MASTER_ADDR is empty";
    int port = Number(Get(env, "MASTER_PORT"), "MASTER_PORT", 1, 65535);
    const char* agent = Get(env, "TORCHELASTIC_USE_AGENT_STORE");
    const bool held = agent && (std::string(agent) == "True" || std::string(agent) == "true" || std::string(agent) == "1");
    if (held) port = port == 65535 ? 65534 : port + 1;  // torchrun's own store holds MASTER_PORT
    p.port = static_cast<uint16_t>(port);
    p.how = held ? "MASTER_ADDR:MASTER_PORT+1" : "MASTER_ADDR:MASTER_PORT";
  } else if (const char* nodes = Get(env, "SLURM_STEP_NODELIST")) {  // srun's step (not a batch script's job)
    p.host = FirstSlurmHost(nodes);
    if (const char* ports = Get(env, "SLURM_STEP_RESV_PORTS")) {
      const std::string first = std::string(ports).substr(0, std::string(ports).find_first_of("-,"));
      p.port = static_cast<uint16_t>(Number(first, "SLURM_STEP_RESV_PORTS", 1, 65535));
    } else {
      p.port = PortFrom(std::string("slurm ") + (Get(env, "SLURM_JOB_ID") ? Get(env, "SLURM_JOB_ID") : ""));
    }
    p.how = "srun's first node (SLURM_STEP_NODELIST)";
  } else if (const char* uri = Get(env, "OMPI_MCA_orte_hnp_uri")) {
    // "JOBID;tcp://IP[,IP...]:PORT;...": mpirun's own address; rank 0 runs on its host.
    const std::string u = uri;
    const size_t at = u.find("tcp://");
    HS_REQUIRE(at != std::string::npos) << "OMPI_MCA_orte_hnp_uri='" << u << "' names no tcp:// address of mpirun";
    const std::string rest = u.substr(at + 6);
    p.host = rest.substr(0, rest.find_first_of(",:;"));
    HS_REQUIRE(!p.host.empty()) << "OMPI_MCA_orte_hnp_uri='" << u << "' names no tcp:// address of mpirun";
    p.port = PortFrom("ompi " + u.substr(0, u.find(';')));
    p.how = "mpirun's host (OMPI_MCA_orte_hnp_uri)";
  } else if (const char* pmi = Get(env, "PMI_PORT")) {
    const std::string text = pmi;
    const size_t colon = text.rfind(':');
    HS_REQUIRE(colon != std::string::npos && colon > 0) << "PMI_PORT='" << text << "' is not HOST:PORT";
    p.host = text.substr(0, colon);
    p.port = PortFrom("pmi " + text);
    p.how = "mpiexec's host (PMI_PORT)";
  } else {
    return std::nullopt;
  }
  // Rank and size: --rank / --machines, else the launcher's (the first pair present).
  const std::optional<LauncherRank> l = LauncherRankOf(env);
  const int size = l ? l->size : 0, launched = l ? l->rank : -1;
  const char* who = l ? l->size_var : "";
  if (l) {
    HS_REQUIRE(size >= 1 && size <= static_cast<int>(kMaxPeers))
        << who << "='" << size << "' is not a number in 1.." << kMaxPeers;
    HS_REQUIRE(launched < size) << l->rank_var << "='" << launched << "' is not a number in 0.." << size - 1;
  }
  HS_REQUIRE(machines == 0 || size == 0 || machines == size)
      << "--machines=" << machines << " but " << who << "=" << size;
  p.machines = machines ? machines : size;
  if (join) return p;  // a new machine: the store gives its rank and the job's list
  HS_REQUIRE(p.machines > 0) << "the rendezvous (" << p.how
                             << ") needs the job's size: --machines=N, or a launcher's (WORLD_SIZE, "
                                "OMPI_COMM_WORLD_SIZE, SLURM_NTASKS, PMI_SIZE)";
  p.rank = forced >= 0 ? forced : launched;
  HS_REQUIRE(p.rank < p.machines) << "--rank=" << p.rank << " is out of range for " << p.machines << " machines";
  return p;
}

std::map<std::string, std::string> RendezvousEnv() {
  std::map<std::string, std::string> env = LauncherEnv();
  for (const char* name : kStoreVars)
    if (const char* v = std::getenv(name)) env[name] = v;
  return env;
}

Rendezvoused Rendezvous(const RendezvousPlan& plan, const RendezvousOptions& opt) {
  HS_CHECK(sodium_init() >= 0) << "libsodium failed to initialise";
  const Clock::time_point deadline = Clock::now() + opt.timeout;
  RendezvousPlan me = plan;
  // Rank 0 serves the store; with no rank known, whoever takes the store's address first.
  std::unique_ptr<Store> store;
  if (opt.join) {
    HS_REQUIRE(opt.key) << "--join through the rendezvous store needs the job's --job-key (its store admits new "
                           "machines only on it)";
    me.rank = -1;
  } else if (me.rank <= 0) {
    Fd listener = Listen(me, /*may_fail=*/me.rank < 0);
    if (listener.fd >= 0) {
      me.rank = 0;
      LOG(INFO) << "Rendezvous: serving the job's store at " << me.host << ":" << me.port << " (" << me.how
                << ") for " << me.machines << " machines";
      store = std::make_unique<Store>(std::move(listener), me, opt);
    }
  }
  Fd fd = Connect(me, deadline);
  sockaddr_in local{};
  socklen_t len = sizeof local;
  HS_REQUIRE(getsockname(fd.fd, reinterpret_cast<sockaddr*>(&local), &len) == 0)
      << "rendezvous: getsockname: " << std::strerror(errno);
  Rendezvoused out;
  out.job = opt.job;
  const std::string entry = OwnEntry(me.scheme, local, &out.port_hold);
  LineReader in(fd.fd);
  const std::string where = "the rendezvous store at " + me.host + ":" + std::to_string(me.port);
  std::string challenge;
  HS_REQUIRE(in.Next(&challenge, deadline) && challenge.rfind("hogstream-rendezvous 1 ", 0) == 0)
      << where << " (" << me.how << ") is not a hogstream store (it said '" << challenge.substr(0, 60) << "')";
  unsigned char pk[crypto_box_PUBLICKEYBYTES], sk[crypto_box_SECRETKEYBYTES];
  crypto_box_keypair(pk, sk);
  std::string hello = "hello job=" + JobHex(opt.job) + " machines=" + std::to_string(me.machines) +
                      " rank=" + std::to_string(me.rank) + " scheme=" + me.scheme + " entry=" + entry +
                      " pk=" + Hex(pk, sizeof pk) + (opt.join ? " join=1" : "");
  const std::string signed_hello = hello;
  if (opt.key) hello += " mac=" + Hmac(*opt.key, challenge + "\n" + signed_hello);
  HS_REQUIRE(SendAll(fd.fd, hello + "\n")) << where << " closed the connection";
  // The answer, once every machine has come (or the store's error where they did not, which it
  // sends at its own deadline: this one waits a little longer to hear it).
  const Clock::time_point answer_by = deadline + std::chrono::seconds(2);
  std::string answer, line;
  std::map<std::string, std::string> got;
  for (;;) {
    HS_REQUIRE(in.Next(&line, answer_by))
        << where << " (" << me.how << ") gave no list within " << opt.timeout.count() / 1000
        << " s (not every machine came, or its machine ended)";
    if (line.rfind("error ", 0) == 0) HS_FAIL() << where << " refused this machine: " << line.substr(6);
    if (line == "end") break;
    const size_t sp = line.find(' ');
    HS_REQUIRE(sp != std::string::npos) << where << " answered '" << line.substr(0, 60) << "'";
    const std::string word = line.substr(0, sp);
    if (word == "mac") {
      HS_REQUIRE(opt.key && MacOk(*opt.key, challenge + "\n" + signed_hello + "\n" + answer, line.substr(sp + 1)))
          << where << "'s answer is not sealed with this machine's --job-key";
    } else {
      answer += line + "\n";
    }
    got[word] = line.substr(sp + 1);
  }
  HS_REQUIRE(!opt.key || got.count("mac")) << where << "'s answer is not sealed with this machine's --job-key";
  out.peers = got["peers"];
  out.rank = Number(got["rank"], "the store's rank", 0, opt.join ? static_cast<long>(kMaxPeers) - 1 : me.machines - 1);
  HS_REQUIRE(me.rank < 0 || out.rank == me.rank) << where << " gave rank " << out.rank << ", not " << me.rank;
  if (!opt.key) {
    unsigned char sealed[crypto_box_SEALBYTES + sizeof(JobKey)];
    JobKey session;
    HS_REQUIRE(Unhex(got["session"], sealed, sizeof sealed) &&
               crypto_box_seal_open(session.data(), sealed, sizeof sealed, pk, sk) == 0)
        << where << " gave a session key this machine cannot open";
    out.session = session;
  }
  sodium_memzero(sk, sizeof sk);
  LOG(INFO) << "Rendezvous: machine " << out.rank << " of " << (opt.join ? out.rank + 1 : me.machines) << " ("
            << me.how << (opt.join ? ", a new machine" : "") << "), "
            << (opt.key ? "frames sealed with --job-key" : "frames sealed with a fresh session key from the store")
            << "; the job: --job='" << opt.job << "' --peers=" << out.peers;
  fd = Fd();
  // Its thread has answered every machine; a keyed job's store serves new machines until the
  // caller lets it go.
  if (opt.key) out.store = std::shared_ptr<Store>(std::move(store));
  return out;
}

}  // namespace hogstream
