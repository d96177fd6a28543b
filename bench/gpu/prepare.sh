#!/usr/bin/env bash
# Run HERE (not on the GPU machine): download the cp312 manylinux wheels the GPU machine's image
# lacks (../shared/FACTS.md, "The GPU machine"), at the versions of this checkout's .venv, into
# bench/gpu/wheels/ (ignored by git: carried to the device by `run`'s carry).
#
#   part1/  the small wheels (~17 MB) and the first half of Ray's wheel
#   part2/  the second half of Ray's wheel
#
# Each part is under 40 MB, so each fits one device run's carry (64 MiB); run.sh's `stash` stage
# copies whatever part came into /tmp/bisect-gpu/wheels, `install` joins Ray and installs.
set -euo pipefail
cd "$(dirname "$0")/../.."

PIP=.venv/bin/pip
DEST=bench/gpu/wheels
# What the image lacks, with what each needs (FACTS.md); versions come from .venv.
PACKAGES=(pydantic pydantic_core annotated-types typing-inspection SQLAlchemy greenlet alembic
          Mako paramiko bcrypt cryptography PyNaCl cffi pycparser httptools orjson
          jsonschema jsonschema-specifications referencing rpds-py)
PLATFORM=(--python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none
          --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64
          --platform manylinux_2_28_x86_64)

# pip warns about this machine's extra index locations on every name: keep the real messages.
pip_download() { "$PIP" download --quiet --no-deps --only-binary=:all: "${PLATFORM[@]}" "$@" \
  2> >(grep -v 'is neither a file nor a directory' >&2); }

pinned() {  # NAME -> NAME==VERSION as .venv has it (pip freeze spells names its own way)
  local name=$1 line
  line=$("$PIP" freeze 2>/dev/null | grep -i -E "^${name//[-_]/[-_]}==" || true)
  [ -n "$line" ] || { echo "prepare.sh: $name is not in .venv (make test installs it)" >&2; exit 2; }
  echo "$line"
}

rm -rf "$DEST"
mkdir -p "$DEST/part1" "$DEST/part2" "$DEST/ray"
chmod 700 "$DEST"
specs=()
for name in "${PACKAGES[@]}"; do specs+=("$(pinned "$name")"); done
echo "downloading: ${specs[*]}"
pip_download -d "$DEST/part1" "${specs[@]}"
ray=$(pinned ray)
echo "downloading: $ray"
pip_download -d "$DEST/ray" "$ray"
wheel=$(ls "$DEST/ray")
# Two pieces of equal size (Ray 2.60's wheel is 79 MB: two of ~40 MB).
split -n 2 -d "$DEST/ray/$wheel" "$DEST/ray/$wheel.part-"
mv "$DEST/ray/$wheel.part-00" "$DEST/part1/"
mv "$DEST/ray/$wheel.part-01" "$DEST/part2/"
sha256sum "$DEST/ray/$wheel" | sed "s|$DEST/ray/||" > "$DEST/part1/$wheel.sha256"
rm -rf "$DEST/ray"
du -sh "$DEST/part1" "$DEST/part2"
ls -l "$DEST/part1" "$DEST/part2"
