#!/usr/bin/env bash
# Build the packaged `cdriver` executable: dist/cdriver-bundle/ and the dist/cdriver link.
set -euo pipefail
cd "$(dirname "$0")/.."
PYINSTALLER="${PYINSTALLER:-.venv/bin/pyinstaller}"
"$PYINSTALLER" --noconfirm --clean --log-level WARN --distpath dist --workpath build/pyinstaller \
  packaging/cdriver.spec
ln -sfn cdriver-bundle/cdriver dist/cdriver
echo "built dist/cdriver -> dist/cdriver-bundle/cdriver"
