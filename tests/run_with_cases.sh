#!/bin/sh
# tests/run_with_cases.sh CASES COMMAND...: runs COMMAND with RC_PARAMS="max_success=N seed=S",
# N = CASES / SC_CASES_DIVISOR (1 unless set: scripts/test --quick sets 5), S the seed of the
# caller's RC_PARAMS if it has one; a caller's reproduce= string is passed on as it is. ctest runs
# the real-code property runs, whose case counts are their own, through it, so that they follow
# the quick run and replay from the commit's seed.
cases=$(($1 / ${SC_CASES_DIVISOR:-1}))
shift
case "${RC_PARAMS:-}" in *reproduce=*) exec "$@" ;; esac  # a replay runs as given
seed=$(printf '%s\n' "${RC_PARAMS:-}" | grep -o 'seed=[0-9]*' || true)
RC_PARAMS="max_success=$cases${seed:+ $seed}" exec "$@"
