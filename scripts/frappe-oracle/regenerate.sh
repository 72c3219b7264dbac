#!/usr/bin/env bash
# Regenerate tests/fixtures/frappe-oracle/expected/ by running Frappe's real webhook code.
#
#   scripts/frappe-oracle/regenerate.sh /path/to/frappe-checkout
#
# The checkout is a work tree of github.com/frappe/frappe at the tag recorded in
# tests/fixtures/frappe-oracle/FRAPPE_VERSION (the directory that holds frappe/ and
# pyproject.toml). Nothing is fetched except the pinned PyPI packages of requirements.txt,
# installed into a venv under $HOME/.cache/hookfleet/frappe-oracle-venv.
set -euo pipefail

if [ $# -ne 1 ] || [ ! -f "$1/frappe/__init__.py" ]; then
	echo "usage: $0 FRAPPE_CHECKOUT (a directory holding frappe/__init__.py)" >&2
	exit 2
fi
FRAPPE=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
FIX="$ROOT/tests/fixtures/frappe-oracle"
VENV="$HOME/.cache/hookfleet/frappe-oracle-venv"
PY=${PYTHON:-python3}

version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$FRAPPE/frappe/__init__.py")
want=$(sed -n 's/^tag: v//p' "$FIX/FRAPPE_VERSION" 2>/dev/null || true)
if [ -n "$want" ] && [ "$version" != "$want" ]; then
	echo "warning: the checkout is Frappe $version, FRAPPE_VERSION records v$want" >&2
fi

if [ ! -x "$VENV/bin/python" ]; then
	"$PY" -m venv "$VENV"
fi
stamp="$VENV/.requirements.sha256"
sum=$(sha256sum "$HERE/requirements.txt" | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$sum" ]; then
	"$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$HERE/requirements.txt"
	echo "$sum" >"$stamp"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$VENV/bin/python" "$HERE/oracle.py" --frappe "$FRAPPE" --cases "$FIX/cases" --out "$tmp/expected"
rm -rf "$FIX/expected"
mkdir -p "$FIX/expected"
cp "$tmp"/expected/*.json "$FIX/expected/"
echo "expected outputs written to $FIX/expected ($(ls "$FIX/expected" | wc -l) files)"
