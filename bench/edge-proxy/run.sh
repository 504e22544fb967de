#!/usr/bin/env bash
# The forwarded (proxy) path: Wicket's edge vs nginx `proxy_pass` vs a bare Pingora ProxyHttp, all in
# front of the same origin (nginx serving the 4.9 KB detail page), side by side in one run.
#
#   plain     GET of an origin page with a browser's device cookie (what every page view of the site
#             that is not a static file costs)
#   cookieless  the same without any cookie (a client that keeps none: the edge fingerprints it and
#             sets a device cookie on every answer)
#   admitted  GET of a protected path with the admission cookie and the user header (an admitted fan)
#
# The edge runs twice: with the forwarded fast path (`fast-forward = true`, the default) and without
# it (every request through Pingora's proxy phases). Writes the "Forwarded path" section of
# bench/results/edge-proxy.md and the keys proxy_vs_nginx, admitted_vs_nginx, bare_pingora_vs_nginx,
# proxy_cookieless_vs_nginx and full_path_vs_nginx of bench/results/summary.json.
#
#   bash bench/edge-proxy/run.sh                    # THREADS=1 CONNS=64 SECONDS_=8 ROUNDS=3
#   THREADS=4 WRK_THREADS=4 CONNS=256 bash bench/edge-proxy/run.sh     # a many-core machine
#
# Pinning (bench/lib.sh pin_sets): the proxies under test share SERVER_CPUS (each runs alone while
# measured), the origin and wrk get the other CPUs; on a 2-core machine the server has CPU 0 and
# wrk + origin CPU 1, so what is measured is the proxy's own cost per request.
# Needs: cargo, nginx, wrk, taskset, python3. Loopback only.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
THREADS="${THREADS:-1}"
CONNS="${CONNS:-64}"
SECONDS_="${SECONDS_:-8}"
ROUNDS="${ROUNDS:-3}"
WRK_THREADS="${WRK_THREADS:-1}"

export PATH="$PATH:/usr/sbin"
for bin in nginx wrk taskset python3; do
  command -v "$bin" >/dev/null || { echo "missing $bin (apt-get install -y $bin)" >&2; exit 1; }
done

cd "$ROOT"
cargo build --release -q -p wicket-edge --bin wicket --example bare_proxy
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
WICKET="$TARGET/release/wicket"
BARE="$TARGET/release/examples/bare_proxy"

source "$ROOT/bench/lib.sh"
bench_workdir
pin_sets "$THREADS"

ORIGIN_PORT="$(free_port)"; NGINX_PORT="$(free_port)"; BARE_PORT="$(free_port)"
FAST_PORT="$(free_port)"; FAST_ADMIN="$(free_port)"; FULL_PORT="$(free_port)"; FULL_ADMIN="$(free_port)"

mkdir -p "$WORK/site/buy" "$WORK/origin/logs" "$WORK/proxy/logs"
cp "$ROOT/static/site/index.html" "$WORK/site/event.html"
cp "$ROOT/static/site/index.html" "$WORK/site/buy/event.html"
chmod -R a+rX "$WORK"
SIZE="$(stat -c %s "$WORK/site/event.html")"

nginx_common() { # prefix → the http{} preamble both nginx instances share
  cat <<CONF
daemon off;
pid $1/nginx.pid;
error_log $1/logs/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  sendfile on;
  tcp_nodelay on;
  keepalive_timeout 60;
  keepalive_requests 1000000;
  open_file_cache max=100 inactive=60s;
  default_type text/html;
  client_body_temp_path $1/body;
  proxy_temp_path $1/proxy;
  fastcgi_temp_path $1/fastcgi;
  uwsgi_temp_path $1/uwsgi;
  scgi_temp_path $1/scgi;
CONF
}

# The origin: nginx serving the page (on the load side's CPUs).
{ echo "worker_processes ${ORIGIN_WORKERS};"; nginx_common "$WORK/origin"; cat <<CONF
  server {
    listen 127.0.0.1:$ORIGIN_PORT reuseport backlog=4096;
    root $WORK/site;
  }
}
CONF
} > "$WORK/origin/nginx.conf"

