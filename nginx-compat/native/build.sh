#!/usr/bin/env bash
# Builds nginx-compat/native (the OpenResty path's native fast path, ngx_http_wicket_module.so) for
# the nginx installed here, from Debian's nginx-dev (nginx's sources as the package was configured:
# /usr/share/nginx/src) — a dynamic module must be built with the configure flags of the nginx that
# loads it. Needs nginx-dev, gcc, make, libpcre2-dev, zlib1g-dev and libssl-dev (the test command
# installs them).
#
#   bash nginx-compat/native/build.sh [OUT_DIR]     # default: target/nginx-native
#
# Prints the module's path. Rebuilds only when the source or nginx's version or flags changed (nginx refuses
# to load a module built for another version: rebuild after an nginx upgrade).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
OUT="${1:-$ROOT/target/nginx-native}"
SRC=/usr/share/nginx/src
[ -f "$SRC/conf_flags" ] || { echo "nginx-dev is not installed ($SRC/conf_flags is missing)" >&2; exit 1; }
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
stamp="$(cat "$HERE/config" "$HERE/ngx_http_wicket_module.c" "$SRC/conf_flags" "$SRC/src/core/nginx.h" | sha256sum | cut -c1-16)"
if [ -f "$OUT/ngx_http_wicket_module.so" ] && [ "$(cat "$OUT/stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "$OUT/ngx_http_wicket_module.so"
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$SRC/." "$work/"
# shellcheck disable=SC1091
source "$SRC/conf_flags"
(
  cd "$work"
  ./configure "${NGX_CONF_FLAGS[@]}" --with-cc-opt='-O2 -fPIC' --add-dynamic-module="$HERE" > configure.log 2>&1 \
    || { tail -30 configure.log >&2; exit 1; }
  make -f objs/Makefile modules > make.log 2>&1 || { tail -40 make.log >&2; exit 1; }
)
# Renamed into place (and the stamp likewise): builds running at once (test processes) never load a
# half-written module.
cp "$work/objs/ngx_http_wicket_module.so" "$OUT/ngx_http_wicket_module.so.$$"
mv "$OUT/ngx_http_wicket_module.so.$$" "$OUT/ngx_http_wicket_module.so"
echo "$stamp" > "$OUT/stamp.$$"
mv "$OUT/stamp.$$" "$OUT/stamp"
echo "$OUT/ngx_http_wicket_module.so"
