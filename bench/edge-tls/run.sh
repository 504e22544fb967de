#!/usr/bin/env bash
# HTTPS: the detail page over TLS from Wicket's edge and from nginx, the same certificate (ECDSA P-256,
# made here), the same worker count, pinned apart from the load generators, side by side in one run:
#   h1         HTTP/1.1 keep-alive (wrk)                                  → tls_static_vs_nginx
#   h2         HTTP/2, 10 streams per connection (h2load)                 → h2_static_vs_nginx
#   handshake  a new connection and full handshake per request (wrk with Connection: close)
#                                                                         → tls_handshakes_vs_nginx
#   status     a queued visitor's status poll over HTTP/2 vs the page over HTTP/2 on the same edge
#                                                                         → h2_status_vs_static
# Writes the "HTTPS" section of bench/results/edge-tls.md and those keys of bench/results/summary.json.
#
#   bash bench/edge-tls/run.sh          # THREADS=1 CONNS=64 SECONDS_=8 ROUNDS=3
#
# Needs: cargo, nginx (with ssl and http2), wrk, h2load (nghttp2-client), openssl, curl, taskset.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
THREADS="${THREADS:-1}"
CONNS="${CONNS:-64}"
SECONDS_="${SECONDS_:-8}"
ROUNDS="${ROUNDS:-3}"
WRK_THREADS="${WRK_THREADS:-1}"

export PATH="$PATH:/usr/sbin"
for bin in nginx wrk h2load openssl curl taskset python3; do
  command -v "$bin" >/dev/null || { echo "missing $bin (apt-get install -y nginx wrk nghttp2-client openssl curl)" >&2; exit 1; }
done

cd "$ROOT"
cargo build --release -q -p wicket-edge --bin wicket
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
WICKET="$TARGET/release/wicket"

source "$ROOT/bench/lib.sh"
bench_workdir
pin_sets "$THREADS"

NGINX_PORT="$(free_port)"; EDGE_PORT="$(free_port)"; EDGE_TLS="$(free_port)"; ADMIN_PORT="$(free_port)"
mkdir -p "$WORK/site" "$WORK/nginx/logs" "$WORK/pki"
cp "$ROOT/static/site/index.html" "$WORK/site/index.html"
chmod -R a+rX "$WORK"
SIZE="$(stat -c %s "$WORK/site/index.html")"
(
  cd "$WORK/pki"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -subj /CN=bench-ca -days 2 2>/dev/null
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout site.key -out site.csr -subj /CN=localhost 2>/dev/null
  echo "subjectAltName=DNS:localhost,IP:127.0.0.1" > ext
  openssl x509 -req -in site.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile ext -out site.pem 2>/dev/null
  chmod a+r site.key
)

