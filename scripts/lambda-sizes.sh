#!/usr/bin/env bash
# Prints the size of each Lambda function's bootstrap as `cargo lambda build --arm64` left it
# in <target dir>/lambda/<function>/ (the functions the SAM templates deploy). The target
# directory is the first argument, or cargo's default.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${1:-${CARGO_TARGET_DIR:-target}}"
for f in tracon-agents tracon-runs tracon-sessions tracon-all tracon-jobs tracon-tick; do
  printf 'lambda bootstrap %-16s %9d bytes (arm64, %s)\n' "$f" "$(stat -c %s "$target/lambda/$f/bootstrap")" "$target/lambda/$f/bootstrap"
done
