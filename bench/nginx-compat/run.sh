#!/usr/bin/env bash
# nginx with Wicket behind it (auth_request, nginx-compat/) vs the same nginx alone: an admitted
# fan's GET of a protected page (4.9 KB, from disk), side by side in one run, servers pinned to
# one CPU and wrk to another: every request judged by the edge, and with the edge's auth answers
# cached by nginx for 1 s (`auth-cache-seconds = 1`, a second edge and nginx). Also the ceiling
# (auth_request to nginx's own `return 204`) and the edge's /wicket/auth endpoint alone (its own
# P99). The figure of record, `ratio`, is the cached one: the edge's default, which
# nginx-compat/README.md explains (`every_request_ratio` is the other). Writes
# the "nginx auth_request" section of its page in bench/results/ (bench/RESULTS.md sums them up) and the `nginx_auth_vs_plain` key of
# bench/results/summary.json (other keys kept).
#
# Then the OpenResty path (nginx-compat/wicket-lua-protect.conf, lua/wicket.lua: the token checked
# in nginx's worker) side by side with plain nginx and the cached auth_request path, for one fan
# and for FANS distinct admitted fans (wrk's distinct.lua takes their turns, each with its own
# token and device): the "nginx-openresty" section of its page in bench/results/ and the `openresty_vs_plain` and
# `openresty_distinct_vs_plain` keys of bench/results/summary.json.
#
#   bash bench/nginx-compat/run.sh           # defaults: CONNS=32 SECONDS_=5 ROUNDS=5 FANS=10000
#   ONLY_OPENRESTY=1 bash bench/nginx-compat/run.sh   # the second part alone
#   OPENRESTY_BASELINE=<git revision> ...    # also that revision's OpenResty files, side by side
#
# With valgrind installed (IR=0 skips it) the OpenResty part also counts the user-space instructions
# nginx runs per request, plain and the OpenResty path (and the baseline): a figure no other tenant
# of a shared machine moves.
#
# Needs: cargo, nginx and Debian's lua module (libnginx-mod-http-lua, lua-resty-core,
# lua-resty-lrucache, lua-cjson), wrk, curl, taskset (the test command installs them); valgrind
# for the instruction counts. Loopback only.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CONNS="${CONNS:-32}"
SECONDS_="${SECONDS_:-5}"
ROUNDS="${ROUNDS:-5}"
SERVER_CPU="${SERVER_CPU:-0}"
WRK_CPU="${WRK_CPU:-1}"

export PATH="$PATH:/usr/sbin"
for bin in nginx wrk curl taskset; do
  command -v "$bin" >/dev/null || { echo "missing $bin" >&2; exit 1; }
done
FANS="${FANS:-10000}"
cd "$ROOT"
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -q -p wicket-edge   # SKIP_BUILD=1: the binary as built
WICKET="${CARGO_TARGET_DIR:-$ROOT/target}/release/wicket"

source "$ROOT/bench/lib.sh"
bench_workdir
PLAIN="$(free_port)"; AUTH="$(free_port)"; EDGE="$(free_port)"; ADMIN="$(free_port)"
CEIL="$(free_port)"; NOOP="$(free_port)"
CACHED="$(free_port)"; EDGE2="$(free_port)"; ADMIN2="$(free_port)"; LUA="$(free_port)"

mkdir -p "$WORK/site/buy/ev-1" "$WORK/nginx" "$WORK/nginx2" "$WORK/nginx3" "$WORK/wicket"
cp "$ROOT/static/site/index.html" "$WORK/site/buy/ev-1/index.html"
cp -r "$ROOT/nginx-compat/wicket.conf" "$ROOT/nginx-compat/wicket-protect.conf" "$ROOT/nginx-compat/wicket-lua-protect.conf" \
  "$ROOT/nginx-compat/wicket-native-protect.conf" "$ROOT/nginx-compat/lua" "$WORK/wicket/"
# The OpenResty path's native fast path (nginx-compat/native), built for this nginx from nginx-dev;
# NATIVE=0 measures the OpenResty path without it.
NATIVE_MODULE=""
[ "${NATIVE:-1}" = 0 ] || NATIVE_MODULE="$(bash "$ROOT/nginx-compat/native/build.sh")"
chmod -R a+rX "$WORK"
SIZE="$(stat -c %s "$WORK/site/buy/ev-1/index.html")"

nginx_head() { # dir edge-port [nginx-compat dir]: the start of an nginx.conf whose wicket_edge is that edge
  cat <<CONF
worker_processes 1;
pcre_jit on;
daemon off;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  keepalive_requests 100000;
  open_file_cache max=100 inactive=60s;
  default_type text/html;
  client_body_temp_path $1/body;
  proxy_temp_path $1/proxy;
  fastcgi_temp_path $1/fastcgi;
  uwsgi_temp_path $1/uwsgi;
  scgi_temp_path $1/scgi;
$(sed "s|/var/lib/nginx/wicket-auth|$1/wicket-auth|" "${3:-$ROOT/nginx-compat}/wicket-http.conf")
  upstream wicket_edge { server 127.0.0.1:$2; keepalive 64; }
CONF
}
{ nginx_head "$WORK/nginx" "$EDGE"; cat <<CONF
  server {
    listen 127.0.0.1:$PLAIN;
    root $WORK/site;
  }
  # The ceiling: the same auth_request to an authoriser that costs nothing (nginx's own return 204).
  upstream noop_auth { server 127.0.0.1:$NOOP; keepalive 64; }
  server {
    listen 127.0.0.1:$NOOP;
    location / { return 204; }
  }
  server {
    listen 127.0.0.1:$CEIL;
    root $WORK/site;
    location = /_noop_auth {
      internal;
      proxy_pass http://noop_auth/ok;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
    location /buy/ { auth_request /_noop_auth; }
  }
  server {
    listen 127.0.0.1:$AUTH;
    root $WORK/site;
    include $WORK/wicket/wicket.conf;
    location /buy/ { include $WORK/wicket/wicket-protect.conf; }
  }
}
CONF
} > "$WORK/nginx/nginx.conf"
# The same site in front of a second edge that lets nginx cache its passes for 1 s.
{ nginx_head "$WORK/nginx2" "$EDGE2"; cat <<CONF
  server {
    listen 127.0.0.1:$CACHED;
    root $WORK/site;
    include $WORK/wicket/wicket.conf;
    location /buy/ { include $WORK/wicket/wicket-protect.conf; }
  }
}
CONF
} > "$WORK/nginx2/nginx.conf"

