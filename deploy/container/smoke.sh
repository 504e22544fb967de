#!/usr/bin/env bash
# Smoke test of the compose setup (compose.yaml, already up): through the edge's public port only, a visitor
# joins the example room, is admitted, and holds a ticket of the example event; then the edge is stopped with
# SIGTERM and must exit 0 within its grace. Needs curl; exits non-zero on the first step that fails.
#
#   bash deploy/container/smoke.sh          # WICKET_PORT (8080) as in compose.yaml; ENGINE: podman (or docker)
set -euo pipefail
cd "$(dirname "$0")"
base="http://127.0.0.1:${WICKET_PORT:-8080}"
jar=$(mktemp)
trap 'rm -f "$jar"' EXIT
fail() { echo "smoke: FAIL: $*" >&2; exit 1; }
field() { sed -n "s/.*\"$1\":\"\\([^\"]*\\)\".*/\\1/p"; }

# The edge answers once the core and Redis are healthy (compose's depends_on), which takes a few seconds.
for _ in $(seq 60); do
  code=$(curl -s -o /dev/null -w '%{http_code}' "$base/v1/events/ev-42" || true)
  [ "$code" = 200 ] && break
  sleep 1
done
[ "$code" = 200 ] || fail "GET /v1/events/ev-42 through the edge: $code"
echo "smoke: the event through the edge: 200"

join=$(curl -fsS -c "$jar" -b "$jar" -H 'Accept: application/json' "$base/queue/ev-42") || fail "join"
echo "smoke: joined: $join"

token=""
for _ in $(seq 60); do
  status=$(curl -fsS -c "$jar" -b "$jar" "$base/queue/ev-42/status") || fail "status"
  state=$(printf '%s' "$status" | field state)
  if [ "$state" = admitted ]; then
    token=$(printf '%s' "$status" | field token)
    break
  fi
  sleep 1
done
[ -n "$token" ] || fail "not admitted within 60 s (last status: $status)"
echo "smoke: admitted (token ${#token} characters)"

# The browser's way: the admission cookie in the jar; the edge turns it into the core's bearer token.
hold=$(curl -sS -c "$jar" -b "$jar" -w '\n%{http_code}' -X POST "$base/v1/events/ev-42/holds" \
  -H 'Content-Type: application/json' \
  -d '{"sku":"park","qty":1,"idempotency_key":"smoke-1","identity":{"phone":"13800000000"}}')
code=${hold##*$'\n'}
body=${hold%$'\n'*}
case $code in 200|201) ;; *) fail "hold: $code $body" ;; esac
order=$(printf '%s' "$body" | field order_id)
[ -n "$order" ] || fail "hold answered $code without an order: $body"
echo "smoke: held: $code $body"

stock=$(curl -fsS "$base/v1/events/ev-42/stock") || fail "stock"
echo "smoke: stock: $stock"

# A graceful stop: SIGTERM, exit status 0, well within stop_grace_period (15 s).
engine=${ENGINE:-podman}
edge=$($engine ps -a -q --filter label=com.docker.compose.service=edge | head -1)
[ -n "$edge" ] || fail "no container of the compose service edge"
start=$(date +%s)
$engine stop -t 15 "$edge" >/dev/null
took=$(( $(date +%s) - start ))
exit_code=$($engine inspect --format '{{.State.ExitCode}}' "$edge")
echo "smoke: edge stopped in ${took} s, exit status $exit_code"
[ "$took" -lt 15 ] || fail "the edge took ${took} s to stop (SIGKILL at 15 s)"
[ "$exit_code" = 0 ] || fail "the edge exited with $exit_code after SIGTERM"
$engine start "$edge" >/dev/null
echo "smoke: ok"
