// The one exception type of lpsgd and the check macros that raise it.
//
// Library code never prints and never exits: it throws lpsgd::Error with the
// source location and a message that names the thing and, where there is one,
// the fix. app/main.cpp catches it, prints `lpsgd: error: ...` once and ends all
// ranks together.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace lpsgd {

/// How an error should end the job.
enum class ErrorKind {
  Runtime,  ///< something failed on this rank; the job is aborted (exit 1)
  Usage,    ///< bad option or input seen identically by every rank (exit 2)
};

class Error : public std::runtime_error {
 public:
  Error(std::string message, const char* file, int line, ErrorKind kind = ErrorKind::Runtime,
        int sys_errno = 0)
      : std::runtime_error(message), message_(std::move(message)), file_(file), line_(line),
        kind_(kind), sys_errno_(sys_errno) {}

  /// The message alone, without the source location.
  const std::string& message() const noexcept { return message_; }
  const char* file() const noexcept { return file_; }
  int line() const noexcept { return line_; }
  ErrorKind kind() const noexcept { return kind_; }
  /// The operating system's errno behind the failure (ENOSPC, EACCES, ...), 0 if none.
  int sys_errno() const noexcept { return sys_errno_; }
  /// "message (file:line)" for logs and test failures.
  std::string where() const;

 private:
  std::string message_;
  const char* file_;
  int line_;
  ErrorKind kind_;
  int sys_errno_;
};

namespace detail {
// Builds a message from a stream expression: LPSGD_THROW("n=" << n).
struct MessageBuilder {
  std::ostringstream os;
  template <class T>
  MessageBuilder& operator<<(const T& v) {
    os << v;
    return *this;
  }
  std::string str() const { return os.str(); }
};
[[noreturn]] void throw_error(const std::string& msg, const char* file, int line, ErrorKind kind,
                              int sys_errno = 0);
std::string mpi_error_string(int code);
}  // namespace detail

}  // namespace lpsgd

/// Throws lpsgd::Error with file:line; the argument is a stream expression.
#define LPSGD_THROW(msg_expr)                                                            \
  ::lpsgd::detail::throw_error((::lpsgd::detail::MessageBuilder() << msg_expr).str(),    \
                               __FILE__, __LINE__, ::lpsgd::ErrorKind::Runtime)

/// LPSGD_THROW for a failure the operating system explained with errno `err`
/// (kept in the Error, so a caller can say "No space left on device" alone).
#define LPSGD_THROW_ERRNO(err, msg_expr)                                                 \
  ::lpsgd::detail::throw_error((::lpsgd::detail::MessageBuilder() << msg_expr).str(),    \
                               __FILE__, __LINE__, ::lpsgd::ErrorKind::Runtime, (err))

/// Like LPSGD_THROW for bad user input seen by every rank alike (exit code 2).
#define LPSGD_USAGE_ERROR(msg_expr)                                                      \
  ::lpsgd::detail::throw_error((::lpsgd::detail::MessageBuilder() << msg_expr).str(),    \
                               __FILE__, __LINE__, ::lpsgd::ErrorKind::Usage)

/// Throws when cond is false: LPSGD_CHECK(n > 0, "count must be positive, got " << n).
#define LPSGD_CHECK(cond, msg_expr)                                                      \
  do {                                                                                   \
    if (!(cond)) LPSGD_THROW(msg_expr);                                                  \
  } while (0)

/// Checks the return code of an MPI call.
#define MPI_CHECK(call)                                                                  \
  do {                                                                                   \
    int lpsgd_mpi_rc_ = (call);                                                          \
    if (lpsgd_mpi_rc_ != 0 /* MPI_SUCCESS */)                                            \
      LPSGD_THROW(#call << " failed: " << ::lpsgd::detail::mpi_error_string(lpsgd_mpi_rc_)); \
  } while (0)

/// Checks a CUDA runtime call; only usable where cuda_runtime_api.h is included.
#define CUDA_CHECK(call)                                                                 \
  do {                                                                                   \
    auto lpsgd_cuda_rc_ = (call);                                                        \
    if (lpsgd_cuda_rc_ != 0 /* cudaSuccess */)                                           \
      LPSGD_THROW(#call << " failed: " << cudaGetErrorName(lpsgd_cuda_rc_) << ": "       \
                        << cudaGetErrorString(lpsgd_cuda_rc_));                          \
  } while (0)
