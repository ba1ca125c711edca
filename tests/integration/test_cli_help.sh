#!/bin/sh
# test_cli_help.sh: every command that `distir --help` lists answers -h and
# --help with its usage on standard output ("usage: distir CMD ..."), nothing
# on standard error and exit status 0; the listed commands all exist (none
# answers "not available"), and an unknown command is a usage error (exit 2).
# The command list is read from `distir --help`, so a new command is covered
# as soon as it is in client/commands.h. DISTIR_BUILD is the build directory.
. "$(dirname "$0")/lib.sh"

if [ ! -x "$DISTIR" ]; then
    echo "test_cli_help: $DISTIR is not built" >&2
    exit 1
fi

"$DISTIR" --help >"$TMP/all.out" 2>"$TMP/all.err"
check "distir --help exits 0" [ $? = 0 ]
check "distir --help writes nothing to stderr" [ ! -s "$TMP/all.err" ]
check "distir --help starts with its usage line" \
    grep -q '^usage: distir COMMAND' "$TMP/all.out"
# The command lines: two spaces, the name, spaces, the summary.
cmds=$(sed -n '/^commands:$/,/^$/s/^  \([a-z][a-z-]*\)  *.*/\1/p' "$TMP/all.out")
n=$(echo "$cmds" | grep -c .)
check "distir --help lists at least the 11 built commands (found $n)" [ "$n" -ge 11 ]
for c in print verify hash convert import model run transform simulate hw info; do
    check "distir --help lists '$c'" sh -c 'echo "$1" | grep -qx "$2"' sh "$cmds" "$c"
done

for c in $cmds; do
    for h in --help -h; do
        "$DISTIR" "$c" "$h" >"$TMP/$c.out" 2>"$TMP/$c.err"
        rc=$?
        check "distir $c $h exits 0 (got $rc)" [ "$rc" = 0 ]
        check "distir $c $h prints 'usage: distir $c' on stdout" \
            grep -q "^usage: distir $c\\b" "$TMP/$c.out"
        check "distir $c $h writes nothing to stderr" [ ! -s "$TMP/$c.err" ]
    done
    # Without arguments a command either works or asks for them; it is never a stub.
    "$DISTIR" "$c" </dev/null >/dev/null 2>"$TMP/$c.bare"
    check "distir $c is implemented" sh -c '! grep -q "not available" "$1"' sh "$TMP/$c.bare"
done

# Options after the file and in sub-commands ask for help too.
quiet() { "$@" >/dev/null 2>&1; }
check "distir model gpt --help exits 0" quiet "$DISTIR" model gpt --help
check "distir simulate FILE --help exits 0" quiet "$DISTIR" simulate x.dir --help
"$DISTIR" frobnicate >/dev/null 2>&1
check "an unknown command exits 2" [ $? = 2 ]
"$DISTIR" verify >/dev/null 2>"$TMP/verify.err"
check "a command without its arguments exits 2" [ $? = 2 ]
check "... with its usage on stderr" grep -q '^usage: distir verify' "$TMP/verify.err"

exit "$failures"
