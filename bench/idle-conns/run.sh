#!/usr/bin/env bash
# Idle keep-alive connections: memory per idle client connection, Wicket's edge vs nginx.
# Each server (one worker thread / process) gets N connections that send one GET of the detail page,
# read the answer and then stay open and idle; the server's proportional memory (Pss, from
# /proc/PID/smaps_rollup, summed over nginx's master and worker) is read before, with the first half
# open and with all open. The figure per connection is what the second half added: the first half's
# burst also makes an allocator give back what it held free from the server's start (the edge's
# mimalloc held about 33 MB freed while building its state, purged at the first burst of
# connections; a "before → all" difference counted that against the connections). Then the same
# over HTTPS (TLS 1.3, the same self-signed ECDSA certificate for both), each server started afresh.
# Writes the "Idle connections" section of bench/results/idle-conns.md and the keys idle_conn_bytes_edge,
# idle_conn_bytes_nginx, idle_conn_edge_vs_nginx and their _tls twins of bench/results/summary.json.
#
#   bash bench/idle-conns/run.sh            # N=50000, capped by the open-file limit (ulimit -n)
#   SETTLE=3 bash bench/idle-conns/run.sh   # read Pss 3 s after each half opened, not 30 s
#
# SETTLE (default 30 s): how long after each half opened its Pss is read. The edge parks a connection
# idle for a second (front::conn::Parked), freeing Pingora's stream object and socket digest; its
# allocator (mimalloc) gives the pages those leave free back to the system lazily, so a reading 2-3 s
# after a burst of 9,500 connections still counts part of them (1.4-1.6 KB a connection then, against
# about 0.8 KB settled). nginx's figure does not move with it.
#
# Needs: cargo, nginx, openssl, python3. Loopback only (clients spread over 127.0.0.2-9 for ports).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
N="${N:-50000}"
SETTLE="${SETTLE:-30}"
LIMIT="$(ulimit -n)"
if [ "$LIMIT" != unlimited ] && [ "$N" -gt $((LIMIT - 1000)) ]; then
  echo "note: open-file limit $LIMIT (ulimit -n): holding $((LIMIT - 1000)) connections instead of $N" >&2
  N=$((LIMIT - 1000))
fi
export PATH="$PATH:/usr/sbin"
for bin in nginx openssl python3; do
  command -v "$bin" >/dev/null || { echo "missing $bin" >&2; exit 1; }
done

cd "$ROOT"
cargo build --release -q -p wicket-edge --bin wicket
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
WICKET="$TARGET/release/wicket"

source "$ROOT/bench/lib.sh"
bench_workdir
EDGE_PORT="$(free_port)"; ADMIN_PORT="$(free_port)"; NGINX_PORT="$(free_port)"
EDGE_TLS="$(free_port)"; NGINX_TLS="$(free_port)"
mkdir -p "$WORK/site" "$WORK/nginx/logs" "$WORK/pki"
cp "$ROOT/static/site/index.html" "$WORK/site/index.html"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$WORK/pki/site.key" \
  -out "$WORK/pki/site.pem" -subj /CN=localhost -addext "subjectAltName=DNS:localhost" -days 2 2>/dev/null
chmod -R a+rX "$WORK"

cat > "$WORK/nginx/nginx.conf" <<CONF
worker_processes 1;
worker_rlimit_nofile $LIMIT;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
events { worker_connections $((N + 100)); }
http {
  access_log off;
  sendfile on;
  keepalive_timeout 300;
  default_type text/html;
  client_body_temp_path $WORK/nginx/body;
  proxy_temp_path $WORK/nginx/proxy;
  fastcgi_temp_path $WORK/nginx/fastcgi;
  uwsgi_temp_path $WORK/nginx/uwsgi;
  scgi_temp_path $WORK/nginx/scgi;
  server { listen 127.0.0.1:$NGINX_PORT backlog=4096; root $WORK/site; }
  server {
    listen 127.0.0.1:$NGINX_TLS ssl backlog=4096;
    ssl_certificate $WORK/pki/site.pem;
    ssl_certificate_key $WORK/pki/site.key;
    root $WORK/site;
  }
}
CONF
cat > "$WORK/wicket.toml" <<CONF
[edge]
listen = "127.0.0.1:$EDGE_PORT"
admin-listen = "127.0.0.1:$ADMIN_PORT"
threads = 1
site-dir = "site"
keepalive-seconds = 300
shutdown-grace-seconds = 1
[edge.tls]
listen = "127.0.0.1:$EDGE_TLS"
[[edge.tls.certs]]
cert-file = "pki/site.pem"
key-file = "pki/site.key"
CONF

