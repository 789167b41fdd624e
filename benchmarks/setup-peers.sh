#!/usr/bin/env bash
# Create (or refresh) benchmarks/.venv-peers: the library with every extra plus the peers of
# requirements-peers.txt, so that `benchmarks/.venv-peers/bin/python benchmarks/run.py` compares
# them side by side. Idempotent: an up-to-date venv is left as it is.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
venv="$here/.venv-peers"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
stamp="$venv/.installed"
wanted="$(cat "$here"/requirements-peers*.txt "$root/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
    echo "benchmarks/.venv-peers is up to date"
    exit 0
fi
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -e "$root[all]" -r "$here/requirements-peers.txt"
"$venv/bin/python" -m pip install -q --no-deps -r "$here/requirements-peers-nodeps.txt"
echo "$wanted" >"$stamp"
echo "benchmarks/.venv-peers ready: run $venv/bin/python benchmarks/run.py"
