#!/usr/bin/env bash
# The thread-scaling table (issue #27 item 4): the edge against nginx at 1, 4 and 8 worker threads, each
# side with dedicated cores (server and load generator pinned apart by bench/lib.sh's pin_sets), for the
# static page, the status poll, the forwarded page and HTTP/2. Each figure is the same-round ratio the
# single benchmarks write (static_vs_nginx, status_vs_static, proxy_vs_nginx, h2_static_vs_nginx in
# bench/results/summary.json); this script runs them per thread count and writes the table to the
# "Thread scaling" section of bench/RESULTS.md and `thread_scaling` in summary.json.
#
#   bash bench/scaling/run.sh                      # THREADS_LIST="1 4 8"
#   THREADS_LIST="1 2" bash bench/scaling/run.sh   # what a 2-core box can show
#
# It needs 2 × the largest thread count in cores (server and wrk apart); on fewer, pin_sets shares them
# and the table says so. Needs what the single benchmarks need (nginx, wrk, h2load, taskset).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
THREADS_LIST="${THREADS_LIST:-1 4 8}"
CORES="$(nproc)"
SUMMARY="$ROOT/bench/results/summary.json"
rows=()
json_rows=()
for t in $THREADS_LIST; do
  conns=$((64 * t))
  export THREADS="$t" WRK_THREADS="$t" CONNS="$conns" ROUNDS="${ROUNDS:-3}"
  bash bench/edge-static/run.sh >/dev/null
  bash bench/waiting-room/run.sh >/dev/null
  bash bench/edge-proxy/run.sh >/dev/null
  bash bench/edge-tls/run.sh >/dev/null
  read -r s st p h < <(python3 - "$SUMMARY" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
def r(k):
    v = d.get(k)
    return v.get("ratio") if isinstance(v, dict) else v
print(r("static_vs_nginx"), r("status_vs_static"), r("proxy_vs_nginx"), r("h2_static_vs_nginx"))
PY
)
  dedicated=$([ "$CORES" -ge $((2 * t)) ] && echo yes || echo "no ($CORES cores)")
  rows+=("| $t | $conns | $s | $st | $p | $h | $dedicated |")
  json_rows+=("{\"threads\": $t, \"connections\": $conns, \"static_vs_nginx\": $s, \"status_vs_static\": $st, \"proxy_vs_nginx\": $p, \"h2_static_vs_nginx\": $h, \"dedicated_cores\": \"$dedicated\"}")
done
table="| threads | connections | static / nginx | status / static | forwarded / nginx | HTTP/2 / nginx | dedicated cores |
|---|---|---|---|---|---|---|
$(printf '%s\n' "${rows[@]}")"
echo "$table"
python3 - "$SUMMARY" "[$(IFS=,; echo "${json_rows[*]}")]" <<'PY'
import json, sys
path, rows = sys.argv[1], json.loads(sys.argv[2])
d = json.load(open(path))
d["thread_scaling"] = rows
open(path, "w").write(json.dumps(d, indent=2) + "\n")
PY
python3 - "$ROOT/bench/RESULTS.md" "$table" "$(uname -m), $CORES cores, $(date -u +%F)" "$THREADS_LIST" <<'PY'
import sys
path, table, machine, threads = sys.argv[1:]
text = open(path).read()
begin, end = "<!-- begin:scaling -->", "<!-- end:scaling -->"
body = f"""{begin}
## Thread scaling

Command: `THREADS_LIST="{threads}" bash bench/scaling/run.sh` ({machine}). Each cell is the single benchmark's
same-round ratio at that thread count (wrk with as many threads, 64 connections per thread; server and load
generator on disjoint cores where the machine has enough).

{table}
{end}"""
if begin in text and end in text:
    a, b = text.index(begin), text.index(end) + len(end)
    text = text[:a] + body + text[b:]
else:
    text = text.rstrip() + "\n" + body + "\n"
open(path, "w").write(text)
PY