# The OpenResty path, in front of the second edge (its own nginx, the lua module loaded).
HS_SECRET="bench-hs-secret-0123456789abcdef0123456789"
EDGE_SECRET="bench-edge-secret-0123456789abcdef"
openresty_conf() { # nginx-dir port nginx-compat-dir files-dir: an nginx with the OpenResty path of those files
  sed 's| modules/| /usr/lib/nginx/modules/|' /usr/share/nginx/modules-available/mod-http-ndk.conf \
    /usr/share/nginx/modules-available/mod-http-lua.conf
  # With the native fast path where those files have it (a baseline revision may not).
  local protect=wicket-lua-protect.conf
  if [ -n "$NATIVE_MODULE" ] && [ -f "$4/wicket-native-protect.conf" ]; then
    echo "load_module $NATIVE_MODULE;"
    protect=wicket-native-protect.conf
  fi
  nginx_head "$1" "$EDGE2" "$3"
  sed "s|/etc/nginx/wicket/lua/|$4/lua/|" "$3/wicket-lua-http.conf"
  cat <<CONF
  init_by_lua_block {
    require("wicket").configure{ edge = "127.0.0.1:$EDGE2", secret = "$EDGE_SECRET",
                                 keys = { ["hs-1"] = { alg = "HS256", secret = "$HS_SECRET" } } }
  }
  server {
    listen 127.0.0.1:$2;
    root $WORK/site;
    include $4/wicket.conf;
    location /buy/ { include $4/$protect; }
  }
}
CONF
}
openresty_conf "$WORK/nginx3" "$LUA" "$ROOT/nginx-compat" "$WORK/wicket" > "$WORK/nginx3/nginx.conf"
# OPENRESTY_BASELINE=<git revision>: that revision's nginx-compat/ as a fourth nginx, measured in
# the same rounds (rows `baseline`, `baseline_distinct`): a change to the OpenResty path side by side
# with what it replaces, on the same machine at the same time.
BASE_LUA=""
if [ -n "${OPENRESTY_BASELINE:-}" ]; then
  BASE_LUA="$(free_port)"
  mkdir -p "$WORK/base-src" "$WORK/nginx4"
  git -C "$ROOT" archive "$OPENRESTY_BASELINE" nginx-compat | tar -x -C "$WORK/base-src"
  chmod -R a+rX "$WORK/base-src"
  openresty_conf "$WORK/nginx4" "$BASE_LUA" "$WORK/base-src/nginx-compat" "$WORK/base-src/nginx-compat" > "$WORK/nginx4/nginx.conf"
fi

cat > "$WORK/wicket.toml" <<CONF
[edge]
listen = "127.0.0.1:$EDGE"
secret = "$EDGE_SECRET"
admin-listen = "127.0.0.1:$ADMIN"
admin-token = "bench-admin-token-0123456789"
threads = 1
user-header = "X-User-Id"
trusted-proxies = ["127.0.0.1"]
shutdown-grace-seconds = 1
auth-cache-seconds = 0
[tokens]
issuer = "wicket"
signing-kid = "hs-1"
[[tokens.keys]]
kid = "hs-1"
alg = "HS256"
secret = "$HS_SECRET"
[[rooms]]
id = "r1"
event = "ev-1"
target = "/buy/ev-1/"
protected = ["/buy/ev-1"]
token-seconds = 300
release = { mode = "fixed", rate = 50000.0 }
CONF
sed -e "s/127.0.0.1:$EDGE\"/127.0.0.1:$EDGE2\"/" -e "s/127.0.0.1:$ADMIN\"/127.0.0.1:$ADMIN2\"/" \
  -e 's/^auth-cache-seconds = 0$/auth-cache-seconds = 1/' "$WORK/wicket.toml" > "$WORK/wicket2.toml"
grep -q '^auth-cache-seconds = 1$' "$WORK/wicket2.toml" && grep -q "127.0.0.1:$EDGE2" "$WORK/wicket2.toml"

taskset -c "$SERVER_CPU" nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" &
PIDS+=($!)
RUST_LOG=error taskset -c "$SERVER_CPU" "$WICKET" serve --config "$WORK/wicket.toml" &
PIDS+=($!)
taskset -c "$SERVER_CPU" nginx -p "$WORK/nginx2" -c "$WORK/nginx2/nginx.conf" &
PIDS+=($!)
RUST_LOG=error taskset -c "$SERVER_CPU" "$WICKET" serve --config "$WORK/wicket2.toml" &
PIDS+=($!)
taskset -c "$SERVER_CPU" nginx -p "$WORK/nginx3" -c "$WORK/nginx3/nginx.conf" &
PIDS+=($!)
if [ -n "$BASE_LUA" ]; then
  taskset -c "$SERVER_CPU" nginx -p "$WORK/nginx4" -c "$WORK/nginx4/nginx.conf" &
  PIDS+=($!)
fi
for port in "$PLAIN" "$AUTH" "$EDGE" "$CACHED" "$EDGE2" "$LUA" $BASE_LUA; do
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
done

