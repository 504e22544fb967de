#!/usr/bin/env bash
# Waiting room: status polls of queued visitors vs the static detail page (same edge, same run),
# status polls at position 1 vs position 1,000,000, and edge memory per queued person.
# Writes the "Waiting room" section of its page in bench/results/ (bench/RESULTS.md sums them up) and the `status_vs_static`,
# `status_depth` and `edge_bytes_per_queued` keys of bench/results/summary.json (others kept).
#
#   bash bench/waiting-room/run.sh          # defaults: THREADS=1 CONNS=64 SECONDS_=10 ROUNDS=5 QUEUED=1000000
#
# Needs: cargo, wrk, curl, python3. Loopback only.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/bench/lib.sh"
load_settings 5
QUEUED="${QUEUED:-1000000}"

command -v wrk >/dev/null || { echo "missing wrk (apt-get install -y wrk)" >&2; exit 1; }
cd "$ROOT"
release_edge
bench_workdir
pin_sets "$THREADS"   # server on SERVER_CPUS, wrk on LOAD_CPUS (disjoint when the machine allows)

EDGE_PORT="$(free_port)"; ADMIN_PORT="$(free_port)"
mkdir -p "$WORK/site"
cp "$ROOT/static/site/index.html" "$WORK/site/index.html"
cat > "$WORK/wicket.toml" <<CONF
[edge]
listen = "127.0.0.1:$EDGE_PORT"
admin-listen = "127.0.0.1:$ADMIN_PORT"
admin-token = "bench-admin-token-0123456789"
secret = "bench-edge-secret-0123456789"
threads = $THREADS
site-dir = "site"
user-header = "x-user-id"
shutdown-grace-seconds = 1
[edge.anomaly]
device-max-users = 0

[tokens]
issuer = "wicket"
signing-kid = "hs-1"
[[tokens.keys]]
kid = "hs-1"
alg = "HS256"
secret = "bench-hs-secret-0123456789abcdef0123"

[[rooms]]
id = "r1"
event = "ev-1"
target = "/buy/ev-1"
protected = ["/buy/ev-1"]
release = { mode = "fixed", rate = 0.0 }
CONF

RUST_LOG=error taskset -c "$SERVER_CPUS" "$WICKET" serve --config "$WORK/wicket.toml" &
EDGE_PID=$!
PIDS+=($EDGE_PID)
for _ in $(seq 1 100); do curl -sf -o /dev/null "http://127.0.0.1:$EDGE_PORT/" && break; sleep 0.1; done
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$EDGE_PID/status"; }

# A queued visitor's cookies (device + ticket) → the wrk header for its status polls.
visitor() { # name → "Cookie: ..." header. Anonymous: the place belongs to the device (a ticket names its
  # owner, and wrk's polls carry only the cookies).
  local jar="$WORK/jar-$1"
  curl -s -c "$jar" -H 'accept: application/json' "http://127.0.0.1:$EDGE_PORT/queue/r1" > "$WORK/join-$1.json"
  echo "Cookie: $(awk '$6 ~ /^wicket_/ {printf "%s=%s; ", $6, $7}' "$jar")"
}

run_wrk() { # url [header] → "rps p99_ms"
  local url="$1"; shift
  taskset -c "$LOAD_CPUS" wrk -t"$WRK_THREADS" -c"$CONNS" -d"${SECONDS_}s" --latency "$@" "$url" | wrk_figures
}

# Warm up, then the idle baseline.
taskset -c "$LOAD_CPUS" wrk -t1 -c8 -d2s "http://127.0.0.1:$EDGE_PORT/" >/dev/null
FRONT="$(visitor front)"
taskset -c "$LOAD_CPUS" wrk -t1 -c8 -d2s -H "$FRONT" "http://127.0.0.1:$EDGE_PORT/queue/r1/status" >/dev/null
sleep 1
IDLE_KB="$(rss_kb)"

