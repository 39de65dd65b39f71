// NetnsScope: setns(CLONE_NEWNET) in, and back out (see netns.hpp).
#include "transport/netns.hpp"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "base/common.hpp"

namespace hogstream {

NetnsScope::NetnsScope(const std::string& name) {
  if (name.empty()) return;
  HS_REQUIRE(name.find('/') == std::string::npos && name != "." && name != "..")
      << "network namespace '" << name << "' is not a namespace name (as `ip netns list` shows them)";
  const std::string path = "/var/run/netns/" + name;
  const int target = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (target < 0) {
    const int err = errno;
    HS_FAIL() << "network namespace '" << name << "' not found (" << path << ": " << ErrnoText(err)
              << "; `ip netns add " << name << "` makes one)";
  }
  home_ = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (home_ < 0) {
    const int err = errno;
    close(target);
    HS_FAIL() << "cannot enter network namespace '" << name
              << "': /proc/thread-self/ns/net: " << ErrnoText(err);
  }
  if (setns(target, CLONE_NEWNET) != 0) {
    const int err = errno;
    close(target);
    close(home_);
    home_ = -1;
    HS_FAIL() << "cannot enter network namespace '" << name << "': " << ErrnoText(err)
              << (err == EPERM ? " (needs CAP_SYS_ADMIN)" : "");
  }
  close(target);
}

NetnsScope::~NetnsScope() {
  if (home_ < 0) return;
  if (setns(home_, CLONE_NEWNET) != 0) {
    std::fprintf(stderr, "hogstream: cannot return to the original network namespace: %s\n",
                 ErrnoText(errno).c_str());
    std::abort();
  }
  close(home_);
}

}  // namespace hogstream
