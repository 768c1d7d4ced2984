# The measured seconds of the tests that take longest, one place for all of them: ctest -j starts
# the tests of higher COST first, and a fresh clone (CI) has no timings of its own yet, so without
# these a 300 s test can start last and run alone on one core at the end of its stage. Measured
# with ctest -j2 on two cores in a clean clone's .ci/run (2026-12-07; the sanitizer suites in
# build-asan, from the run before). A test not listed here has cost 0 and starts after these.
# Update a row when its test's time changes much.
set(SC_TEST_SECONDS
  # scripts/test's ordinary stage
  "RealCode.MegatronStyleTestsPassExactlyWithTheirPatch=340"
  "RealRanks.ResumesOnTheTreeWithEveryPatch=262"
  "RealCode.TheGatheredFormatsPropertyFindsF7F8AndF9OnTheirOwn=171"
  "RealCode.EachFindingsPatchAloneFixesItsCaseInTheRealCode=140"
  "DistributedCheckpoint.GatheredFormatsOnTheTreeWithEveryPatch=75"
  "Review.ARefactorThatChangesNoBehaviourHasNothingNewlyFailing=88"
  "RealCode.WithTheSeedFixTheConstructionAndLeafPropertiesPass=53"
  "RealRanks.EachCollectivePatchFailsTheRealRanksProperty=55"
  "Recall.G06.StillCaughtByItsProperty=50"
  "RealCodeDiff.UpstreamAgainstThePristineTree=68"
  "RealRanks.TheReshardingPropertyFindsF7AndHoldsWithItsPatch=37"
  "Registry/HoldsWhereItShould.*=33"
  # the sanitizer stage
  "CliEveryOption.*=212"
  "CliConvention.*=50")

# COST of every test of SC_TEST_SECONDS: now for the tests this directory added, and in a
# TEST_INCLUDE_FILES script for those listed when ctest runs (the suites, the discovered tests),
# which ctest reads before the directory's own add_test lines.
function(sc_write_test_costs file)
  set(script "")
  foreach(row IN LISTS SC_TEST_SECONDS)
    string(REGEX MATCH "^(.*)=([0-9]+)$" _ "${row}")
    if(TEST "${CMAKE_MATCH_1}")
      set_tests_properties("${CMAKE_MATCH_1}" PROPERTIES COST ${CMAKE_MATCH_2})
      continue()
    endif()
    # ctest's set_tests_properties passes over a name it does not know (a stage's build may
    # lack the test): ctest scripts have no if(TEST).
    string(APPEND script
      "set_tests_properties([=[${CMAKE_MATCH_1}]=] PROPERTIES COST ${CMAKE_MATCH_2})\n")
  endforeach()
  file(WRITE "${file}" "${script}")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${file}")
endfunction()
