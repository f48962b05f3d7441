# Helpers shared by every directory's CMakeLists.txt.

# lpsgd_library(NAME SOURCES ... [DEPS ...]): a static library of the project,
# with the warnings target, the generated config header and lib/ on its path.
function(lpsgd_library name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${A_SOURCES})
  target_include_directories(${name} PUBLIC
    ${PROJECT_SOURCE_DIR}/lib ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/generated)
  target_link_libraries(${name} PUBLIC ${A_DEPS} PRIVATE lpsgd_warnings)
endfunction()
