#!/usr/bin/env bash
# Regenerates the console screenshots the README shows (docs/screenshots/):
# they are taken by the browser test (tests/console_browser.rs) against a
# real fleet, so they show what the console really renders.
#
#   scripts/screenshots.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p docs/screenshots
HOOKFLEET_SCREENSHOTS_DIR="$PWD/docs/screenshots" exec scripts/test.sh -E 'binary(console_browser)'