cat > "$WORK/nginx/nginx.conf" <<CONF
worker_processes $THREADS;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  sendfile on;
  tcp_nodelay on;
  keepalive_timeout 60;
  keepalive_requests 1000000;
  open_file_cache max=100 inactive=60s;
  default_type text/html;
  client_body_temp_path $WORK/nginx/body;
  proxy_temp_path $WORK/nginx/proxy;
  fastcgi_temp_path $WORK/nginx/fastcgi;
  uwsgi_temp_path $WORK/nginx/uwsgi;
  scgi_temp_path $WORK/nginx/scgi;
  ssl_protocols TLSv1.2 TLSv1.3;
  ssl_session_cache shared:SSL:10m;
  server {
    listen 127.0.0.1:$NGINX_PORT ssl http2 backlog=4096;
    ssl_certificate $WORK/pki/site.pem;
    ssl_certificate_key $WORK/pki/site.key;
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
static-dir = "$ROOT/static"
secret = "bench-edge-secret-0123456789abcdef"
shutdown-grace-seconds = 1

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
target = "/buy/"
protected = ["/buy/"]
release = { mode = "fixed", rate = 0.0 }
CONF

taskset -c "$SERVER_CPUS" nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" &
PIDS+=($!)
(cd "$WORK" && RUST_LOG=error exec taskset -c "$SERVER_CPUS" "$WICKET" serve --config "$WORK/wicket.toml") &
PIDS+=($!)
CA="$WORK/pki/ca.pem"
for port in "$NGINX_PORT" "$EDGE_TLS"; do
  for _ in $(seq 1 100); do
    curl -sf --cacert "$CA" -o /dev/null "https://localhost:$port/" && break
    sleep 0.1
  done
done
cmp <(curl -s --cacert "$CA" "https://localhost:$NGINX_PORT/") <(curl -s --cacert "$CA" "https://localhost:$EDGE_TLS/")
[ "$(curl -s --cacert "$CA" --http2 -o /dev/null -w '%{http_version}' "https://localhost:$EDGE_TLS/")" = 2 ]

# A queued visitor (over HTTPS): its cookies for the status polls.
JAR="$WORK/jar"
curl -s --cacert "$CA" -c "$JAR" -H "User-Agent: bench" -H "Accept-Language: en" -o /dev/null "https://localhost:$EDGE_TLS/queue/r1"
COOKIE="$(awk '$6 ~ /^wicket_/ {printf "%s%s=%s", (n++ ? "; " : ""), $6, $7}' "$JAR")"
STATUS_JSON="$(curl -s --cacert "$CA" -H "Cookie: $COOKIE" -H "User-Agent: bench" -H "Accept-Language: en" "https://localhost:$EDGE_TLS/queue/r1/status")"
echo "$STATUS_JSON" | grep -q '"waiting"' || { echo "not a queued visitor: $STATUS_JSON" >&2; exit 1; }

wrk_run() { # url, args... → "rps p99"
  local url="$1"; shift
  taskset -c "$LOAD_CPUS" wrk -t"$WRK_THREADS" -c"$CONNS" -d"${SECONDS_}s" --latency "$@" "$url" | wrk_figures
}
h2_run() { # url, args... → "rps"
  local url="$1"; shift
  taskset -c "$LOAD_CPUS" h2load -c "$CONNS" -m 10 -t "$WRK_THREADS" -D "$SECONDS_" "$@" "$url" 2>/dev/null \
    | python3 -c '
import re, sys
out = sys.stdin.read()
m = re.search(r"finished in [\d.]+m?s, ([\d.]+) req/s", out)
failed = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed", out)
if not m or not failed or int(failed.group(2)) > 0: sys.exit("h2load failed:\n" + out)
print(m.group(1))'
}

for port in "$NGINX_PORT" "$EDGE_TLS"; do
  taskset -c "$LOAD_CPUS" wrk -t1 -c8 -d2s "https://localhost:$port/" >/dev/null
done
RESULTS="$WORK/results.txt"
: > "$RESULTS"
for r in $(seq 1 "$ROUNDS"); do
  {
    echo "$r nginx_h1 $(wrk_run "https://localhost:$NGINX_PORT/" | cut -d' ' -f1)"
    echo "$r edge_h1 $(wrk_run "https://localhost:$EDGE_TLS/" | cut -d' ' -f1)"
    echo "$r nginx_h2 $(h2_run "https://localhost:$NGINX_PORT/")"
    echo "$r edge_h2 $(h2_run "https://localhost:$EDGE_TLS/")"
    echo "$r edge_h2_status $(h2_run "https://localhost:$EDGE_TLS/queue/r1/status" -H "cookie: $COOKIE" -H "user-agent: bench" -H "accept-language: en")"
    echo "$r nginx_hs $(wrk_run "https://localhost:$NGINX_PORT/" -H "Connection: close" | cut -d' ' -f1)"
    echo "$r edge_hs $(wrk_run "https://localhost:$EDGE_TLS/" -H "Connection: close" | cut -d' ' -f1)"
  } >> "$RESULTS"
  grep "^$r " "$RESULTS" | sed "s/^/round /"
done

LOAD="$(cut -d' ' -f1-3 /proc/loadavg)"
export THREADS CONNS SECONDS_ ROUNDS WRK_THREADS SIZE RESULTS ROOT LOAD SERVER_CPUS LOAD_CPUS
python3 - <<'PY'
import json, os, statistics, datetime
rows = [l.split() for l in open(os.environ["RESULTS"]) if l.strip()]
rounds = sorted({r[0] for r in rows})
val = {(r[0], r[1]): float(r[2]) for r in rows}
ratio = lambda a, b: statistics.median(val[(k, a)] / val[(k, b)] for k in rounds)
med = lambda n: statistics.median(val[(k, n)] for k in rounds)
keys = {
    "tls_static_vs_nginx": ratio("edge_h1", "nginx_h1"),
    "h2_static_vs_nginx": ratio("edge_h2", "nginx_h2"),
    "tls_handshakes_vs_nginx": ratio("edge_hs", "nginx_hs"),
    "h2_status_vs_static": ratio("edge_h2_status", "edge_h2"),
}
e = os.environ
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
today = datetime.date.today().isoformat()
cmd = f"THREADS={e['THREADS']} CONNS={e['CONNS']} SECONDS_={e['SECONDS_']} ROUNDS={e['ROUNDS']} bash bench/edge-tls/run.sh"
root = e["ROOT"]
path = os.path.join(root, "bench/results/summary.json")
summary = json.load(open(path)) if os.path.exists(path) else {}
for k, v in keys.items():
    summary[k] = round(v, 3)
names = ("nginx_h1", "edge_h1", "nginx_h2", "edge_h2", "edge_h2_status", "nginx_hs", "edge_hs")
summary["edge_tls"] = {"command": cmd, "date": today, "machine": f"{os.cpu_count()} × {cpu}", "server_cpus": e["SERVER_CPUS"],
                       "load_cpus": e["LOAD_CPUS"], "median_rps": {n: round(med(n)) for n in names}, "loadavg_after": e["LOAD"]}
json.dump(summary, open(path, "w"), indent=2, sort_keys=True)
open(path, "a").write("\n")
lines = [
    "## HTTPS (edge vs nginx, same certificate)", "",
    f"`{cmd}` on {today}: {os.cpu_count()} × {cpu}; servers pinned to CPU {e['SERVER_CPUS']} (each alone while measured), load on",
    f"CPU {e['LOAD_CPUS']}; {e['THREADS']} worker thread(s) each; the {e['SIZE']}-byte detail page; ECDSA P-256 certificate; TLS: rustls (ring) on the edge, OpenSSL 3.0 in nginx;",
    f"{e['CONNS']} connections, {e['SECONDS_']} s per run, {e['ROUNDS']} rounds in turn; ratios are medians of same-round ratios.", "",
    "| measure | tool | nginx req/s | edge req/s | edge / nginx |", "|---|---|---|---|---|",
    f"| page, HTTP/1.1 keep-alive | wrk | {med('nginx_h1'):,.0f} | {med('edge_h1'):,.0f} | {keys['tls_static_vs_nginx']:.2f}× |",
    f"| page, HTTP/2 (10 streams/conn) | h2load | {med('nginx_h2'):,.0f} | {med('edge_h2'):,.0f} | {keys['h2_static_vs_nginx']:.2f}× |",
    f"| new connection + full handshake per request | wrk, `Connection: close` | {med('nginx_hs'):,.0f} | {med('edge_hs'):,.0f} | {keys['tls_handshakes_vs_nginx']:.2f}× |",
    f"| status poll vs page, both HTTP/2 on the edge | h2load | — | {med('edge_h2_status'):,.0f} vs {med('edge_h2'):,.0f} | {keys['h2_status_vs_static']:.2f}× (status / page) |",
    "",
]
section = "\n".join(lines) + "\n"
import sys; sys.path.insert(0, os.path.join(root, "bench")); import results
res = results.page_path(root, "edge-tls")
text = results.page_text(root, "edge-tls")
title = "## HTTPS (edge vs nginx, same certificate)"
start = text.find(title)
if start >= 0:
    end = text.find("\n## ", start + 1)
    text = text[:start] + section.rstrip("\n") + ("\n" + text[end:] if end >= 0 else "\n")
else:
    text = text.rstrip("\n") + "\n\n" + section
open(res, "w").write(text)
print(section)
PY
