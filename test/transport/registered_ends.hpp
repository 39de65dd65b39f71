// Two ends of a registered transport scheme (transport/registry.hpp) in this process, opened
// through the factory as a program opens them: what the conformance suite
// (test/transport/transport_test.cc) and the registry test run on. A scheme with a `loopback`
// url needs nothing of the host; raw is given a veth pair between two namespaces (root only)
// and verbs the in-process fake fabric; any other scheme fails the caller's test until this
// file says how to open it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/open.hpp"
#include "transport/registry.hpp"

namespace hogstream::test {

// The names of every registered scheme, in the registry's order (a test parameter list).
std::vector<std::string> RegisteredSchemes();

// Ends 0 and 1 of `scheme` with the options `o` (rank, iface and netns are the helper's); empty
// with *why set where this host cannot open them (and the reason a test skips for).
std::vector<std::unique_ptr<Transport>> RegisteredEnds(const TransportScheme& scheme, OpenOptions o,
                                                       std::string* why);

}  // namespace hogstream::test