# One admitted fan per edge: join through nginx, poll until admitted, keep the cookies.
admitted_cookie() { # nginx-port → the fan's Cookie header
  local jar="$WORK/jar-$1" h=(-H "X-User-Id: bench-fan" -H "Accept: application/json")
  curl -s -c "$jar" -b "$jar" "${h[@]}" "http://127.0.0.1:$1/queue/r1" >/dev/null
  for _ in $(seq 1 50); do
    curl -s -c "$jar" -b "$jar" "${h[@]}" "http://127.0.0.1:$1/queue/r1/status" | grep -q '"admitted"' && break
    sleep 0.2
  done
  sed 's/^#HttpOnly_//' "$jar" | awk '!/^#/ && NF >= 7 {printf "%s%s=%s", sep, $6, $7; sep="; "}'
}
COOKIE="$(admitted_cookie "$AUTH")"
COOKIE2="$(admitted_cookie "$CACHED")"
for pair in "$AUTH|$COOKIE" "$CACHED|$COOKIE2"; do
  port="${pair%%|*}"; cookie="${pair#*|}"
  code="$(curl -s -o /dev/null -w '%{http_code}' -H "Cookie: $cookie" -H "X-User-Id: bench-fan" "http://127.0.0.1:$port/buy/ev-1/")"
  [ "$code" = 200 ] || { echo "the admitted fan got $code through nginx+auth on :$port" >&2; exit 1; }
  cmp <(curl -s "http://127.0.0.1:$PLAIN/buy/ev-1/") <(curl -s -H "Cookie: $cookie" -H "X-User-Id: bench-fan" "http://127.0.0.1:$port/buy/ev-1/")
done
# Without its cookies the cached site still refuses (a cache never answers for a stranger).
code="$(curl -s -o /dev/null -w '%{http_code}' -H "X-User-Id: bench-fan" -H "Accept: application/json" "http://127.0.0.1:$CACHED/buy/ev-1/")"
[ "$code" = 403 ] || { echo "a fan without cookies got $code through the cached site" >&2; exit 1; }

run_wrk() { # url [headers...] → "rps p99_ms"
  local url="$1"; shift
  taskset -c "$WRK_CPU" wrk -t1 -c"$CONNS" -d"${SECONDS_}s" --latency "$@" "$url" | wrk_figures
}
FAN=(-H "Cookie: $COOKIE" -H "X-User-Id: bench-fan")
FAN2=(-H "Cookie: $COOKIE2" -H "X-User-Id: bench-fan")
AUTHQ=(-H "X-Original-URI: /buy/ev-1/" -H "X-Original-Method: GET" -H "Cookie: $COOKIE" -H "X-User-Id: bench-fan")
taskset -c "$WRK_CPU" wrk -t1 -c8 -d2s "http://127.0.0.1:$PLAIN/buy/ev-1/" >/dev/null
LOAD="$(cut -d' ' -f1-3 /proc/loadavg)"
export CONNS SECONDS_ ROUNDS SIZE ROOT LOAD SERVER_CPU WRK_CPU
if [ -z "${ONLY_OPENRESTY:-}" ]; then
taskset -c "$WRK_CPU" wrk -t1 -c8 -d2s "${FAN[@]}" "http://127.0.0.1:$AUTH/buy/ev-1/" >/dev/null
RESULTS="$WORK/results.txt"
: > "$RESULTS"
for r in $(seq 1 "$ROUNDS"); do
  echo "plain $(run_wrk "http://127.0.0.1:$PLAIN/buy/ev-1/")" >> "$RESULTS"
  echo "ceiling $(run_wrk "http://127.0.0.1:$CEIL/buy/ev-1/")" >> "$RESULTS"
  echo "auth $(run_wrk "http://127.0.0.1:$AUTH/buy/ev-1/" "${FAN[@]}")" >> "$RESULTS"
  echo "cached $(run_wrk "http://127.0.0.1:$CACHED/buy/ev-1/" "${FAN2[@]}")" >> "$RESULTS"
  echo "endpoint $(run_wrk "http://127.0.0.1:$EDGE/wicket/auth" "${AUTHQ[@]}")" >> "$RESULTS"
  tail -5 "$RESULTS" | sed "s/^/round $r: /"
done

