#!/usr/bin/env bash
# `make test`'s pytest run in two lanes at once: most of a test's time is spent waiting on the
# processes it drives (API server, nodes, plugins), so two lanes fill the two cores that one
# leaves half idle. Lane 1: unit, integration and packaging tests (its output goes to
# build/test-lane-1.log and is printed when both lanes are done); lane 2: e2e and reliability
# (printed as it runs). Each lane lists its skips and its 25 slowest tests; the run fails if
# either lane fails. Arguments go to both lanes' pytest (e.g. -x, -k EXPR).
set -uo pipefail
cd "$(dirname "$0")/.."
pytest=${PYTEST:-.venv/bin/pytest}
mkdir -p build
lane1=build/test-lane-1.log
started=$(date +%s)
"$pytest" -q -rs --durations=25 -p no:cacheprovider tests/unit tests/integration tests/packaging "$@" >"$lane1" 2>&1 &
pid=$!
"$pytest" -q -rs --durations=25 tests/e2e tests/reliability "$@"
rc2=$?
wait "$pid"
rc1=$?
echo
echo "================ lane 1: unit, integration, packaging (exit $rc1; full log $lane1) ================"
cat "$lane1"
echo "================ both lanes done in $(( $(date +%s) - started )) s (lane 1 exit $rc1, lane 2 exit $rc2) ================"
[ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ]
