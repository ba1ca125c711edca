#!/bin/sh
# test_ci_baselines.sh: distir baseline / compare / history, the CI
# regression queries, against a daemon (--server) and on a database file
# (--db), with the same checks: an unchanged model compares equal (exit 0);
# one more layer regresses step time (exit 1, the message names the metric
# and the delta); wider activations (a longer sequence) regress memory;
# thresholds hold at their edges; history lists every baseline in order;
# the JUnit file is XML with one testcase per metric; the SVG is XML with a
# path and axis labels; baselines of one project are invisible to another;
# --kernels fused gives a baseline that fused compares equal to and eager
# kernels regress, with a warning naming the settings that differ.
. tests/integration/lib.sh

T="timeout 60"
gen() { $T "$DISTIR" model gpt --layers "$1" --hidden 64 --heads 4 --seq "$2" --vocab 64 \
    --batch 8 -o "$TMP/$3.pb" >/dev/null || fail "model $3"; }
gen 2 16 base
gen 3 16 deeper
gen 2 32 wider
xml_ok() { /usr/bin/python3 -c 'import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])' "$1"; }
count() { /usr/bin/python3 -c 'import sys, xml.etree.ElementTree as E
print(sum(1 for e in E.parse(sys.argv[1]).iter() if e.tag.split("}")[-1] == sys.argv[2]))' "$1" "$2"; }
jget() { /usr/bin/python3 -c 'import sys, json
d = json.load(open(sys.argv[1])); m = [x for x in d["metrics"] if x["name"] == sys.argv[2]][0]
print(repr(m[sys.argv[3]]) if isinstance(m[sys.argv[3]], float) else m[sys.argv[3]])' "$1" "$2" "$3"; }

run_checks() {
    W=$1 # "--server ADDR" or "--db PATH"
    tag=$2
    $T "$DISTIR" baseline set train "$TMP/base.pb" --label c1 $W >"$TMP/$tag.set1" ||
        fail "$tag: baseline set"
    check "$tag: baseline set reports it" grep -q "baseline 'train' of project 'default' set to c1" "$TMP/$tag.set1"
    check "$tag: ... the first of its history" grep -q ", 1 in its history)" "$TMP/$tag.set1"
    $T "$DISTIR" compare "$TMP/base.pb" --baseline train $W --junit "$TMP/$tag.same.xml" \
        >"$TMP/$tag.same" 2>&1
    check "$tag: the unchanged model compares equal (exit 0)" [ $? -eq 0 ]
    check "$tag: ... both metrics ok" [ "$(grep -c ' ok ' "$TMP/$tag.same")" -eq 2 ]
    check "$tag: its JUnit file is XML with one testcase per metric and no failure" \
        sh -c "xml_ok() { :; }; [ \"\$(/usr/bin/python3 -c 'import sys, xml.etree.ElementTree as E
r = E.parse(sys.argv[1]).getroot(); print(len(list(r.iter(\"testcase\"))), len(list(r.iter(\"failure\"))))' '$TMP/$tag.same.xml')\" = '2 0' ]"
    $T "$DISTIR" compare "$TMP/deeper.pb" --baseline train $W --json --junit "$TMP/$tag.deep.xml" \
        >"$TMP/$tag.deep.json" 2>"$TMP/$tag.deep.err"
    check "$tag: one more layer: exit 1" [ $? -eq 1 ]
    check "$tag: ... the message names step time and the delta" \
        grep -q "regression: step time grew by +[0-9.e-]* s (+[0-9.]*%)" "$TMP/$tag.deep.err"
    check "$tag: ... JUnit: XML, 2 testcases, a failure for step_time_s" \
        sh -c "/usr/bin/python3 -c 'import sys, xml.etree.ElementTree as E
r = E.parse(sys.argv[1]).getroot()
cases = {c.get(\"name\"): c.find(\"failure\") is not None for c in r.iter(\"testcase\")}
sys.exit(not (len(cases) == 2 and cases[\"step_time_s\"]))' '$TMP/$tag.deep.xml'"
    $T "$DISTIR" compare "$TMP/wider.pb" --baseline train $W --json --max-time-regression 100% \
        >"$TMP/$tag.wide.json" 2>"$TMP/$tag.wide.err"
    check "$tag: wider activations regress memory (exit 1)" [ $? -eq 1 ]
    check "$tag: ... named: peak memory" grep -q "regression: peak memory grew by" "$TMP/$tag.wide.err"
    check "$tag: ... and step time is within its 100% allowance" \
        [ "$(jget "$TMP/$tag.wide.json" step_time_s regressed)" = False ]
    check "$tag: ... the explanation: activations grew" /usr/bin/python3 -c 'import sys, json
sys.exit(not json.load(open(sys.argv[1]))["explanation"]["memory_by_class"]["activations"] > 0)' "$TMP/$tag.wide.json"
    # Edges: an allowance equal to the growth passes, one a hair below fails.
    dm=$(jget "$TMP/$tag.deep.json" peak_memory_bytes delta | sed 's/\.0$//')
    dt=$(jget "$TMP/$tag.deep.json" step_time_s delta)
    $T "$DISTIR" compare "$TMP/deeper.pb" --baseline train $W --max-time-regression "${dt}s" \
        --max-memory-regression "${dm}B" >/dev/null 2>&1
    check "$tag: allowances equal to the growth (${dt}s, ${dm}B) pass" [ $? -eq 0 ]
    $T "$DISTIR" compare "$TMP/deeper.pb" --baseline train $W --max-time-regression "${dt}s" \
        --max-memory-regression "$((dm - 1))B" >/dev/null 2>&1
    check "$tag: one byte less fails" [ $? -eq 1 ]
    lt=$(/usr/bin/python3 -c "print(repr($dt * (1 - 1e-9)))")
    $T "$DISTIR" compare "$TMP/deeper.pb" --baseline train $W --max-time-regression "${lt}s" \
        --max-memory-regression "${dm}B" >/dev/null 2>&1
    check "$tag: a time allowance a hair below the growth fails" [ $? -eq 1 ]
    # History: every set, in order.
    $T "$DISTIR" baseline set train "$TMP/deeper.pb" --label c2 $W >/dev/null || fail "$tag: set c2"
    $T "$DISTIR" baseline set train "$TMP/base.pb" --label c3 $W >"$TMP/$tag.set3" || fail "$tag: set c3"
    check "$tag: the third set is the third of its history" grep -q ", 3 in its history)" "$TMP/$tag.set3"
    $T "$DISTIR" history train $W --json >"$TMP/$tag.hist.json"
    check "$tag: history lists c1, c2, c3 in order" [ "$(/usr/bin/python3 -c 'import sys, json
print(",".join(e["label"] for e in json.load(open(sys.argv[1]))["entries"]))' "$TMP/$tag.hist.json")" = c1,c2,c3 ]
    $T "$DISTIR" compare "$TMP/base.pb" --baseline train $W >/dev/null 2>&1
    check "$tag: the latest baseline (c3) is the one compared" [ $? -eq 0 ]
    $T "$DISTIR" history train $W --metric peak_memory --svg "$TMP/$tag.svg" >"$TMP/$tag.hist.txt"
    check "$tag: history text has 3 rows" [ "$(grep -c '^[0-9]' "$TMP/$tag.hist.txt")" -eq 3 ]
    check "$tag: the SVG is XML with a path and axis labels" /usr/bin/python3 -c 'import sys, xml.etree.ElementTree as E
r = E.parse(sys.argv[1]).getroot(); ns = "{http://www.w3.org/2000/svg}"
paths = [p for p in r.iter(ns + "path") if p.get("d", "").startswith("M")]
labels = [t.text for t in r.iter(ns + "text") if t.get("class") == "axis-label"]
marks = [c for c in r.iter(ns + "circle") if c.get("class") == "change"]
sys.exit(not (len(paths) == 1 and len(labels) == 2 and len(marks) == 2))' "$TMP/$tag.svg"
    # Projects: another project sees nothing.
    $T "$DISTIR" compare "$TMP/base.pb" --baseline train --project other $W >/dev/null \
        2>"$TMP/$tag.other.err"
    check "$tag: another project does not see the baseline" grep -q "no baseline 'train' in project 'other'" "$TMP/$tag.other.err"
    $T "$DISTIR" history train --project other $W >/dev/null 2>&1
    check "$tag: ... nor its history" [ $? -ne 0 ]
    $T "$DISTIR" compare "$TMP/deeper.pb" --against "$TMP/base.pb" $W >/dev/null 2>&1
    check "$tag: two modules compared without a baseline (exit 1: deeper is slower)" [ $? -eq 1 ]
    $T "$DISTIR" compare "$TMP/base.pb" $W >/dev/null 2>&1
    check "$tag: compare without --baseline or --against is a usage error (exit 2)" [ $? -eq 2 ]
    # Kernels: a baseline with fused kernels, compared fused (equal) and eager (slower).
    $T "$DISTIR" baseline set fused "$TMP/base.pb" --kernels fused $W >/dev/null ||
        fail "$tag: baseline set --kernels fused"
    $T "$DISTIR" compare "$TMP/base.pb" --baseline fused --kernels fused $W >/dev/null 2>&1
    check "$tag: --kernels fused against a fused baseline compares equal (exit 0)" [ $? -eq 0 ]
    $T "$DISTIR" compare "$TMP/base.pb" --baseline fused $W --junit "$TMP/$tag.eager.xml" \
        >"$TMP/$tag.eager.out" 2>"$TMP/$tag.eager.err"
    check "$tag: ... eager kernels against it regress step time (exit 1)" [ $? -eq 1 ]
    check "$tag: ... named" grep -q "regression: step time grew by" "$TMP/$tag.eager.err"
    check "$tag: ... with a warning that the kernels differ, not the module" \
        grep -q "warning: the results were simulated with different settings.*kernels 'fused' (baseline) -> 'eager'" \
        "$TMP/$tag.eager.out"
    $T "$DISTIR" compare "$TMP/base.pb" --baseline fused --json --dp 2 $W >"$TMP/$tag.sd.json" \
        2>"$TMP/$tag.sd.err"
    check "$tag: ... --json lists the settings that differ (strategy, kernels) and warns on stderr" \
        sh -c "[ \"\$(/usr/bin/python3 -c 'import sys, json
print(\",\".join(d[\"setting\"] for d in json.load(open(sys.argv[1]))[\"settings_differ\"]))' '$TMP/$tag.sd.json')\" = strategy,kernels ] &&
            grep -q 'warning: the results were simulated with different settings' '$TMP/$tag.sd.err'"
    check "$tag: ... and the unchanged model against its baseline warns of nothing" \
        sh -c "! grep -q warning '$TMP/$tag.same'"
    check "$tag: ... the JUnit file has the warning (system-err), the unchanged one none" \
        sh -c "/usr/bin/python3 -c 'import sys, xml.etree.ElementTree as E
e = E.parse(sys.argv[1]).getroot().find(\"testsuite\").find(\"system-err\")
s = E.parse(sys.argv[2]).getroot().find(\"testsuite\").find(\"system-err\")
sys.exit(not (e is not None and \"kernels\" in e.text and s is None))' '$TMP/$tag.eager.xml' '$TMP/$tag.same.xml'"
    $T "$DISTIR" compare "$TMP/base.pb" --baseline fused --kernels jit $W >/dev/null 2>&1
    check "$tag: --kernels jit is a usage error (exit 2)" [ $? -eq 2 ]
}

run_checks "--db $TMP/local.db" db
start_daemon ci || { fail "daemon start"; finish; }
run_checks "--server $ADDR" server
stop_daemon
check "daemon exits 0" [ $? -eq 0 ]
# One key: the same module, hardware and strategy get the same cache key from --db and
# from the daemon (so a result can move between them).
kd=$(sed -n 's/.*(key \([0-9a-f]*\)\.\.\..*/\1/p' "$TMP/db.set1")
ks=$(sed -n 's/.*(key \([0-9a-f]*\)\.\.\..*/\1/p' "$TMP/server.set1")
check "--db and the daemon give the same cache key ($kd)" [ -n "$kd" ] && [ "$kd" = "$ks" ]
# One format: the daemon's baselines read from its database file directly.
$T "$DISTIR" history train --db "$TMP/ci.db" --json >"$TMP/same.json"
check "the daemon's database read with --db has its history" [ "$(/usr/bin/python3 -c 'import sys, json
print(",".join(e["label"] for e in json.load(open(sys.argv[1]))["entries"]))' "$TMP/same.json")" = c1,c2,c3 ]
"$DISTIR" history train >/dev/null 2>&1
check "history without --server or --db is a usage error" [ $? -eq 2 ]
finish
