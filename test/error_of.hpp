// For tests of thrown errors: the message of the hogstream::Error (or any exception type) a call
// throws.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "base/common.hpp"

namespace hogstream {

// Runs `f` and returns the message of the `E` it throws ("" and a test failure when it throws
// none).
template <class E, class F>
std::string MessageOf(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception of the type asked for; nothing was thrown";
  return "";
}

// The same for the hogstream::Error of a user's mistake.
template <class F>
std::string ErrorOf(F&& f) {
  return MessageOf<Error>(std::forward<F>(f));
}

}  // namespace hogstream
