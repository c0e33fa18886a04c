#!/usr/bin/env bash
# Serve with the predictive KV policy, then with LRU; replay the same generated agent
# workload against each; print the comparison. Runs on the embedded SmolLM2 by default:
#   bash examples/replay_and_compare.sh
#   MODEL=tiny SESSIONS=2 bash examples/replay_and_compare.sh      # a quick look
#   TRACE=recorded.jsonl bash examples/replay_and_compare.sh       # your own traffic, from
#     stepahead traces export --all -o recorded.jsonl  (its tenants are served as they are named)
# Knobs (environment): MODEL, TENANTS, SESSIONS, SEED, SPEED, HOT_BLOCKS, PORT, TRACE, and
# MAX_INPUT_TOKENS (cut longer prompts to fit the model's context: replay --max-input-tokens).
# Exit status: 0 when every request of both replays was answered; 1 when some failed (the
# comparison is printed, then each policy's first error messages on stderr), or a gateway
# did not start or exited (the last lines of its log on stderr); 2 for a bad TRACE, a PORT
# that is no port number (1 to 65535) or one already in use, before any gateway starts (a bad
# PORT, or a numeric knob that is no number in its range, before the workload is generated
# too); else the status `stepahead replay` stopped with (3: the gateway stopped answering
# mid-replay).
set -euo pipefail
MODEL=${MODEL:-smollm2}
TENANTS=${TENANTS:-3}
SESSIONS=${SESSIONS:-4}
SEED=${SEED:-0}
SPEED=${SPEED:-2}
HOT_BLOCKS=${HOT_BLOCKS:-400}
PORT=${PORT:-8765}
MAX_INPUT_TOKENS=${MAX_INPUT_TOKENS:-}
# a port number, checked before anything runs (at most 5 digits: no shell arithmetic overflow)
if ! [[ "$PORT" =~ ^[0-9]{1,5}$ ]] || (( 10#$PORT < 1 || 10#$PORT > 65535 )); then
  echo "replay_and_compare: PORT must be a port number from 1 to 65535, got '$PORT'" >&2; exit 2
fi
PORT=$((10#$PORT))   # 08765 is 8765, for curl and the gateway alike
# the other numeric knobs too, the same way: one line and exit 2 before anything runs
whole() {  # $1 = knob, $2 = its value, $3 = the least it may be (at most 18 digits: no overflow)
  if ! [[ "$2" =~ ^[0-9]{1,18}$ ]] || (( 10#$2 < $3 )); then
    echo "replay_and_compare: $1 must be a whole number of at least $3, got '$2'" >&2; exit 2
  fi
}
whole TENANTS "$TENANTS" 1; whole SESSIONS "$SESSIONS" 1; whole SEED "$SEED" 0; whole HOT_BLOCKS "$HOT_BLOCKS" 1
[ -z "$MAX_INPUT_TOKENS" ] || whole MAX_INPUT_TOKENS "$MAX_INPUT_TOKENS" 1
if ! [[ "$SPEED" =~ ^([0-9]{1,9}(\.[0-9]{0,9})?|\.[0-9]{1,9})$ && "$SPEED" =~ [1-9] ]]; then
  echo "replay_and_compare: SPEED must be a positive number (2 replays twice as fast), got '$SPEED'" >&2; exit 2
fi
work=$(mktemp -d)
trap 'kill "${server:-}" 2>/dev/null || true; rm -rf "$work"' EXIT

if [ -n "${TRACE:-}" ]; then
  [ -r "$TRACE" ] || { echo "replay_and_compare: cannot read TRACE=$TRACE" >&2; exit 2; }
  workload=$TRACE
else
  workload="$work/workload.jsonl"
  stepahead workload generate --tenants "$TENANTS" --sessions "$SESSIONS" --seed "$SEED" \
    --max-context-tokens 3000 -o "$workload"
fi
# the trace's tenants, each served with a key of its own (sk-compare-<i>); read with the
# replay's own reader first, so a bad trace stops here with its one-line error, before any gateway starts
tenant_list=$(python -c '
import sys
from cache.trace_format import TraceFormatError, read_trace
try:
    _, records = read_trace(sys.argv[1])
except (OSError, TraceFormatError) as exc:
    sys.exit(f"replay_and_compare: cannot read {sys.argv[1]}: {exc}")
if not records:
    sys.exit(f"replay_and_compare: {sys.argv[1]} holds no requests")
print("\n".join(sorted({record.tenant for record in records})))' "$workload") || exit 2
mapfile -t tenants <<< "$tenant_list"
keys=()
for i in "${!tenants[@]}"; do keys+=("--tenant-key=${tenants[$i]}=sk-compare-$i"); done
cut=()
[ -z "$MAX_INPUT_TOKENS" ] || cut=(--max-input-tokens "$MAX_INPUT_TOKENS")

port_free() {  # binds as the gateway does (SO_REUSEADDR), so only a server listening there fails it
  python -c '
import socket, sys
with socket.socket() as probe:
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind(("127.0.0.1", int(sys.argv[1])))
    except OSError as exc:
        sys.exit(f"replay_and_compare: cannot use PORT={sys.argv[1]}: {exc.strerror or exc} "
                 "(another server listens there? pick another PORT)")' "$PORT"
}
server_exited() {  # $1 = policy: the gateway this script started is gone; show why
  echo "replay_and_compare: the $1 gateway (stepahead serve on port $PORT) exited; the last lines of its log:" >&2
  tail -n 20 "$work/serve-$1.log" >&2
  exit 1
}
port_free || exit 2

write_config() {  # $1 = policy
  python - "$1" "$MODEL" "$HOT_BLOCKS" "$work" "${tenants[@]}" > "$work/$1.toml" <<'PY'
import hashlib, json, sys
policy, model, hot_blocks, work, *tenants = sys.argv[1:]
# every store in the scratch folder: a gateway on the user's own places would take up their
# unfinished batches (their tenants' names are the trace's) and send them to model "m"
print(f'[tracing]\nstore_path = {json.dumps(f"{work}/traces-{policy}.sqlite")}\n')
print(f'[server]\nresponses_db = {json.dumps(f"{work}/responses-{policy}.sqlite3")}\n')
print(f'[[models]]\nname = "m"\nkind = "local"\npath = {json.dumps(model)}\nnum_workers = 2')
print(f'[models.engine]\npolicy = "{policy}"\nnum_hot_blocks = {int(hot_blocks)}\n')
for i, name in enumerate(tenants):
    digest = hashlib.sha256(f"sk-compare-{i}".encode()).hexdigest()
    print(f'[[tenants]]\nname = {json.dumps(name)}\napi_key_sha256 = ["{digest}"]\n')
PY
}

for policy in predictive lru; do
  write_config "$policy"
  port_free || exit 2   # the last gateway let it go; has another server taken it since?
  STEPAHEAD_PREDICTOR_DIR="$work/predictor-$policy" \
    stepahead serve --config "$work/$policy.toml" --port "$PORT" --log-level warning \
    > "$work/serve-$policy.log" 2>&1 &
  server=$!
  for _ in $(seq 600); do
    kill -0 "$server" 2>/dev/null || server_exited "$policy"
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
    sleep 0.5
  done
  # the port was free, and the gateway started here still runs: the answer was its own
  kill -0 "$server" 2>/dev/null || server_exited "$policy"
  status=0
  stepahead replay "$workload" --base-url "http://127.0.0.1:$PORT" \
    --api-key sk-compare-0 "${keys[@]}" --speed "$SPEED" --max-output-tokens 8 "${cut[@]}" \
    --no-progress --json > "$work/$policy.json" || status=$?
  kill -0 "$server" 2>/dev/null || server_exited "$policy"   # it died during the replay
  # exit 1: some requests failed, and the report counts them; anything else stops here
  if [ "$status" -gt 1 ]; then
    echo "replay_and_compare: stepahead replay stopped with exit status $status" >&2; exit "$status"
  fi
  kill "$server"; wait "$server" 2>/dev/null || true
  server=
done

python - "$work/predictive.json" "$work/lru.json" <<'PY'
import json, sys
rows = {name: json.load(open(path))["total"] for name, path in zip(("predictive", "lru"), sys.argv[1:])}
keys = ("requests", "errors", "ttft_mean_s", "ttft_p50_s", "ttft_p99_s", "session_e2e_p50_s", "cached_token_share")
def cell(value):
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)
print(f"{'':<20}" + "".join(f"{name:>14}" for name in rows))
for key in keys:
    print(f"{key:<20}" + "".join(f"{cell(rows[name][key]):>14}" for name in rows))
p, l = rows["predictive"], rows["lru"]
if p["ttft_mean_s"] and l["ttft_mean_s"]:
    print(f"LRU / predictive mean TTFT: {l['ttft_mean_s'] / p['ttft_mean_s']:.2f}x (one run of each: on a "
          "shared or small machine two runs can disagree on the winner; repeat it, or see "
          "docs/benchmarks.md for medians over many runs)")
failed = [name for name in rows if rows[name]["errors"]]
if not failed and p["cached_token_share"] is not None and p["cached_token_share"] == l["cached_token_share"]:
    print("Both kept the same share of prompt tokens cached (memory was not short for this "
          "workload: raise SESSIONS or lower HOT_BLOCKS); their TTFT differs by noise only.")
print(json.dumps({"comparison": rows}))
shown = []
for name, path in zip(("predictive", "lru"), sys.argv[1:]):
    if rows[name]["errors"]:
        samples = json.load(open(path))["error_samples"][:3]
        shown += samples
        print(f"replay_and_compare: {rows[name]['errors']} of the {name} replay's {rows[name]['requests']} "
              "requests failed, so its numbers cover the rest only; first errors:", file=sys.stderr)
        print("".join(f"  {message}\n" for message in samples), end="", file=sys.stderr)
if any("context" in message for message in shown):
    print("replay_and_compare: prompts longer than the model's context can be cut with MAX_INPUT_TOKENS=N",
          file=sys.stderr)
sys.exit(1 if failed else 0)
PY
