# The change table of docs/variants-and-mutants.md is the source of the port's fix rows
# (cmake/sc_fix_rows.cmake). This runs the reader on the page, on the page with one more fix, and
# on malformed tables, each of which must stop it with the page's line and what is wrong.
#   cmake -DSRC=<source dir> -DWORK=<scratch dir> -P tests/fix_rows_test.cmake
cmake_policy(VERSION 3.20)
set(page "${SRC}/docs/variants-and-mutants.md")
file(READ "${page}" text)
file(MAKE_DIRECTORY "${WORK}")
set(failures 0)

# Runs the reader on `content`; sets `rc`, `err` and `rows` (what it wrote).
function(read_table name content)
  file(WRITE "${WORK}/${name}.md" "${content}")
  file(REMOVE "${WORK}/${name}.inc")
  execute_process(
    COMMAND ${CMAKE_COMMAND} -DSC_FIX_TABLE=${WORK}/${name}.md -DSC_FIX_ROWS=${WORK}/${name}.inc
            -P ${SRC}/cmake/sc_fix_rows.cmake
    RESULT_VARIABLE result ERROR_VARIABLE error OUTPUT_QUIET)
  set(rows "")
  if(EXISTS "${WORK}/${name}.inc")
    file(READ "${WORK}/${name}.inc" rows)
  endif()
  set(rc "${result}" PARENT_SCOPE)
  # CMake wraps a message's lines: the words are looked for in one line.
  string(REGEX REPLACE "[ \n]+" " " error "${error}")
  set(err "${error}" PARENT_SCOPE)
  set(rows "${rows}" PARENT_SCOPE)
endfunction()

macro(fail what)
  message(SEND_ERROR "${what}")
  math(EXPR failures "${failures} + 1")
endmacro()

# The page as it is: every fix, F5's semicolons and the alias of F7 kept.
read_table(page "${text}")
string(FIND "${rows}" "SC_FIX_ROW(kF7, \"F7\", \"F7\", \"#5077\", \"pr5077\", \"distopt-reshard-padding\"" f7)
string(FIND "${rows}" "no step; the FusedAdam" f5)
if(NOT rc EQUAL 0 OR f7 EQUAL -1 OR f5 EQUAL -1)
  fail("the page's own table: rc ${rc}, ${err}\n${rows}")
endif()

# A new fix is one row (a name no finding will take).
string(REPLACE "<!-- change-table:end -->"
       "| `Fnew` | Fnew | none | none | a \"quoted\" fix |\n<!-- change-table:end -->"
       added "${text}")
read_table(added "${added}")
string(FIND "${rows}" "SC_FIX_ROW(kFnew, \"Fnew\", \"Fnew\", \"\", \"\", \"\", \"a \\\"quoted\\\" fix\")" fnew)
if(NOT rc EQUAL 0 OR fnew EQUAL -1)
  fail("one more row: rc ${rc}, ${err}\n${rows}")
endif()

# Malformed tables: each line's replacement, and the words the error must hold.
string(REGEX MATCH "\n[^\n]*`F12` \\| F12 [^\n]*\n" f12_row "${text}")
string(STRIP "${f12_row}" f12_row)
set(cases
  "four-cells|| `F12` | F12 | none | clipping |" "5 cells"
  "dashed-name|| `F-12` | F12 | none | none | clipping |" "NAME"
  "bare-pr|| `F12` | F12 | 5077 | none | clipping |" "#N or none"
  "twice|| `F11` | F12 | none | none | clipping |" "given twice"
  "no-doc|| `F12` | F12 | none | none |  |" "no doc"
  "no-pipes|`F12` F12 none none clipping" "starts with")
list(LENGTH cases count)
math(EXPR last "${count} - 1")
foreach(i RANGE 0 ${last} 2)
  list(GET cases ${i} spec)
  math(EXPR j "${i} + 1")
  list(GET cases ${j} words)
  string(FIND "${spec}" "|" bar)
  string(SUBSTRING "${spec}" 0 ${bar} name)
  math(EXPR bar "${bar} + 1")
  string(SUBSTRING "${spec}" ${bar} -1 line)
  string(REPLACE "${f12_row}" "${line}" bad "${text}")
  read_table(${name} "${bad}")
  string(FIND "${err}" "${words}" has_words)
  string(REGEX MATCH "/${name}\\.md:[0-9]+: change table" has_line "${err}")
  if(rc EQUAL 0 OR has_words EQUAL -1 OR has_line STREQUAL "")
    fail("${name}: want a stop naming the line and '${words}'; rc ${rc}: ${err}")
  endif()
endforeach()

# No table at all.
string(REPLACE "<!-- change-table:begin -->" "" missing "${text}")
read_table(missing "${missing}")
string(FIND "${err}" "no change table" has_words)
if(rc EQUAL 0 OR has_words EQUAL -1)
  fail("a page without the table: rc ${rc}: ${err}")
endif()

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} check(s) failed")
endif()
message(STATUS "fix rows: the page, one more row and 7 malformed tables read as expected")
