#!/usr/bin/env bash
# Queued fans holding a connection: the room's event stream (server-sent events) against status
# polling, on one edge (one worker thread, CPU 0; the clients on CPU 1).
# - memory per open event stream, over HTTP and HTTPS (TLS 1.3): the edge's Pss (smaps_rollup)
#   with N fans joined, then with each holding its stream open (its first frame read);
# - fan-out: the room paused through the admin API, the time until each open stream has its
#   `paused` frame: P50 / P99 / max over N streams (the kernel's receive time of each segment,
#   SO_TIMESTAMPNS, so the Python client's own pace does not count);
# - the edge's CPU while N streams stay open and nothing changes (each stream looks at its status
#   every second), in µs per stream per second;
# - poll-only: memory per fan that polled its status once and keeps the keep-alive connection
#   (HTTP and HTTPS), and the edge's CPU per status poll (wrk, 64 connections, one fan's cookies).
# N defaults to the open-file limit (`ulimit -n`) less 1000.
# Writes the "Event streams and polling" section of bench/results/sse-fanout.md and the sse_* / poll_* keys
# of bench/results/summary.json.
#
#   bash bench/sse-fanout/run.sh            # N=(ulimit -n) - 1000
#   WICKET_BIN=path/to/wicket N=500 bash bench/sse-fanout/run.sh   # another build (e.g. one from before a change)
#   NOFILE=101000 bash bench/sse-fanout/run.sh   # 100,000 fans per row (as root; clients over 127.0.0.2-9)
#
# Needs: cargo, wrk, h2load, curl, openssl, python3. Loopback only (clients spread over 127.0.0.2-9 for ports).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/bench/lib.sh"
# NOFILE=<n>: raise the open-file limit first (root: the hard limit too; at most fs.nr_open).
if [ -n "${NOFILE:-}" ]; then ulimit -Hn "$NOFILE" 2>/dev/null || true; ulimit -n "$NOFILE"; fi
LIMIT="$(ulimit -n)"
N="${N:-$((LIMIT - 1000))}"
[ "$LIMIT" != unlimited ] && [ "$N" -gt $((LIMIT - 1000)) ] && N=$((LIMIT - 1000))
export PATH="$PATH:/usr/sbin"
for bin in wrk h2load curl openssl python3; do command -v "$bin" >/dev/null || { echo "missing $bin" >&2; exit 1; }; done
cd "$ROOT"
release_edge
WICKET="${WICKET_BIN:-$WICKET}"
bench_workdir
pin_sets 1
EDGE_PORT="$(free_port)"; ADMIN_PORT="$(free_port)"; EDGE_TLS="$(free_port)"
TOKEN="bench-admin-token-0123456789"
mkdir -p "$WORK/site" "$WORK/pki"
cp "$ROOT/static/site/index.html" "$WORK/site/index.html"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$WORK/pki/site.key" \
  -out "$WORK/pki/site.pem" -subj /CN=localhost -addext "subjectAltName=DNS:localhost" -days 2 2>/dev/null
cat > "$WORK/wicket.toml" <<CONF
[edge]
listen = "127.0.0.1:$EDGE_PORT"
admin-listen = "127.0.0.1:$ADMIN_PORT"
admin-token = "$TOKEN"
secret = "bench-edge-secret-0123456789"
threads = 1
site-dir = "site"
keepalive-seconds = 300
shutdown-grace-seconds = 1
# The clients come from eight loopback addresses: no cap per address here (the default is 1000).
max-event-streams-per-ip = 10000000
# Streams held for as long as the rows measure them (the default ends each after 120 s).
event-stream-seconds = 600
[edge.anomaly]
device-max-users = 0
[edge.tls]
listen = "127.0.0.1:$EDGE_TLS"
[[edge.tls.certs]]
cert-file = "pki/site.pem"
key-file = "pki/site.key"

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

