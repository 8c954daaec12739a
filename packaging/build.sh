#!/usr/bin/env bash
# Build the packaged `cdriver` executable: dist/cdriver-bundle/ and the dist/cdriver link.
# DIST and WORKPATH move the output and pyinstaller's work directory (the image build uses them).
set -euo pipefail
cd "$(dirname "$0")/.."
PYINSTALLER="${PYINSTALLER:-.venv/bin/pyinstaller}"
DIST="${DIST:-dist}"
WORKPATH="${WORKPATH:-build/pyinstaller}"
"$PYINSTALLER" --noconfirm --clean --log-level WARN --distpath "$DIST" --workpath "$WORKPATH" \
  packaging/cdriver.spec
ln -sfn cdriver-bundle/cdriver "$DIST/cdriver"
echo "built $DIST/cdriver -> $DIST/cdriver-bundle/cdriver"
