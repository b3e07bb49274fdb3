#!/usr/bin/env bash
# Builds one Worker bundle offline and deploys it: infra/cloudflare/deploy.sh [all|agents|runs|sessions]
# Needs what infra/cloudflare/README.md lists (Hyperdrive id in wrangler.toml, secrets put,
# migrations applied, `wrangler login` done).
set -euo pipefail
cd "$(dirname "$0")/../.."
group=${1:-all}
case "$group" in all | agents | runs | sessions) ;; *) echo "usage: $0 [all|agents|runs|sessions]" >&2; exit 2 ;; esac
adapters/worker/build.sh "$group"
env_args=()
[ "$group" != all ] && env_args=(--env "$group")
# (The `+` form keeps bash before 4.4, macOS's /bin/bash, from calling an empty array unbound.)
adapters/worker/node_modules/.bin/wrangler deploy --config wrangler.toml ${env_args[@]+"${env_args[@]}"}
