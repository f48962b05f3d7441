#include "core/error.hpp"

#include <mpi.h>

#include <cstring>

namespace lpsgd {

std::string Error::where() const {
  const char* base = std::strrchr(file_, '/');
  return message_ + " (" + (base ? base + 1 : file_) + ":" + std::to_string(line_) + ")";
}

namespace detail {

void throw_error(const std::string& msg, const char* file, int line, ErrorKind kind,
                 int sys_errno) {
  throw Error(msg, file, line, kind, sys_errno);
}

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}

}  // namespace detail
}  // namespace lpsgd
