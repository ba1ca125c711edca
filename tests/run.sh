#!/bin/sh
# run.sh BUILD_DIR: runs every test binary and fuzz replay in BUILD_DIR and
# prints one closing line "N passed, N failed". Each cmocka binary prints its
# own summary as it goes. Exit status is non-zero when anything failed.
# The binaries run are those of the sources in tests/ and fuzz/ (a stale
# binary left in BUILD_DIR by a renamed source is not run; a missing one fails).
B=${1:-build/release}
passed=0
failed=0
failures=""
log=$(mktemp)
for src in tests/test_*.c; do
    name=$(basename "$src" .c)
    t=$B/tests/$name
    echo "== $name"
    if [ ! -x "$t" ]; then echo "$t: not built" >"$log"; ok=0;
    elif "$t" >"$log" 2>&1; then ok=1; else ok=0; fi
    cat "$log"
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    passed=$((passed + p))
    failed=$((failed + f))
    if [ "$ok" = 0 ]; then
        failures="$failures $name"
        [ "$f" = 0 ] && failed=$((failed + 1))
    fi
done
for src in fuzz/fuzz_*.c; do
    name=$(basename "$src" .c)
    z=$B/fuzz/$name
    corpus=fuzz/corpus/$name
    echo "== $name (replay $corpus)"
    if "$z" "$corpus"; then passed=$((passed + 1)); else failed=$((failed + 1)); failures="$failures $name"; fi
done
for s in tests/integration/test_*.sh; do
    [ -f "$s" ] || continue
    name=$(basename "$s" .sh)
    echo "== $name"
    if DISTIR_BUILD="$B" sh "$s"; then passed=$((passed + 1)); else failed=$((failed + 1)); failures="$failures $name"; fi
done
rm -f "$log"
[ -n "$failures" ] && echo "failing:$failures"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