# The same edge with every request through Pingora's proxy (how event streams were served before
# the HTTP/1.1 door served them itself, issue #40).
sed 's/^threads = 1$/threads = 1\nfast-path = false/' "$WORK/wicket.toml" > "$WORK/wicket-proxy.toml"
# A room that releases, slowly (every place's turn hours away): its streams look at their status at
# the poll interval, not every second.
sed 's/rate = 0.0 }/rate = 0.001 }/' "$WORK/wicket.toml" > "$WORK/wicket-far.toml"

pss_kib() { awk '/^Pss:/ {print $2}' "/proc/$1/smaps_rollup"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TCK="$(getconf CLK_TCK)"

start_edge() {
  (cd "$WORK" && RUST_LOG=error exec taskset -c "$SERVER_CPUS" "$WICKET" serve --config "${1:-wicket.toml}") &
  EDGE_PID=$!
  PIDS+=("$EDGE_PID")
  for _ in $(seq 1 100); do curl -sf -o /dev/null "http://127.0.0.1:$EDGE_PORT/" && break; sleep 0.1; done
  for _ in $(seq 1 50); do curl -sf -o /dev/null "http://127.0.0.1:$EDGE_PORT/"; curl -sfk -o /dev/null "https://localhost:$EDGE_TLS/"; done
}
stop_edge() { kill "$EDGE_PID"; wait "$EDGE_PID" 2>/dev/null || true; }

# row MODE SCHEME [CONFIG] → "mode scheme n bytes_per joined_kib open_kib idle_cpu_us fanout_json"
row() {
  local mode="$1" scheme="$2" port="$EDGE_PORT" ca=()
  [ "$scheme" = https ] && { port="$EDGE_TLS"; ca=("$WORK/pki/site.pem"); }
  start_edge "${3:-wicket.toml}"
  coproc FANS { taskset -c "$LOAD_CPUS" python3 "$ROOT/bench/sse-fanout/sse.py" "$port" "$N" "$ADMIN_PORT" "$TOKEN" "$mode" "${ca[@]}"; }
  local line joined opened before after c0 c1 idle=0 fan="{}"
  read -r line <&"${FANS[0]}"; joined="${line#joined }"
  sleep 1; before="$(pss_kib "$EDGE_PID")"
  echo >&"${FANS[1]}"
  read -r line <&"${FANS[0]}"; opened="${line#open }"
  sleep 2; after="$(pss_kib "$EDGE_PID")"
  if [ "$mode" = events ]; then
    c0="$(cpu_ticks "$EDGE_PID")"; sleep 10; c1="$(cpu_ticks "$EDGE_PID")"
    idle="$(python3 -c "print(round(($c1 - $c0) / $TCK * 1e6 / 10 / $opened, 2))")"
    echo pause >&"${FANS[1]}"
    read -r fan <&"${FANS[0]}"
  elif [ "$scheme" = http ]; then
    # The N fans poll at the rate the room tells them, for POLL_SECONDS: the edge's CPU per fan
    # per second, and the pollers' figures (polls answered, latency, how late each went out).
    c0="$(cpu_ticks "$EDGE_PID")"
    echo "run ${POLL_SECONDS:-20}" >&"${FANS[1]}"
    read -r fan <&"${FANS[0]}"
    c1="$(cpu_ticks "$EDGE_PID")"
    idle="$(python3 -c "print(round(($c1 - $c0) / $TCK * 1e6 / ${POLL_SECONDS:-20} / $opened, 2))")"
  fi
  echo >&"${FANS[1]}"
  wait "$FANS_PID" 2>/dev/null || true
  stop_edge
  echo "$mode $scheme $opened $(( (after - before) * 1024 / opened )) $before $after $idle $fan"
}

# An event stream over HTTP/2 (TLS; h2load: one connection per stream, one fan's cookies) →
# "n bytes_per half_kib all_kib": the edge's Pss with N/2 streams held, then with N, and what the second
# half added per stream (as bench/idle-conns does: the first burst of connections also makes the
# allocator give back memory it held from start-up, which would flatter a figure taken from zero). The
# edge's own count of open streams (`wicket_edge_event_streams`) says when each half is in.
h2_row() {
  start_edge "${1:-wicket.toml}"
  local jar="$WORK/jar-h2" cookie half="$((N / 2))" mid all loads=()
  curl -sk -c "$jar" -H 'accept: application/json' "https://localhost:$EDGE_TLS/queue/r1" >/dev/null
  cookie="Cookie: $(awk '$6 ~ /^wicket_/ {printf "%s=%s; ", $6, $7}' "$jar")"
  open_streams() { curl -s -H "authorization: Bearer $TOKEN" "http://127.0.0.1:$ADMIN_PORT/metrics" | awk '/^wicket_edge_event_streams /{print $2}'; }
  hold() {
    taskset -c "$LOAD_CPUS" h2load -n "$half" -c "$half" -m 1 -H "$cookie" "https://localhost:$EDGE_TLS/queue/r1/events" >/dev/null 2>&1 &
    loads+=($!)
    for _ in $(seq 1 240); do [ "$(open_streams)" -ge "$1" ] 2>/dev/null && break; sleep 0.5; done
    sleep 2
  }
  hold "$half"; mid="$(pss_kib "$EDGE_PID")"
  hold "$((2 * half))"; all="$(pss_kib "$EDGE_PID")"
  local n; n="$(open_streams)"
  kill "${loads[@]}" 2>/dev/null || true; wait "${loads[@]}" 2>/dev/null || true
  stop_edge
  echo "$n $(( (all - mid) * 1024 / (n - half) )) $mid $all"
}

# CPU per status poll: wrk on one fan's status, the edge's CPU time over the requests served.
poll_cpu() {
  start_edge
  local jar="$WORK/jar" cookie c0 c1 out
  curl -s -c "$jar" -H 'accept: application/json' "http://127.0.0.1:$EDGE_PORT/queue/r1" >/dev/null
  cookie="Cookie: $(awk '$6 ~ /^wicket_/ {printf "%s=%s; ", $6, $7}' "$jar")"
  taskset -c "$LOAD_CPUS" wrk -t1 -c64 -d2s -H "$cookie" "http://127.0.0.1:$EDGE_PORT/queue/r1/status" >/dev/null
  c0="$(cpu_ticks "$EDGE_PID")"
  out="$(taskset -c "$LOAD_CPUS" wrk -t1 -c64 -d10s --latency -H "$cookie" "http://127.0.0.1:$EDGE_PORT/queue/r1/status")"
  c1="$(cpu_ticks "$EDGE_PID")"
  stop_edge
  local rps; rps="$(echo "$out" | wrk_figures | cut -d' ' -f1)"
  python3 -c "print(round($rps), round(($c1 - $c0) / $TCK * 1e6 / ($rps * 10), 2))"
}

EV="$(row events http)"; echo "$EV"
EVT="$(row events https)"; echo "$EVT"
EVP="$(row events http wicket-proxy.toml)"; echo "$EVP"
EVF="$(row events http wicket-far.toml)"; echo "$EVF"
EH2="$(h2_row)"; echo "h2: $EH2"
EH2P="$(h2_row wicket-proxy.toml)"; echo "h2 proxy: $EH2P"
PO="$(row poll http)"; echo "$PO"
POT="$(row poll https)"; echo "$POT"
PCPU="$(poll_cpu)"; echo "poll cpu: $PCPU"
LOADAVG="$(cut -d' ' -f1-3 /proc/loadavg)"

export EV EVT EVP EVF EH2 EH2P PO POT PCPU LOADAVG ROOT N LIMIT
python3 - <<'PY'
import json, os, datetime
def parse(row):
    f = row.split(" ", 7)
    return {"n": int(f[2]), "bytes": int(f[3]), "kib": [int(f[4]), int(f[5])], "idle_us": float(f[6]), "fan": json.loads(f[7])}
ev, evt, evp, evf, po, pot = (parse(os.environ[k]) for k in ("EV", "EVT", "EVP", "EVF", "PO", "POT"))
poll_rps, poll_us = os.environ["PCPU"].split()
h2n, h2b, h2k0, h2k1 = (int(x) for x in os.environ["EH2"].split())
h2pn, h2pb, h2pk0, h2pk1 = (int(x) for x in os.environ["EH2P"].split())
today = datetime.date.today().isoformat()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
root = os.environ["ROOT"]
path = os.path.join(root, "bench/results/summary.json")
summary = json.load(open(path)) if os.path.exists(path) else {}
summary.update({
    "sse_streams": ev["n"], "sse_bytes_per_stream": ev["bytes"], "sse_bytes_per_stream_tls": evt["bytes"],
    "sse_fanout_p50_ms": ev["fan"]["p50_ms"], "sse_fanout_p99_ms": ev["fan"]["p99_ms"], "sse_fanout_max_ms": ev["fan"]["max_ms"],
    "sse_fanout_p99_ms_tls": evt["fan"]["p99_ms"], "sse_idle_cpu_us_per_stream_second": ev["idle_us"],
    "sse_bytes_per_stream_proxy": evp["bytes"], "sse_bytes_per_stream_h2": h2b, "sse_bytes_per_stream_h2_proxy": h2pb, "sse_idle_cpu_us_per_stream_second_proxy": evp["idle_us"],
    "sse_idle_cpu_us_per_stream_second_far": evf["idle_us"],
    "pollers": po["fan"].get("pollers"), "pollers_answered_per_second": po["fan"].get("polls_per_second"),
    "pollers_told_rate_per_second": po["fan"].get("told_rate_per_second"), "pollers_latency_p99_ms": po["fan"].get("latency_p99_ms"),
    "pollers_cpu_us_per_poller_second": po["idle_us"],
    "poll_bytes_per_client": po["bytes"], "poll_bytes_per_client_tls": pot["bytes"], "poll_cpu_us_per_poll": float(poll_us),
})
summary["sse_fanout"] = {"command": "bash bench/sse-fanout/run.sh", "date": today, "open_file_limit": os.environ["LIMIT"],
    "load_average": os.environ["LOADAVG"], "events_http": ev, "events_https": evt, "events_http_proxy": evp, "events_http_far": evf, "events_h2": {"n": h2n, "bytes": h2b, "kib": [h2k0, h2k1]}, "events_h2_proxy": {"n": h2pn, "bytes": h2pb, "kib": [h2pk0, h2pk1]}, "poll_http": po, "poll_https": pot,
    "poll_requests_per_second": float(poll_rps)}
json.dump(summary, open(path, "w"), indent=2, sort_keys=True, ensure_ascii=False)
open(path, "a").write("\n")
def fan(r):
    f = r["fan"]
    return f"{f['reached']:,} of {f['streams']:,} in P50 {f['p50_ms']} ms, P99 {f['p99_ms']} ms, max {f['max_ms']} ms"
section = "\n".join([
    "## Event streams and polling (queued fans holding a connection)", "",
    f"`bash bench/sse-fanout/run.sh` on {today}: {os.cpu_count()} × {cpu}; one edge worker thread on CPU 0, the clients",
    f"on CPU 1 (`taskset`); the open-file limit here is {os.environ['LIMIT']} (`ulimit -n`), so N = {ev['n']:,} fans per row (each joined",
    "room r1, release rate 0, so everyone stays queued). Memory: the edge's Pss with the N fans joined, then with each holding",
    "its event stream open (first frame read) or having polled its status once on a keep-alive connection; kernel socket",
    "buffers not included. Fan-out: `POST /admin/rooms/r1/pause`, then the time until each stream has its `paused` frame",
    "(the kernel's receive time of the segment that carried it, so the client's pace does not count). The machine is shared",
    f"with other jobs (load average at the end: {os.environ['LOADAVG']}): timings vary between runs, memory does not.", "",
    "| fans hold | Pss joined → open (KiB) | bytes per fan | state change reaches every stream |", "|---|---|---|---|",
    f"| event stream, HTTP | {ev['kib'][0]:,} → {ev['kib'][1]:,} | {ev['bytes']:,} | {fan(ev)} |",
    f"| event stream, HTTPS | {evt['kib'][0]:,} → {evt['kib'][1]:,} | {evt['bytes']:,} | {fan(evt)} |",
    f"| event stream, HTTP, through Pingora's proxy (`fast-path = false`: how every stream was served before #40) | {evp['kib'][0]:,} → {evp['kib'][1]:,} | {evp['bytes']:,} | {fan(evp)} |",
    f"| event stream, HTTP/2 over TLS (h2load, one connection per stream; N/2 → N streams, the second half's bytes) | {h2k0:,} → {h2k1:,} | {h2b:,} | (not timed) |",
    f"| the same through Pingora's proxy (`fast-path = false`) | {h2pk0:,} → {h2pk1:,} | {h2pb:,} | (not timed) |",
    f"| a polled keep-alive connection, HTTP | {po['kib'][0]:,} → {po['kib'][1]:,} | {po['bytes']:,} | at the fan's next poll (`poll_after_ms`, 1–5 s) |",
    f"| a polled keep-alive connection, HTTPS | {pot['kib'][0]:,} → {pot['kib'][1]:,} | {pot['bytes']:,} | at the fan's next poll |", "",
    (f"Pollers at their told rate: the {po['fan']['pollers']:,} fans of the HTTP poll row each poll their status again "
     f"`poll_after_ms` after its answer, for {po['fan']['seconds']:.0f} s: {po['fan']['polls_per_second']:,} polls/s answered once all were polling "
     f"against the {po['fan']['told_rate_per_second']:,}/s their told intervals (mean {po['fan']['told_interval_mean_s']} s) ask for, "
     f"{po['fan']['errors']} errors; a poll's answer in P50 {po['fan']['latency_p50_ms']} ms, P99 {po['fan']['latency_p99_ms']} ms, "
     f"max {po['fan']['latency_max_ms']} ms; the client sent each within P99 {po['fan']['send_lag_p99_ms']} ms of its due time; "
     f"the edge spent {po['idle_us']} µs of CPU per poller per second."),
    "",
    f"CPU: {ev['n']:,} open streams with nothing changing cost the edge {ev['idle_us']} µs per stream per second ({evp['idle_us']} µs",
    f"through the proxy; each looks at its status once a second and writes a frame at its poll interval); in a room releasing",
    f"0.001/s, where every place is far from the front (looks at its poll interval, ≤ 5 s; a frame at most every 15 s), {evf['idle_us']} µs (fan-out there: {fan(evf)});",
    f"a status poll costs {poll_us} µs of edge CPU",
    f"(wrk, 64 connections, {float(poll_rps):,.0f} polls/s). A room-wide change (pause, resume, queue-all, reject-all, sold out,",
    "stock back, a new room spec) wakes every stream of the room at once through the room's pulse (a `watch` channel),",
    "not at each stream's next one-second look.", "",
])
import sys; sys.path.insert(0, os.path.join(root, "bench")); import results
res = results.page_path(root, "sse-fanout")
text = results.page_text(root, "sse-fanout")
title = "## Event streams and polling (queued fans holding a connection)"
start = text.find(title)
if start >= 0:
    end = text.find("\n## ", start + 1)
    text = text[:start] + section.rstrip("\n") + ("\n" + text[end:] if end >= 0 else "\n")
else:
    anchor = "## HTTPS (edge vs nginx, same certificate)"
    at = text.find(anchor)
    text = text[:at] + section + "\n" + text[at:] if at >= 0 else text.rstrip("\n") + "\n\n" + section
open(res, "w").write(text)
print(section)
PY
