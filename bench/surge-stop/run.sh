#!/usr/bin/env bash
# A surge with the core process stopped mid-sale (issue #39): `wicket-bench surge <scenario> --dry-run`
# (nothing in bench/results/ is written: a faulted run is not the scenario's figure), its core stopped
# with SIGSTOP when the bench's clock reads AT seconds and continued with SIGCONT FOR seconds later.
# Prints the run's JSON summary (held_through_seconds, admitted_sold_out_share, seat_order, oversold, ...)
# and keeps the whole output, with the edge's release log (each step's size and the controller's
# decision: reason, budget, occupancy, exits, pressure), in OUT.
#
#   bash bench/surge-stop/run.sh [scenario=stararena] [AT=14] [FOR=1] [OUT=/tmp/surge-stop.out]
#
# Uses the release binaries (SKIP_BUILD=1 to use them as they are). Figures of 2026-12-05:
# bench/results/surge-stararena.md, sections "After a cut, the release resumes at the rate it carried" and
# "A stall's cost is the budget's regrowth" (tried-quiet-holders.patch beside this script: two ways of counting
# held sessions out of the controller's occupancy, measured there and not kept; `git apply` it on main).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
SCENARIO="${1:-stararena}"
AT="${2:-14}"
FOR="${3:-1}"
OUT="${4:-/tmp/surge-stop.out}"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
if [ -z "${SKIP_BUILD:-}" ]; then
  cargo build -q --release -p wicket-edge -p wicket-core -p wicket-bench
fi
BIN="$TARGET/release"
WICKET_BENCH_EDGE_LOG="${WICKET_BENCH_EDGE_LOG:-warn,wicket_edge::room::release=debug}" \
  "$BIN/wicket-bench" surge "$SCENARIO" --dry-run >"$OUT" 2>&1 &
BENCH=$!
trap 'kill "$BENCH" 2>/dev/null || true' EXIT
# The bench prints "<N>s done" once a second of its clock.
until grep -q " ${AT}s done" "$OUT" 2>/dev/null; do
  kill -0 "$BENCH" 2>/dev/null || { echo "the bench ended before ${AT} s:" >&2; tail -20 "$OUT" >&2; exit 1; }
  sleep 0.1
done
CORE="$(pgrep -P "$BENCH" -f wicket-core | head -1)"
[ -n "$CORE" ] || { echo "no wicket-core under the bench (pid $BENCH)" >&2; exit 1; }
kill -STOP "$CORE"
echo "core $CORE stopped at $(date +%T.%N) for ${FOR} s" >&2
sleep "$FOR"
kill -CONT "$CORE"
wait "$BENCH"
trap - EXIT
sed -n '/^{/,/^}/p' "$OUT" | grep -E '^([{}]|\s)' | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(json.dumps({k: d.get(k) for k in ("scenario","admitted","held_through_seconds","sellout_seconds","admitted_sold_out_share","seat_order","oversold","double_sold","longest_stall_seconds")}, indent=2))'
