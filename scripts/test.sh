#!/usr/bin/env bash
# Runs every test of Wicket on a fresh Debian machine: installs what is missing (cmake for Pingora's
# zlib-ng, redis-server and redis-cli, nginx and its lua module (and nginx-dev for Wicket's own module), wrk, h2load, gdb, promtool, systemd-analyze,
# iproute2, nftables and libfaketime for the fault tests, the schema checkers of deploy/, mdBook), builds the book
# and checks its links, then the whole workspace's tests with cargo-nextest.
# Tests start their own servers on free loopback ports; nothing here starts a shared one.
#
#   bash scripts/test.sh            # everything
#   bash scripts/test.sh -p wicket-core   # extra arguments go to `cargo nextest run`
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-cli >/dev/null || need+=(redis-tools)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v wrk >/dev/null || need+=(wrk)
# nginx-compat's OpenResty path (edge/tests/nginx_compat.rs, bench/nginx-compat): Debian's lua module
# for nginx, the resty core and LRU cache it loads, and cjson for the token's JSON.
for pkg in libnginx-mod-http-lua lua-resty-core lua-resty-lrucache lua-cjson; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
# The OpenResty path's native fast path (nginx-compat/native): a dynamic module built against the installed
# nginx from Debian's nginx-dev (its configured sources), with gcc, make and the libraries nginx's configure checks.
dpkg -s nginx-dev >/dev/null 2>&1 || need+=(nginx-dev)
command -v gcc >/dev/null || need+=(gcc)
command -v make >/dev/null || need+=(make)
for pkg in libpcre2-dev zlib1g-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
# The benchmarks' HTTP/2 load (bench/edge-tls): h2load.
command -v h2load >/dev/null || need+=(nghttp2-client)
command -v pkg-config >/dev/null || need+=(pkg-config)
# Pingora's TLS (openssl feature) links the system's libssl; the TLS tests make certificates with
# the openssl command and talk HTTP/2 with curl.
dpkg -s libssl-dev >/dev/null 2>&1 || need+=(libssl-dev)
command -v openssl >/dev/null || need+=(openssl)
command -v curl >/dev/null || need+=(curl)
command -v taskset >/dev/null || need+=(util-linux)
# The fault tests (issue #41; root): network namespaces and links (iproute2), silent partitions (nftables),
# a clock jump on one edge (libfaketime), a moved name (unshare + mount, util-linux).
command -v ip >/dev/null || [ -x /usr/sbin/ip ] || need+=(iproute2)
command -v nft >/dev/null || [ -x /usr/sbin/nft ] || need+=(nftables)
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || dpkg -s libfaketime >/dev/null 2>&1 || need+=(faketime)
# edge/tests/request_path.rs reads the call stacks of an admitted request in the real binary under gdb.
command -v gdb >/dev/null || need+=(gdb)
# The queue page's browser test: Debian's Chromium, and CJK fonts so the zh-CN page renders.
command -v chromium >/dev/null || need+=(chromium)
dpkg -s fonts-noto-cjk >/dev/null 2>&1 || need+=(fonts-noto-cjk)
# promtool (Debian's prometheus package) checks the metric names, the alert rules and their unit tests.
command -v promtool >/dev/null || need+=(prometheus)
# The deployment tests (edge/tests/deploy.rs, core/tests/deploy.rs): systemd-analyze verifies the units, and a
# Python virtualenv holds the schema checkers of the manifests and the compose file (below).
command -v systemd-analyze >/dev/null || need+=(systemd)
python3 -c 'import ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# Debian starts a redis-server on 6379 when it installs one, and a prometheus on 9090; the tests use
# neither, and 9090 is the demo's admin port: stop prometheus if the install started it.
if [[ " ${need[*]} " == *" prometheus "* ]]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO service prometheus stop >/dev/null 2>&1 || true
fi
if ! cargo nextest --version >/dev/null 2>&1; then
  cargo install --locked cargo-nextest
fi
# kubernetes-validate (the Kubernetes schemas, shipped in the package: nothing is fetched when it runs) and
# check-jsonschema (the Compose schema, likewise), pinned, in target/deploy-venv: the deployment tests look there.
deploy_venv=target/deploy-venv
if ! "$deploy_venv/bin/kubernetes-validate" --version >/dev/null 2>&1 || ! "$deploy_venv/bin/check-jsonschema" --version >/dev/null 2>&1; then
  echo "installing kubernetes-validate and check-jsonschema into $deploy_venv"
  rm -rf "$deploy_venv"
  python3 -m venv "$deploy_venv"
  "$deploy_venv/bin/pip" install -q --disable-pip-version-check kubernetes-validate==1.37.0 check-jsonschema==0.39.0
fi

