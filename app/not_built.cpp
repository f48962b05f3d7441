#include <cstdio>

#include "app/commands.hpp"
#include "core/log.hpp"

namespace lpsgd::app {

int not_built(const char* what) {
  if (log::rank() == 0)
    std::fprintf(stderr, "lpsgd: error: '%s' is not built yet in this version\n", what);
  return 2;
}

}  // namespace lpsgd::app
