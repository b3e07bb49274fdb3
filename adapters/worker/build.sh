#!/usr/bin/env bash
# Builds the Worker bundles offline: one per endpoint group (default: all agents runs
# sessions) into adapters/worker/dist/<group>/, then prints each bundle's gzipped size.
# worker-build is pointed at local wasm-bindgen, wasm-opt and esbuild (WASM_BINDGEN_BIN,
# WASM_OPT_BIN, ESBUILD_BIN), so nothing is downloaded. Bundles are built for size:
# opt-level "z", fat LTO, one codegen unit (the native release profile is left alone), then
# wasm-opt -Oz; the name section and producer notes are stripped last (a sixth of the gzipped
# size) unless TRACON_WORKER_KEEP_NAMES=1 asks for readable wasm frames in stack traces.
set -euo pipefail
cd "$(dirname "$0")"
: "${WASM_BINDGEN_BIN:=$(command -v wasm-bindgen || true)}"
if [ -z "$WASM_BINDGEN_BIN" ] || [ ! -x "$WASM_BINDGEN_BIN" ]; then
  echo "wasm-bindgen not found: cargo install wasm-bindgen-cli@0.2.130 (or set WASM_BINDGEN_BIN)" >&2
  exit 1
fi
: "${WASM_OPT_BIN:=$PWD/node_modules/.bin/wasm-opt}"
: "${ESBUILD_BIN:=$PWD/node_modules/.bin/esbuild}"
export WASM_BINDGEN_BIN WASM_OPT_BIN ESBUILD_BIN
# wasm-bindgen reads the target_features section, so nothing is stripped before wasm-opt.
export CARGO_PROFILE_RELEASE_OPT_LEVEL=z CARGO_PROFILE_RELEASE_LTO=true CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 CARGO_PROFILE_RELEASE_STRIP=none
groups=("$@")
[ "$#" -eq 0 ] && groups=(all agents runs sessions)
for group in "${groups[@]}"; do
  case "$group" in all | agents | runs | sessions) ;; *) echo "unknown group '$group'" >&2; exit 2 ;; esac
  rm -rf build
  log="../../target/worker-build-$group.log"
  mkdir -p ../../target
  worker-build --release --features "group-$group" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  rm -f "$log"
  rm -rf "dist/$group"
  mkdir -p dist
  mv build "dist/$group"
  wasm="dist/$group/index_bg.wasm"
  if [ "${TRACON_WORKER_KEEP_NAMES:-0}" != 1 ]; then
    # The feature set worker-build passes, so no newer encoding appears in the output.
    "$WASM_OPT_BIN" "$wasm" -o "$wasm.stripped" --strip-debug --strip-producers \
      --enable-mutable-globals --enable-sign-ext --enable-nontrapping-float-to-int --enable-bulk-memory \
      --enable-multivalue --enable-reference-types --enable-exception-handling
    mv "$wasm.stripped" "$wasm"
  fi
  raw=$(wc -c <"$wasm" | tr -d ' ')
  gz=$(gzip -9 -c "$wasm" | wc -c)
  printf 'worker bundle %-9s %9d bytes wasm, %9d bytes gzipped\n' "$group" "$raw" "$gz"
done
