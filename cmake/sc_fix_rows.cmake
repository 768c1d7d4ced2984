# The fix rows of the deviation table (sim/port/deviation.h) come from one place: the change table
# of docs/variants-and-mutants.md, between `<!-- change-table:begin -->` and
# `<!-- change-table:end -->`. Each row,
#
#   | `F7`, `pr5077` | F7 | #5077 | distopt-reshard-padding | merged after d8b71082 ... |
#
# gives the change's name (and an optional second name), the finding it fixes, Megatron's pull
# request (`#N`, or `none`), the name an earlier release gave the variant up to it (or `none`)
# and one line of doc. sc_fix_rows() turns them into an X-macro list,
#
#   SC_FIX_ROW(kF7, "F7", "F7", "#5077", "pr5077", "distopt-reshard-padding", "merged ...")
#
# whose first field is the enumerator the port reads (`behaviour.has(Deviation::kF7)`). A table
# it cannot read stops the configure step with the page's line and what is wrong.
#
# Script mode, for the tests of malformed tables:
#   cmake -DSC_FIX_TABLE=page.md -DSC_FIX_ROWS=out.inc -P cmake/sc_fix_rows.cmake

cmake_policy(VERSION 3.20)

# A markdown cell as a C string literal's contents.
function(sc_fix_rows_c_string text out)
  string(REPLACE "\\" "\\\\" text "${text}")
  string(REPLACE "\"" "\\\"" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# "F7" -> "kF7", "pr6982" -> "kPr6982".
function(sc_fix_rows_enumerator name out)
  string(SUBSTRING "${name}" 0 1 first)
  string(TOUPPER "${first}" first)
  string(SUBSTRING "${name}" 1 -1 rest)
  set(${out} "k${first}${rest}" PARENT_SCOPE)
endfunction()

# Fails the configure step at line `n` of `page`.
macro(sc_fix_rows_error page n what)
  message(FATAL_ERROR "${page}:${n}: change table: ${what}")
endmacro()

# One table row (its cells in `cells`, a list) as an SC_FIX_ROW line, appended to `out_var`.
# `seen` holds the names so far; the row's own go to `sc_fix_rows_names`.
function(sc_fix_rows_row page n cells seen out_var)
  list(LENGTH cells count)
  if(NOT count EQUAL 5)
    sc_fix_rows_error("${page}" ${n} "a row has 5 cells (change | fixes | Megatron PR | earlier name | what), this one ${count}")
  endif()
  list(GET cells 0 names)
  list(GET cells 1 finding)
  list(GET cells 2 pr)
  list(GET cells 3 earlier)
  list(GET cells 4 doc)
  if(NOT names MATCHES "^`([A-Za-z][A-Za-z0-9]*)`(, `([A-Za-z][A-Za-z0-9]*)`)?$")
    sc_fix_rows_error("${page}" ${n} "the change is `NAME` or `NAME`, `ALIAS` (letters and digits), not '${names}'")
  endif()
  set(name "${CMAKE_MATCH_1}")
  set(alias "${CMAKE_MATCH_3}")
  foreach(taken IN ITEMS ${name} ${alias})
    if(taken IN_LIST seen OR (alias STREQUAL name))
      sc_fix_rows_error("${page}" ${n} "the name ${taken} is given twice")
    endif()
  endforeach()
  if(pr STREQUAL "none")
    set(pr "")
  elseif(NOT pr MATCHES "^#[0-9]+$")
    sc_fix_rows_error("${page}" ${n} "the Megatron PR is #N or none, not '${pr}'")
  endif()
  if(earlier STREQUAL "none")
    set(earlier "")
  elseif(NOT earlier MATCHES "^`([a-z0-9-]+)`$")
    sc_fix_rows_error("${page}" ${n} "the earlier name is `name` or none, not '${earlier}'")
  else()
    set(earlier "${CMAKE_MATCH_1}")
  endif()
  if(finding STREQUAL "" OR doc STREQUAL "")
    sc_fix_rows_error("${page}" ${n} "${name} names no finding or has no doc")
  endif()
  set(sc_fix_rows_names ${name} ${alias} PARENT_SCOPE)
  sc_fix_rows_enumerator("${name}" flag)
  sc_fix_rows_c_string("${finding}" finding)
  sc_fix_rows_c_string("${doc}" doc)
  set(${out_var} "${${out_var}}SC_FIX_ROW(${flag}, \"${name}\", \"${finding}\", \"${pr}\", \"${alias}\", \"${earlier}\", \"${doc}\")\n" PARENT_SCOPE)
endfunction()

# Reads the change table of `page` and writes its rows to `out` (only when they changed, so an
# edit elsewhere on the page rebuilds nothing); in a project, the page becomes a configure
# dependency.
function(sc_fix_rows page out)
  file(READ "${page}" text)
  # Semicolons are CMake's list separator: carried through as a token no table holds.
  string(REPLACE ";" "@SC_SEMICOLON@" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(rows "")
  set(seen "")
  set(state "before")
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    if(line STREQUAL "<!-- change-table:begin -->")
      set(state "header")
    elseif(line STREQUAL "<!-- change-table:end -->")
      set(state "after")
    elseif(state STREQUAL "header" OR state STREQUAL "rule")
      # The header row and the `| --- |` rule.
      if(state STREQUAL "header")
        set(state "rule")
      else()
        set(state "rows")
      endif()
    elseif(state STREQUAL "rows")
      if(NOT line MATCHES "^\\| (.*) \\|$")
        sc_fix_rows_error("${page}" ${n} "a row starts with '| ' and ends with ' |'")
      endif()
      string(REPLACE " | " ";" cells "${CMAKE_MATCH_1}")
      sc_fix_rows_row("${page}" ${n} "${cells}" "${seen}" rows)
      list(APPEND seen ${sc_fix_rows_names})
    endif()
  endforeach()
  if(NOT state STREQUAL "after" OR rows STREQUAL "")
    message(FATAL_ERROR "${page}: no change table with rows between <!-- change-table:begin --> and <!-- change-table:end -->")
  endif()
  string(REPLACE "@SC_SEMICOLON@" ";" rows "${rows}")
  file(WRITE "${out}.new" "// Generated from the change table of docs/variants-and-mutants.md by\n// cmake/sc_fix_rows.cmake: edit the table, not this file.\n${rows}")
  configure_file("${out}.new" "${out}" COPYONLY)
  file(REMOVE "${out}.new")
  if(NOT CMAKE_SCRIPT_MODE_FILE)
    # An edit of the page configures again (and rebuilds only if the rows changed).
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${page}")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  sc_fix_rows("${SC_FIX_TABLE}" "${SC_FIX_ROWS}")
endif()
