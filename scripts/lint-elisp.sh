#!/usr/bin/env bash
# The Emacs Lisp linters the package ecosystem runs: package-lint, checkdoc
# and check-declare, through Eask. Eask prints their findings but exits 0
# either way, so a file not reported clean fails the run here.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
for linter in package checkdoc declare; do
  out=$(eask lint "$linter" 2>&1) || status=1
  checked=$(grep -c '^`elisp/.*` with ' <<<"$out")
  clean=$(grep -c '^No issues found' <<<"$out")
  if [ "$checked" -gt 0 ] && [ "$checked" -eq "$clean" ]; then
    echo "eask lint $linter: $checked files, no issues"
  else
    echo "$out"
    echo "eask lint $linter: $((checked - clean)) of $checked files have issues" >&2
    status=1
  fi
done
exit $status
