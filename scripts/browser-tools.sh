# shellcheck shell=bash
# What the chat widget's browser tests need (tests/tests/widget_browser.rs): Debian's
# Chromium (apt; playwright's own browser download is not used) and playwright-core in
# tests/browser/node_modules (pinned by tests/browser/package-lock.json). Sourced by
# scripts/test.

install_browser_tools() {
  local chromium="${TRACON_CHROMIUM:-/usr/bin/chromium}"
  if [ ! -x "$chromium" ]; then
    echo "==> installing Chromium (Debian package) for the widget's browser tests"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
  if [ ! -d tests/browser/node_modules/playwright-core ]; then
    echo "==> installing playwright-core for the widget's browser tests (npm ci)"
    (cd tests/browser && npm ci --no-audit --no-fund --silent)
  fi
  export TRACON_CHROMIUM="$chromium"
}