LOAD="$(cut -d' ' -f1-3 /proc/loadavg)"
export RESULTS LOAD
python3 - <<'PY'
import json, os, statistics, datetime, sys
rows = [l.split() for l in open(os.environ["RESULTS"]) if l.strip()]
def col(name, i): return [float(r[i]) for r in rows if r[0] == name]
# Ratio per round (same machine conditions), then the median of the rounds.
ratios = [a / p for a, p in zip(col("auth", 1), col("plain", 1))]
ratio = statistics.median(ratios)
ceiling = statistics.median(c / p for c, p in zip(col("ceiling", 1), col("plain", 1)))
of_ceiling = statistics.median(a / c for a, c in zip(col("auth", 1), col("ceiling", 1)))
cached_ratios = [c / p for c, p in zip(col("cached", 1), col("plain", 1))]
cached_ratio = statistics.median(cached_ratios)
k_rps, k_p99 = statistics.median(col("cached", 1)), statistics.median(col("cached", 2))
p_rps, a_rps, e_rps, c_rps = (statistics.median(col(n, 1)) for n in ("plain", "auth", "endpoint", "ceiling"))
p_p99, a_p99, e_p99, c_p99 = (statistics.median(col(n, 2)) for n in ("plain", "auth", "endpoint", "ceiling"))
conns, secs, rounds = (int(os.environ[k]) for k in ("CONNS", "SECONDS_", "ROUNDS"))
today = datetime.date.today().isoformat()
entry = {
    # The figure of record: nginx keeping the edge's passes for 1 s, as sites run it on sale night.
    "ratio": round(cached_ratio, 3), "round_ratios": [round(r, 3) for r in cached_ratios], "goal": 0.5,
    "configuration": "auth-cache-seconds = 1 (the default; nginx-compat/README.md, Caching the auth answer)",
    "every_request_ratio": round(ratio, 3), "every_request_round_ratios": [round(r, 3) for r in ratios],
    "cached_auth_seconds": 1, "cached_rps": round(k_rps), "cached_p99_ms": round(k_p99, 3),
    "noop_auth_ratio": round(ceiling, 3), "of_noop_auth": round(of_ceiling, 3), "noop_auth_rps": round(c_rps),
    "plain_rps": round(p_rps), "auth_rps": round(a_rps), "plain_p99_ms": round(p_p99, 3), "auth_p99_ms": round(a_p99, 3),
    "auth_endpoint_rps": round(e_rps), "auth_endpoint_p99_ms": round(e_p99, 3),
    "connections": conns, "seconds": secs, "rounds": rounds, "page_bytes": int(os.environ["SIZE"]), "date": today,
}
root = os.environ["ROOT"]
sys.path.insert(0, os.path.join(root, "bench"))
import results
results.update_summary(root, {"nginx_auth_vs_plain": entry})
per_round = "\n".join(f"| {i // 5 + 1} | {r[0]} | {float(r[1]):.0f} | {float(r[2]):.2f} ms |" for i, r in enumerate(rows))
section = f"""<!-- begin:nginx-auth -->
## nginx auth_request to Wicket vs plain nginx

Command: `bash bench/nginx-compat/run.sh` (CONNS={conns} SECONDS_={secs} ROUNDS={rounds})

{os.cpu_count()} cores, {today}. An admitted fan's keep-alive GET of a protected page ({os.environ["SIZE"]} bytes,
from disk) through nginx with `nginx-compat/wicket.conf` (every request makes an `auth_request` subrequest
to the edge, which checks identity, limits, blocklist and the admission token and its session) against the
same nginx serving the page without it. nginx (1 worker) and the edge (1 thread) share CPU
{os.environ["SERVER_CPU"]}; `wrk -t1 -c{conns}` runs on CPU {os.environ["WRK_CPU"]}. Rounds alternate; the ratio is
the median of the per-round ratios. Load average at the end: {os.environ["LOAD"]}.

| | requests/s | P99 |
|---|---|---|
| nginx alone | {p_rps:.0f} | {p_p99:.2f} ms |
| nginx + auth_request to an authoriser that costs nothing (nginx `return 204`) | {c_rps:.0f} | {c_p99:.2f} ms |
| nginx + auth_request to Wicket, every request judged (`auth-cache-seconds = 0`) | {a_rps:.0f} | {a_p99:.2f} ms |
| nginx + auth_request to Wicket, passes cached by nginx for 1 s (`auth-cache-seconds = 1`, the default) | {k_rps:.0f} | {k_p99:.2f} ms |
| the edge's `/wicket/auth` alone (1 thread) | {e_rps:.0f} | {e_p99:.2f} ms |

**nginx_auth_vs_plain = {cached_ratio:.2f}** with nginx keeping the edge's passes for 1 s, the edge's default
(`auth-cache-seconds = 1`; per round: {", ".join(f"{r:.2f}" for r in cached_ratios)});
goal ≥ 0.5 {"met" if cached_ratio >= 0.5 else "not met"}. With every request judged (`auth-cache-seconds = 0`):
{ratio:.2f} (per round: {", ".join(f"{r:.2f}" for r in ratios)}).
nginx's `auth_request` machinery alone — a subrequest proxied over a kept-alive upstream connection to an
authoriser that answers 204 for free — already runs at {ceiling:.2f}× plain nginx when both share one core, so no
authoriser judging every request can reach 0.5 in this setup; Wicket reaches {of_ceiling:.2f} of that ceiling.
wrk repeats one admitted fan's request, so nearly every cached-run request is a hit; with many fans, nginx
asks the edge once per fan, page and second, and the figure lies between the two. The cache trades freshness for it: a revocation, block or pause reaches a cached pass within 1 s, and a
path an edge limit covers is never cached (nginx-compat/README.md "Caching the auth answer").

| round | server | requests/s | P99 |
|---|---|---|---|
{per_round}
<!-- end:nginx-auth -->"""
results.write_section(root, "nginx-auth", section)
print(f"nginx_auth_vs_plain = {cached_ratio:.3f} (auth-cache-seconds = 1; every request judged: {ratio:.3f}); auth endpoint P99 {e_p99:.2f} ms")
PY
fi

# The OpenResty path. Fresh tokens (they live 300 s): FANS distinct fans admitted through the
# second edge, whose sessions both sites ask about, and the one fan of each site again.
started="$(date +%s)"
python3 "$ROOT/bench/nginx-compat/admit_fans.py" "127.0.0.1:$EDGE2" "$FANS" "$WORK/fans.txt"
echo "$FANS fans admitted in $(( $(date +%s) - started )) s"
COOKIE2="$(admitted_cookie "$CACHED")"
COOKIE3="$(admitted_cookie "$LUA")"
FAN2=(-H "Cookie: $COOKIE2" -H "X-User-Id: bench-fan")
FAN3=(-H "Cookie: $COOKIE3" -H "X-User-Id: bench-fan")
code="$(curl -s -o /dev/null -w '%{http_code}' "${FAN3[@]}" "http://127.0.0.1:$LUA/buy/ev-1/")"
[ "$code" = 200 ] || { echo "the admitted fan got $code through the OpenResty path" >&2; exit 1; }
cmp <(curl -s "http://127.0.0.1:$PLAIN/buy/ev-1/") <(curl -s "${FAN3[@]}" "http://127.0.0.1:$LUA/buy/ev-1/")
if [ -n "$BASE_LUA" ]; then
  COOKIE4="$(admitted_cookie "$BASE_LUA")"
  FAN4=(-H "Cookie: $COOKIE4" -H "X-User-Id: bench-fan")
  cmp <(curl -s "http://127.0.0.1:$PLAIN/buy/ev-1/") <(curl -s "${FAN4[@]}" "http://127.0.0.1:$BASE_LUA/buy/ev-1/")