# nginx doing what the edge does: proxy_pass with upstream keep-alive, same worker count.
{ echo "worker_processes $THREADS;"; nginx_common "$WORK/proxy"; cat <<CONF
  upstream origin { server 127.0.0.1:$ORIGIN_PORT; keepalive 256; }
  server {
    listen 127.0.0.1:$NGINX_PORT reuseport backlog=4096;
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$remote_addr;
    }
  }
}
CONF
} > "$WORK/proxy/nginx.conf"

HS_SECRET="bench-hs-secret-0123456789abcdef0123"
edge_config() { # port admin fast-forward
  cat <<CONF
[edge]
listen = "127.0.0.1:$1"
admin-listen = "127.0.0.1:$2"
threads = $THREADS
origin = "http://127.0.0.1:$ORIGIN_PORT"
user-header = "x-user-id"
secret = "bench-edge-secret-0123456789abcdef"
fast-forward = $3
shutdown-grace-seconds = 1

[[edge.protected]]
path = "/buy/"
room = "ev-1"

[tokens]
issuer = "wicket"
[[tokens.keys]]
kid = "hs-1"
alg = "HS256"
secret = "$HS_SECRET"
CONF
}
edge_config "$FAST_PORT" "$FAST_ADMIN" true > "$WORK/fast.toml"
edge_config "$FULL_PORT" "$FULL_ADMIN" false > "$WORK/full.toml"

taskset -c "$LOAD_CPUS" nginx -p "$WORK/origin" -c "$WORK/origin/nginx.conf" &
PIDS+=($!)
taskset -c "$SERVER_CPUS" nginx -p "$WORK/proxy" -c "$WORK/proxy/nginx.conf" &
PIDS+=($!)
RUST_LOG=error taskset -c "$SERVER_CPUS" "$BARE" "127.0.0.1:$BARE_PORT" "127.0.0.1:$ORIGIN_PORT" "$THREADS" 2>/dev/null &
PIDS+=($!)
RUST_LOG=error taskset -c "$SERVER_CPUS" "$WICKET" serve --config "$WORK/fast.toml" &
PIDS+=($!)
RUST_LOG=error taskset -c "$SERVER_CPUS" "$WICKET" serve --config "$WORK/full.toml" &
PIDS+=($!)

for port in "$ORIGIN_PORT" "$NGINX_PORT" "$BARE_PORT" "$FAST_PORT" "$FULL_PORT"; do
  for _ in $(seq 1 100); do
    curl -sf -o /dev/null "http://127.0.0.1:$port/event.html" && break
    sleep 0.1
  done
done

# A browser's device cookie (from the edge's first answer) and an admitted fan's token.
DEVICE="$(curl -s -D - -o /dev/null "http://127.0.0.1:$FAST_PORT/event.html" | tr -d '\r' | sed -n 's/^[Ss]et-[Cc]ookie: wicket_d=\([^;]*\).*/\1/p')"
mint_token() { # an admission token for alice, valid 300 s (the most the edge accepts)
  HS_SECRET="$HS_SECRET" python3 - <<'PY'
import base64, hashlib, hmac, json, os, time
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
now = int(time.time())
head = {"typ": "admission+jwt", "alg": "HS256", "kid": "hs-1"}
claims = {"iss": "wicket", "aud": "ev-1", "sub": "alice", "jti": "0123456789abcdef0123456789abcdef",
          "iat": now, "nbf": now, "exp": now + 300, "room": "ev-1", "pos": 1, "max_qty": 2}
msg = b64(json.dumps(head).encode()) + "." + b64(json.dumps(claims).encode())
sig = hmac.new(os.environ["HS_SECRET"].encode(), msg.encode(), hashlib.sha256).digest()
print(msg + "." + b64(sig))
PY
}
admitted() { TOKEN="$(mint_token)"; ADMITTED=(-H "Cookie: wicket_d=$DEVICE; wicket_a_ev-1=$TOKEN" -H "X-User-Id: alice" -H "User-Agent: bench" -H "Accept-Language: zh-CN"); }
[ -n "$DEVICE" ] || { echo "no device cookie from the edge" >&2; exit 1; }
BROWSER=(-H "Cookie: wicket_d=$DEVICE" -H "User-Agent: bench" -H "Accept-Language: zh-CN")
admitted

