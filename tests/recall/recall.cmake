# Recall on Megatron's history (scripts/recall, docs/recall.md): one kill test per corpus patch
# that docs/recall.json lists as caught. Each runs only the properties that caught the patch, on
# its tree with the bug (the snapshot, the seed fix, the findings' patches that leave it applying,
# the patch), with the recorded seed and budget and without shrinking, and fails when none of them
# fails any more. The control runs that make each catch attributable are the recall run's own
# (scripts/recall without --kill), not repeated here. Cost: one verify-megatron start (unpack,
# patch, worker start-up, 3 to 6 s on two cores) and the cases up to the recorded failing one.
set(SC_RECALL_CORPUS "${PROJECT_SOURCE_DIR}/../shared/megatron/history"
  CACHE PATH "Megatron's fixed bugs, re-introduced as patches (the recall corpus)")
set(recall_table "${PROJECT_SOURCE_DIR}/docs/recall.json")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${recall_table}")
# The harness's own logic (verdicts, attribution, bad input), with its runs stood in for.
add_test(NAME Recall.TheHarnessJudgesAndRefusesAsDocumented
  COMMAND ${SC_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/recall_test.py)
set_tests_properties(Recall.TheHarnessJudgesAndRefusesAsDocumented PROPERTIES LABELS unit)
if(EXISTS "${SC_RECALL_CORPUS}" AND EXISTS "${recall_table}")
  file(READ "${recall_table}" recall_json)
  string(JSON count LENGTH "${recall_json}" patches)
  math(EXPR last "${count} - 1")
  foreach(k RANGE ${last})
    string(JSON id GET "${recall_json}" patches ${k} id)
    string(JSON verdict GET "${recall_json}" patches ${k} verdict)
    if(NOT verdict STREQUAL "caught")
      continue()
    endif()
    add_test(NAME Recall.${id}.StillCaughtByItsProperty
      COMMAND ${PROJECT_SOURCE_DIR}/scripts/recall --kill --expected ${recall_table}
              --corpus ${SC_RECALL_CORPUS} --only ${id} --work ${CMAKE_BINARY_DIR}/recall/${id})
    set_tests_properties(Recall.${id}.StillCaughtByItsProperty PROPERTIES TIMEOUT 600
      ENVIRONMENT "SC_BUILD_DIR=${CMAKE_BINARY_DIR};PYTHONWARNINGS=ignore" LABELS kill)
  endforeach()
endif()