export PATH="$PATH:/usr/sbin"
# Everything the tests and the quick benches run, once. (Not `-p wicket-edge` / `-p wicket-core` as well:
# cargo resolves a package's dependency features apart from the workspace's, so each `-p` build compiled
# wicket-edge, wicket-core and a few dependencies again — about 3-4 minutes of a cold run on 2 cores.
# `bash scripts/demo.sh` builds its own on its first run.)
cargo build --workspace --all-targets
# The native fast path's module (edge/tests/nginx_compat.rs loads it; the tests would build it themselves).
echo "nginx module: $(bash nginx-compat/native/build.sh target/nginx-native)"
# The surge bench in quick mode against the real (debug) binaries, so the bench cannot rot:
# fails when anything is oversold, double-sold or over a limit, or nothing sells.
target/debug/wicket-bench surge stararena --quick --dry-run --check > target/surge-quick.json
echo "surge --quick: $(grep -E '"(sold|oversold|double_sold|fifo_tau)"' target/surge-quick.json | tr -d ' \n')"
# The core's capacity halved and restored mid-sale (a shaper in front of the core), end to end: fails when
# anything is oversold, or the sale sold out before the drop ended (the drop was not tested).
target/debug/wicket-bench surge capacity-drop --quick --dry-run --check > target/surge-drop-quick.json
echo "surge capacity-drop --quick: $(grep -E '"(sold|oversold|sellout_seconds|drop_while_selling|drop_window_client_p99_ok)"' target/surge-drop-quick.json | tr -d ' \n')"
# The whole sale through crashes: two edges sharing a queue in Redis (AOF), the core on it; the leader edge,
# the core and Redis are each SIGKILLed mid-sale and restarted (no paid order or place lost, still sells out).
target/debug/wicket-bench surge crashes --quick --dry-run --check > target/surge-crashes-quick.json
echo "surge crashes --quick: $(grep -E '"(sold|oversold|double_sold|fifo_tau|fifo_tau_send_order|fifo_pairs_judged|paid_lost|holds_lost|places_changed|places_shared)"' target/surge-crashes-quick.json | tr -d ' \n')"
# The multi-edge megasale (issue #27): four edges sharing one room on a Redis Cluster of 3 masters with
# replicas; the leader edge and the room's master SIGKILLed mid-sale: fails on anything oversold or
# double-sold, a place lost through the kills, τ across edges < 0.99, or a kill after the sale stopped selling.
# Both layouts; the spread layout is held to τ ≥ 0.99 over every fan given a place too. Each τ is judged over
# the pairs of joins that did not overlap (a thousand joins in flight on debug edges reach them in an order the
# bench's scheduler picks); τ by the order the bench sent the joins is printed beside it.
target/debug/wicket-bench surge megasale --quick --layout single --dry-run --check > target/surge-megasale-quick.json
echo "surge megasale --quick: $(grep -E '"(sold|oversold|double_sold|tau_across_edges|tau_across_edges_judged|tau_across_edges_pairs_judged|places_checked|places_lost|joins_per_second|ops_per_join_busiest)"' target/surge-megasale-quick.json | tr -d ' \n')"
target/debug/wicket-bench surge megasale --quick --layout spread --dry-run --check > target/surge-megasale-spread-quick.json
echo "surge megasale --quick --layout spread: $(grep -E '"(sold|oversold|double_sold|tau_across_edges|tau_across_edges_judged|tau_across_edges_pairs_judged|tau_all_placed|tau_all_placed_pairs_judged|tau_all_placed_send_order|places_checked|places_lost|joins_per_second|ops_per_join_busiest)"' target/surge-megasale-spread-quick.json | tr -d ' \n')"
# Two sales on one edge (a separate core process), one after another and at once, each with a cautious
# start at an idle core: fails unless every fan of each sale is admitted within 30 s (100 fans a sale here;
# bench/RESULTS.md has the 300-fan figures of a release build).
target/debug/wicket-bench rooms --fans 100 --dry-run --check > target/rooms-quick.txt
echo "rooms --fans 100: $(grep -c '| yes |' target/rooms-quick.txt) of 4 sales within 30 s"
# Issue #39 end to end: a cautious sale with its core process stopped (SIGSTOP) for 1 s, 8 s in: fails unless
# every fan is admitted within 30 s and no stall (no admission while fans wait, or cool-down with the core
# under target) lasts over 5 s. 150 fans here (debug binaries on shared cores: 24 s); the issue's 300 fans
# with a release build are in bench/results/rooms.md (27-31 s).
target/debug/wicket-bench rooms --fans 150 --stop-core-at 8 --stop-core-for 1 --dry-run --check > target/rooms-core-stopped.txt
echo "rooms --stop-core-at 8: $(grep -c '| yes |' target/rooms-core-stopped.txt) of 1 sale within its goals"
# The book (docs/, mdBook): built, and every internal link and #anchor of its pages checked (no network). Its
# examples run in edge/tests/book.rs, and its configuration reference is the code's (edge/tests/config_reference.rs).
export PATH="$PATH:$HOME/.cargo/bin"
command -v mdbook >/dev/null || cargo install --locked mdbook@0.5.4
mdbook build docs
python3 scripts/linkcheck.py docs/book
# Every test of the workspace, last, so its summary closes the run. (The crates have no doc tests: their
# code blocks are commands and sketches, marked `text`/`sh`/`ignore`.)
cargo nextest run --workspace --no-fail-fast --profile ci "$@"