fi
code="$(curl -s -o /dev/null -w '%{http_code}' -H "X-User-Id: bench-fan" -H "Accept: application/json" "http://127.0.0.1:$LUA/buy/ev-1/")"
[ "$code" = 403 ] || { echo "a fan without cookies got $code through the OpenResty path" >&2; exit 1; }
FANS_FILE="$WORK/fans.txt"
run_fans() { # url → "rps p99_ms", each request the next fan's
  taskset -c "$WRK_CPU" env FANS="$FANS_FILE" wrk -t1 -c"$CONNS" -d"${SECONDS_}s" --latency -s "$ROOT/bench/nginx-compat/distinct.lua" "$1" | wrk_figures
}
warm_fans() { # url: one request of every fan (their sessions known to the path before a measured run)
  awk -F'\t' -v url="$1" '{printf "%surl = \"%s\"\noutput = /dev/null\nwrite-out = \"%%{http_code}\\n\"\nheader = \"Cookie: %s\"\nheader = \"X-User-Id: %s\"\n", (NR > 1 ? "next\n" : ""), url, $1, $2}' \
    "$FANS_FILE" > "$WORK/warm.cfg"
  [ "$(taskset -c "$WRK_CPU" curl -s --parallel --parallel-max "$CONNS" -K "$WORK/warm.cfg" 2>/dev/null | sort -u)" = 200 ] ||
    { echo "a fan's warm-up request through $1 was not a 200" >&2; exit 1; }
}
# Warm-up: the OpenResty path asks the edge once about each fan's session (then confirms them in
# its reports); the cached auth site fills its cache.
taskset -c "$WRK_CPU" wrk -t1 -c8 -d2s "${FAN3[@]}" "http://127.0.0.1:$LUA/buy/ev-1/" >/dev/null
warm_fans "http://127.0.0.1:$LUA/buy/ev-1/"
if [ -n "$BASE_LUA" ]; then
  taskset -c "$WRK_CPU" wrk -t1 -c8 -d2s "${FAN4[@]}" "http://127.0.0.1:$BASE_LUA/buy/ev-1/" >/dev/null
  warm_fans "http://127.0.0.1:$BASE_LUA/buy/ev-1/"
fi
SECONDS_=3 run_fans "http://127.0.0.1:$CACHED/buy/ev-1/" >/dev/null
RESULTS2="$WORK/results2.txt"
: > "$RESULTS2"
# The CPU the servers spend per request (nginx's processes, with the edge where it takes part),
# besides requests/s: on a shared machine another tenant's load moves requests/s a lot and the
# CPU per request little (`cpu_ratio`: plain nginx's CPU per request over the path's).
cpu_ticks() { # pids (nginx masters: their workers too) → CPU ticks so far
  local t=0 p
  for p in "$@" $(for m in "$@"; do pgrep -P "$m"; done); do
    t=$(( t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0) ))
  done
  echo "$t"
}
edge_decided() { # the second edge's count of protected-path decisions so far (its /wicket/auth answers)
  curl -s -H "Authorization: Bearer bench-admin-token-0123456789" "http://127.0.0.1:$ADMIN2/metrics" |
    awk '/^wicket_edge_requests_total\{/ && /route="protected"/ {s += $NF} END {printf "%d\n", s}'
}
row() { # label "server pids" wrk-args... → a line of RESULTS2: label rps p99_ms cpu_us_per_request edge_share
  local label="$1" servers="$2" out t0 t1 n d0 d1
  shift 2
  d0="$(edge_decided)"; t0="$(cpu_ticks $servers)"
  out="$(taskset -c "$WRK_CPU" wrk -t1 -c"$CONNS" -d"${SECONDS_}s" --latency "$@")"
  t1="$(cpu_ticks $servers)"; d1="$(edge_decided)"
  n="$(echo "$out" | awk '/requests in/ {print $1}')"
  # edge_share: of the requests, the share the second edge decided (the cached auth_request path's
  # cache misses; the OpenResty path's requests its fast path did not pass); 0 for plain nginx.
  echo "$label $(echo "$out" | wrk_figures) $(python3 -c "print(round(($t1 - $t0) * 1e6 / $(getconf CLK_TCK) / $n, 2), round(($d1 - $d0) / $n, 4))")" >> "$RESULTS2"
}
NGINX1="${PIDS[0]}"; NGINX2="${PIDS[2]}"; EDGE2_PID="${PIDS[3]}"; NGINX3="${PIDS[4]}"; NGINX4="${PIDS[5]:-}"
DISTINCT=(-s "$ROOT/bench/nginx-compat/distinct.lua")
# Each distinct run follows the same load unmeasured, so the fans are active, as on a sale's page:
# one request of every fan for the OpenResty path (a fan's first request after its session lapsed
# in nginx — not seen for `idle`, 30 s, as between rounds — goes to the edge, and a run measures the
# fans' repeated requests), 2 s for the cached auth path (its passes last one second). A round is
# skipped when the tokens would run out in it.
ROWS=6; [ -z "$BASE_LUA" ] || ROWS=8
round_s=$(( ROWS * SECONDS_ + ROWS - 2 + 10 + (ROWS - 4) * 5 ))
for r in $(seq 1 "$ROUNDS"); do
  if [ $(( $(date +%s) - started + round_s )) -gt 290 ]; then
    echo "round $r skipped: the fans' tokens (300 s) would expire in it" >&2
    break
  fi
  # Plain nginx gets the very requests the paths get (the fan's cookies and user id: parsing them
  # is nginx's work either way). The OpenResty path and plain nginx run back to back, in turns
  # first (a tenant's load that rises or falls across a pair counts against each in turn).
  one_plain() { row plain "$NGINX1" "${FAN3[@]}" "http://127.0.0.1:$PLAIN/buy/ev-1/"; }
  one_openresty() { row openresty "$NGINX3 $EDGE2_PID" "${FAN3[@]}" "http://127.0.0.1:$LUA/buy/ev-1/"; }
  distinct_plain() { FANS="$FANS_FILE" row plain_distinct "$NGINX1" "${DISTINCT[@]}" "http://127.0.0.1:$PLAIN/buy/ev-1/"; }
  distinct_openresty() { FANS="$FANS_FILE" row openresty_distinct "$NGINX3 $EDGE2_PID" "${DISTINCT[@]}" "http://127.0.0.1:$LUA/buy/ev-1/"; }
  if [ $(( r % 2 )) = 1 ]; then one_plain; one_openresty; else one_openresty; one_plain; fi
  row cached "$NGINX2 $EDGE2_PID" "${FAN2[@]}" "http://127.0.0.1:$CACHED/buy/ev-1/"
  warm_fans "http://127.0.0.1:$LUA/buy/ev-1/"
  if [ $(( r % 2 )) = 1 ]; then distinct_plain; distinct_openresty; else distinct_openresty; distinct_plain; fi
  SECONDS_=2 run_fans "http://127.0.0.1:$CACHED/buy/ev-1/" >/dev/null
  FANS="$FANS_FILE" row cached_distinct "$NGINX2 $EDGE2_PID" "${DISTINCT[@]}" "http://127.0.0.1:$CACHED/buy/ev-1/"
  if [ -n "$BASE_LUA" ]; then
    row baseline "$NGINX4 $EDGE2_PID" "${FAN4[@]}" "http://127.0.0.1:$BASE_LUA/buy/ev-1/"
    warm_fans "http://127.0.0.1:$BASE_LUA/buy/ev-1/"
    FANS="$FANS_FILE" row baseline_distinct "$NGINX4 $EDGE2_PID" "${DISTINCT[@]}" "http://127.0.0.1:$BASE_LUA/buy/ev-1/"
  fi
  tail -"$ROWS" "$RESULTS2" | sed "s/^/round $r: /"
