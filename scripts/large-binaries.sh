#!/usr/bin/env bash
# Fails when the index holds a file that is not text and is larger than
# LIMIT bytes (default 1 MiB): a build, an archive or a data dump committed
# by mistake. Text is what git itself takes for text (the files that
# `git diff --numstat` counts in lines); the size is the staged blob's.
#
# Usage: scripts/large-binaries.sh [LIMIT]
set -euo pipefail
cd "$(dirname "$0")/.."
limit="${1:-1048576}"
empty=$(git hash-object -t tree /dev/null)
found=0
# numstat against the empty tree lists every staged file; a binary one is
# "-<TAB>-<TAB>path".
while IFS=$'\t' read -r -d '' added deleted path; do
  [ "$added" = - ] && [ "$deleted" = - ] || continue
  size=$(git cat-file -s ":$path")
  if [ "$size" -gt "$limit" ]; then
    echo "large-binaries.sh: $path is not text and is $size bytes (limit $limit): build outputs and data stay out of the repository" >&2
    found=1
  fi
done < <(git -c core.quotepath=off diff --cached --numstat -z --no-renames "$empty")
exit "$found"