cat > "$WORK/clients.py" <<'PY'
import asyncio, ssl, sys
port, n, cafile = int(sys.argv[1]), int(sys.argv[2]), (sys.argv[3] if len(sys.argv) > 3 else None)
tls = ssl.create_default_context(cafile=cafile) if cafile else None
async def one(i, sem):
    async with sem:
        r, w = await asyncio.open_connection("127.0.0.1", port, local_addr=(f"127.0.0.{2 + i % 8}", 0),
                                             ssl=tls, server_hostname="localhost" if tls else None)
        w.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await w.drain()
        head = await r.readuntil(b"\r\n\r\n")
        length = next(int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:"))
        await r.readexactly(length)
        return w
async def main():
    # Two halves: each opened, counted on stdout, then held until a line on stdin.
    sem, held, loop = asyncio.Semaphore(256), [], asyncio.get_running_loop()
    for lo, hi in ((0, n // 2), (n // 2, n)):
        held += await asyncio.gather(*(one(i, sem) for i in range(lo, hi)))
        print(len(held), flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)
asyncio.run(main())
PY

pss_kib() { # pids... → summed Pss in KiB
  local total=0 p v
  for p in "$@"; do
    v="$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup")"
    total=$((total + v))
  done
  echo "$total"
}

measure() { # name port http|https pids... → "name bytes_per_conn before_kib after_kib opened half_kib half"
  local name="$1" port="$2" scheme="$3"; shift 3
  local url="$scheme://localhost:$port/" ca=()
  [ "$scheme" = https ] && ca=("$WORK/pki/site.pem")
  for _ in $(seq 1 100); do curl -sf --cacert "$WORK/pki/site.pem" -o /dev/null "$url" && break; sleep 0.1; done
  for _ in $(seq 1 50); do curl -sf --cacert "$WORK/pki/site.pem" -o /dev/null "$url"; done
  sleep 0.5
  local before half after opened first
  before="$(pss_kib "$@")"
  coproc CLIENTS { python3 "$WORK/clients.py" "$port" "$N" "${ca[@]}"; }
  read -r first <&"${CLIENTS[0]}"
  sleep "$SETTLE"
  half="$(pss_kib "$@")"
  echo >&"${CLIENTS[1]}"
  read -r opened <&"${CLIENTS[0]}"
  sleep "$SETTLE"
  after="$(pss_kib "$@")"
  echo >&"${CLIENTS[1]}"
  wait "$CLIENTS_PID" 2>/dev/null || true
  echo "$name $(( (after - half) * 1024 / (opened - first) )) $before $after $opened $half $first"
}

edge_row() { # port scheme: a fresh edge measured on that listener
  RUST_LOG=error "$WICKET" serve --config "$WORK/wicket.toml" &
  local pid=$!
  PIDS+=("$pid")
  measure edge "$1" "$2" "$pid"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
nginx_row() { # port scheme: a fresh nginx measured on that listener
  nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" &
  local master=$!
  PIDS+=("$master")
  sleep 0.5
  measure nginx "$1" "$2" "$master" $(pgrep -P "$master")
  kill "$master"; wait "$master" 2>/dev/null || true
}
EDGE_ROW="$(edge_row "$EDGE_PORT" http)"; echo "$EDGE_ROW"
NGINX_ROW="$(nginx_row "$NGINX_PORT" http)"; echo "$NGINX_ROW"
EDGE_TLS_ROW="$(edge_row "$EDGE_TLS" https)"; echo "$EDGE_TLS_ROW"
NGINX_TLS_ROW="$(nginx_row "$NGINX_TLS" https)"; echo "$NGINX_TLS_ROW"

export EDGE_ROW NGINX_ROW EDGE_TLS_ROW NGINX_TLS_ROW ROOT N LIMIT SETTLE
python3 - <<'PY'
import json, os, datetime
e, n = os.environ["EDGE_ROW"].split(), os.environ["NGINX_ROW"].split()
et, nt = os.environ["EDGE_TLS_ROW"].split(), os.environ["NGINX_TLS_ROW"].split()
edge_b, nginx_b, held = int(e[1]), int(n[1]), int(e[4])
edge_t, nginx_t = int(et[1]), int(nt[1])
today = datetime.date.today().isoformat()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
root = os.environ["ROOT"]
path = os.path.join(root, "bench/results/summary.json")
summary = json.load(open(path)) if os.path.exists(path) else {}
summary["idle_conn_bytes_edge"] = edge_b
summary["idle_conn_bytes_nginx"] = nginx_b
summary["idle_conn_edge_vs_nginx"] = round(edge_b / nginx_b, 3) if nginx_b else None
summary["idle_conn_bytes_edge_tls"] = edge_t
summary["idle_conn_bytes_nginx_tls"] = nginx_t
summary["idle_conn_tls_edge_vs_nginx"] = round(edge_t / nginx_t, 3) if nginx_t else None
summary["idle_conns"] = {"command": "bash bench/idle-conns/run.sh", "date": today, "held": held,
    "open_file_limit": os.environ["LIMIT"], "measured": "Pss added by the second half of the connections",
    "settle_seconds": int(os.environ["SETTLE"]),
    "edge_pss_kib": [int(e[2]), int(e[5]), int(e[3])], "nginx_pss_kib": [int(n[2]), int(n[5]), int(n[3])],
    "edge_tls_pss_kib": [int(et[2]), int(et[5]), int(et[3])], "nginx_tls_pss_kib": [int(nt[2]), int(nt[5]), int(nt[3])]}
json.dump(summary, open(path, "w"), indent=2, sort_keys=True)
open(path, "a").write("\n")
section = "\n".join([
    "## Idle connections (memory per idle keep-alive client)", "",
    f"`bash bench/idle-conns/run.sh` on {today}: {os.cpu_count()} × {cpu}. {held:,} idle keep-alive connections per server",
    f"(each sent one GET of the detail page first; the open-file limit here is {os.environ['LIMIT']}, so not 50,000), one worker each;",
    f"proportional memory (Pss) of the server's processes before, with the first half open and with all open (each read {os.environ['SETTLE']} s after its half opened), kernel socket",
    "buffers not included. Bytes per idle connection: what the second half added (the first half's burst also makes the edge's",
    "allocator give back memory it held free from its start; the last column, all against before, counts that against them).", "",
    "| server | Pss before → half → all (KiB) | bytes per idle connection | (all − before) / all |", "|---|---|---|---|",
    *(f"| {label} | {int(r[2]):,} → {int(r[5]):,} → {int(r[3]):,} | {int(r[1]):,} | {(int(r[3]) - int(r[2])) * 1024 // int(r[4]):,} |"
      for label, r in (("Wicket edge, HTTP", e), ("nginx, HTTP", n), ("Wicket edge, HTTPS", et), ("nginx, HTTPS", nt))), "",
    f"Edge / nginx: {edge_b / nginx_b:.2f}× over HTTP, {edge_t / nginx_t:.2f}× over HTTPS. Idle clients are closed after",
    "`keepalive-seconds` (edge/tests/exhaustion.rs).", "",
])
import sys; sys.path.insert(0, os.path.join(root, "bench")); import results
res = results.page_path(root, "idle-conns")
text = results.page_text(root, "idle-conns")
title = "## Idle connections (memory per idle keep-alive client)"
start = text.find(title)
if start >= 0:
    end = text.find("\n## ", start + 1)
    text = text[:start] + section.rstrip("\n") + ("\n" + text[end:] if end >= 0 else "\n")
else:
    text = text.rstrip("\n") + "\n\n" + section
open(res, "w").write(text)
print(section)
PY
