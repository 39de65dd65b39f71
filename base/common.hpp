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
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

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
// Collects a message with operator<<. It never throws itself: Thrower does, once the whole
// message is built, so no destructor throws and a failure inside another exception's
// unwinding cannot terminate the process.
template <class E>
class Raise {
 public:
  Raise(const char* file, int line, const char* cond) {
    if (file) os_ << file << ":" << line << ": check failed: " << cond << " ";
  }
  Raise(const Raise&) = delete;
  template <class T>
  Raise& operator<<(const T& v) {
    os_ << v;
    return *this;
  }
  std::string str() const { return os_.str(); }

 private:
  std::ostringstream os_;
};

// `Thrower<E>() = Raise<E>(...) << a << b` throws E with the message. `=` binds more loosely
// than `<<`, so the whole message is collected first; operator= is [[noreturn]], so the
// compiler knows control does not go on.
template <class E>
struct Thrower {
  [[noreturn]] void operator=(const Raise<E>& r) const { throw E(r.str()); }
};

// For HS_CHECK_EQ and friends: each operand is evaluated once, as an argument here; the
// result is empty when the check holds, else "(a vs b) " for the message.
template <class A, class B, class Op>
std::optional<std::string> Compare(const A& a, const B& b, Op op) {
  if (op(a, b)) return std::nullopt;
  std::ostringstream os;
  os << "(" << a << " vs " << b << ") ";
  return os.str();
}

// Thread-safe text of an errno value ("No such file or directory"); std::strerror may share
// one buffer between threads.
inline std::string ErrnoText(int err) {
  char buf[256];
  // GNU strerror_r returns the text (in buf or a static string); XSI returns 0 and fills buf.
  auto r = ::strerror_r(err, buf, sizeof buf);
  if constexpr (std::is_same_v<decltype(r), char*>) {
    return r ? std::string(r) : "errno " + std::to_string(err);
  } else {
    return r == 0 ? std::string(buf) : "errno " + std::to_string(err);
  }
}
}  // namespace detail

using detail::ErrnoText;

}  // namespace hogstream

// `while` rather than `if/else` so the macros nest under a caller's unbraced if/else without
// stealing its `else`; the body throws, so it runs at most once. The condition is evaluated
// exactly once either way.
#define HS_CHECK(cond) \
  while (!(cond))      \
  ::hogstream::detail::Thrower<::hogstream::Bug>() = \
      ::hogstream::detail::Raise<::hogstream::Bug>(__FILE__, __LINE__, #cond)

#define HS_REQUIRE(cond) \
  while (!(cond))        \
  ::hogstream::detail::Thrower<::hogstream::Error>() = \
      ::hogstream::detail::Raise<::hogstream::Error>(nullptr, 0, nullptr)

#define HS_FAIL()                                      \
  ::hogstream::detail::Thrower<::hogstream::Error>() = \
      ::hogstream::detail::Raise<::hogstream::Error>(nullptr, 0, nullptr)

// The operands are bound once, inside Compare; a trailing `<< "more"` still works.
#define HS_CHECK_OP_(a, b, op, opstr)                                                    \
  while (auto hs_cmp_ = ::hogstream::detail::Compare((a), (b), op))                      \
  ::hogstream::detail::Thrower<::hogstream::Bug>() =                                     \
      ::hogstream::detail::Raise<::hogstream::Bug>(__FILE__, __LINE__, #a " " opstr " " #b) \
      << *hs_cmp_

#define HS_CHECK_EQ(a, b) HS_CHECK_OP_(a, b, std::equal_to<>(), "==")
#define HS_CHECK_LE(a, b) HS_CHECK_OP_(a, b, std::less_equal<>(), "<=")
#define HS_CHECK_LT(a, b) HS_CHECK_OP_(a, b, std::less<>(), "<")
#define HS_CHECK_GE(a, b) HS_CHECK_OP_(a, b, std::greater_equal<>(), ">=")
#define HS_CHECK_GT(a, b) HS_CHECK_OP_(a, b, std::greater<>(), ">")

#ifdef HOGSTREAM_CUDA
#define HS_CUDA_CHECK(expr)                                                          \
  do {                                                                               \
    cudaError_t hs_err_ = (expr);                                                    \
    HS_CHECK(hs_err_ == cudaSuccess) << #expr << ": " << cudaGetErrorString(hs_err_); \
  } while (0)
#endif
