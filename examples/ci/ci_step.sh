#!/bin/sh
# ci_step.sh: a complete CI step for a model repository. It exports the model
# from PyTorch to ONNX, then either records it as the baseline (on the main
# branch) or compares it with the baseline (on a merge request), writes a
# JUnit file the CI system displays, prints a GitHub/GitLab-style error line,
# and fails the job on a regression of the step time (over 2%) or the peak
# memory (over 5%).
#
#   ci_step.sh set|check WORKDIR [--label COMMIT] [--hidden N] [--layers N]
#              [--server ADDR | --db PATH]
#
# With neither --server nor --db it uses WORKDIR/distir.db. DISTIR is the
# distir binary (default: distir on PATH), PYTHON Debian's python3.
set -u
DISTIR=${DISTIR:-distir}
PYTHON=${PYTHON:-/usr/bin/python3}
here=$(dirname "$0")
mode=${1:-}
work=${2:-}
[ "$mode" = set ] || [ "$mode" = check ] || { echo "usage: ci_step.sh set|check WORKDIR ..." >&2; exit 2; }
[ -n "$work" ] || { echo "usage: ci_step.sh set|check WORKDIR ..." >&2; exit 2; }
shift 2
label=${CI_COMMIT_SHA:-${GITHUB_SHA:-local}}
where=
model_args=
while [ $# -gt 0 ]; do
    case $1 in
    --label) label=$2; shift 2 ;;
    --hidden | --layers) model_args="$model_args $1 $2"; shift 2 ;;
    --server | --db) where="$1 $2"; shift 2 ;;
    *) echo "ci_step.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
mkdir -p "$work"
[ -n "$where" ] || where="--db $work/distir.db"

# 1. Export the model.
# shellcheck disable=SC2086
"$PYTHON" "$here/export_model.py" "$work/model.onnx" $model_args || {
    echo "::error title=distir::cannot export the model to ONNX"
    exit 1
}

# 2. Record or compare.
if [ "$mode" = set ]; then
    # shellcheck disable=SC2086
    "$DISTIR" baseline set train-step "$work/model.onnx" --hw a100-dgx --label "$label" $where
    exit $?
fi
# shellcheck disable=SC2086
"$DISTIR" compare "$work/model.onnx" --baseline train-step --hw a100-dgx \
    --max-time-regression 2% --max-memory-regression 5% \
    --junit "$work/distir-junit.xml" $where 2>"$work/distir.err"
rc=$?
cat "$work/distir.err" >&2
if [ $rc -eq 1 ]; then
    # One annotation per regressed metric (GitHub Actions and GitLab read this form).
    sed -n 's/^distir: regression: \(.*\)$/::error title=distir regression::\1/p' "$work/distir.err"
fi
exit $rc
