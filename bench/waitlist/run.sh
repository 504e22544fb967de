#!/usr/bin/env bash
# What the waitlist (issue #39) costs a hold on Redis: Redis's own microseconds per call of lua/hold.lua for a
# hold that finds the event sold out with an empty and with a full waitlist (50 fans), a listed fan asking
# again, and a hold that takes a ticket — the kinds in turn within each round (core/examples/waitlist_cost.rs).
# redis-server on CPU 0, the client on CPU 1 (Redis's time per call is its own, whoever else runs).
#
#   bash bench/waitlist/run.sh            # HOLDS (5000 per kind and round), ROUNDS (5), SKIP_BUILD=1
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/bench/lib.sh"
bench_workdir
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
if [ -z "${SKIP_BUILD:-}" ]; then
  (cd "$ROOT" && cargo build --release -q -p wicket-core --example waitlist_cost)
fi
PORT="$(free_port)"
taskset -c 0 redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" >"$WORK/redis.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
taskset -c 1 "$TARGET/release/examples/waitlist_cost" --url "redis://127.0.0.1:$PORT/0" \
  --holds "${HOLDS:-5000}" --rounds "${ROUNDS:-5}"