# Queue QUEUED more people (each a new user: one place each), in 10 s rounds until there are enough.
issued() { curl -s -H 'authorization: Bearer bench-admin-token-0123456789' "http://127.0.0.1:$ADMIN_PORT/admin/rooms/r1/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["issued"])'; }
JOIN_START=$(date +%s.%N)
CHUNK=0
while [ "$(issued)" -le "$QUEUED" ]; do
  CHUNK=$((CHUNK + 1))
  taskset -c "$LOAD_CPUS" wrk -t"$WRK_THREADS" -c"$CONNS" -d10s -s "$ROOT/bench/waiting-room/join.lua" "http://127.0.0.1:$EDGE_PORT" -- "c$CHUNK" > "$WORK/join.txt" 2>&1 || { cat "$WORK/join.txt"; exit 1; }
  echo "joined so far: $(issued)"
done
JOIN_END=$(date +%s.%N)
BACK="$(visitor back)"
python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); print("front:", v["position"], v["state"]); v=json.load(open(sys.argv[2])); print("back:", v["position"], v["state"])' "$WORK/join-front.json" "$WORK/join-back.json"
for who in "$FRONT" "$BACK"; do
  code="$(curl -s -o /dev/null -w '%{http_code}' -H "$who" "http://127.0.0.1:$EDGE_PORT/queue/r1/status")"
  [ "$code" = 200 ] || { echo "a queued visitor's status poll answered $code" >&2; exit 1; }
done
sleep 2
FULL_KB="$(rss_kb)"
STATS="$(curl -s -H 'authorization: Bearer bench-admin-token-0123456789' "http://127.0.0.1:$ADMIN_PORT/admin/rooms/r1/stats")"

RESULTS="$WORK/results.txt"
: > "$RESULTS"
for r in $(seq 1 "$ROUNDS"); do
  echo "static $(run_wrk "http://127.0.0.1:$EDGE_PORT/")" >> "$RESULTS"
  echo "status_front $(run_wrk "http://127.0.0.1:$EDGE_PORT/queue/r1/status" -H "$FRONT")" >> "$RESULTS"
  echo "status_back $(run_wrk "http://127.0.0.1:$EDGE_PORT/queue/r1/status" -H "$BACK")" >> "$RESULTS"
  echo "edge_json $(run_wrk "http://127.0.0.1:$EDGE_PORT/wicket/challenge" -H "$FRONT")" >> "$RESULTS"
  tail -4 "$RESULTS" | sed "s/^/round $r: /"
done

export THREADS CONNS SECONDS_ ROUNDS WRK_THREADS QUEUED RESULTS ROOT IDLE_KB FULL_KB STATS JOIN_START JOIN_END SERVER_CPUS LOAD_CPUS
cp "$WORK/join-front.json" "$WORK/join-back.json" /tmp/ 2>/dev/null || true
export FRONT_JSON="$WORK/join-front.json" BACK_JSON="$WORK/join-back.json"
python3 - <<'PY'
import json, os, statistics, datetime, re, sys
rows = [l.split() for l in open(os.environ["RESULTS"]) if l.strip()]
def med(name, i):
    return statistics.median(float(r[i]) for r in rows if r[0] == name)
st_rps, f_rps, b_rps = med("static", 1), med("status_front", 1), med("status_back", 1)
st_p99, f_p99, b_p99 = med("static", 2), med("status_front", 2), med("status_back", 2)
j_rps, j_p99 = med("edge_json", 1), med("edge_json", 2)
stats = json.loads(os.environ["STATS"])
front = json.load(open(os.environ["FRONT_JSON"]))
back = json.load(open(os.environ["BACK_JSON"]))
queued = int(stats["issued"]) - 1  # everyone but the front visitor
idle_kb, full_kb = int(os.environ["IDLE_KB"]), int(os.environ["FULL_KB"])
per = (full_kb - idle_kb) * 1024 / max(queued, 1)
join_s = float(os.environ["JOIN_END"]) - float(os.environ["JOIN_START"])
threads, conns, secs, rounds = (int(os.environ[k]) for k in ("THREADS", "CONNS", "SECONDS_", "ROUNDS"))
wrk_threads, root = int(os.environ["WRK_THREADS"]), os.environ["ROOT"]
cpu = "unknown"
for line in open("/proc/cpuinfo"):
    if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip(); break
today = datetime.date.today().isoformat()
# Ratios within a round (the same minute of a shared, noisy machine), then the median over rounds.
by_round = [rows[i:i + 4] for i in range(0, len(rows), 4)]
def in_round(r, name):
    return float(next(x for x in r if x[0] == name)[1])
