# What the demo scripts share (scripts/demo.sh, scripts/s3-demo.sh), sourced after they set
# $work (their folder) and $metad (the daemon binary): every process they start is stopped on
# exit, headings, and starting a metad.

pids=()  # every background process a script starts: stopped (TERM, then waited for) on exit
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# start_daemon NAME CONFIG [BINARY, default $metad]: starts it with its output in $work/NAME.out
# and its log in $work/NAME.log, waits up to 10 s for its address, and sets $address.
start_daemon() {
  local name=$1 config=$2 out="$work/$1.out" daemon=${3:-$metad}
  "$daemon" --node-config "$config" >"$out" 2>"$work/$name.log" &
  pids+=($!)
  address=
  for _ in $(seq 100); do
    address=$(sed -n 's/.*listening on \(.*\)/\1/p' "$out")
    [ -n "$address" ] && break
    sleep 0.1
  done
  [ -n "$address" ] || { echo "metad $name did not start:"; cat "$work/$name.log"; exit 1; }
  echo "  $name listening on $address"
}
