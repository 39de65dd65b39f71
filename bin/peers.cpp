// --peers: parsing (by transport/open.hpp's one parser), finding this machine in the list, opening
// its endpoint through the transport factory (see peers.hpp).
#include "bin/peers.hpp"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "base/common.hpp"
#include "sync/net_job.hpp"
#include "transport/registry.hpp"

namespace hogstream {

namespace {

// The launchers FindSelf knows: (rank variable, size variable, who sets them).
struct Launcher {
  const char *rank, *size, *who;
};
constexpr Launcher kLaunchers[] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "mpirun"},
                                   {"PMI_RANK", "PMI_SIZE", "mpirun (PMI)"},
                                   {"SLURM_PROCID", "SLURM_NTASKS", "srun"},
                                   {"RANK", "WORLD_SIZE", "torchrun"}};

int EnvInt(const std::map<std::string, std::string>& env, const char* name) {
  const auto it = env.find(name);
  HS_REQUIRE(it != env.end()) << name << " is not set (its rank/size partner is)";
  const std::string& v = it->second;
  const bool digits = !v.empty() && v.size() <= 9 && v.find_first_not_of("0123456789") == std::string::npos;
  HS_REQUIRE(digits) << name << "='" << v << "' is not a number";
  return std::atoi(v.c_str());
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "none" : s;
}

}  // namespace

PeerList ParsePeers(const std::string& spec) {
  UrlRules rules;
  rules.flag = "--peers";
  return ParseTransportUrl(spec, rules);
}

PeerList ParseRawBinPeers(const std::string& text) {
  if (text.find("://") == std::string::npos && text.rfind('@', 0) != 0) {
    std::string spec = "raw://";
    std::istringstream parts(text);
    for (std::string mac; std::getline(parts, mac, ':');) {
      HS_REQUIRE(mac.size() == 12) << "peers '" << text << "': '" << mac << "' is not a MAC of 12 hex digits "
                                   << "(want MAC1:MAC2:..., like 0025908a56d8:0025908a56d9, or raw://MAC,MAC)";
      spec += mac + ",";
    }
    return ParsePeers(spec);  // ',' at the end is a blank entry, ignored
  }
  PeerList list = ParsePeers(text);
  HS_REQUIRE(list.scheme == "raw") << "peers '" << text << "' are not raw:// MACs";
  return list;
}

std::vector<std::pair<int, std::string>> LocalEntries(const PeerList& list, const LocalAddresses& local) {
  std::vector<std::pair<int, std::string>> mine;
  const TransportScheme* scheme = FindTransport(list.scheme);
  if (!scheme || !scheme->is_here) return mine;
  for (int r = 0; r < static_cast<int>(list.peers.size()); ++r) {
    std::string iface;
    if (scheme->is_here(list.peers[r], local, &iface)) mine.emplace_back(r, iface);
  }
  return mine;
}

SelfRank FindSelf(const PeerList& list, const LocalAddresses& local,
                  const std::map<std::string, std::string>& env, int forced) {
  const int n = static_cast<int>(list.peers.size());
  HS_REQUIRE(n > 0) << "--peers names no machine";
  // Which entries are this machine (raw: and on which interface).
  std::vector<int> mine;
  std::map<int, std::string> iface;
  for (const auto& [r, name] : LocalEntries(list, local)) {
    mine.push_back(r);
    if (!name.empty()) iface[r] = name;
  }
  auto pick = [&](int r, std::string how) { return SelfRank{r, std::move(how), iface.count(r) ? iface[r] : ""}; };
  if (forced >= 0) {
    HS_REQUIRE(forced < n) << "--rank=" << forced << " is out of range: --peers names " << n << " machines (ranks 0.."
                           << n - 1 << ")";
    return pick(forced, "--rank");
  }
  // A launcher's rank, where one is set (the first pair present); its size must be the list's.
  const std::optional<LauncherRank> launcher = LauncherRankOf(env);
  const int launched = launcher ? launcher->rank : -1;
  if (launcher) {
    const int size = launcher->size;
    HS_REQUIRE(size == n) << launcher->who << " started " << size << " processes (" << launcher->size_var << "="
                          << size << ") but --peers names " << n << " machines";
    HS_REQUIRE(launched < n) << launcher->rank_var << "=" << launched << " is out of range for " << n << " machines";
  }
  if (mine.size() == 1) return pick(mine[0], "the only local entry");
  std::vector<std::string> names;
  for (int r : mine) names.push_back("'" + list.peers[r].text + "'");
  if (launcher) {
    HS_REQUIRE(mine.empty() || std::find(mine.begin(), mine.end(), launched) != mine.end())
        << launcher->rank_var << "=" << launched << " picks '" << list.peers[launched].text
        << "', which is not this machine (its entries: " << Join(names) << ")";
    return pick(launched, launcher->rank_var);
  }
  if (mine.empty()) {
    const TransportScheme* scheme = FindTransport(list.scheme);
    const std::vector<std::string> have = scheme && scheme->local_text ? scheme->local_text(local) : local.ipv4;
    HS_FAIL() << "none of the " << n << " --peers entries is an address of this machine (local: " << Join(have)
              << ")";
  }
  HS_FAIL() << "--peers entries " << names[0] << " and " << names[1]
            << " are both local; run under mpirun/srun/torchrun or give --rank";
}

std::optional<LauncherRank> LauncherRankOf(const std::map<std::string, std::string>& env) {
  for (const Launcher& l : kLaunchers) {
    if (!env.count(l.rank) && !env.count(l.size)) continue;
    LauncherRank r;
    r.rank = EnvInt(env, l.rank);
    r.size = EnvInt(env, l.size);
    r.rank_var = l.rank;
    r.size_var = l.size;
    r.who = l.who;
    return r;
  }
  return std::nullopt;
}

std::map<std::string, std::string> LauncherEnv() {
  std::map<std::string, std::string> env;
  for (const Launcher& l : kLaunchers) {
    for (const char* name : {l.rank, l.size})
      if (const char* v = std::getenv(name)) env[name] = v;
  }
  return env;
}

std::unique_ptr<Transport> OpenPeers(const PeerList& list, const SelfRank& self, const PeerOpenOptions& opt) {
  OpenOptions o;
  o.rank = self.rank;
  o.job = opt.job;
  o.key = opt.key;
  o.iface = opt.iface.empty() ? self.iface : opt.iface;
  o.multicast = opt.multicast;
  o.max_payload = opt.max_payload;
  if (!opt.netns.empty()) o.netns = {opt.netns};
  o.heartbeat_ms = 0;  // one liveness: the job's control messages (no transport heartbeats, no timeout)
  o.verbs_api = opt.verbs_api;
  o.exchange_timeout = opt.exchange_timeout;
  // What the job may have in flight to this machine from each other one: a window of positions
  // from its master and one of deltas answering ours (a transport that drops what finds no
  // receive buffer sizes its buffers from it).
  o.in_flight = 2 * NetJobOptions{}.window;
  return OpenTransport(list, o);
}

}  // namespace hogstream
