#!/usr/bin/env bash
# The GPU twin's benchmark (issue 18), run on the lent GPU machine from the repository root:
#
#   bash bench/gpu/run.sh [STAGE ...]      (default: all)
#
#   stash     copy the wheel parts that came with this run (bench/gpu/wheels/part*, prepare.sh)
#             into $STASH/wheels; a later run brings the next part (the machine stays warm)
#   install   join Ray's parts, check its sha256, pip install --no-index --no-deps --target
#             $STASH/site every wheel (skipped when the site is already complete)
#   race      bench/gpu/race.py: the race rate per dtype x HiCache x concurrency x fix
#   seed-off  the seed campaign with the fix off (bisect run): index_k=bf16 AND hicache=on
#   seed-on   the seed campaign with the fix on: nothing to blame (factorial: no_culprit)
#   hunt      a tree whose one commit removes the wait, and bisect commits over it
#   all       stash install race seed-off seed-on hunt
#
# Everything it writes goes under $OUT (the device tool's folder; default bench/gpu/out): a
# log and a JSON document per stage, the store (bisect.db) and each campaign's HTML report.
# ENGINE=cpu-standin runs every stage here on the CPU stand-in with .venv (no wheels, no GPU):
#   ENGINE=cpu-standin bash bench/gpu/run.sh
# The engine's sizes pass through from the environment: BISECT_TWIN_GPU_POOL_SLOTS (16),
# BISECT_TWIN_GPU_SLOT_TOKENS (65536), BISECT_TWIN_GPU_ATTENTION_US (250).
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
ENGINE=${ENGINE:-gpu}
OUT=${OUT:-$REPO/bench/gpu/out}
STASH=${STASH:-/tmp/bisect-gpu}
WORK=${WORK:-$STASH/work}
STRATEGY_ON=${STRATEGY_ON:-factorial}
umask 077
mkdir -p "$OUT" "$WORK"

if [ "$ENGINE" = cpu-standin ] && [ -x .venv/bin/python ]; then
  PY=$REPO/.venv/bin/python
else
  PY=${PYTHON:-python3}
  export PYTHONPATH="$STASH/site:$REPO${PYTHONPATH:+:$PYTHONPATH}"
fi
# The twins inherit the driver's environment (local transport): no fix switch from outside,
# Ray quiet and in our own folder.
unset SGLANG_HICACHE_WAIT_LOAD
export RAY_AUTH_MODE=disabled RAY_TMPDIR="$STASH/ray" BISECT_STORE="$OUT/bisect.db"
mkdir -p "$RAY_TMPDIR"

say() { echo "[run.sh $(date +%H:%M:%S)] $*" | tee -a "$OUT/run.log" >&2; }
bisect() { "$PY" -c 'import sys; from orchestrator.cli import main; sys.argv[0] = "bisect"; main()' "$@"; }

