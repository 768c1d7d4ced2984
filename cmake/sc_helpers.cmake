# sc_add_test(NAME <name> SRCS <files...> DEPS <targets...>)
# One GoogleTest executable, discovered test by test; RC_PARAMS reaches it through the
# environment, so ctest forwards RapidCheck's seed and reproduce strings.
function(sc_add_test)
  cmake_parse_arguments(T "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${T_NAME} ${T_SRCS})
  target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} GTest::gtest GTest::gtest_main)
  sc_warnings(${T_NAME})
  gtest_discover_tests(${T_NAME} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 600)
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
