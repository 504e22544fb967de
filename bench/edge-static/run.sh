#!/usr/bin/env bash
# Edge static vs nginx: the example detail page (static/site/index.html) served by the Wicket edge
# from memory and by nginx from disk, same file, same number of worker threads, same wrk load,
# side by side in one run. Writes the "Edge static vs nginx" section of its page in bench/results/ (bench/RESULTS.md sums them up) and the
# `static_vs_nginx` key of bench/results/summary.json (other keys are kept).
#
#   bash bench/edge-static/run.sh                 # defaults: THREADS=1 CONNS=64 SECONDS_=10 ROUNDS=3
#   THREADS=1 CONNS=32 bash bench/edge-static/run.sh
#
# Needs: cargo, nginx, wrk (the test command installs them). Loopback only.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/bench/lib.sh"
load_settings 3

export PATH="$PATH:/usr/sbin"
for bin in nginx wrk taskset; do
  command -v "$bin" >/dev/null || { echo "missing $bin (apt-get install -y $bin)" >&2; exit 1; }
done

cd "$ROOT"
release_edge
bench_workdir
pin_sets "$THREADS"   # server on SERVER_CPUS, wrk on LOAD_CPUS (disjoint when the machine allows)

NGINX_PORT="$(free_port)"; EDGE_PORT="$(free_port)"; ADMIN_PORT="$(free_port)"
LIM_PORT="$(free_port)"; LIM_ADMIN_PORT="$(free_port)"

mkdir -p "$WORK/site" "$WORK/nginx/logs"
cp "$ROOT/static/site/index.html" "$WORK/site/index.html"
chmod -R a+rX "$WORK"  # nginx workers run as an unprivileged user
SIZE="$(stat -c %s "$WORK/site/index.html")"

cat > "$WORK/nginx/nginx.conf" <<CONF
worker_processes $THREADS;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  keepalive_timeout 60;
  keepalive_requests 100000;
  open_file_cache max=100 inactive=60s;
  open_file_cache_valid 60s;
  default_type text/html;
  client_body_temp_path $WORK/nginx/body;
  proxy_temp_path $WORK/nginx/proxy;
  fastcgi_temp_path $WORK/nginx/fastcgi;
  uwsgi_temp_path $WORK/nginx/uwsgi;
  scgi_temp_path $WORK/nginx/scgi;
  server {
    listen 127.0.0.1:$NGINX_PORT;
    root $WORK/site;
    location / { add_header Cache-Control "public, max-age=5"; }
  }
}
CONF

cat > "$WORK/wicket.toml" <<CONF
[edge]
listen = "127.0.0.1:$EDGE_PORT"
admin-listen = "127.0.0.1:$ADMIN_PORT"
threads = $THREADS
site-dir = "site"
shutdown-grace-seconds = 1
CONF

# The same edge with a per-IP limit on every path, set high enough never to refuse: the cost of
# the limiter on the hot path (wrk comes from one IP).
sed -e "s/$EDGE_PORT/$LIM_PORT/" -e "s/$ADMIN_PORT/$LIM_ADMIN_PORT/" "$WORK/wicket.toml" > "$WORK/limited.toml"
cat >> "$WORK/limited.toml" <<CONF
[[edge.limits]]
path = "/"
key = "ip"
rate = "1000000r/s"
burst = 1000000
nodelay = true
CONF

taskset -c "$SERVER_CPUS" nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" &
PIDS+=($!)
RUST_LOG=error taskset -c "$SERVER_CPUS" "$WICKET" serve --config "$WORK/wicket.toml" &
PIDS+=($!)
RUST_LOG=error taskset -c "$SERVER_CPUS" "$WICKET" serve --config "$WORK/limited.toml" &
PIDS+=($!)

for port in "$NGINX_PORT" "$EDGE_PORT" "$LIM_PORT"; do
  for _ in $(seq 1 100); do
    curl -sf -o /dev/null "http://127.0.0.1:$port/" && break
    sleep 0.1
  done
done
# Same bytes from both.
cmp <(curl -s "http://127.0.0.1:$NGINX_PORT/") <(curl -s "http://127.0.0.1:$EDGE_PORT/")

run_wrk() { # url → "rps p99_ms"
  taskset -c "$LOAD_CPUS" wrk -t"$WRK_THREADS" -c"$CONNS" -d"${SECONDS_}s" --latency "$1" | wrk_figures
}

