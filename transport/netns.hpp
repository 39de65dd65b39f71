// Entering a named network namespace for a scope, on the calling thread only: the way one
// process opens endpoints in several namespaces (tests and the bench put both ends of a veth
// link in one process). NAME is what `ip netns add NAME` makes: a bind mount at
// /var/run/netns/NAME. Sockets created inside stay in that namespace for their whole life, so
// a backend enters, creates and binds its sockets, and leaves.
// Not for: creating or deleting namespaces (test/transport/veth.hpp does that with `ip`), other
// namespace kinds, or threads other than the caller (setns(CLONE_NEWNET) moves one thread).
#pragma once

#include <string>

namespace hogstream {

class NetnsScope {
 public:
  // Enters namespace `name` on this thread; "" = stays where it is (a no-op). A missing
  // namespace, or one this process may not enter (CAP_SYS_ADMIN), is a one-line Error, and the
  // thread is still in its own namespace.
  explicit NetnsScope(const std::string& name);
  // Returns the thread to the namespace it was in. Cannot fail short of a kernel fault: the
  // fd to the original namespace was opened at entry (a failure aborts with a message, since a
  // thread left in the wrong namespace would open every later socket there).
  ~NetnsScope();
  NetnsScope(const NetnsScope&) = delete;
  NetnsScope& operator=(const NetnsScope&) = delete;

 private:
  int home_ = -1;  // /proc/thread-self/ns/net at entry; -1: no-op scope
};

}  // namespace hogstream
