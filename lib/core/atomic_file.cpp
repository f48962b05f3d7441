#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.hpp"

namespace lpsgd {

namespace {

std::string dir_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void fsync_path(const std::string& path, int flags, const char* what) {
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    const int err = errno;
    LPSGD_THROW_ERRNO(err, "cannot open " << what << " " << path << " to sync it: " << std::strerror(err));
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems cannot sync a directory (EINVAL); the rename is still atomic there.
  if (rc != 0 && !(flags & O_DIRECTORY && (err == EINVAL || err == ENOTSUP)))
    LPSGD_THROW_ERRNO(err, "fsync of " << what << " " << path << " failed: " << std::strerror(err));
}

}  // namespace

std::string temp_path_for(const std::string& path) {
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  return dir + "." + name + ".tmp." + std::to_string(::getpid());
}

void fsync_file(const std::string& path) { fsync_path(path, O_RDONLY, "file"); }

void fsync_dir(const std::string& dir) { fsync_path(dir, O_RDONLY | O_DIRECTORY, "directory"); }

void commit_file(const std::string& tmp, const std::string& path) {
  fsync_file(tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    LPSGD_THROW_ERRNO(err, "cannot rename " << tmp << " to " << path << ": " << std::strerror(err));
  }
  fsync_dir(dir_of(path));
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = temp_path_for(path);
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) {
    const int err = errno;
    LPSGD_THROW_ERRNO(err, "cannot write " << tmp << ": " << std::strerror(err));
  }
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  int err = errno;
  if (std::fclose(f) != 0 || !ok) {
    if (ok) err = errno;  // buffered: the write itself failed in fclose
    std::remove(tmp.c_str());
    LPSGD_THROW_ERRNO(err, "cannot write " << tmp << ": " << std::strerror(err));
  }
  try {
    commit_file(tmp, path);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

}  // namespace lpsgd
