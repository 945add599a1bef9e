#!/usr/bin/env bash
# The training and surgery tests on the oldest declared dependency versions (constraints/oldest.txt), in a virtual
# environment of their own: ${LANGSWAP_OLDEST_VENV:-$HOME/.cache/langswap-oldest-venv}. The environment is kept and
# reused while constraints/oldest.txt and the Python version are unchanged, and built anew otherwise (about 4 minutes
# and 2.9 GB of downloads: PyPI's Linux torch wheels bring their CUDA libraries; 5.2 GB on disk).
#
#   scripts/test_oldest.sh                 # the default test files below
#   scripts/test_oldest.sh tests/test_x.py -k name   # other pytest arguments instead
#
# Exits with pytest's status (non-zero when a test fails), or non-zero when the environment cannot be built.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${LANGSWAP_OLDEST_VENV:-$HOME/.cache/langswap-oldest-venv}"
python="${PYTHON:-python3}"
constraints="constraints/oldest.txt"

version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
case "$version" in
    3.10|3.11) ;;
    *) echo "test_oldest.sh: $constraints is for Python 3.10/3.11 (numpy 1.24 has no wheels for $version); set PYTHON" >&2
       exit 2 ;;
esac

stamp="$(sha256sum < "$constraints" | cut -c1-16)-py$version"
if [[ ! -x "$venv/bin/python" || "$(cat "$venv/.langswap-stamp" 2>/dev/null)" != "$stamp" ]]; then
    echo "test_oldest.sh: building $venv ($constraints changed or no environment yet)"
    rm -rf "$venv"
    "$python" -m venv "$venv"
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
# Every run: points the editable install at this checkout and installs what pyproject.toml added since (seconds when
# nothing is missing).
"$venv/bin/python" -m pip install --quiet --progress-bar off -c "$constraints" -e ".[test]"
echo "$stamp" > "$venv/.langswap-stamp"

"$venv/bin/python" - <<'EOF'
import sys
from importlib.metadata import version
names = ["torch", "transformers", "accelerate", "tokenizers", "safetensors", "huggingface-hub", "numpy", "fasttext",
         "pyyaml", "tqdm", "matplotlib", "peft", "pytest"]
print("oldest environment: Python %d.%d.%d; " % sys.version_info[:3] + ", ".join(f"{n} {version(n)}" for n in names))
EOF

if [[ $# -eq 0 ]]; then
    set -- tests/test_training.py tests/test_numerics.py tests/test_locking.py tests/test_known_answers.py \
        tests/test_methods_contract.py tests/test_bad_input.py tests/test_cli.py tests/test_tokens.py \
        tests/test_streaming.py tests/test_adapters.py tests/test_extension.py tests/test_teacher.py \
        tests/test_families.py tests/test_family_models.py
fi
exec "$venv/bin/python" -m pytest -q -n auto -p no:cacheprovider "$@"
