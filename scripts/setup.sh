#!/usr/bin/env bash
# Create (or update) the project's virtual environment in .venv and install AutoKernel into it.
#   bash scripts/setup.sh          the package and its dependencies
#   bash scripts/setup.sh --dev    the same plus the test tools ([dev] extra)
# Idempotent: a second run only checks what is already there.
#
# Without an NVIDIA GPU the CPU build of torch is installed (pinned, so pip never pulls the
# multi-GB CUDA build) together with Triton 3.6, whose interpreter (TRITON_INTERPRET=1) runs the
# Triton kernels on the CPU. With a GPU, plain torch (which brings its own Triton) is installed.
#   AUTOKERNEL_VENV=DIR     another environment than .venv
#   TRITON_CPU=newest       without a GPU, the newest Triton pyproject.toml allows instead of 3.6
#                           (CI runs the interpreter tests under it too: scripts/test.sh)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV="${AUTOKERNEL_VENV:-.venv}"
TRITON_CPU="${TRITON_CPU:-3.6}"

extra=""
[[ "${1:-}" == "--dev" ]] && extra="[dev]"
TORCH_CPU_VERSION="${TORCH_CPU_VERSION:-2.13.0}"
CPU_INDEX="https://download.pytorch.org/whl/cpu"

PYTHON="${PYTHON:-python3}"
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "setup: creating $VENV with $("$PYTHON" --version 2>&1)"
  "$PYTHON" -m venv "$VENV"
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }
pip_install() { python -m pip install --quiet --disable-pip-version-check "$@"; }
installed() { python - "$@" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
name, prefix = sys.argv[1], sys.argv[2]
sys.exit(0 if version(name).startswith(prefix) else 1)
PY
}

if has_gpu; then
  if ! python -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    echo "setup: NVIDIA GPU found: installing torch (CUDA build)"
    pip_install torch
  fi
else
  if ! installed torch "$TORCH_CPU_VERSION"; then
    echo "setup: no NVIDIA GPU: installing the CPU build of torch==$TORCH_CPU_VERSION"
    # the CPU index is used when it is reachable; machines with a local wheel cache do without
    if python -c "import urllib.request as u; u.urlopen('$CPU_INDEX/', timeout=5)" 2>/dev/null; then
      pip_install "torch==$TORCH_CPU_VERSION" --extra-index-url "$CPU_INDEX"
    else
      pip_install "torch==$TORCH_CPU_VERSION"
    fi
  fi
  if [[ "$TRITON_CPU" == newest ]]; then
    # the newest release the package's own requirement allows (what `pip install .` resolves)
    spec="$(python - <<'PY'
import re
text = open("pyproject.toml").read()
print(re.search(r'"(triton[^"]*)"', text).group(1))
PY
)"
    echo "setup: installing the newest Triton that pyproject.toml allows ($spec) for its CPU interpreter"
    pip_install --upgrade "$spec" "numpy<2.3"
  elif ! installed triton "$TRITON_CPU"; then
    echo "setup: installing triton $TRITON_CPU for its CPU interpreter"
    pip_install "triton==$TRITON_CPU.*" "numpy<2.3"
  fi
fi

# reinstall the package only when its metadata changed (an editable install needs no more)
stamp="$VENV/.autokernel-install${extra:+-dev}"
want="$(sha1sum pyproject.toml | cut -d' ' -f1)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]] || ! python -c "import autokernel" 2>/dev/null; then
  echo "setup: installing autokernel${extra} (editable)"
  pip_install -e ".${extra}" "numpy<2.3"
  echo "$want" > "$stamp"
fi
python -c "import torch, triton, autokernel; print(f'setup: ok in $VENV (autokernel {autokernel.__version__}, torch {torch.__version__}, triton {triton.__version__}, ' + ('CUDA' if torch.cuda.is_available() else 'CPU only: Triton runs in interpreter mode') + ')')"
