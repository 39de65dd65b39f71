// The address exchange of a verbs job: every machine learns every other machine's UD queue pair
// address (LID, GID, QPN) before the first frame can go over RDMA, by trading HELLO and REPLY messages
// over a bootstrap transport that needs no exchange itself (UDP on the addresses of --peers).
// Not for: the RDMA traffic (transport/verbs/endpoint.hpp), deciding ranks (bin/peers.hpp).
//
// The protocol, on any Transport whose peers are the other ranks (lossy, unordered is fine):
// each rank sends HELLO(its address) every `resend` to every rank that has not yet shown it
// knows ours; a rank that receives a HELLO records the sender's address and answers REPLY(its
// own address); a REPLY both teaches the sender's address and proves the sender has ours. Done
// when every address is known and every rank has replied; then the rank lingers, answering
// HELLOs until none has come for `linger`, so a rank whose REPLY was lost is not left waiting. A message of another
// job is refused by the bootstrap transport's frame check (its job id, or --job-key's MAC).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "transport/transport.hpp"
#include "transport/verbs/device.hpp"

namespace hogstream {

struct VerbsExchangeOptions {
  std::chrono::milliseconds timeout{60000};  // the whole exchange; then a one-line Error
  std::chrono::milliseconds resend{20};      // HELLO period towards ranks that have not replied
  std::chrono::milliseconds linger{500};     // once done: answer HELLOs until this long without one
  // Names rank r in the Error (e.g. its --peers entry); default "rank r".
  std::function<std::string(PeerId)> name;
};

// Every rank's address (index = rank; ours is `mine`). `bootstrap` is this rank's endpoint
// with ranks 0..ranks-1 (but self) as peers; its receiver and sender threads are the caller's
// for the duration. Ranks silent until the timeout are named in the Error, and so is a rank
// whose messages are malformed (a wrong payload length).
std::vector<VerbsAddress> ExchangeVerbsAddresses(Transport& bootstrap, uint32_t ranks, const VerbsAddress& mine,
                                                 const VerbsExchangeOptions& opt = {});

}  // namespace hogstream
