// bin/rendezvous: where the store is, from --rendezvous and from each launcher's variables (and
// every mistake in them one line naming the variable); and the store itself on 127.0.0.1, its
// machines as threads: one serves, every one gets the same list in rank order and the same
// session key sealed to it alone, a machine with the wrong --job-key or of another job is
// refused in one line while the job goes on, a visitor that is not a machine is turned away,
// and a store whose machines do not all come ends with an error to those that did.
#include "bin/rendezvous.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <set>
#include <thread>

#include "bin/peers.hpp"
#include "test/error_of.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using Env = std::map<std::string, std::string>;
using namespace std::chrono_literals;

// A TCP port on 127.0.0.1 free now (bound and closed again).
uint16_t FreeTcpPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// "HOST:PORT rank R of N": a plan in one string, compared at once.
std::string Said(const std::optional<RendezvousPlan>& p) {
  return p ? p->host + ":" + std::to_string(p->port) + " rank " + std::to_string(p->rank) + " of " +
                 std::to_string(p->machines)
           : "none";
}

TEST(RendezvousPlanTest, FromTheFlagAndEachLaunchersVariables) {
  EXPECT_FALSE(PlanRendezvous("", -1, 0, {}).has_value()) << "nothing given: the job needs --peers";
  EXPECT_FALSE(PlanRendezvous("", -1, 0, {{"RANK", "1"}, {"WORLD_SIZE", "2"}}).has_value())
      << "a rank alone names no store";
  std::optional<RendezvousPlan> p = PlanRendezvous("127.0.0.1:7000", -1, 3, {});
  EXPECT_EQ(Said(p), "127.0.0.1:7000 rank -1 of 3") << "the store gives the rank";
  EXPECT_EQ(p->scheme, "udp");
  EXPECT_EQ(PlanRendezvous("raw://store:9", 2, 3, {})->scheme, "raw");
  EXPECT_EQ(PlanRendezvous("verbs://store:9", 2, 3, {})->rank, 2);
  // torchrun: MASTER_ADDR:MASTER_PORT, or the port after it where torchrun's agent holds it.
  const Env torchrun = {{"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}, {"RANK", "2"}, {"WORLD_SIZE", "4"}};
  EXPECT_EQ(Said(PlanRendezvous("", -1, 0, torchrun)), "10.0.0.1:29500 rank 2 of 4");
  Env agent = torchrun;
  agent["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  EXPECT_EQ(PlanRendezvous("", -1, 0, agent)->port, 29501);
  EXPECT_EQ(PlanRendezvous("store:5", -1, 0, torchrun)->host, "store") << "--rendezvous first";
  // srun: the step's first node, the step's first reserved port (else one from the job id).
  const Env srun = {{"SLURM_STEP_NODELIST", "node[07-09,12],gpu1"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "5"},
                    {"SLURM_STEP_RESV_PORTS", "12000-12015"}, {"SLURM_JOB_ID", "881"}};
  EXPECT_EQ(Said(PlanRendezvous("", -1, 0, srun)), "node07:12000 rank 1 of 5");
  Env unreserved = srun;
  unreserved.erase("SLURM_STEP_RESV_PORTS");
  unreserved["SLURM_STEP_NODELIST"] = "gpu1";
  p = PlanRendezvous("", -1, 0, unreserved);
  EXPECT_EQ(p->host, "gpu1");
  EXPECT_GE(p->port, kRendezvousBasePort);
  EXPECT_LT(p->port, kRendezvousBasePort + 600);
  EXPECT_FALSE(PlanRendezvous("", -1, 0, {{"SLURM_JOB_NODELIST", "n1"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}}))
      << "a batch script's own environment is not a job's step";
  // mpirun: its own host (rank 0 runs there), a port from its job id; two jobs differ.
  const Env ompi = {{"OMPI_MCA_orte_hnp_uri", "1907359744.0;tcp://192.0.2.2,10.1.1.1:42549;tcp6://[fd00::2]:49173"},
                    {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}};
  p = PlanRendezvous("", -1, 0, ompi);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->host, "192.0.2.2");
  EXPECT_EQ(p->rank, 0);
  EXPECT_EQ(p->machines, 4);
  Env other = ompi;
  other["OMPI_MCA_orte_hnp_uri"] = "1907490816.0;tcp://192.0.2.2:40001";
  EXPECT_NE(PlanRendezvous("", -1, 0, other)->port, p->port);
  const Env mpich = {{"PMI_PORT", "head:4211"}, {"PMI_RANK", "3"}, {"PMI_SIZE", "6"}};
  EXPECT_EQ(PlanRendezvous("", -1, 0, mpich)->host, "head");
  EXPECT_EQ(PlanRendezvous("", -1, 0, mpich)->rank, 3);
}

TEST(RendezvousPlanTest, AMistakeIsOneLineNamingItsVariable) {
  EXPECT_NE(ErrorOf([] { PlanRendezvous("tcp://h:1", -1, 2, {}); }).find("unknown scheme 'tcp'"), std::string::npos);
  EXPECT_NE(ErrorOf([] { PlanRendezvous("store", -1, 2, {}); }).find("is not HOST:PORT"), std::string::npos);
  EXPECT_NE(ErrorOf([] { PlanRendezvous("store:0", -1, 2, {}); }).find("--rendezvous's port='0'"), std::string::npos);
  EXPECT_NE(ErrorOf([] { PlanRendezvous("store:1", -1, 0, {}); }).find("--machines=N"), std::string::npos)
      << "no size known";
  EXPECT_NE(ErrorOf([] { PlanRendezvous("", -1, 0, {{"MASTER_ADDR", "h"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}}); })
                .find("MASTER_PORT is not"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { PlanRendezvous("", -1, 0, {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "9"}, {"WORLD_SIZE", "2"}}); })
                .find("RANK is not set"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { PlanRendezvous("", -1, 0, {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "9"}, {"RANK", "2"}, {"WORLD_SIZE", "2"}}); })
                .find("RANK='2' is not a number in 0..1"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { PlanRendezvous("store:1", -1, 3, {{"RANK", "0"}, {"WORLD_SIZE", "2"}}); })
                .find("--machines=3 but WORLD_SIZE=2"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { PlanRendezvous("store:1", 5, 3, {}); }).find("--rank=5 is out of range"), std::string::npos);
  EXPECT_NE(ErrorOf([] { PlanRendezvous("", -1, 0, {{"OMPI_MCA_orte_hnp_uri", "1.0;ud://x"}, {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}); })
                .find("names no tcp:// address"),
            std::string::npos);
}

RendezvousPlan Loopback(uint16_t port, int rank, int machines) {
  RendezvousPlan p;
  p.host = "127.0.0.1";
  p.port = port;
  p.rank = rank;
  p.machines = machines;
  p.how = "test";
  return p;
}

TEST(RendezvousTest, EveryMachineGetsTheListInRankOrderAndOneSessionKey) {
  const uint16_t port = FreeTcpPort();
  RendezvousOptions o;
  o.job = "three";
  o.timeout = 20s;
  // Three machines with no rank: whoever takes the store's address serves it and is rank 0;
  // the others get theirs in the order they came.
  std::vector<std::future<Rendezvoused>> met;
  for (int i = 0; i < 3; ++i) met.push_back(std::async(std::launch::async, [&] { return Rendezvous(Loopback(port, -1, 3), o); }));
  std::vector<Rendezvoused> got;
  for (auto& m : met) got.push_back(m.get());
  std::set<int> ranks;
  for (const Rendezvoused& g : got) {
    ranks.insert(g.rank);
    EXPECT_EQ(g.peers, got[0].peers);
    ASSERT_TRUE(g.session.has_value());
    EXPECT_EQ(*g.session, *got[0].session) << "one key for the job's frames";
    EXPECT_TRUE(g.port_hold) << "its port held until its endpoint opens";
    EXPECT_EQ(g.job, "three");
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
  const PeerList list = ParsePeers(got[0].peers);
  ASSERT_EQ(list.peers.size(), 3u);
  std::set<uint16_t> ports;
  for (const PeerEntry& e : list.peers) {
    EXPECT_EQ(e.ip, "127.0.0.1");
    ports.insert(e.port);
  }
  EXPECT_EQ(ports.size(), 3u) << got[0].peers;
  // A second job on the same store address later draws another key.
  std::vector<std::future<Rendezvoused>> again;
  for (int r = 0; r < 2; ++r) again.push_back(std::async(std::launch::async, [&, r] { return Rendezvous(Loopback(port, r, 2), o); }));
  const Rendezvoused a = again[0].get(), b = again[1].get();
  EXPECT_EQ(a.rank, 0);
  EXPECT_EQ(b.rank, 1);
  EXPECT_EQ(*a.session, *b.session);
  EXPECT_NE(*a.session, *got[0].session);
}

TEST(RendezvousTest, AWrongKeyAnotherJobOrAStrangerIsRefusedAndTheJobGoesOn) {
  const uint16_t port = FreeTcpPort();
  RendezvousOptions o;
  o.job = "keyed";
  o.key = JobKey{};
  (*o.key)[0] = 7;
  o.timeout = 20s;
  auto zero = std::async(std::launch::async, [&] { return Rendezvous(Loopback(port, 0, 2), o); });
  RendezvousOptions wrong = o;
  (*wrong.key)[0] = 8;
  const std::string refused = ErrorOf([&] { Rendezvous(Loopback(port, 1, 2), wrong); });
  EXPECT_NE(refused.find("refused this machine: its --job-key is not the job's"), std::string::npos) << refused;
  EXPECT_EQ(refused.find('\n'), std::string::npos) << "one line";
  RendezvousOptions unkeyed = o;
  unkeyed.key.reset();
  EXPECT_NE(ErrorOf([&] { Rendezvous(Loopback(port, 1, 2), unkeyed); }).find("gave none"), std::string::npos);
  RendezvousOptions foreign = o;
  foreign.job = "another";
  EXPECT_NE(ErrorOf([&] { Rendezvous(Loopback(port, 1, 2), foreign); }).find("names another job"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { Rendezvous(Loopback(port, 0, 2), o); }).find("cannot listen on 127.0.0.1"), std::string::npos)
      << "a second rank 0: the store's address is taken";
  // A stranger that speaks something else: turned away, the store serves on.
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  ASSERT_EQ(connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string get = "GET / HTTP/1.0\n";
  ASSERT_EQ(send(s, get.data(), get.size(), 0), static_cast<ssize_t>(get.size()));
  std::string said;
  char buf[512];
  for (ssize_t n; (n = recv(s, buf, sizeof buf, 0)) > 0;) said.append(buf, static_cast<size_t>(n));
  close(s);
  EXPECT_NE(said.find("error not a hogstream rendezvous hello"), std::string::npos) << said;
  // One that says nothing is let go within seconds (the store holds no connection for long).
  const int mute = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(mute, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval limit{15, 0};
  setsockopt(mute, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  const auto t0 = std::chrono::steady_clock::now();
  std::string heard;
  ssize_t n = 0;
  while ((n = recv(mute, buf, sizeof buf, 0)) > 0) heard.append(buf, static_cast<size_t>(n));
  close(mute);
  EXPECT_EQ(n, 0) << "closed by the store, not at the test's deadline";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 12s);
  EXPECT_EQ(heard.rfind("hogstream-rendezvous 1 challenge=", 0), 0u) << heard;
  // The right machine: the job's list, under the job's key (no session key drawn).
  const Rendezvoused one = Rendezvous(Loopback(port, 1, 2), o);
  const Rendezvoused z = zero.get();
  EXPECT_EQ(one.rank, 1);
  EXPECT_EQ(z.rank, 0);
  EXPECT_EQ(one.peers, z.peers);
  EXPECT_FALSE(one.session.has_value()) << "frames sealed with the job's --job-key";
}

// A keyed job's store stays open, while its machine holds it, for new machines (--join): each
// gets the list so far with its own entry last, and the next rank. A machine that is not new
// comes too late; a new one before the job has started, or without the key, is refused.
TEST(RendezvousTest, AKeyedJobsStoreTakesNewMachinesWhileItRuns) {
  const uint16_t port = FreeTcpPort();
  RendezvousOptions o;
  o.job = "grows";
  o.key = JobKey{};
  o.timeout = 20s;
  RendezvousOptions join = o;
  join.join = true;
  auto zero = std::async(std::launch::async, [&] { return Rendezvous(Loopback(port, 0, 2), o); });
  EXPECT_NE(ErrorOf([&] { Rendezvous(Loopback(port, -1, 2), join); }).find("this one has not started"), std::string::npos);
  const Rendezvoused one = Rendezvous(Loopback(port, 1, 2), o);
  Rendezvoused z = zero.get();
  ASSERT_TRUE(z.store) << "machine 0 holds the store";
  EXPECT_FALSE(one.store);
  const Rendezvoused two = Rendezvous(Loopback(port, -1, 0), join);
  EXPECT_EQ(two.rank, 2);
  ASSERT_EQ(two.peers.rfind(z.peers + ",", 0), 0u) << two.peers;
  EXPECT_EQ(ParsePeers(two.peers).peers.size(), 3u);
  const Rendezvoused three = Rendezvous(Loopback(port, -1, 0), join);
  EXPECT_EQ(three.rank, 3);
  EXPECT_EQ(three.peers.rfind(two.peers + ",", 0), 0u) << "the list so far, then its own entry";
  EXPECT_NE(ErrorOf([&] { Rendezvous(Loopback(port, 1, 2), o); }).find("the job has started"), std::string::npos);
  RendezvousOptions unkeyed = join;
  unkeyed.key.reset();
  EXPECT_NE(ErrorOf([&] { Rendezvous(Loopback(port, -1, 0), unkeyed); }).find("needs the job's --job-key"),
            std::string::npos);
  RendezvousOptions wrong = join;
  (*wrong.key)[1] = 1;
  EXPECT_NE(ErrorOf([&] { Rendezvous(Loopback(port, -1, 0), wrong); }).find("its --job-key is not the job's"),
            std::string::npos);
  // Let go (the job has ended): nobody answers any more.
  z.store.reset();
  RendezvousOptions late = join;
  late.timeout = 500ms;
  EXPECT_NE(ErrorOf([&] { Rendezvous(Loopback(port, -1, 0), late); }).find("did not answer in time"), std::string::npos);
}

TEST(RendezvousTest, MachinesThatDoNotAllComeEndTheStoreWithAnErrorToThoseThatDid) {
  const uint16_t port = FreeTcpPort();
  RendezvousOptions o;
  o.job = "short";
  o.timeout = 1500ms;
  const auto t0 = std::chrono::steady_clock::now();
  auto one = std::async(std::launch::async, [&] { return ErrorOf([&] { Rendezvous(Loopback(port, 1, 3), o); }); });
  const std::string zero = ErrorOf([&] { Rendezvous(Loopback(port, 0, 3), o); });
  EXPECT_NE(zero.find("only 2 of 3 machines came to the store at 127.0.0.1:" + std::to_string(port)), std::string::npos)
      << zero;
  const std::string first = one.get();
  EXPECT_NE(first.find("only 2 of 3"), std::string::npos) << first;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  // Nobody serves: a machine waits until its deadline, then says so.
  const std::string alone = ErrorOf([&] { Rendezvous(Loopback(FreeTcpPort(), 2, 3), o); });
  EXPECT_NE(alone.find("did not answer in time"), std::string::npos) << alone;
}

}  // namespace
}  // namespace hogstream
