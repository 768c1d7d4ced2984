# Run at build time (POST_BUILD) by sc_add_test: lists the suites of a GoogleTest executable and
# writes one ctest test per suite, `Suite.*`, into OUT. Variables: EXE, OUT, FILTER (a
# --gtest_filter for the listing, may be empty), LABEL, TIMEOUT.
set(filter_args "")
if(NOT "${FILTER}" STREQUAL "")
  set(filter_args "--gtest_filter=${FILTER}")
endif()
execute_process(COMMAND "${EXE}" --gtest_list_tests ${filter_args}
  OUTPUT_VARIABLE listing RESULT_VARIABLE status TIMEOUT 60)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${EXE} --gtest_list_tests failed (${status}): ${listing}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(script "")
foreach(line IN LISTS lines)
  # A suite line starts in column one and ends its name with '.', a comment may follow.
  if(line MATCHES "^([^ #][^ ]*)\\.( .*)?$")
    set(suite "${CMAKE_MATCH_1}")
    string(APPEND script
      "add_test([=[${suite}.*]=] \"${EXE}\" [=[--gtest_filter=${suite}.*]=])\n"
      "set_tests_properties([=[${suite}.*]=] PROPERTIES LABELS ${LABEL} TIMEOUT ${TIMEOUT})\n")
  endif()
endforeach()
file(WRITE "${OUT}" "${script}")
