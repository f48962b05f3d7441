# FindOneDNN: oneDNN (the library behind PyTorch's CPU layers; Debian libdnnl-dev).
#
# A find module rather than oneDNN's own dnnl-config.cmake: Debian's build of
# that config also requires the OpenCL development files (its GPU runtime),
# which lpsgd never uses. Defines OneDNN_FOUND, OneDNN_VERSION and the imported
# target OneDNN::dnnl; OneDNN_ROOT or CMAKE_PREFIX_PATH point at other installs.
find_path(OneDNN_INCLUDE_DIR NAMES oneapi/dnnl/dnnl.hpp dnnl.hpp)
find_library(OneDNN_LIBRARY NAMES dnnl)
if(OneDNN_INCLUDE_DIR)
  foreach(h oneapi/dnnl/dnnl_version.h dnnl_version.h)
    if(EXISTS "${OneDNN_INCLUDE_DIR}/${h}")
      file(STRINGS "${OneDNN_INCLUDE_DIR}/${h}" _onednn_v REGEX "#define DNNL_VERSION_(MAJOR|MINOR|PATCH) ")
      string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*PATCH ([0-9]+).*" "\\1.\\2.\\3"
             OneDNN_VERSION "${_onednn_v}")
      break()
    endif()
  endforeach()
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OneDNN REQUIRED_VARS OneDNN_LIBRARY OneDNN_INCLUDE_DIR
                                  VERSION_VAR OneDNN_VERSION)
if(OneDNN_FOUND AND NOT TARGET OneDNN::dnnl)
  add_library(OneDNN::dnnl UNKNOWN IMPORTED)
  set_target_properties(OneDNN::dnnl PROPERTIES IMPORTED_LOCATION "${OneDNN_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${OneDNN_INCLUDE_DIR}")
endif()
mark_as_advanced(OneDNN_INCLUDE_DIR OneDNN_LIBRARY)
