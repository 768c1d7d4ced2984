# sc_add_test(NAME <name> SRCS <files...> DEPS <targets...> [PER_TEST] [KILL_TESTS <filter>])
# One GoogleTest executable. By default ctest runs it one suite per process (`Suite.*`, label
# `unit`): a LibTorch process spends about 0.65 s starting (1.2 s under the sanitizers) before
# its first test, more than most unit tests take. PER_TEST discovers it test by test (the
# properties, one long test each). The suites matching KILL_TESTS (a --gtest_filter) get the
# label `kill` instead of `unit`: scripts/test runs those at full speed only. RC_PARAMS reaches
# the tests through the environment, so ctest forwards RapidCheck's seed and reproduce strings.
# An executable with only `unit` suites is listed in the global property SC_UNIT_ONLY_TARGETS:
# sc_all_but_unit_tests (CMakeLists.txt) builds everything else.
function(sc_add_test)
  cmake_parse_arguments(T "PER_TEST" "NAME;KILL_TESTS" "SRCS;DEPS" ${ARGN})
  add_executable(${T_NAME} ${T_SRCS})
  target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} GTest::gtest GTest::gtest_main)
  sc_warnings(${T_NAME})
  if(T_PER_TEST)
    gtest_discover_tests(${T_NAME} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 600)
    return()
  endif()
  if(T_KILL_TESTS)
    sc_suite_tests(${T_NAME} kill "${T_KILL_TESTS}")
    sc_suite_tests(${T_NAME} unit "-${T_KILL_TESTS}")
  else()
    sc_suite_tests(${T_NAME} unit "")
    set_property(GLOBAL APPEND PROPERTY SC_UNIT_ONLY_TARGETS ${T_NAME})
  endif()
endfunction()

# Every target that `all` builds in `dir` and below, except the executables with only unit suites:
# a run that leaves the unit suites to another build (scripts/test, before its sanitizer stage)
# builds this target instead of `all`.
function(sc_all_but_unit_tests name dir)
  get_property(unit_only GLOBAL PROPERTY SC_UNIT_ONLY_TARGETS)
  set(pending ${dir})
  set(wanted "")
  while(pending)
    list(POP_FRONT pending d)
    get_property(subdirs DIRECTORY ${d} PROPERTY SUBDIRECTORIES)
    list(APPEND pending ${subdirs})
    get_property(targets DIRECTORY ${d} PROPERTY BUILDSYSTEM_TARGETS)
    foreach(t IN LISTS targets)
      get_target_property(excluded ${t} EXCLUDE_FROM_ALL)
      get_target_property(type ${t} TYPE)
      if(NOT excluded AND NOT type STREQUAL "INTERFACE_LIBRARY" AND NOT t IN_LIST unit_only)
        list(APPEND wanted ${t})
      endif()
    endforeach()
  endwhile()
  add_custom_target(${name})
  add_dependencies(${name} ${wanted})
endfunction()

# One ctest test per suite of `target` (those `filter` lists), labelled `label`: listed after
# each build of the target, included by ctest when it reads this directory.
function(sc_suite_tests target label filter)
  set(out "${CMAKE_CURRENT_BINARY_DIR}/${target}_${label}_suites.cmake")
  set(include "${CMAKE_CURRENT_BINARY_DIR}/${target}_${label}_include.cmake")
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -D EXE=$<TARGET_FILE:${target}> -D OUT=${out}
            -D "FILTER=${filter}" -D LABEL=${label} -D TIMEOUT=600
            -P ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/sc_list_suites.cmake
    BYPRODUCTS ${out} VERBATIM)
  file(WRITE "${include}"
    "if(EXISTS \"${out}\")\n  include(\"${out}\")\nelse()\n"
    "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\n"
    "  set_tests_properties(${target}_NOT_BUILT PROPERTIES LABELS ${label})\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include}")
endfunction()

# Our warnings (-Winvalid-pch: every target reuses sc_port's precompiled LibTorch header, and a
# flag that made GCC refuse it would silently double the build), plus -ffp-contract=off: the model's fp32 emulations and the port's kernels must
# round every operation separately unless they call std::fma on purpose; and the debug level
# SC_DEBUG_LEVEL (it follows the build type's -g, and GCC takes the last -g level).
# With SC_SANITIZE=ON every target of ours (each calls sc_warnings) is also compiled and linked
# with AddressSanitizer and UndefinedBehaviorSanitizer, at -O1 (the sanitizers' own advice; it
# compiles a batch in half the time -O2 takes under them); LibTorch and the other libraries stay
# as they are.
function(sc_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra
    -Wno-unused-parameter -Winvalid-pch -ffp-contract=off>)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND NOT "${SC_DEBUG_LEVEL}" STREQUAL "")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-g${SC_DEBUG_LEVEL}>)
  endif()
  if(SC_SANITIZE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${SC_SANITIZE_FLAGS} -O1>)
    target_link_options(${target} PRIVATE ${SC_SANITIZE_FLAGS})
  endif()
endfunction()
