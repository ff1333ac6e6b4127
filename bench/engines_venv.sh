# Sourced by bench/engines.sh and bench/data.sh: the venv of python/requirements-test.txt
# (Parsl, Dask, numpy, pandas) under target/bench-venv-engines, made again when the pins change.
VENV=target/bench-venv-engines
if [ ! -f "$VENV/.complete" ] || ! cmp -s python/requirements-test.txt "$VENV/.complete"; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r python/requirements-test.txt
  cp python/requirements-test.txt "$VENV/.complete"
fi
