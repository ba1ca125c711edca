#!/bin/sh
# test_daemon_security.sh: TLS, mutual TLS, bearer tokens and tenants. A
# throwaway CA (and a second, rogue one) is made with openssl at test time.
# Under mutual TLS a client without a certificate, with one from the other
# CA, or speaking plaintext is refused; a missing or unknown token is
# UNAUTHENTICATED; tenants do not see each other's results (daemon_tls.py,
# Debian's Python grpcio over TLS); SIGHUP loads a new server certificate;
# a non-loopback listen address without TLS is refused unless
# --insecure-public 1.
. tests/integration/lib.sh

MLP=tests/ir/seed001_mlp.dir
T="timeout 60"
C=$TMP/certs
mkdir -p "$C"
# mkcert NAME CA SUBJECT-CN [SAN]: an EC key and a certificate signed by CA.
mkcert() {
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$C/$1.key" \
        -out "$C/$1.csr" -subj "/CN=$3" 2>/dev/null || return 1
    if [ -n "$4" ]; then printf 'subjectAltName=%s\n' "$4" >"$C/$1.ext"; else : >"$C/$1.ext"; fi
    openssl x509 -req -in "$C/$1.csr" -CA "$C/$2.pem" -CAkey "$C/$2.key" -CAcreateserial \
        -out "$C/$1.pem" -days 2 -extfile "$C/$1.ext" 2>/dev/null
}
for ca in ca rogue; do
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$C/$ca.key" -out "$C/$ca.pem" -days 2 -subj "/CN=distir test $ca" 2>/dev/null ||
        fail "make CA $ca"
done
mkcert server ca localhost "DNS:localhost,IP:127.0.0.1" || fail "server certificate"
mkcert client ca "distir client" || fail "client certificate"
mkcert stranger rogue "someone else" || fail "rogue client certificate"

ALICE=alice-secret-token-1; BOB=bob-secret-token-2; ROOT=root-secret-token-3
sha() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
cat >"$TMP/tokens" <<TOK
# tenant sha256(token) [admin]
alice $(sha $ALICE)
bob   $(sha $BOB)
root  $(sha $ROOT) admin
TOK
check "the token file holds no token" sh -c "! grep -q secret '$TMP/tokens'"

start_daemon tls --tls-cert "$C/server.pem" --tls-key "$C/server.key" \
    --tls-client-ca "$C/ca.pem" --tls-require-client-cert 1 --tokens "$TMP/tokens" ||
    { fail "daemon start with mutual TLS"; finish; }

sim() { $T "$DISTIR" simulate $MLP --hw a100-dgx --server "$ADDR" "$@" --json; }
sim >/dev/null 2>"$TMP/plain.err"
check "a plaintext client is refused" grep -q UNAVAILABLE "$TMP/plain.err"
sim --tls-ca "$C/ca.pem" --token $ALICE >/dev/null 2>"$TMP/nocert.err"
check "a TLS client without a certificate is refused" grep -q UNAVAILABLE "$TMP/nocert.err"
sim --tls-ca "$C/ca.pem" --tls-cert "$C/stranger.pem" --tls-key "$C/stranger.key" \
    --token $ALICE >/dev/null 2>"$TMP/rogue.err"
check "a client certificate from another CA is refused" grep -q UNAVAILABLE "$TMP/rogue.err"
M="--tls-ca $C/ca.pem --tls-cert $C/client.pem --tls-key $C/client.key"
sim $M >/dev/null 2>"$TMP/notoken.err"
check "mutual TLS without a token: UNAUTHENTICATED" grep -q "UNAUTHENTICATED: missing or unknown bearer token" "$TMP/notoken.err"
sim $M --token wrong >/dev/null 2>"$TMP/badtoken.err"
check "a wrong token: UNAUTHENTICATED" grep -q UNAUTHENTICATED "$TMP/badtoken.err"
DISTIR_TOKEN=$ROOT sim $M >"$TMP/ok.json" 2>"$TMP/ok.err"
check "mutual TLS with a token (from the environment) is answered" grep -q '"step_time_s"' "$TMP/ok.json"
"$DISTIR" simulate $MLP --hw a100-dgx --json >"$TMP/inproc.json"
strip_cache "$TMP/ok.json" >"$TMP/ok.stripped"
check "... bit for bit the in-process result" cmp -s "$TMP/ok.stripped" "$TMP/inproc.json"

"$DISTIR" convert $MLP -o "$TMP/mlp.pb" >/dev/null
/usr/bin/python3 tests/integration/daemon_tls.py "$ADDR" "$C/ca.pem" "$C/client.pem" \
    "$C/client.key" $ALICE $BOB $ROOT "$TMP/mlp.pb"
check "Python grpcio over mutual TLS: tenants and tokens (above)" [ $? -eq 0 ]

