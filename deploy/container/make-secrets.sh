#!/usr/bin/env bash
# Writes a random value for each secret compose.yaml names into deploy/container/secrets/ (git-ignored), keeping
# any that exist. Compose bind-mounts each file as /run/secrets/<name>, where the container's user (uid 10001)
# must read it: so the files are 0644 and the folder that guards them on this host 0700.
#
#   bash deploy/container/make-secrets.sh
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd)/secrets"
install -d -m 0700 "$dir"
for name in WICKET_ADMIN_TOKEN WICKET_EDGE_SECRET WICKET_CALLBACK_SECRET WICKET_TOKEN_SECRET; do
  [ -s "$dir/$name" ] && continue
  # 32 random bytes as 64 hex characters: over every minimum length the configs check (16, 32).
  od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > "$dir/$name"
  chmod 0644 "$dir/$name"
done
echo "secrets in $dir: $(cd "$dir" && ls | tr '\n' ' ')"