# Every path answers the page, the same bytes; the admitted request passes the gate.
for port in "$NGINX_PORT" "$BARE_PORT" "$FAST_PORT" "$FULL_PORT"; do
  cmp <(curl -s "http://127.0.0.1:$ORIGIN_PORT/event.html") <(curl -s "${BROWSER[@]}" "http://127.0.0.1:$port/event.html")
done
for port in "$FAST_PORT" "$FULL_PORT"; do
  code="$(curl -s -o /dev/null -w '%{http_code}' "${ADMITTED[@]}" "http://127.0.0.1:$port/buy/event.html")"
  [ "$code" = 200 ] || { echo "admitted request answered $code on port $port" >&2; exit 1; }
  code="$(curl -s -o /dev/null -w '%{http_code}' "${BROWSER[@]}" "http://127.0.0.1:$port/buy/event.html")"
  [ "$code" = 403 ] || { echo "an unadmitted request answered $code on port $port" >&2; exit 1; }
done

run_wrk() { # url, headers... → "rps p99_ms"
  local url="$1"; shift
  taskset -c "$LOAD_CPUS" wrk -t"$WRK_THREADS" -c"$CONNS" -d"${SECONDS_}s" --latency "$@" "$url" | wrk_figures
}

for port in "$NGINX_PORT" "$BARE_PORT" "$FAST_PORT" "$FULL_PORT"; do
  taskset -c "$LOAD_CPUS" wrk -t1 -c8 -d2s "${BROWSER[@]}" "http://127.0.0.1:$port/event.html" >/dev/null
done
RESULTS="$WORK/results.txt"
: > "$RESULTS"
for r in $(seq 1 "$ROUNDS"); do
  admitted  # a fresh token each round (a round takes well under its 300 s)
  {
    echo "$r nginx $(run_wrk "http://127.0.0.1:$NGINX_PORT/event.html" "${BROWSER[@]}")"
    echo "$r bare $(run_wrk "http://127.0.0.1:$BARE_PORT/event.html" "${BROWSER[@]}")"
    echo "$r fast $(run_wrk "http://127.0.0.1:$FAST_PORT/event.html" "${BROWSER[@]}")"
    echo "$r full $(run_wrk "http://127.0.0.1:$FULL_PORT/event.html" "${BROWSER[@]}")"
    echo "$r fast_cookieless $(run_wrk "http://127.0.0.1:$FAST_PORT/event.html")"
    echo "$r nginx_admitted $(run_wrk "http://127.0.0.1:$NGINX_PORT/buy/event.html" "${ADMITTED[@]}")"
    echo "$r fast_admitted $(run_wrk "http://127.0.0.1:$FAST_PORT/buy/event.html" "${ADMITTED[@]}")"
    echo "$r full_admitted $(run_wrk "http://127.0.0.1:$FULL_PORT/buy/event.html" "${ADMITTED[@]}")"
  } >> "$RESULTS"
  grep "^$r " "$RESULTS" | sed "s/^/round /"
done

LOAD="$(cut -d' ' -f1-3 /proc/loadavg)"
export THREADS CONNS SECONDS_ ROUNDS WRK_THREADS SIZE RESULTS ROOT LOAD SERVER_CPUS LOAD_CPUS
python3 - <<'PY'
import json, os, statistics, datetime
rows = [l.split() for l in open(os.environ["RESULTS"]) if l.strip()]
rounds = sorted({r[0] for r in rows})
val = {(r[0], r[1]): (float(r[2]), float(r[3])) for r in rows}
def med_ratio(a, b):
    """Median over rounds of the same-round ratio a/b (requests per second)."""
    return statistics.median(val[(k, a)][0] / val[(k, b)][0] for k in rounds)
def med(name, i=0):
    return statistics.median(val[(k, name)][i] for k in rounds)
