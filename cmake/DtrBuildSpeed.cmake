# What makes dtr's build faster without changing what it builds (issue 39: CI in 30 minutes
# on two cores; .ci/run's header gives the measured effect).
#
#   dtr_choose_linker()       before the targets: links with lld where installed (DTR_LINKER;
#                             scripts/setup.sh installs it). Release links were already cheap
#                             with GNU ld (0.1-0.2 CPU-s each); the sanitizer build's, with
#                             debug info, are the larger ones.
#   dtr_option_parsing_source(SOURCE)
#                             a main that parses command-line options with CLI11 (header-
#                             only: each such source compiles its inline code, 18-30 CPU-s at
#                             -O3, 33-59 under ASan+UBSan at -O1) is compiled at -O1 in
#                             Release builds and -O0 in the others (the sanitizer builds;
#                             still instrumented): it runs once.
#   dtr_precompile_headers()  after the targets: each target of ours with at least
#                             DTR_PCH_MIN_SOURCES C++ sources parses the standard headers most
#                             sources include and {fmt} once, into a precompiled header,
#                             instead of once per source (DTR_PCH).
#   dtr_unity_build()         after the targets: each library and program of ours with at
#                             least two C++ sources compiles them DTR_UNITY_BATCH at a time in
#                             one translation unit (CMake's UNITY_BUILD), so that the dtr,
#                             ZeroMQ, spdlog and standard headers they share are parsed and
#                             their inline functions compiled once per batch (DTR_UNITY). The
#                             worker library: 198 CPU-s in 30 sources, 65 in batches of 8.
#                             Sources in a batch share one translation unit: helpers in their
#                             anonymous namespaces must not share names, and a call must not
#                             rely on a name another source of the batch would shadow. The
#                             test binaries set their own batches (tests/CMakeLists.txt).
#
# dtr_choose_linker(), dtr_precompile_headers() and dtr_unity_build() change no compiler or
# sanitizer flag of any source.

include(CheckLinkerFlag)

function(dtr_option_parsing_source source)
  # Without the target's precompiled header: it was built at the target's level, and clang
  # refuses one built with __OPTIMIZE__ in a source at -O0.
  set_source_files_properties(${source} PROPERTIES COMPILE_OPTIONS
                                                   "$<IF:$<CONFIG:Release>,-O1,-O0>"
                                                   SKIP_PRECOMPILE_HEADERS ON)
endfunction()

set(DTR_LINKER "auto" CACHE STRING
    "Linker: auto (lld where installed), lld, mold, or default (the compiler's)")
set_property(CACHE DTR_LINKER PROPERTY STRINGS auto lld mold default)

function(dtr_choose_linker)
  if(DTR_LINKER STREQUAL "default")
    return()
  endif()
  if(DTR_LINKER STREQUAL "auto")
    set(candidates lld)
  else()
    set(candidates ${DTR_LINKER})
  endif()
  foreach(linker IN LISTS candidates)
    check_linker_flag(CXX "-fuse-ld=${linker}" DTR_HAVE_LINKER_${linker})
    if(DTR_HAVE_LINKER_${linker})
      message(STATUS "dtr: linking with ${linker}")
      add_link_options("-fuse-ld=${linker}")
      return()
    endif()
  endforeach()
  if(NOT DTR_LINKER STREQUAL "auto")
    message(FATAL_ERROR "DTR_LINKER is ${DTR_LINKER}, but -fuse-ld=${DTR_LINKER} does not link")
  endif()
endfunction()

# Precompiled headers are on by default except under a compiler launcher (ccache): ccache
# cannot cache a source that uses one unless its sloppiness allows it, and a warm ccache
# saves more than they do.
if(CMAKE_CXX_COMPILER_LAUNCHER)
  set(_dtr_pch_default OFF)
else()
  set(_dtr_pch_default ON)
endif()
option(DTR_PCH "Precompile the headers most sources include (default: on without a compiler launcher)"
       ${_dtr_pch_default})

# System headers only: CMake's precompiled header is a system header, and dtr's own headers
# inside it would have their warnings silenced. These are the ones most sources include
# (parsing them took about 1.3 s of each source's compile; a header takes about 6 s to build,
# so a target needs DTR_PCH_MIN_SOURCES sources for it to pay).
set(DTR_PCH_HEADERS
    <algorithm> <array> <atomic> <chrono> <cmath> <cstdint> <cstring> <functional> <map>
    <memory> <mutex> <optional> <sstream> <string> <string_view> <thread> <unordered_map>
    <vector> <fmt/format.h>)
