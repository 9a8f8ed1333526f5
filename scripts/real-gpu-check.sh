#!/usr/bin/env bash
# Checks that need a real NVIDIA GPU, for a session that has one (the device
# tool). Build here, carry the binary, run there:
#   cargo build --release --workspace
#   run(command="bash scripts/real-gpu-check.sh", carry=["target/release/gpufree"])
# Everything goes to $OUT (or ./real-gpu-out). It signals only the CUDA
# worker it starts itself, by PID, and never touches the GPU's settings.
set -u
OUT=${OUT:-./real-gpu-out}
mkdir -p "$OUT"
G=./target/release/gpufree
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }

log "driver and GPUs"
nvidia-smi -L >"$OUT/nvidia-smi-L.txt" 2>&1
nvidia-smi --query-gpu=index,uuid,memory.total,memory.used --format=csv,noheader,nounits >"$OUT/smi-gpus.csv" 2>&1
cat "$OUT/nvidia-smi-L.txt" | tee -a "$OUT/summary.txt"

log "gpufree status on the real driver (before)"
$G status --json >"$OUT/status-before.json" 2>"$OUT/status-before.err"; echo "exit $?" | tee -a "$OUT/summary.txt"
python3 - "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
out = sys.argv[1]
doc = json.load(open(f"{out}/status-before.json"))
smi = [l.split(", ") for l in open(f"{out}/smi-gpus.csv").read().splitlines()]
for g, s in zip(doc["gpus"], smi):
    ok = g["uuid"] == s[1] and g["memory"]["total_bytes"] >> 20 == int(s[2])
    print(f"GPU {g['index']}: uuid and total agree with nvidia-smi: {ok}; used {g['memory']['used_bytes'] >> 20} MiB (smi {s[3]})")
print("unavailable:", doc["unavailable"])
PY

log "a CUDA worker renamed like vLLM (4096 MiB on GPU 0)"
python3 scripts/cuda_worker.py 0 4096 VLLM::Worker_TP0 >"$OUT/worker.out" 2>&1 &
WORKER=$!
for _ in $(seq 100); do grep -q ready "$OUT/worker.out" && break; sleep 0.2; done
cat "$OUT/worker.out" | tee -a "$OUT/summary.txt"
tr '\0' ' ' </proc/$WORKER/cmdline | tee -a "$OUT/summary.txt"; echo | tee -a "$OUT/summary.txt"

log "status / why / pattern on it"
$G status --no-color >"$OUT/status-held.txt" 2>&1
$G status --json >"$OUT/status-held.json" 2>&1
$G why --no-color --pattern 'python3.*cuda_worker' >"$OUT/why-held.txt" 2>&1; echo "why exit $?" | tee -a "$OUT/summary.txt"
python3 - "$OUT" "$WORKER" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
doc = json.load(open(f"{sys.argv[1]}/status-held.json"))
pid = int(sys.argv[2])
p = [q for q in doc["processes"] if q["pid"] == pid]
print("worker found:", bool(p))
if p:
    p = p[0]
    print("renamed:", p["renamed"], "comm:", p["comm"], "cmdline:", p["cmdline"], "exe:", p["exe"])
    print("gpu_memory:", p["gpu_memory"], "devices:", [(d["path"], d["via"]) for d in p["devices"]])
PY

log "gpufree kill --pid WORKER (by identity) and the release"
$G kill --pid "$WORKER" --yes --json --timeout 60s >"$OUT/kill.json" 2>"$OUT/kill.err"; echo "kill exit $?" | tee -a "$OUT/summary.txt"
python3 -c "import json,sys; k=json.load(open('$OUT/kill.json'))['kill']; print({x: k[x] for x in ('targets','survivors','released','seconds_to_release')})" | tee -a "$OUT/summary.txt"
kill -0 "$WORKER" 2>/dev/null && { echo "worker survived; ending it" | tee -a "$OUT/summary.txt"; kill -9 "$WORKER"; }
wait "$WORKER" 2>/dev/null

log "status after"
$G status --no-color >"$OUT/status-after.txt" 2>&1
$G why --no-color >"$OUT/why-after.txt" 2>&1; echo "why exit $?" | tee -a "$OUT/summary.txt"
head -12 "$OUT/status-after.txt" | tee -a "$OUT/summary.txt"

log "scan speed on this host"
for i in 1 2 3; do /usr/bin/time -f "status %e s, %M KiB" $G status --json >/dev/null; done 2>&1 | tee -a "$OUT/summary.txt"
