#!/usr/bin/env bash
# Regenerate proto/gen/ from proto/**/*.proto (grpcio-tools + mypy-protobuf from the locked
# python-default resolve). Run after editing a .proto; proto/gen/generated_test.py fails until you do.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -n "${GPUDRA_DEV_PYTHON:-}" ]]; then
  "$GPUDRA_DEV_PYTHON" proto/protogen.py proto/gen
else
  ./pants run proto:protogen -- "$PWD/proto/gen"
fi