set(DTR_PCH_MIN_SOURCES 5)

# out: every buildsystem target defined in dir and the directories below it.
function(_dtr_targets_below dir out)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _dtr_targets_below("${sub}" below)
    list(APPEND targets ${below})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# out: every target of the project that compiles sources (libraries and programs).
function(_dtr_compiled_targets out)
  _dtr_targets_below("${PROJECT_SOURCE_DIR}" all)
  set(compiled "")
  foreach(target IN LISTS all)
    get_target_property(type ${target} TYPE)
    if(type MATCHES "^(EXECUTABLE|SHARED_LIBRARY|STATIC_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY)$")
      list(APPEND compiled ${target})
    endif()
  endforeach()
  set(${out} ${compiled} PARENT_SCOPE)
endfunction()

# The number of C++ sources of ours (not of a dependency built from source) in target.
function(_dtr_own_cxx_sources target out)
  get_target_property(sources ${target} SOURCES)
  get_target_property(source_dir ${target} SOURCE_DIR)
  set(ours 0)
  foreach(src IN LISTS sources)
    if(src MATCHES "\\.(cpp|cc|cxx)$")
      if(NOT IS_ABSOLUTE "${src}")
        set(src "${source_dir}/${src}")
      endif()
      string(FIND "${src}" "${PROJECT_SOURCE_DIR}/" at)
      if(at EQUAL 0)
        math(EXPR ours "${ours} + 1")
      endif()
    endif()
  endforeach()
  set(${out} ${ours} PARENT_SCOPE)
endfunction()

function(dtr_precompile_headers)
  if(NOT DTR_PCH)
    return()
  endif()
  _dtr_compiled_targets(targets)
  foreach(target IN LISTS targets)
    # Ours only (nanobind's own library is built from its sources in site-packages).
    _dtr_own_cxx_sources(${target} ours)
    if(ours LESS DTR_PCH_MIN_SOURCES)
      continue()
    endif()
    # C++ sources only: nvcc compiles the CUDA ones.
    set(cxx_headers "")
    foreach(header IN LISTS DTR_PCH_HEADERS)
      string(REPLACE ">" "$<ANGLE-R>" header "${header}")
      list(APPEND cxx_headers "$<$<COMPILE_LANGUAGE:CXX>:${header}>")
    endforeach()
    target_precompile_headers(${target} PRIVATE ${cxx_headers})
  endforeach()
endfunction()

option(DTR_UNITY "Compile the libraries' and programs' sources in batches (unity build)" ON)
set(DTR_UNITY_BATCH 8 CACHE STRING "Sources per unity translation unit of a library or program")

function(dtr_unity_build)
  if(NOT DTR_UNITY)
    return()
  endif()
  _dtr_compiled_targets(targets)
  foreach(target IN LISTS targets)
    # The test binaries choose their own batches (DTR_UNITY_TESTS).
    get_target_property(source_dir ${target} SOURCE_DIR)
    string(FIND "${source_dir}/" "${PROJECT_SOURCE_DIR}/tests/" in_tests)
    _dtr_own_cxx_sources(${target} ours)
    # Every source ours: nanobind's library is compiled from its own sources.
    get_target_property(sources ${target} SOURCES)
    list(FILTER sources INCLUDE REGEX "\\.(cpp|cc|cxx)$")
    list(LENGTH sources all)
    if(in_tests EQUAL 0 OR ours LESS 2 OR NOT ours EQUAL all)
      continue()
    endif()
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${DTR_UNITY_BATCH})
    # GCC takes a source included by the batch's generated file for a header, and warns on
    # every class member whose type is in the source's anonymous namespace (meant for types
    # a header would define once per includer): here the batch is the only includer. Clang
    # and builds with DTR_UNITY off keep the check.
    target_compile_options(${target} PRIVATE
                           "$<$<AND:$<CXX_COMPILER_ID:GNU>,$<COMPILE_LANGUAGE:CXX>>:-Wno-subobject-linkage>")
  endforeach()
endfunction()
