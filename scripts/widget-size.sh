#!/usr/bin/env bash
# The embeddable chat widget's size budget: handlers/assets/embed.js, gzipped (-9), must stay
# within 15 KB. Prints both sizes; exits non-zero over budget. Called by scripts/test.
set -euo pipefail
cd "$(dirname "$0")/.."

BUDGET=15360
file=handlers/assets/embed.js
raw=$(wc -c <"$file")
gzipped=$(gzip -9 -c "$file" | wc -c)
echo "embed.js: $raw bytes, $gzipped bytes gzipped (budget $BUDGET)"
if [ "$gzipped" -gt "$BUDGET" ]; then
  echo "embed.js is over its budget by $((gzipped - BUDGET)) bytes gzipped" >&2
  exit 1
fi
