# lib.sh: shared helpers for the daemon integration tests (sourced by
# tests/integration/test_*.sh; POSIX sh). DISTIR_BUILD names the build
# directory. Each test prints "ok - ..." or "FAIL - ..." per check and exits
# with the number of failures (0: passed). Daemons run on 127.0.0.1:0 with a
# database and log under a temporary directory that is removed at exit.

B=${DISTIR_BUILD:-build/release}
DISTIRD=$B/distird
DISTIR=$B/distir
ROOT=$(pwd)
TMP=$(mktemp -d /tmp/distir-it.XXXXXX)
failures=0
PID=
ADDR=

# ASan builds: LSan reports only our leaks; gRPC's own at-exit allocations
# are listed in tests/lsan.supp. Harmless in other builds.
LSAN_OPTIONS="suppressions=$ROOT/tests/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export LSAN_OPTIONS

cleanup() {
    if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
        kill -KILL "$PID" 2>/dev/null
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT

ok() { echo "ok - $*"; }
fail() {
    echo "FAIL - $*"
    failures=$((failures + 1))
}
# check "description" command...: runs the command, reports ok or FAIL.
check() {
    desc=$1
    shift
    if "$@"; then ok "$desc"; else fail "$desc"; fi
}

# start_daemon NAME [flags]: starts distird with database $TMP/NAME.db and log
# $TMP/NAME.log, waits for its "distird listening on" line, sets PID and ADDR.
start_daemon() {
    name=$1
    shift
    # The background shell truncates the file only when it gets to run:
    # remove it first so that an earlier run's address is never read.
    rm -f "$TMP/$name.out"
    "$DISTIRD" --listen 127.0.0.1:0 --db "$TMP/$name.db" --log-file "$TMP/$name.log" "$@" \
        >"$TMP/$name.out" 2>"$TMP/$name.err" &
    PID=$!
    ADDR=
    i=0
    while [ $i -lt 200 ]; do
        ADDR=$(sed -n 's/^distird listening on //p' "$TMP/$name.out" 2>/dev/null)
        [ -n "$ADDR" ] && return 0
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.05
        i=$((i + 1))
    done
    echo "distird did not start:"
    cat "$TMP/$name.err" "$TMP/$name.log" 2>/dev/null
    return 1
}

# stop_daemon: SIGTERM, wait (at most 30 s); returns distird's exit status.
stop_daemon() {
    kill -TERM "$PID"
    i=0
    while kill -0 "$PID" 2>/dev/null && [ $i -lt 600 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    wait "$PID"
    rc=$?
    PID=
    return $rc
}

# The result JSON without the daemon's cache fields.
strip_cache() {
    sed 's/^{"cache":"[a-z]*","cache_key":"[0-9a-f]*",/{/' "$1"
}

# wait_log FILE SECONDS PATTERN...: waits (polling every 50 ms, at most SECONDS) until
# FILE has a line matching each extended regex PATTERN; returns 0 once it has.
wait_log() {
    _wl_file=$1
    _wl_tries=$(($2 * 20))
    shift 2
    _wl_n=0
    while [ $_wl_n -lt $_wl_tries ]; do
        _wl_all=1
        for _wl_pat in "$@"; do
            grep -Eq "$_wl_pat" "$_wl_file" 2>/dev/null || { _wl_all=0; break; }
        done
        [ $_wl_all = 1 ] && return 0
        sleep 0.05
        _wl_n=$((_wl_n + 1))
    done
    return 1
}

integrity_ok() {
    [ "$(sqlite3 "$1" 'PRAGMA integrity_check')" = ok ]
}

finish() {
    if [ "$failures" -ne 0 ]; then
        echo "$failures check(s) failed; daemon logs:"
        for f in "$TMP"/*.log "$TMP"/*.err; do
            [ -s "$f" ] && { echo "--- $f"; tail -n 20 "$f"; }
        done
        exit 1
    fi
    exit 0
}
