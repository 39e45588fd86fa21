#!/usr/bin/env bash
# What the fleet weighs (issue 41): examples/notes built without fleetmcp's `redis` feature
# (as its Cargo.toml asks), the same source with it (`--features fleetmcp/redis`), and the same
# server on rmcp (bench/rmcp-notes). Prints a table: lines of code, crates in the dependency
# tree, debug and release binary sizes, and the time of a rebuild after `touch src/main.rs`.
#
#   bench/weight.sh                 # everything (three debug and three release builds)
#   RELEASE=0 bench/weight.sh       # debug only
#   JOBS=1 NICE=10 bench/weight.sh  # how docs/BENCHMARKS.md ran it (a shared machine)
#
# Each package is built alone (`-p`), so its figures are its own: in a workspace build the
# members' features unify and fleetmcp would get `redis` from help-desk.
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS=${JOBS:-1}
NICE=${NICE:-10}
RELEASE=${RELEASE:-1}
cargo_() { nice -n "$NICE" cargo "$@" -j "$JOBS"; }

# name | package | extra cargo arguments | source file
variants=(
  "notes, no fleet|notes||examples/notes/src/main.rs"
  "notes, with the fleet|notes|--features fleetmcp/redis|examples/notes/src/main.rs"
  "rmcp 3.11|rmcp-notes||bench/rmcp-notes/src/main.rs"
)

# Lines that are neither blank nor comments only.
code_lines() { grep -cvE '^\s*(//.*)?$' "$1"; }

# Distinct crates (name and version) in the normal-dependency tree, the package included.
crates() {
  # shellcheck disable=SC2086
  cargo tree -q -p "$1" $2 -e normal --prefix none | sed 's/ (.*//; s/ (\*)//' | sort -u | wc -l
}

# Seconds of `cargo build` after touching the source: only the package itself recompiles.
rebuild() {
  # shellcheck disable=SC2086
  cargo_ build -q -p "$1" $2
  touch "$3"
  local t0 t1
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  cargo_ build -q -p "$1" $2
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc | xargs printf '%.1f'
}

size_mb() { stat -c %s "$1" | awk '{printf "%.1f", $1 / 1048576}'; }

printf '| server | lines (code) | crates | debug binary MB | release binary MB | touch rebuild s (debug) |\n'
printf '|---|--:|--:|--:|--:|--:|\n'
for v in "${variants[@]}"; do
  IFS='|' read -r name pkg extra src <<<"$v"
  lines="$(wc -l <"$src") ($(code_lines "$src"))"
  n=$(crates "$pkg" "$extra")
  secs=$(rebuild "$pkg" "$extra" "$src")
  debug=$(size_mb "target/debug/$pkg")
  release="-"
  if [[ $RELEASE == 1 ]]; then
    # shellcheck disable=SC2086
    cargo_ build -q --release -p "$pkg" $extra
    release=$(size_mb "target/release/$pkg")
  fi
  printf '| %s | %s | %s | %s | %s | %s |\n' "$name" "$lines" "$n" "$debug" "$release" "$secs"
done
