#!/bin/sh
# test_daemon_cache_integrity.sh: a stored result changed in place (one byte
# flipped behind the daemon's back) is detected on read and never served: the
# call is answered by simulating again (a miss, bit-identical to the
# in-process result), the log says so, the next call is a hit again; the same
# through a worker's read-only connection (--inline-decode-kb 0). A damaged
# database at start is moved aside, loudly, and the daemon serves with a
# fresh one.
. tests/integration/lib.sh

MLP=tests/ir/seed001_mlp.dir
T="timeout 60"

# flip DB: flips one byte in the middle of every stored result. The daemon is
# stopped meanwhile: a running one answers a repeated request from its
# in-memory reply memo without reading the row.
cat >"$TMP/flip.py" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
n = 0
for rowid, blob in db.execute("SELECT id, result FROM results").fetchall():
    b = bytearray(blob)
    b[len(b) // 2] ^= 0x01
    db.execute("UPDATE results SET result = ? WHERE id = ?", (bytes(b), rowid))
    n += 1
db.commit()
print(n)
PY
flip() { /usr/bin/python3 "$TMP/flip.py" "$1"; }

# call NAME EXPECTED_STATUS: a remote simulate whose cache status and bytes are checked.
call() {
    $T "$DISTIR" simulate $MLP --hw a100-dgx --server "$ADDR" --json >"$TMP/$1.json"
    check "$1: simulate succeeds" [ $? -eq 0 ]
    check "$1: cache $2" grep -q "^{\"cache\":\"$2\"" "$TMP/$1.json"
    strip_cache "$TMP/$1.json" >"$TMP/$1.stripped"
    check "$1: result equals the in-process one bit for bit" cmp -s "$TMP/$1.stripped" \
        "$TMP/inproc.json"
}

$T "$DISTIR" simulate $MLP --hw a100-dgx --json >"$TMP/inproc.json" || fail "in-process simulate"

start_daemon main || { fail "daemon start"; finish; }
call first miss
call second hit
stop_daemon
check "one stored result flipped" [ "$(flip "$TMP/main.db")" = 1 ]
start_daemon main || { fail "daemon restart"; finish; }
call after_flip miss
check "log: cache_corrupt_row" grep -q "event=cache_corrupt_row" "$TMP/main.log"
call repaired hit
stop_daemon
check "daemon exits 0" [ $? -eq 0 ]

# Every request decoded on a worker: its read-only connection finds the bad row.
check "one stored result flipped again" [ "$(flip "$TMP/main.db")" = 1 ]
start_daemon main --inline-decode-kb 0 || { fail "daemon start (worker decode)"; finish; }
call worker_after_flip miss
check "log: cache_corrupt_row from a worker" \
    [ "$(grep -c "event=cache_corrupt_row" "$TMP/main.log")" -ge 2 ]
call worker_repaired hit
stop_daemon
check "daemon exits 0 (worker decode)" [ $? -eq 0 ]
check "database integrity ok" integrity_ok "$TMP/main.db"

# A damaged database file at start: set aside, a fresh one, serving.
rm -f "$TMP/main.db-wal" "$TMP/main.db-shm"
head -c 8192 /dev/urandom >"$TMP/main.db"
cp "$TMP/main.db" "$TMP/garbage"
start_daemon main || { fail "daemon start on a damaged database"; finish; }
check "log: cache_damaged" grep -q "event=cache_damaged" "$TMP/main.log"
check "log: cache_set_aside" grep -q "event=cache_set_aside" "$TMP/main.log"
aside=$(ls "$TMP"/main.db.damaged-* 2>/dev/null | head -n 1)
check "the damaged file is kept beside it" cmp -s "$aside" "$TMP/garbage"
call fresh miss
call fresh_again hit
stop_daemon
check "daemon exits 0 (fresh database)" [ $? -eq 0 ]
finish
