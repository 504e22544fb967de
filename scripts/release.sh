#!/usr/bin/env bash
# Builds what ships: `wicket` (the edge) and `wicket-core` with the `dist` profile (Cargo.toml: the release
# profile plus link-time optimisation, one codegen unit), then strips them, keeping their line tables apart in
# `<binary>.debug` (linked from the binary by a GNU debuglink, so gdb and perf find them when they sit beside it),
# and writes SHA256SUMS. docs/src/deploy.md "Release artefacts" says what each file is.
#
#   bash scripts/release.sh                 # → target/artefacts/
#   bash scripts/release.sh --out /dist     # the container build (deploy/container/Containerfile)
#
# `--version` names the commit (git, or WICKET_COMMIT where there is no .git) and the build date:
# SOURCE_DATE_EPOCH when given (reproducible builds), else the start of today (UTC), so a second run the same day
# rebuilds nothing. Needs cargo, cmake, pkg-config and libssl-dev (the binaries link the system's OpenSSL:
# .cargo/config.toml), objcopy (binutils). The binaries then need libssl3 where they run.
set -euo pipefail
cd "$(dirname "$0")/.."

out=target/artefacts
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    *) echo "usage: bash scripts/release.sh [--out DIR]" >&2; exit 2 ;;
  esac
done

if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH=$(date -u -d "$(date -u +%F)" +%s)
fi
export SOURCE_DATE_EPOCH
if [ -z "${WICKET_COMMIT:-}" ] && ! git rev-parse -q --verify HEAD >/dev/null 2>&1; then
  echo "release.sh: no git history here and no WICKET_COMMIT: --version will say the commit is unknown" >&2
fi

cargo build --locked --profile dist -p wicket-edge -p wicket-core --bin wicket --bin wicket-core

target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
mkdir -p "$out"
for bin in wicket wicket-core; do
  rm -f "$out/$bin" "$out/$bin.debug"
  cp "$target_dir/dist/$bin" "$out/$bin"
  objcopy --only-keep-debug --compress-debug-sections=zlib "$out/$bin" "$out/$bin.debug"
  chmod 0644 "$out/$bin.debug"
  # Debug sections out, symbols kept: a panic's backtrace and perf still name the functions.
  objcopy --strip-debug "$out/$bin"
  (cd "$out" && objcopy --add-gnu-debuglink="$bin.debug" "$bin")
done
(cd "$out" && sha256sum wicket wicket-core wicket.debug wicket-core.debug > SHA256SUMS)
"$out/wicket" --version
"$out/wicket-core" --version
ls -l "$out"