done
# Every request above was a 2xx (wrk_figures fails otherwise): no fan's token ran out mid-run.
LOAD="$(cut -d' ' -f1-3 /proc/loadavg)"

# The user-space instructions nginx runs per request (valgrind's cachegrind; no machine noise moves
# them): plain nginx and the OpenResty path, one fan's request, each nginx alone in one process
# (`master_process off`) on its original's port (the original stopped first), the same config. N requests over one kept-alive
# connection, twice (1,000 and 3,000): the difference over 2,000 leaves out start and stop. The
# kernel's share (the socket, sendfile) is the same for both and not counted. Skipped without
# valgrind (IR=0 skips it too).
instructions_per_request() { # name nginx-dir port fan-headers... → instructions per request (that fan's request)
  local name="$1" dir="$2" port="$3" n total=()
  shift 3
  mkdir -p "$WORK/ir-$name"
  sed -e "s/^worker_processes 1;/worker_processes 1; master_process off;/" \
    -e "s|^pid $dir/nginx.pid;|pid $WORK/ir-$name/nginx.pid;|" "$dir/nginx.conf" > "$WORK/ir-$name/nginx.conf"
  for n in 1000 3000; do
    # CALLGRIND_DIR=<dir>: callgrind instead, its profiles kept there (where the instructions go).
    if [ -n "${CALLGRIND_DIR:-}" ]; then
      mkdir -p "$CALLGRIND_DIR"
      valgrind --tool=callgrind --callgrind-out-file="$CALLGRIND_DIR/$name-$n.out" \
        nginx -p "$dir" -c "$WORK/ir-$name/nginx.conf" 2> "$WORK/ir-$name/valgrind.log" &
    else
      valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
        nginx -p "$dir" -c "$WORK/ir-$name/nginx.conf" 2> "$WORK/ir-$name/valgrind.log" &
    fi
    local vp=$!
    for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.2; done
    { for _ in $(seq 1 "$n"); do echo "url = \"http://127.0.0.1:$port/buy/ev-1/\""; echo "output = /dev/null"; done; } > "$WORK/ir-$name/urls"
    [ "$(curl -s -K "$WORK/ir-$name/urls" "$@" -w '%{http_code}\n' | sort -u)" = 200 ] || { echo "$name under valgrind: not every answer a 200" >&2; exit 1; }
    kill -QUIT "$vp"; wait "$vp" || true
    total+=("$(awk '/I *refs/ {gsub(",", "", $NF); print $NF}' "$WORK/ir-$name/valgrind.log")")
  done
  echo $(( (total[1] - total[0]) / 2000 ))
}
# What the OpenResty path's reports cost with no request at all: the sessions of the distinct fans
# are still reported every second (for `idle`, 30 s, after their last request); 5 s of CPU of the
# nginx and of the edge, apart.
tick="$(getconf CLK_TCK)"
n0="$(cpu_ticks "$NGINX3")"; e0="$(cpu_ticks "$EDGE2_PID")"
sleep 5
n1="$(cpu_ticks "$NGINX3")"; e1="$(cpu_ticks "$EDGE2_PID")"
REPORT_NGINX_MS=$(( (n1 - n0) * 1000 / tick / 5 )); REPORT_EDGE_MS=$(( (e1 - e0) * 1000 / tick / 5 ))
echo "reports with no load, $FANS sessions: nginx $REPORT_NGINX_MS ms, edge $REPORT_EDGE_MS ms of CPU a second"
IR_PLAIN=""; IR_OPENRESTY=""; IR_BASELINE=""
if [ "${IR:-1}" != 0 ] && command -v valgrind >/dev/null; then
  # Each nginx copy takes its original's port: the originals stop (the edge stays for the Lua path).
  kill "$NGINX1" "$NGINX3"; wait "$NGINX1" "$NGINX3" 2>/dev/null || true
  IR_PLAIN="$(instructions_per_request plain "$WORK/nginx" "$PLAIN" "${FAN3[@]}")"
  IR_OPENRESTY="$(instructions_per_request openresty "$WORK/nginx3" "$LUA" "${FAN3[@]}")"
  echo "instructions per request: plain nginx $IR_PLAIN, OpenResty path $IR_OPENRESTY"
  if [ -n "$BASE_LUA" ]; then
    kill "$NGINX4"; wait "$NGINX4" 2>/dev/null || true
    IR_BASELINE="$(instructions_per_request baseline "$WORK/nginx4" "$BASE_LUA" "${FAN4[@]}")"
    echo "instructions per request: the baseline's OpenResty path $IR_BASELINE"
  fi