keys = {
    "proxy_vs_nginx": med_ratio("fast", "nginx"),
    "admitted_vs_nginx": med_ratio("fast_admitted", "nginx_admitted"),
    "bare_pingora_vs_nginx": med_ratio("bare", "nginx"),
    "proxy_cookieless_vs_nginx": med_ratio("fast_cookieless", "nginx"),
    "full_path_vs_nginx": med_ratio("full", "nginx"),
    "full_path_admitted_vs_nginx": med_ratio("full_admitted", "nginx_admitted"),
}
env = {k: os.environ[k] for k in ("THREADS", "CONNS", "SECONDS_", "ROUNDS", "WRK_THREADS", "SIZE", "SERVER_CPUS", "LOAD_CPUS", "LOAD")}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
ncpu = os.cpu_count()
today = datetime.date.today().isoformat()
cmd = f"THREADS={env['THREADS']} WRK_THREADS={env['WRK_THREADS']} CONNS={env['CONNS']} SECONDS_={env['SECONDS_']} ROUNDS={env['ROUNDS']} bash bench/edge-proxy/run.sh"
root = os.environ["ROOT"]
path = os.path.join(root, "bench/results/summary.json")
os.makedirs(os.path.dirname(path), exist_ok=True)
summary = json.load(open(path)) if os.path.exists(path) else {}
for k, v in keys.items():
    summary[k] = round(v, 3)
summary["edge_proxy"] = {
    "command": cmd, "date": today, "machine": f"{ncpu} × {cpu}", "server_cpus": env["SERVER_CPUS"],
    "load_cpus": env["LOAD_CPUS"], "worker_threads": int(env["THREADS"]), "connections": int(env["CONNS"]),
    "page_bytes": int(env["SIZE"]), "loadavg_after": env["LOAD"],
    "median_rps": {n: round(med(n)) for n in ("nginx", "bare", "fast", "full", "fast_cookieless", "nginx_admitted", "fast_admitted", "full_admitted")},
    "median_p99_ms": {n: round(med(n, 1), 3) for n in ("nginx", "bare", "fast", "full", "fast_cookieless", "nginx_admitted", "fast_admitted", "full_admitted")},
}
json.dump(summary, open(path, "w"), indent=2, sort_keys=True)
open(path, "a").write("\n")

lines = [
    "## Forwarded path (edge vs nginx proxy_pass vs bare Pingora)", "",
    f"`{cmd}` on {today}: {ncpu} × {cpu}; proxies pinned to CPU {env['SERVER_CPUS']} (each alone while measured),",
    f"origin (nginx, the {env['SIZE']}-byte detail page) and wrk on CPU {env['LOAD_CPUS']}; {env['THREADS']} worker thread(s) each,",
    f"{env['CONNS']} keep-alive connections, {env['SECONDS_']} s per run, {env['ROUNDS']} rounds in turn; ratios are medians of same-round ratios.", "",
    "| request | through | req/s (median) | p99 ms | vs nginx |",
    "|---|---|---|---|---|",
]
rows_out = [
    ("page, device cookie", "nginx proxy_pass", "nginx", None),
    ("page, device cookie", "bare Pingora ProxyHttp", "bare", "bare_pingora_vs_nginx"),
    ("page, device cookie", "**Wicket (fast path)**", "fast", "proxy_vs_nginx"),
    ("page, device cookie", "Wicket, fast-forward = false", "full", "full_path_vs_nginx"),
    ("page, no cookie", "Wicket (fast path)", "fast_cookieless", "proxy_cookieless_vs_nginx"),
    ("protected page, admitted", "nginx proxy_pass (no check)", "nginx_admitted", None),
    ("protected page, admitted", "**Wicket (fast path)**", "fast_admitted", "admitted_vs_nginx"),
    ("protected page, admitted", "Wicket, fast-forward = false", "full_admitted", "full_path_admitted_vs_nginx"),
]
for req, through, name, key in rows_out:
    ratio = f"{keys[key]:.2f}×" if key else "1.00×"
    lines.append(f"| {req} | {through} | {med(name):,.0f} | {med(name, 1):.2f} | {ratio} |")
lines.append("")
section = "\n".join(lines) + "\n"
import sys; sys.path.insert(0, os.path.join(root, "bench")); import results
res = results.page_path(root, "edge-proxy")
text = results.page_text(root, "edge-proxy")
start = text.find("## Forwarded path (edge vs nginx proxy_pass vs bare Pingora)")
if start >= 0:
    end = text.find("\n## ", start + 1)
    text = text[:start] + section.rstrip("\n") + ("\n" + text[end:] if end >= 0 else "\n")
else:
    text = text.rstrip("\n") + "\n\n" + section
open(res, "w").write(text)
print(section)
PY
