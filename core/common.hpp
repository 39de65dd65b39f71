// Two kinds of failure, and the macros that raise them.
//
//  * hogstream::Error — something a user can cause and fix: a bad prototxt, a missing file, a
//    layer whose bottoms do not fit. Raised with HS_REQUIRE(cond) << "message". Programs in
//    bin/ catch it and print one line.
//  * hogstream::Bug — a broken invariant inside hogstream. Raised with HS_CHECK(cond), and the
//    message carries file:line so the report points at the code.
//
// Neither aborts the process; both are ordinary exceptions, so tests can expect them.
#pragma once

#include <cstdint>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>

namespace hogstream {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Bug : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {
// Collects a message with operator<< and throws when the full expression ends.
template <class E>
class Raise {
 public:
  Raise(const char* file, int line, const char* cond) {
    if (file) os_ << file << ":" << line << ": check failed: " << cond << " ";
  }
  Raise(const Raise&) = delete;
  [[noreturn]] ~Raise() noexcept(false) { throw E(os_.str()); }
  template <class T>
  Raise& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  std::ostringstream os_;
};
}  // namespace detail

// errno as text, safe on any thread (std::strerror is not).
inline std::string ErrnoText(int err) {
  char buf[256];
  // GNU strerror_r returns its message, which may or may not be in buf.
  return std::string(strerror_r(err, buf, sizeof(buf)));
}

}  // namespace hogstream

// `while` rather than `if/else` so the macros nest under a caller's unbraced if; the body
// throws, so it runs at most once.
#define HS_CHECK(cond) \
  while (!(cond))      \
  ::hogstream::detail::Raise<::hogstream::Bug>(__FILE__, __LINE__, #cond)

#define HS_REQUIRE(cond) \
  while (!(cond))        \
  ::hogstream::detail::Raise<::hogstream::Error>(nullptr, 0, nullptr)

#define HS_FAIL() ::hogstream::detail::Raise<::hogstream::Error>(nullptr, 0, nullptr)

#define HS_CHECK_EQ(a, b) HS_CHECK((a) == (b)) << "(" << (a) << " vs " << (b) << ") "
#define HS_CHECK_LE(a, b) HS_CHECK((a) <= (b)) << "(" << (a) << " vs " << (b) << ") "
#define HS_CHECK_LT(a, b) HS_CHECK((a) < (b)) << "(" << (a) << " vs " << (b) << ") "
#define HS_CHECK_GE(a, b) HS_CHECK((a) >= (b)) << "(" << (a) << " vs " << (b) << ") "
#define HS_CHECK_GT(a, b) HS_CHECK((a) > (b)) << "(" << (a) << " vs " << (b) << ") "

#ifdef HOGSTREAM_CUDA
#define HS_CUDA_CHECK(expr)                                                          \
  do {                                                                               \
    cudaError_t hs_err_ = (expr);                                                    \
    HS_CHECK(hs_err_ == cudaSuccess) << #expr << ": " << cudaGetErrorString(hs_err_); \
  } while (0)
#endif
