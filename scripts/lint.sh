#!/usr/bin/env bash
# What CI checks besides the tests (scripts/setup.sh test runs it first):
#   - every tracked C++ file is formatted by the repo's .clang-format, with the clang-format
#     pinned in scripts/requirements.txt (14.0.6; Debian's may differ elsewhere);
#   - mypy, pinned there too, passes over the Python package client/python/metaload with the
#     settings of pyproject.toml's [tool.mypy] (strict: every function typed; the extension
#     through metaload/_native.pyi).
#
#   scripts/lint.sh          check, and name each file that differs (exit 1)
#   scripts/lint.sh --fix    format those files in place (mypy's findings are fixed by hand)
set -euo pipefail
cd "$(dirname "$0")/.."
fix=0
case "${1:-}" in
  "") ;;
  --fix) fix=1 ;;
  *) echo "usage: scripts/lint.sh [--fix]" >&2; exit 2 ;;
esac
clang_format=.venv/bin/clang-format
mypy=.venv/bin/mypy
for tool in "$clang_format" "$mypy"; do
  if [ ! -x "$tool" ]; then
    echo "lint: no $tool: run scripts/setup.sh build first (it installs scripts/requirements.txt)" >&2
    exit 2
  fi
done
version=$("$clang_format" --version)
case "$version" in
  *" 14.0.6"*) ;;
  *) echo "lint: $clang_format is '$version', not the pinned 14.0.6" >&2; exit 2 ;;
esac

# Tracked files and new ones not yet added (not ignored): a file a change adds is checked before
# it is committed, not only in CI after.
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.cc' '*.h')
unformatted=()
for f in "${files[@]}"; do
  if ! "$clang_format" --style=file "$f" | cmp -s - "$f"; then unformatted+=("$f"); fi
done
if [ ${#unformatted[@]} -eq 0 ]; then
  echo "lint: ${#files[@]} C++ files formatted"
elif [ "$fix" = 1 ]; then
  "$clang_format" --style=file -i "${unformatted[@]}"
  echo "lint: formatted ${#unformatted[@]} files: ${unformatted[*]}"
else
  echo "lint: ${#unformatted[@]} of ${#files[@]} C++ files differ from .clang-format (scripts/lint.sh --fix):" >&2
  printf '  %s\n' "${unformatted[@]}" >&2
  exit 1
fi

# The files and settings are pyproject.toml's.
"$mypy" || { echo "lint: mypy found the errors above (pyproject.toml [tool.mypy])" >&2; exit 1; }
echo "lint: mypy passes over client/python/metaload"
