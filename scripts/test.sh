#!/usr/bin/env bash
# Install what the tests need and run the whole suite (the README's test command; CI runs it).
# The viewer tests drive Debian's Chromium headless: installed here when missing and we are
# root (apt), otherwise those tests skip and say why. Two pytest processes (pytest-xdist) share
# the tests: most of a test's time is spent waiting on a gateway or a worker, so the
# suite takes about 60 % of its time in one process on a 2-core machine. Arguments go to
# pytest (`bash scripts/test.sh -n 0 tests/cache` runs one directory in one process).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
      || echo "note: could not install chromium; the browser tests will be skipped" >&2
  else
    echo "note: chromium/chromedriver not found; the browser tests will be skipped" >&2
  fi
fi
python -m pip install -q -e '.[test]'
python -m pytest -q -n 2 --dist loadgroup "$@"   # (loadgroup: a module marked xdist_group stays in one process)