fi
export RESULTS2 LOAD FANS IR_PLAIN IR_OPENRESTY IR_BASELINE ROWS NATIVE_MODULE REPORT_NGINX_MS REPORT_EDGE_MS
export OPENRESTY_BASELINE="${OPENRESTY_BASELINE:-}"
python3 - <<'PY'
import os, statistics, datetime, sys
rows = [l.split() for l in open(os.environ["RESULTS2"]) if l.strip()]
def col(name, i): return [float(r[i]) for r in rows if r[0] == name]
# Each path against plain nginx serving the same requests (one fan's, or the distinct fans' in turn).
def base(name): return "plain_distinct" if name.endswith("_distinct") else "plain"
def ratios(name): return [a / p for a, p in zip(col(name, 1), col(base(name), 1))]
med = {n: statistics.median(ratios(n)) for n in ("cached", "openresty", "cached_distinct", "openresty_distinct")}
rps = {n: statistics.median(col(n, 1)) for n in ("plain", "cached", "openresty", "plain_distinct", "cached_distinct", "openresty_distinct")}
p99 = {n: statistics.median(col(n, 2)) for n in rps}
cpu = {n: statistics.median(col(n, 3)) for n in rps}
share = {n: statistics.median(col(n, 4)) for n in rps}
def cpu_ratios(name): return [p / a for a, p in zip(col(name, 3), col(base(name), 3))]
cmed = {n: statistics.median(cpu_ratios(n)) for n in med}
conns, secs, fans = (int(os.environ[k]) for k in ("CONNS", "SECONDS_", "FANS"))
rounds = len(col("plain", 1))
today = datetime.date.today().isoformat()
def entry(name, goal):
    return {"ratio": round(med[name], 3), "round_ratios": [round(r, 3) for r in ratios(name)], "goal": goal,
            "rps": round(rps[name]), "p99_ms": round(p99[name], 3), "plain_rps": round(rps[base(name)]),
            "cpu_ratio": round(cmed[name], 3), "round_cpu_ratios": [round(r, 3) for r in cpu_ratios(name)],
            "cpu_us_per_request": cpu[name], "plain_cpu_us_per_request": cpu[base(name)], "edge_decided_share": share[name],
            "auth_request_cached_ratio": round(med["cached" if name == "openresty" else "cached_distinct"], 3),
            "fans": 1 if name == "openresty" else fans, "connections": conns, "seconds": secs, "rounds": rounds,
            "page_bytes": int(os.environ["SIZE"]), "date": today}
root = os.environ["ROOT"]
sys.path.insert(0, os.path.join(root, "bench"))
import results
ir_plain, ir_lua = os.environ.get("IR_PLAIN", ""), os.environ.get("IR_OPENRESTY", "")
one = entry("openresty", 0.9)
baseline = os.environ.get("OPENRESTY_BASELINE", "")
base_text = ""
if baseline and col("baseline", 1):
    def med_of(xs): return round(statistics.median(xs), 3)
    bl = {}
    for name in ("openresty", "openresty_distinct"):
        bname = "baseline" + ("_distinct" if name.endswith("_distinct") else "")
        rps_change = [a / b for a, b in zip(col(name, 1), col(bname, 1))]
        cpu_change = [b / a for a, b in zip(col(name, 3), col(bname, 3))]
        bl[name] = {"revision": baseline, "baseline_ratio": round(statistics.median([a / p for a, p in zip(col(bname, 1), col(base(name), 1))]), 3),
                    "rps_vs_baseline": med_of(rps_change), "cpu_vs_baseline": med_of(cpu_change),
                    "round_rps_vs_baseline": [round(x, 3) for x in rps_change], "edge_decided_share": statistics.median(col(bname, 4))}
    base_text = (f"\n\nSide by side with `{baseline}`'s nginx-compat/ (`OPENRESTY_BASELINE={baseline}`, a fourth nginx in the same rounds):"
                 f" one fan {bl['openresty']['baseline_ratio']:.2f} × plain for the baseline against {med['openresty']:.2f} for this tree"
                 f" (requests/s this tree over the baseline, median of rounds {bl['openresty']['rps_vs_baseline']:.3f}, by CPU per request {bl['openresty']['cpu_vs_baseline']:.3f});"
                 f" {fans} fans {bl['openresty_distinct']['baseline_ratio']:.2f} against {med['openresty_distinct']:.2f}"
                 f" ({bl['openresty_distinct']['rps_vs_baseline']:.3f}, by CPU {bl['openresty_distinct']['cpu_vs_baseline']:.3f});"
                 f" the baseline's requests decided by the edge: {bl['openresty']['edge_decided_share']:.2%} and {bl['openresty_distinct']['edge_decided_share']:.2%}.")
if ir_plain and ir_lua:
    one["instructions_per_request"] = {"plain": int(ir_plain), "openresty": int(ir_lua), "ratio": round(int(ir_plain) / int(ir_lua), 3)}
    if os.environ.get("IR_BASELINE"):
        one["instructions_per_request"]["baseline"] = int(os.environ["IR_BASELINE"])
many = entry("openresty_distinct", 0.8)
if base_text:
    one["baseline"], many["baseline"] = bl["openresty"], bl["openresty_distinct"]
results.update_summary(root, {"openresty_vs_plain": one, "openresty_distinct_vs_plain": many})
if ir_plain and ir_lua:
    ir_text = (f"\n\nUser-space instructions per request (valgrind's cachegrind, one fan's request, 1,000 and 3,000 requests over one\n"
               f"connection to each nginx alone, the difference over 2,000; the kernel's share is not counted and is the same for both):\n"
               f"plain nginx {int(ir_plain):,}, the OpenResty path {int(ir_lua):,} (+{int(ir_lua) - int(ir_plain):,}; {int(ir_plain) / int(ir_lua):.2f} × plain by instructions)"
               + (f"; the baseline's path {int(os.environ['IR_BASELINE']):,}." if os.environ.get("IR_BASELINE") else "."))
else:
    ir_text = ""
per_round = "\n".join(f"| {i // int(os.environ['ROWS']) + 1} | {r[0]} | {float(r[1]):.0f} | {float(r[2]):.2f} ms | {float(r[3]):.1f} µs | {float(r[4]):.2%} |" for i, r in enumerate(rows))
def met(name, goal): return "met" if med[name] >= goal else "not met"
path_text = ("`wicket-native-protect.conf`, the OpenResty path with its native fast path (nginx-compat/native's module, built by\n"
             "`native/build.sh`: a fan's repeated request passes in C without entering Lua; `NATIVE=0` measures the path without it)"
             if os.environ.get("NATIVE_MODULE") else "`wicket-lua-protect.conf`, the OpenResty path without its native fast path (`NATIVE=0`)")
