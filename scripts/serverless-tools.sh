#!/usr/bin/env bash
# The serverless toolchain the Worker and Lambda tests need, installed when missing; sourced
# by scripts/test. Versions are the ones recorded in the serverless toolchain notes:
# worker-build and wasm-bindgen-cli from crates.io (wasm-bindgen-cli must equal the
# wasm-bindgen crate in Cargo.lock), wrangler and binaryen (wasm-opt) from npm, cargo-lambda
# (with zig) and cfn-lint from PyPI, the aarch64 standard library from rustup (the Lambda
# functions are deployed on arm64). Nothing is downloaded from GitHub: worker-build is pointed at these binaries.

WORKER_BUILD_VERSION=0.8.7
WASM_BINDGEN_VERSION=0.2.130
CARGO_LAMBDA_VERSION=1.9.2
CFN_LINT_VERSION=1.58.0
MOTO_VERSION=5.2.1
TOOLS_DIR="$PWD/target/tools"

ensure_cargo_tool() { # binary crate version [cargo install flags…]
  local bin=$1 crate=$2 version=$3; shift 3
  if command -v "$bin" >/dev/null 2>&1 && "$bin" --version 2>/dev/null | grep -qw -- "$version"; then
    return 0
  fi
  echo "==> installing $crate $version (cargo install; a few minutes)"
  cargo install "$crate" --version "$version" "$@" --quiet
}

install_serverless_tools() {
  if command -v rustup >/dev/null 2>&1; then
    rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1 || return 1
  fi
  ensure_cargo_tool worker-build worker-build "$WORKER_BUILD_VERSION" --locked || return 1
  ensure_cargo_tool wasm-bindgen wasm-bindgen-cli "$WASM_BINDGEN_VERSION" || return 1

  if [ ! -x adapters/worker/node_modules/.bin/wrangler ] || [ ! -x adapters/worker/node_modules/.bin/wasm-opt ]; then
    echo "==> installing wrangler and binaryen (npm)"
    (cd adapters/worker && npm ci --no-audit --no-fund --loglevel=error) || return 1
  fi

  # moto's server is the SQS emulator of the Lambda queue test (tests/tests/serverless_e2e.rs).
  if [ ! -x "$TOOLS_DIR/venv/bin/cargo-lambda" ] || [ ! -x "$TOOLS_DIR/venv/bin/cfn-lint" ] || [ ! -x "$TOOLS_DIR/venv/bin/moto_server" ]; then
    echo "==> installing cargo-lambda $CARGO_LAMBDA_VERSION, cfn-lint $CFN_LINT_VERSION and moto[server] $MOTO_VERSION (PyPI)"
    { [ -x "$TOOLS_DIR/venv/bin/pip" ] || python3 -m venv "$TOOLS_DIR/venv"; } &&
      "$TOOLS_DIR/venv/bin/pip" install --quiet "cargo-lambda==$CARGO_LAMBDA_VERSION" "cfn-lint==$CFN_LINT_VERSION" \
        "moto[server]==$MOTO_VERSION" || return 1
  fi
  export PATH="$TOOLS_DIR/venv/bin:$PWD/adapters/worker/node_modules/.bin:$PATH"
  export WASM_BINDGEN_BIN
  WASM_BINDGEN_BIN=$(command -v wasm-bindgen)
  export WASM_OPT_BIN="$PWD/adapters/worker/node_modules/.bin/wasm-opt"
  # worker-build would fetch esbuild from the npm registry; wrangler already brings it.
  export ESBUILD_BIN="$PWD/adapters/worker/node_modules/.bin/esbuild"
  # wrangler must not phone home from CI.
  export WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false WRANGLER_SEND_ERROR_REPORTS=false
}
