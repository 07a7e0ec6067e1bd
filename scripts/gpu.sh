#!/usr/bin/env bash
# Run the tests or any autokernel command on a GPU machine that has Python 3.12, torch and Triton
# but no package index and none of sqlmodel, pydantic, SQLAlchemy or GitPython.
#
# On the CPU machine, from the repo root, fetch the missing wheels into .whl/ (ignored by git):
#     ../shared/device/wheels.sh tenacity optuna colorlog
# take .whl/ along with the repository, then on the GPU machine, from the repo root:
#     bash scripts/gpu.sh pytest -q                          # the test suite, GPU tests included
#     bash scripts/gpu.sh autokernel profile --model llama-7b
#     bash scripts/gpu.sh python3 benchmarks/some_script.py
# The wheels go into /tmp/site (override with AUTOKERNEL_SITE), once per machine; the repository
# itself is put on PYTHONPATH instead of being pip-installed, so `autokernel` means
# `python3 -m autokernel`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ $# -eq 0 ]]; then
  echo "usage: bash scripts/gpu.sh pytest ARGS | autokernel ARGS | python3 ARGS | COMMAND ARGS" >&2
  exit 2
fi
shopt -s nullglob
wheels=(.whl/*.whl)
if [[ ${#wheels[@]} -eq 0 ]]; then
  echo "gpu.sh: no wheels in .whl/: run ../shared/device/wheels.sh on a machine with a package index" \
       "and carry .whl/ along" >&2
  exit 2
fi

site="${AUTOKERNEL_SITE:-/tmp/site}"
want="$(ls -1 "${wheels[@]}" | sha1sum | cut -d' ' -f1)"
if [[ "$(cat "$site/.autokernel-wheels" 2>/dev/null)" != "$want" ]]; then
  # --no-deps: never let a wheel's requirements replace the machine's own torch/triton/numpy
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "${wheels[@]}"
  echo "$want" > "$site/.autokernel-wheels"
  # a package the project needs that the wheels lack would fail deep inside a long command (the
  # search agent without Optuna did, after a profile): name it once, at install time
  missing="$(PYTHONPATH="$site" python3 -c 'import importlib.util as u
print(" ".join(m for m in ("sqlmodel", "sqlalchemy", "pydantic", "git", "optuna", "tenacity") if u.find_spec(m) is None))' \
    || true)"  # a warning only: never the reason the command does not run
  [[ -z "$missing" ]] || echo "gpu.sh: the wheels in .whl/ lack: $missing (run ../shared/device/wheels.sh" \
    "tenacity optuna colorlog on a machine with a package index)" >&2
fi
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

cmd="$1"
shift
case "$cmd" in
  autokernel) exec python3 -m autokernel "$@" ;;
  pytest) exec python3 -m pytest "$@" ;;
  python | python3) exec python3 "$@" ;;
  *) exec "$cmd" "$@" ;;
esac