report_text = (f"\n\nThe reports alone, with no request at all (5 s after the last round, {fans} sessions still reported every second):"
               f" nginx {os.environ['REPORT_NGINX_MS']} ms and the edge {os.environ['REPORT_EDGE_MS']} ms of CPU a second.")
section = f"""<!-- begin:nginx-openresty -->
## OpenResty path (token checked in nginx) vs auth_request vs plain nginx

Command: `bash bench/nginx-compat/run.sh` (CONNS={conns} SECONDS_={secs} ROUNDS={rounds} FANS={fans}; this part alone:
`{"OPENRESTY_BASELINE=" + baseline + " " if baseline else ""}ONLY_OPENRESTY=1 bash bench/nginx-compat/run.sh`)

{os.cpu_count()} cores, {today}. The same protected page ({os.environ["SIZE"]} bytes, from disk) through plain nginx, through
nginx with `wicket-protect.conf` (`auth_request`, the edge's passes cached for 1 s) and through nginx with
{path_text} (Debian's libnginx-mod-http-lua: lua/wicket.lua checks the admission token, its holder
and the edge's confirmation of the session in nginx's worker, and reports the sessions it passed to the edge every
second). One fan: wrk repeats one admitted fan's request. Plain nginx gets the very same requests (the fan's cookies
and user id), one fan's and the distinct fans' in turn. {fans} fans: {fans} fans admitted through the edge, each
with its own token, device cookie and user id; wrk's `distinct.lua` sends each request as the next fan's. Each
nginx has 1 worker; nginx and the edge (1 thread) share CPU {os.environ["SERVER_CPU"]}, `wrk -t1 -c{conns}` runs on
CPU {os.environ["WRK_CPU"]}. In each round plain nginx and the OpenResty path run back to back, which of the two
first alternating from round to round; the distinct runs follow the same load, unmeasured, so the fans are active: one request of every fan for the OpenResty path (a fan's first request after its session lapsed in
nginx goes to the edge; the runs measure repeated requests), 2 s for the cached auth path. Ratios are medians
of per-round ratios; every answer was a 2xx.
Load average at the end: {os.environ["LOAD"]}.

The servers' CPU per request (nginx's processes, and the edge where the path asks it or takes its reports, from
`/proc`) is the steadier figure on a shared machine: `cpu_ratio` is plain nginx's CPU per request over the path's.
"Decided by the edge": the share of the requests the edge answered a `/wicket/auth` subrequest for (its
count of protected-path decisions over the run; `edge_decided_share`): the cache's misses, the OpenResty path's
requests its fast path did not pass.

| | requests/s | P99 | × plain nginx | CPU per request | × plain nginx, CPU | decided by the edge |
|---|---|---|---|---|---|---|
| nginx alone, one fan | {rps["plain"]:.0f} | {p99["plain"]:.2f} ms | 1 | {cpu["plain"]:.1f} µs | 1 | — |
| auth_request, passes cached 1 s, one fan | {rps["cached"]:.0f} | {p99["cached"]:.2f} ms | {med["cached"]:.2f} | {cpu["cached"]:.1f} µs | {cmed["cached"]:.2f} | {share["cached"]:.2%} |
| OpenResty path, one fan | {rps["openresty"]:.0f} | {p99["openresty"]:.2f} ms | **{med["openresty"]:.2f}** | {cpu["openresty"]:.1f} µs | **{cmed["openresty"]:.2f}** | {share["openresty"]:.2%} |
| nginx alone, {fans} fans | {rps["plain_distinct"]:.0f} | {p99["plain_distinct"]:.2f} ms | 1 | {cpu["plain_distinct"]:.1f} µs | 1 | — |
| auth_request, passes cached 1 s, {fans} fans | {rps["cached_distinct"]:.0f} | {p99["cached_distinct"]:.2f} ms | {med["cached_distinct"]:.2f} | {cpu["cached_distinct"]:.1f} µs | {cmed["cached_distinct"]:.2f} | {share["cached_distinct"]:.2%} |
| OpenResty path, {fans} fans | {rps["openresty_distinct"]:.0f} | {p99["openresty_distinct"]:.2f} ms | **{med["openresty_distinct"]:.2f}** | {cpu["openresty_distinct"]:.1f} µs | **{cmed["openresty_distinct"]:.2f}** | {share["openresty_distinct"]:.2%} |

**openresty_vs_plain = {med["openresty"]:.2f}** (per round: {", ".join(f"{r:.2f}" for r in ratios("openresty"))}; goal ≥ 0.9 {met("openresty", 0.9)});
**openresty_distinct_vs_plain = {med["openresty_distinct"]:.2f}** (per round: {", ".join(f"{r:.2f}" for r in ratios("openresty_distinct"))}; goal ≥ 0.8 {met("openresty_distinct", 0.8)}).
By CPU per request: {cmed["openresty"]:.2f} (one fan; per round {", ".join(f"{r:.2f}" for r in cpu_ratios("openresty"))}) and
{cmed["openresty_distinct"]:.2f} ({fans} fans; per round {", ".join(f"{r:.2f}" for r in cpu_ratios("openresty_distinct"))}).{ir_text}{base_text}{report_text}

| round | server | requests/s | P99 | CPU per request | decided by the edge |
|---|---|---|---|---|---|
{per_round}
<!-- end:nginx-openresty -->"""
results.write_section(root, "nginx-openresty", section)
print(f"openresty_vs_plain = {med['openresty']:.3f}, openresty_distinct_vs_plain = {med['openresty_distinct']:.3f} (auth_request cached: {med['cached']:.3f} / {med['cached_distinct']:.3f}); CPU: {cmed['openresty']:.3f} / {cmed['openresty_distinct']:.3f} (auth_request cached: {cmed['cached']:.3f} / {cmed['cached_distinct']:.3f})")
PY
