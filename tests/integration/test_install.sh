#!/bin/sh
# test_install.sh: `make install DESTDIR=... PREFIX=/usr/local` puts distir,
# distird, both man pages, the systemd unit, a sample config, the
# documentation and the Python client in place; the man pages render with
# `man -l` without warnings; the installed programs (distir finding its RPC
# client in PREFIX/lib/distir) and the installed Python
# package work. And deploy/Containerfile's runtime stage names packages that
# provide (with their dependencies) every shared library the binaries load.
. tests/integration/lib.sh

mode=$(basename "$B")
D=$TMP/root
make --no-print-directory MODE="$mode" install DESTDIR="$D" PREFIX=/usr/local >"$TMP/install.log" 2>&1
check "make install exits 0" [ $? -eq 0 ]
pydir=$(/usr/bin/python3 -c 'import sys; print("lib/python%d.%d/dist-packages" % sys.version_info[:2])')
for f in bin/distir bin/distird lib/distir/distir-rpc.so share/man/man1/distir.1 share/man/man8/distird.8 \
    lib/systemd/system/distird.service share/doc/distir/distird.conf share/doc/distir/daemon.md \
    share/doc/distir/ci.md "$pydir/distir/__init__.py" "$pydir/distir/client.py" \
    "$pydir/distir/distir_pb2.py"; do
    check "installed: /usr/local/$f" [ -s "$D/usr/local/$f" ]
done
check "the programs are executable" [ -x "$D/usr/local/bin/distir" ] && [ -x "$D/usr/local/bin/distird" ]
for page in share/man/man1/distir.1 share/man/man8/distird.8; do
    MANWIDTH=80 man --warnings -l "$D/usr/local/$page" >"$TMP/page.txt" 2>"$TMP/page.err"
    check "man -l renders $page" grep -q "^NAME" "$TMP/page.txt"
    check "... without warnings" [ ! -s "$TMP/page.err" ]
    check "... with its synopsis and see-also" sh -c "grep -q '^SYNOPSIS' '$TMP/page.txt' && grep -q '^SEE ALSO' '$TMP/page.txt'"
done
check "the installed distir runs" sh -c "'$D/usr/local/bin/distir' --version | grep -q '^distir '"
check "the installed distird runs" sh -c "'$D/usr/local/bin/distird' --help | grep -q 'usage: distird'"
start_daemon inst || { fail "daemon start"; finish; }
check "the installed distir talks to a daemon (its RPC client found from its own place)" \
    sh -c "'$D/usr/local/bin/distir' info --server '$ADDR' | grep -q version"
stop_daemon
check "the installed unit starts the installed distird" \
    grep -q '^ExecStart=/usr/local/bin/distird ' "$D/usr/local/lib/systemd/system/distird.service"
check "the installed Python client imports" env PYTHONPATH="$D/usr/local/$pydir" \
    /usr/bin/python3 -c 'import distir; distir.Client; distir.distir_pb2 if hasattr(distir, "distir_pb2") else None'

# The container's runtime stage: every library the binaries load comes from a listed package
# or one of its dependencies (installed here, so dpkg knows them).
runtime=$(sed -n '/^FROM debian:12$/,$p' deploy/Containerfile | tr '\\\n' '  ' |
    sed -n 's/.*apt-get install -y --no-install-recommends \([^&]*\)&&.*/\1/p')
check "the runtime stage lists packages ($runtime)" [ -n "$runtime" ]
closure=$(/usr/bin/python3 - $runtime <<'PY'
import subprocess, sys
seen, todo = set(), list(sys.argv[1:])
while todo:
    p = todo.pop()
    if p in seen:
        continue
    seen.add(p)
    out = subprocess.run(["dpkg-query", "-W", "-f=${Depends},${Pre-Depends}", p],
                         capture_output=True, text=True).stdout
    for alt in out.split(","):
        name = alt.split("|")[0].strip().split(" ")[0].split(":")[0]
        if name:
            todo.append(name)
print(" ".join(sorted(seen)))
PY
)
missing=
for bin in "$B/distird" "$B/distir" "$B/distir-rpc.so"; do
    for lib in $(ldd "$bin" | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p'); do
        pkg=$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null | head -n 1 | cut -d: -f1)
        case $pkg in libc6 | libgcc-s1 | libstdc++6 | "") continue ;; esac
        case " $closure " in *" $pkg "*) ;; *) missing="$missing $pkg" ;; esac
    done
done
case $mode in asan*) missing= ;; esac # the sanitizer runtime is not for containers
check "the runtime stage provides every library the binaries load${missing:+ (missing:$missing)}" [ -z "$missing" ]
finish
