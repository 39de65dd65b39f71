// For tests of user errors: the message of the hogstream::Error a call throws.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "base/common.hpp"

namespace hogstream {

// Runs `f` and returns the message of the hogstream::Error it throws ("" and a test failure
// when it throws none).
template <class F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a hogstream::Error";
  return "";
}

}  // namespace hogstream
