// Tests of transport/netns: a scope enters the named namespace on this thread and returns to the
// original after; a socket made inside stays there (it can bind the namespace's own address,
// which outside does not exist); "" is a no-op; a missing namespace is a one-line Error and
// leaves the thread where it was. The namespaces come from test/transport/veth.hpp (root only;
// skipped with the reason otherwise).
#include "transport/netns.hpp"

#include "base/common.hpp"

#include "test/transport/veth.hpp"
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

namespace hogstream {
namespace HS_UNITY_ID {

ino_t Inode(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}
ino_t ThreadNetns() { return Inode("/proc/thread-self/ns/net"); }

bool Binds(int fd, const std::string& ip) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
}

TEST(NetnsScopeTest, EntersTheNamespaceAndReturns) {
  if (const std::string why = test::TestNet::Unavailable(); !why.empty()) GTEST_SKIP() << why;
  test::VethPair net;
  const ino_t home = ThreadNetns();
  ASSERT_NE(home, 0u);
  int inside = -1;
  {
    NetnsScope scope(net.ns(0));
    EXPECT_EQ(ThreadNetns(), Inode("/var/run/netns/" + net.ns(0)));
    EXPECT_NE(ThreadNetns(), home);
    inside = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  }
  EXPECT_EQ(ThreadNetns(), home);
  ASSERT_GE(inside, 0);
  EXPECT_TRUE(Binds(inside, net.address(0))) << "the socket left the namespace with us";
  close(inside);
  const int outside = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  EXPECT_FALSE(Binds(outside, net.address(0))) << "the caller's own namespace has the test address";
  close(outside);
}

TEST(NetnsScopeTest, EmptyNameStaysAndMissingNameIsOneLineError) {
  const ino_t home = ThreadNetns();
  { NetnsScope scope(""); EXPECT_EQ(ThreadNetns(), home); }
  for (const std::string bad : {"hs-no-such-namespace", "../etc"}) {
    try {
      NetnsScope scope(bad);
      ADD_FAILURE() << "entered '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'" + bad + "'"), std::string::npos) << e.what();
    }
    EXPECT_EQ(ThreadNetns(), home);
  }
}

}  // namespace
}  // namespace hogstream
