#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, -DMETALOAD_FUZZ=ON, clang) in build-fuzz/ and runs each
# for a while, one per core at a time. docs/fuzzing.md explains the targets and their seeds.
#
#   scripts/fuzz.sh [--seconds N] [TARGET...]   # default: every target, 20 s each
#
# Seeds: fuzz/seeds/<target>/ (committed), plus files of the repository's fixtures
# (tests/fixtures; METALOAD_FIXTURES overrides), copied at run time
# into build-fuzz/seeds/<target>/. What a run finds stays in build-fuzz/corpus/<target>/ and
# seeds the next run. Exit 1 when a target crashes (or leaks, or hangs): the input is left in
# build-fuzz/crashes/<target>/ and its path printed; reproduce with
#   build-fuzz/fuzz/<target>_fuzz build-fuzz/crashes/<target>/crash-...
set -euo pipefail

src="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${src}/build-fuzz"
fixtures="${METALOAD_FIXTURES:-${src}/tests/fixtures}"
seconds=20
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --seconds=*) seconds="${1#*=}"; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown flag $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done

# The longest input each target is given: a little over its largest real seed (a config.json is
# ~1 KB, a 400B model's index ~100 KB), so the fuzzer spends its time on plausible sizes.
declare -A max_len=(
  [safetensors_header]=65536
  [checkpoint_index]=131072
  [skeleton_json]=16384
  [hf_config]=8192
  [plan_json]=16384
  [node_config]=4096
  [chunk_wire]=4096
  [range_request]=64
  [metrics_text]=1024
  [record_check]=4096
  [log_line]=1024
  [s3_xml]=16384
)
all_targets=(safetensors_header checkpoint_index skeleton_json hf_config plan_json node_config chunk_wire range_request metrics_text
  record_check log_line s3_xml)
for t in "${targets[@]}"; do
  [[ -n "${max_len[$t]:-}" ]] || { echo "fuzz.sh: no target $t (targets: ${all_targets[*]})" >&2; exit 2; }
done

if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: needs clang and libFuzzer: apt-get install -y clang libfuzzer-14-dev" >&2
  exit 2
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [[ ! -f "${build}/CMakeCache.txt" ]]; then
  CCACHE_BASEDIR="${src}" cmake -S "${src}" -B "${build}" -G Ninja -DMETALOAD_FUZZ=ON \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
fi
# Without yaml-cpp or gRPC the build has no node_config or chunk_wire target: the default set is
# what it has.
if [[ ${#targets[@]} -eq 0 ]]; then
  for t in "${all_targets[@]}"; do
    if ninja -C "${build}" -t query "${t}_fuzz" >/dev/null 2>&1; then targets+=("$t"); fi
  done
fi
CCACHE_BASEDIR="${src}" ninja -C "${build}" -j "${FUZZ_JOBS:-2}" "${targets[@]/%/_fuzz}" >/dev/null

# The first 8 + N bytes of a safetensors file (its header), where the whole file is too long.
safetensors_prefix() {
  local n
  n=$(od -An -t u8 -N 8 "$1" | tr -d ' ')
  head -c "$((8 + n))" "$1"
}

# Fixture files for `target` (absent fixtures: no seeds from them).
seed_from_fixtures() {
  local target="$1" out="$2" f i=0
  [[ -d "${fixtures}" ]] || return 0
  case "${target}" in
    safetensors_header)
      while IFS= read -r f; do
        i=$((i + 1))
        if (( $(stat -c %s "$f") <= max_len[safetensors_header] )); then
          cp "$f" "${out}/fixture-${i}.safetensors"
        else
          safetensors_prefix "$f" > "${out}/fixture-${i}.header"
        fi
      done < <(find "${fixtures}" -name '*.safetensors' -type f | sort) ;;
    checkpoint_index)
      while IFS= read -r f; do i=$((i + 1)); cp "$f" "${out}/fixture-${i}.json"; done \
        < <(find "${fixtures}" -name '*.index.json' -type f | sort) ;;
    hf_config)
      while IFS= read -r f; do i=$((i + 1)); cp "$f" "${out}/fixture-${i}.json"; done \
        < <(find "${fixtures}" -name config.json -type f | sort) ;;
  esac
}

# One target's run; its table row goes to ${build}/logs/<target>.row (exit 1: it failed).
run_target() {
  local t="$1" seeds="${build}/seeds/$1" corpus="${build}/corpus/$1" crashes="${build}/crashes/$1"
  local log="${build}/logs/$1.log" row="${build}/logs/$1.row" rc=0 done_line runs cov files artifact
  rm -rf "${seeds}"
  mkdir -p "${seeds}" "${corpus}" "${crashes}"
  [[ -d "${src}/fuzz/seeds/${t}" ]] && cp "${src}/fuzz/seeds/${t}"/* "${seeds}/"
  seed_from_fixtures "${t}" "${seeds}"
  "${build}/fuzz/${t}_fuzz" -max_total_time="${seconds}" -max_len="${max_len[$t]}" -rss_limit_mb=2048 \
    -timeout=10 -print_final_stats=1 -artifact_prefix="${crashes}/" "${corpus}" "${seeds}" >"${log}" 2>&1 || rc=$?
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "${log}" | tail -1 || true)
  runs=$(grep -oE 'stat::number_of_executed_units:[[:space:]]*[0-9]+' "${log}" | grep -oE '[0-9]+$' || true)
  cov=$(sed -nE 's/.*cov: ([0-9]+).*/\1/p' "${log}" | tail -1)
  files=$(find "${corpus}" -type f | wc -l)
  if [[ ${rc} -eq 0 && -n "${done_line}" ]]; then
    printf '%-20s %12s %8s %8s  %s\n' "$t" "${runs:-?}" "${cov:-?}" "${files}" ok >"${row}"
    return 0
  fi
  artifact=$(sed -nE 's/.*Test unit written to (.*)$/\1/p' "${log}" | tail -1)
  {
    printf '%-20s %12s %8s %8s  %s\n' "$t" "${runs:-?}" "${cov:-?}" "${files}" "FAILED (exit ${rc})"
    grep -E '^(==[0-9]+==ERROR|SUMMARY|    #[0-9] )' "${log}" | sed -n '1,12s/^/    /p'
    echo "    input: ${artifact:-none written; see ${log}}"
    echo "    log:   ${log}"
  } >"${row}"
  return 1
}

# FUZZ_JOBS targets at a time (default: one per core): each still gets its own `seconds` of
# one core, and the smoke run takes a core-count fraction of the time.
jobs="${FUZZ_JOBS:-$(nproc)}"
failed=()
mkdir -p "${build}/logs"
printf '%-20s %12s %8s %8s  %s\n' target runs cov corpus result
for ((i = 0; i < ${#targets[@]}; i += jobs)); do
  batch=("${targets[@]:i:jobs}")
  pids=()
  for t in "${batch[@]}"; do
    run_target "$t" &
    pids+=($!)
  done
  for j in "${!batch[@]}"; do
    wait "${pids[$j]}" || failed+=("${batch[$j]}")
    cat "${build}/logs/${batch[$j]}.row"
  done
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz.sh: ${#failed[@]} target(s) failed: ${failed[*]}" >&2
  exit 1
fi