ratio = statistics.median(min(in_round(r, "status_front"), in_round(r, "status_back")) / in_round(r, "static") for r in by_round)
depth = statistics.median(in_round(r, "status_back") / in_round(r, "status_front") for r in by_round)
sys.path.insert(0, os.path.join(root, "bench"))
import results
summary = {}
common = {"worker_threads": threads, "connections": conns, "seconds": secs, "rounds": rounds, "wrk_threads": wrk_threads, "date": today}
summary["status_vs_static"] = {"ratio": round(ratio, 3), "static_rps": round(st_rps), "status_rps": round(min(f_rps, b_rps)),
    "static_p99_ms": round(st_p99, 3), "status_p99_ms": round(max(f_p99, b_p99), 3), **common}
summary["status_depth"] = {"ratio": round(depth, 3), "position_front": front["position"], "position_back": back["position"],
    "front_rps": round(f_rps), "back_rps": round(b_rps), **common}
summary["edge_bytes_per_queued"] = round(per, 1)
summary["edge_memory_queued"] = {"queued": queued, "idle_rss_kb": idle_kb, "queued_rss_kb": full_kb,
    "bytes_per_queued": round(per, 1), "joins_per_second": round(queued / join_s), "date": today}
results.update_summary(root, summary)

per_round = "\n".join(f"| {i // 4 + 1} | {r[0]} | {float(r[1]):.0f} | {float(r[2]):.2f} ms |" for i, r in enumerate(rows))
section = f"""<!-- begin:waiting-room -->
## Waiting room: status polls and memory per queued person

Command: `bash bench/waiting-room/run.sh` (THREADS={threads} CONNS={conns} SECONDS_={secs} ROUNDS={rounds} QUEUED={os.environ['QUEUED']})

Machine: {os.cpu_count()} cores ({cpu}), {today}. One edge (release build, {threads} worker threads,
embedded room state, room `r1` with release rate 0 so everyone stays queued). `wrk -t{wrk_threads}
-c{conns} -d{secs}s` over loopback keep-alive, the edge on CPU {os.environ['SERVER_CPUS']} and wrk on CPU {os.environ['LOAD_CPUS']} (`taskset`); rounds alternate
static / status at the front / status at the back, figures are medians. A status poll carries the
visitor's device cookie and signed ticket: the edge's fast path (edge/src/front/http1.rs) verifies both
MACs, applies the blocklist and the device-users rule, reads two counters and writes the status
JSON (no per-visitor lookup: the ticket carries the place).

| request | requests/s | P99 |
|---|---|---|
| static detail page `/` ({'%.1f' % (len(open(os.path.join(root, 'static/site/index.html'), 'rb').read()) / 1024)} KiB) | {st_rps:.0f} | {st_p99:.2f} ms |
| status, position {front['position']} | {f_rps:.0f} | {f_p99:.2f} ms |
| status, position {back['position']:,} | {b_rps:.0f} | {b_p99:.2f} ms |
| reference: `/wicket/challenge` (a small JSON answer through Pingora's full proxy path) | {j_rps:.0f} | {j_p99:.2f} ms |

- **Status / static: {ratio:.2f}x** (goal ≥ 0.8x; per round the slower of the two status rows over static, median of the rounds). {"Met" if ratio >= 0.8 else "Not met"}: status polls skip
  Pingora's per-request machinery the way static files do; an answer through the full proxy path (the
  reference row) runs at {j_rps / st_rps:.2f}x of static on this edge.
- **Status at position {back['position']:,} / at position {front['position']}: {depth:.2f}x** (goal: within 10%; median of the per-round ratios).
- **Edge memory: {per:.1f} bytes per queued person** above the idle RSS (goal ≤ 100): {queued:,} people
  queued (each a distinct user id, joined over HTTP at {queued / join_s:,.0f} joins/s), RSS
  {idle_kb / 1024:.1f} MiB idle → {full_kb / 1024:.1f} MiB queued. What a queued person costs is one
  identity → place entry (so a rejoin keeps the place); the queue itself is two counters.

| round | request | requests/s | P99 |
|---|---|---|---|
{per_round}
<!-- end:waiting-room -->"""
results.write_section(root, "waiting-room", section)
print(f"status/static {ratio:.2f}x, depth {depth:.2f}x, {per:.1f} B per queued person")
PY