stage_stash() {
  if [ "$ENGINE" = cpu-standin ]; then say "stash: not needed with .venv"; return 0; fi
  mkdir -p "$STASH/wheels"
  local found=0
  for part in bench/gpu/wheels/part*; do
    [ -d "$part" ] || continue
    cp -f "$part"/* "$STASH/wheels/" && found=1
  done
  say "stash: $(ls "$STASH/wheels" 2>/dev/null | wc -l) files in $STASH/wheels (this run brought: $found)"
}

stage_install() {
  if [ "$ENGINE" = cpu-standin ]; then say "install: not needed with .venv"; return 0; fi
  if "$PY" -c 'import pydantic, sqlalchemy, alembic, paramiko, httptools, orjson, ray' 2>/dev/null; then
    say "install: every module imports already"; return 0
  fi
  cd "$STASH/wheels" || return 1
  local sums
  for sums in *.whl.sha256; do
    [ -e "$sums" ] || { say "install: no Ray parts: run stash with part1, then part2"; return 1; }
    local wheel=${sums%.sha256}
    if [ ! -e "$wheel" ]; then
      cat "$wheel".part-* > "$wheel.tmp" && mv "$wheel.tmp" "$wheel"
    fi
    sha256sum -c "$sums" || { rm -f "$wheel"; say "install: $wheel incomplete: bring part2"; cd "$REPO"; return 1; }
  done
  "$PY" -m pip install --quiet --no-index --no-deps --target "$STASH/site" ./*.whl
  local rc=$?
  cd "$REPO" || return 1
  "$PY" -c 'import pydantic, sqlalchemy, alembic, paramiko, httptools, orjson, ray, torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tee -a "$OUT/run.log"
  return $rc
}

stage_race() {
  "$PY" bench/gpu/race.py --engine "$ENGINE" --json "$OUT/race.json" 2>&1 | tee "$OUT/race.txt"
}

# A campaign: its JSON verdict on stdout, progress in the log, the report beside them.
campaign() {
  local name=$1; shift
  local started=$SECONDS
  "$@" --json -o "$OUT/$name.html" > "$OUT/$name.json" 2> "$OUT/$name.log"
  local rc=$?
  say "$name: exit $rc in $((SECONDS - started)) s: $("$PY" -c 'import json, sys; v = json.load(open(sys.argv[1])); print(v.get("status"), "|", v.get("reason") or [c["factors"] for c in v.get("culprits", [])], "| trials", v.get("cost", {}).get("trials"))' "$OUT/$name.json" 2>/dev/null || echo "no verdict: see $OUT/$name.log")"
  return $rc
}

stage_seed() {  # off|on
  local fix=$1 strategy=adaptive
  [ "$fix" = on ] && strategy=$STRATEGY_ON
  local made
  made=$("$PY" bench/gpu/campaigns.py seed --dir "$WORK" --fix "$fix" --engine "$ENGINE" --strategy "$strategy") || return 2
  local file
  file=$("$PY" -c 'import json, sys; print(json.loads(sys.argv[1])["campaign"])' "$made")
  cp "$file" "$OUT/seed-fix-$fix.yaml"
  bisect validate "$file" >> "$OUT/run.log" 2>&1 || return 2
  campaign "seed-fix-$fix" bisect run "$file"
}

stage_hunt() {
  local made
  made=$("$PY" bench/gpu/campaigns.py hunt --dir "$WORK" --engine "$ENGINE") || return 2
  echo "$made" > "$OUT/hunt-tree.json"
  local file good bad
  read -r file good bad < <("$PY" -c 'import json, sys; d = json.loads(sys.argv[1]); print(d["campaign"], d["good"], d["bad"])' "$made")
  git -C "$WORK/hunt-tree" log --format='%H %s' > "$OUT/hunt-tree.log"
  cp "$file" "$OUT/hunt.yaml"
  bisect validate "$file" >> "$OUT/run.log" 2>&1 || return 2
  campaign hunt bisect commits "$file" --good "$good" --bad "$bad"
  say "hunt: the commit that removed the wait: $("$PY" -c 'import json, sys; print(json.loads(sys.argv[1])["removed_wait"][:12])' "$made")"
}

stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(all)
[ "${stages[*]}" = all ] && stages=(stash install race seed-off seed-on hunt)
say "engine $ENGINE, stages: ${stages[*]}, out $OUT"
status=0
for each in "${stages[@]}"; do
  started=$SECONDS
  case $each in
    stash) stage_stash ;;
    install) stage_install ;;
    race) stage_race ;;
    seed-off) stage_seed off ;;
    seed-on) stage_seed on ;;
    hunt) stage_hunt ;;
    *) say "unknown stage $each"; exit 2 ;;
  esac
  rc=$?
  say "stage $each: exit $rc, $((SECONDS - started)) s"
  # A campaign's verdict has its own exit codes (3 inconclusive): keep going, report the worst.
  [ $rc -gt $status ] && status=$rc
done
exit $status