# Stored searches are per tenant too.
$T "$DISTIR" model gpt --layers 4 --hidden 48 --heads 6 --seq 8 --vocab 13 --batch 24 \
    -o "$TMP/gpt.pb" >/dev/null || fail "model gpt"
srch() { $T "$DISTIR" search "$TMP/gpt.pb" --devices 8 --top 3 --server "$ADDR" $M "$@" | head -n 1; }
srch --token $ALICE >"$TMP/s1.txt"
srch --token $ALICE >"$TMP/s2.txt"
srch --token $BOB >"$TMP/s3.txt"
check "alice's repeated search is answered from her stored one" grep -q "cache hit" "$TMP/s2.txt"
check "bob's identical search is not answered from alice's" sh -c "! grep -q 'cache hit' '$TMP/s3.txt'"
check "... but computed (a table)" grep -q "^space: " "$TMP/s3.txt"

# SIGHUP: a new server certificate for new connections.
serial() {
    openssl s_client -connect "$ADDR" -cert "$C/client.pem" -key "$C/client.key" \
        -CAfile "$C/ca.pem" </dev/null 2>/dev/null | openssl x509 -noout -serial
}
old=$(serial)
mkcert server2 ca localhost "DNS:localhost,IP:127.0.0.1" || fail "second server certificate"
cp "$C/server2.pem" "$C/server.pem"
cp "$C/server2.key" "$C/server.key"
kill -HUP "$PID"
i=0
while ! grep -q "event=tls_reloaded" "$TMP/tls.log" && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
new=$(serial)
check "SIGHUP loads the new certificate ($old -> $new)" [ -n "$new" ] && [ "$old" != "$new" ]
sim $M --token $BOB >"$TMP/after_hup.json" 2>/dev/null
check "calls still work after the reload" grep -q '"step_time_s"' "$TMP/after_hup.json"
stop_daemon
check "daemon exits 0" [ $? -eq 0 ]

# Without a client CA: TLS only (any client), tokens still required.
start_daemon tlsonly --tls-cert "$C/server.pem" --tls-key "$C/server.key" --tokens "$TMP/tokens" ||
    { fail "daemon start with TLS"; finish; }
sim --tls-ca "$C/ca.pem" --token $BOB >"$TMP/tlsonly.json" 2>/dev/null
check "TLS without client certificates: answered" grep -q '"step_time_s"' "$TMP/tlsonly.json"
stop_daemon

# Per-tenant limits: one simulation at a time each; bob is not held up by alice.
start_daemon limit --tls-cert "$C/server.pem" --tls-key "$C/server.key" --tokens "$TMP/tokens" \
    --tenant-max-jobs 1 --test-delay-ms 1500 || { fail "daemon start with --tenant-max-jobs"; finish; }
lim() { $T "$DISTIR" simulate $MLP --hw "a100-dgx:$1" --server "$ADDR" --tls-ca "$C/ca.pem" \
    --token "$2" --json; }
lim 2 $ALICE >"$TMP/l1.json" 2>"$TMP/l1.err" &
p1=$!
sleep 0.5
lim 3 $ALICE >"$TMP/l2.json" 2>"$TMP/l2.err"
lim 4 $BOB >"$TMP/l3.json" 2>"$TMP/l3.err"
wait $p1
check "alice's first simulation is answered" grep -q '"step_time_s"' "$TMP/l1.json"
check "her second one meanwhile: RESOURCE_EXHAUSTED naming the limit" \
    grep -q "RESOURCE_EXHAUSTED: tenant alice has 1 simulations queued or running (--tenant-max-jobs 1)" "$TMP/l2.err"
check "bob's meanwhile is answered" grep -q '"step_time_s"' "$TMP/l3.json"
lim 5 $ALICE >"$TMP/l4.json" 2>/dev/null
check "alice's next one after hers finished is answered" grep -q '"step_time_s"' "$TMP/l4.json"
stop_daemon

# Listening beyond loopback without TLS is refused, unless asked for.
"$DISTIRD" --listen 0.0.0.0:0 --db "$TMP/pub.db" >"$TMP/pub.out" 2>"$TMP/pub.err"
check "--listen 0.0.0.0 without TLS exits non-zero" [ $? -ne 0 ]
check "... saying why" grep -q "reachable from other machines and has no TLS" "$TMP/pub.err"
start_daemon public --listen 0.0.0.0:0 --insecure-public 1 || fail "--insecure-public 1 starts"
[ -n "$PID" ] && stop_daemon
"$DISTIRD" --listen 127.0.0.1:0 --db "$TMP/bad.db" --tokens "$TMP/nonexistent" \
    >/dev/null 2>"$TMP/badtok.err"
check "a missing token file is refused at start" grep -q "tokens" "$TMP/badtok.err"
finish
