#!/bin/sh
# test_cli_rpc_lazy.sh: distir links no gRPC; its RPC client (distir-rpc.so)
# is opened only by a command with --server. A local simulate works with the
# library unreachable; a --server command then fails with a message saying
# what it could not load; DISTIR_RPC_LIB points at it elsewhere.
. tests/integration/lib.sh

MLP=tests/ir/seed001_mlp.dir
check "distir does not link libgrpc" sh -c "! ldd '$DISTIR' | grep -q libgrpc"
check "distir-rpc.so is beside it and links libgrpc" sh -c "ldd '$B/distir-rpc.so' | grep -q libgrpc"
mkdir -p "$TMP/bin"
cp "$DISTIR" "$TMP/bin/distir" # alone: no distir-rpc.so next to it
"$TMP/bin/distir" simulate $MLP --hw a100-dgx --json >"$TMP/local.json"
check "a local simulate runs without the RPC library" grep -q '"step_time_s"' "$TMP/local.json"
start_daemon lazy || { fail "daemon start"; finish; }
"$TMP/bin/distir" simulate $MLP --hw a100-dgx --server "$ADDR" >/dev/null 2>"$TMP/noso.err"
check "... --server without it fails (exit 1)" [ $? -eq 1 ]
check "... saying what it could not load" grep -q "cannot load the RPC client distir-rpc.so" "$TMP/noso.err"
DISTIR_RPC_LIB="$ROOT/$B/distir-rpc.so" "$TMP/bin/distir" simulate $MLP --hw a100-dgx \
    --server "$ADDR" --json >"$TMP/remote.json"
check "DISTIR_RPC_LIB finds it elsewhere" grep -q '"cache"' "$TMP/remote.json"
stop_daemon
finish
