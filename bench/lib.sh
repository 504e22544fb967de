# Shared by the bench/*/run.sh scripts: `source "$ROOT/bench/lib.sh"`.
#
#   bench_workdir        WORK (a fresh temporary folder), PIDS (processes to stop), and a trap that stops
#                        them and removes WORK on exit
#   free_port            a loopback port free right now
#   wrk ... | wrk_figures    "requests_per_second p99_ms" from wrk's --latency output; fails on non-2xx answers
#   pin_sets N           SERVER_CPUS (N CPUs for the server under test) and LOAD_CPUS (the rest: wrk, origin),
#                        disjoint when the machine has more than N CPUs; ORIGIN_WORKERS for an origin there
#   load_settings R      THREADS (1), CONNS (64), SECONDS_ (10), ROUNDS (R), WRK_THREADS (1), each kept when set
#   release_edge         builds the edge (release; not with SKIP_BUILD set) and sets WICKET to its binary

bench_workdir() {
  WORK="$(mktemp -d)"
  PIDS=()
  trap bench_cleanup EXIT
}

bench_cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  # Servers that take their graceful stop (Pingora waits out its grace period) are killed after 2 s.
  for _ in $(seq 1 20); do
    local alive=0
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wrk_figures() {
  python3 -c '
import re, sys
out = sys.stdin.read()
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
m = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", out)
v, unit = float(m.group(1)), m.group(2)
p99 = v / 1000 if unit == "us" else v * 1000 if unit == "s" else v
errs = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
if errs: sys.exit("non-2xx responses: " + errs.group(1))
print(rps, p99)'
}

pin_sets() {
  local n="${1:-1}" cpus
  cpus="$(nproc)"
  if [ "$cpus" -gt "$n" ]; then
    SERVER_CPUS="0-$((n - 1))"
    LOAD_CPUS="$n-$((cpus - 1))"
  else
    echo "warning: $cpus CPUs for $n server threads: server and load share CPUs (ratios flatter the cheaper server)" >&2
    SERVER_CPUS="0-$((cpus - 1))"
    LOAD_CPUS="$SERVER_CPUS"
  fi
  [ "$n" -eq 1 ] && SERVER_CPUS=0
  ORIGIN_WORKERS="$(( (cpus - n) / 2 > 0 ? (cpus - n) / 2 : 1 ))"
}

load_settings() {
  THREADS="${THREADS:-1}"
  CONNS="${CONNS:-64}"
  SECONDS_="${SECONDS_:-10}"
  ROUNDS="${ROUNDS:-$1}"
  WRK_THREADS="${WRK_THREADS:-1}"
}

release_edge() {
  [ -n "${SKIP_BUILD:-}" ] || (cd "$ROOT" && cargo build --release -q -p wicket-edge)
  WICKET="$ROOT/target/release/wicket"
}