# Warm-up, then alternate rounds so both see the same machine conditions.
taskset -c "$LOAD_CPUS" wrk -t1 -c8 -d2s "http://127.0.0.1:$NGINX_PORT/" >/dev/null
taskset -c "$LOAD_CPUS" wrk -t1 -c8 -d2s "http://127.0.0.1:$EDGE_PORT/" >/dev/null
taskset -c "$LOAD_CPUS" wrk -t1 -c8 -d2s "http://127.0.0.1:$LIM_PORT/" >/dev/null
RESULTS="$WORK/results.txt"
: > "$RESULTS"
for r in $(seq 1 "$ROUNDS"); do
  echo "nginx $(run_wrk "http://127.0.0.1:$NGINX_PORT/")" >> "$RESULTS"
  echo "edge $(run_wrk "http://127.0.0.1:$EDGE_PORT/")" >> "$RESULTS"
  echo "edge+limit $(run_wrk "http://127.0.0.1:$LIM_PORT/")" >> "$RESULTS"
  tail -3 "$RESULTS" | sed "s/^/round $r: /"
done

LOAD="$(cut -d' ' -f1-3 /proc/loadavg)"
export THREADS CONNS SECONDS_ ROUNDS WRK_THREADS SIZE RESULTS ROOT LOAD SERVER_CPUS LOAD_CPUS
python3 - <<'PY'
import json, os, statistics, datetime, re, platform, sys
rows = [l.split() for l in open(os.environ["RESULTS"]) if l.strip()]
def med(name, i):
    return statistics.median(float(r[i]) for r in rows if r[0] == name)
n_rps, e_rps = med("nginx", 1), med("edge", 1)
n_p99, e_p99 = med("nginx", 2), med("edge", 2)
l_rps, l_p99 = med("edge+limit", 1), med("edge+limit", 2)
ratio = e_rps / n_rps
threads, conns, secs, rounds = (int(os.environ[k]) for k in ("THREADS", "CONNS", "SECONDS_", "ROUNDS"))
wrk_threads, size = int(os.environ["WRK_THREADS"]), int(os.environ["SIZE"])
root = os.environ["ROOT"]
cpu = "unknown"
try:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip(); break
except OSError:
    pass
today = datetime.date.today().isoformat()
entry = {
    "ratio": round(ratio, 3), "edge_rps": round(e_rps), "nginx_rps": round(n_rps),
    "edge_p99_ms": round(e_p99, 3), "nginx_p99_ms": round(n_p99, 3),
    "worker_threads": threads, "connections": conns, "seconds": secs, "rounds": rounds,
    "wrk_threads": wrk_threads, "file_bytes": size, "date": today,
    "edge_ip_limit_rps": round(l_rps), "edge_ip_limit_p99_ms": round(l_p99, 3),
    "ratio_with_ip_limit": round(l_rps / n_rps, 3),
}
sys.path.insert(0, os.path.join(root, "bench"))
import results
results.update_summary(root, {"static_vs_nginx": entry})

per_round = "\n".join(f"| {i // 3 + 1} | {r[0]} | {float(r[1]):.0f} | {float(r[2]):.2f} ms |" for i, r in enumerate(rows))
section = f"""<!-- begin:edge-static-vs-nginx -->
## Edge static vs nginx

Command: `bash bench/edge-static/run.sh` (THREADS={threads} CONNS={conns} SECONDS_={secs} ROUNDS={rounds})

Machine: {os.cpu_count()} cores ({cpu}), {today}. The example detail page (`static/site/index.html`,
{size} bytes, identity encoding) from the Wicket edge (release build, from memory, no limits
configured) and from nginx (from disk with `sendfile` and `open_file_cache`, `access_log off`), each
with {threads} worker threads, loaded by `wrk -t{wrk_threads} -c{conns} -d{secs}s` over loopback
keep-alive; rounds alternate between the two and the figures are medians. The servers run on CPU
{os.environ["SERVER_CPUS"]} and wrk on CPU {os.environ["LOAD_CPUS"]} (`taskset`; shared only when the machine has too few cores),
and the machine is shared with other jobs (load average at the end
of the run: {os.environ["LOAD"]}), so single rounds vary; compare the two within a run. The edge
answers plain GET/HEAD of a file that no limit or blocklist covers on its fast path
(`edge/src/front/http1.rs`), IP limits included; user/device limits and trusted proxies take the
full proxy (not measured here).

| server | requests/s | P99 |
|---|---|---|
| nginx | {n_rps:.0f} | {n_p99:.2f} ms |
| wicket edge | {e_rps:.0f} | {e_p99:.2f} ms |
| wicket edge, per-IP limit on `/` | {l_rps:.0f} | {l_p99:.2f} ms |

**Edge / nginx: {ratio:.2f}x** (goal ≥ 1.0x); with a per-IP limit in force (never refusing, so
the limiter's cost is measured): {l_rps / n_rps:.2f}x.

| round | server | requests/s | P99 |
|---|---|---|---|
{per_round}
<!-- end:edge-static-vs-nginx -->"""
results.write_section(root, "edge-static-vs-nginx", section)
print(f"edge {e_rps:.0f} req/s (P99 {e_p99:.2f} ms), nginx {n_rps:.0f} req/s (P99 {n_p99:.2f} ms): {ratio:.2f}x; with IP limit {l_rps:.0f} req/s: {l_rps / n_rps:.2f}x")
PY
