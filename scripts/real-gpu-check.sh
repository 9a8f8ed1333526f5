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
# Every gpufree call is bounded, so one hang cannot eat the lease.
g() { timeout 90 $G "$@"; }
if ! ldconfig -p | grep -q libnvidia-ml.so.1; then
    GPUFREE_NVML_LIB=$(find / -xdev -name libnvidia-ml.so.1 2>/dev/null | head -1)
    export GPUFREE_NVML_LIB
fi

log "driver and GPUs"
nvidia-smi -L >"$OUT/nvidia-smi-L.txt" 2>&1
nvidia-smi --query-gpu=index,uuid,memory.total,memory.used --format=csv,noheader,nounits >"$OUT/smi-gpus.csv" 2>&1
cat "$OUT/nvidia-smi-L.txt" | tee -a "$OUT/summary.txt"

log "gpufree status on the real driver (before)"
g status --json >"$OUT/status-before.json" 2>"$OUT/status-before.err"; echo "exit $?" | tee -a "$OUT/summary.txt"
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
g status --no-color >"$OUT/status-held.txt" 2>&1
g status --json >"$OUT/status-held.json" 2>&1
g why --no-color --pattern 'python3.*cuda_worker' >"$OUT/why-held.txt" 2>&1; echo "why exit $?" | tee -a "$OUT/summary.txt"
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
g kill --pid "$WORKER" --yes --json --timeout 60s >"$OUT/kill.json" 2>"$OUT/kill.err"; echo "kill exit $?" | tee -a "$OUT/summary.txt"
python3 -c "import json,sys; k=json.load(open('$OUT/kill.json'))['kill']; print({x: k[x] for x in ('targets','survivors','released','seconds_to_release')})" | tee -a "$OUT/summary.txt"
kill -0 "$WORKER" 2>/dev/null && { echo "worker survived; ending it" | tee -a "$OUT/summary.txt"; kill -9 "$WORKER"; }
wait "$WORKER" 2>/dev/null

log "status after"
g status --no-color >"$OUT/status-after.txt" 2>&1
g why --no-color >"$OUT/why-after.txt" 2>&1; echo "why exit $?" | tee -a "$OUT/summary.txt"
head -12 "$OUT/status-after.txt" | tee -a "$OUT/summary.txt"

log "MIG mode and the driver's MIG view (query only)"
nvidia-smi --query-gpu=index,mig.mode.current,mig.mode.pending --format=csv 2>&1 | tee -a "$OUT/summary.txt"
nvidia-smi mig -lgi 2>&1 | head -5 | tee -a "$OUT/summary.txt"
ls /dev/nvidia-caps /proc/driver/nvidia-caps 2>&1 | tee -a "$OUT/summary.txt"
cat /proc/driver/nvidia-caps/mig-minors 2>/dev/null | head -8 | tee -a "$OUT/summary.txt"

log "gpufree's MIG view (mode, devices, a MIG selector on a GPU without them)"
python3 -c "import json; d=json.load(open('$OUT/status-before.json')); print([(g['index'], g.get('mig_mode'), len(g.get('mig_devices', []))) for g in d['gpus']])" 2>&1 | tee -a "$OUT/summary.txt"
g status --gpu 0:0 >"$OUT/mig-selector.txt" 2>&1; echo "status --gpu 0:0 exit $?: $(head -c 300 "$OUT/mig-selector.txt")" | tee -a "$OUT/summary.txt"

log "metrics on the real driver"
g metrics >"$OUT/metrics.txt" 2>&1; echo "metrics exit $?" | tee -a "$OUT/summary.txt"
grep -E '^gpufree_(gpu_memory|unaccounted|verdict|holder)' "$OUT/metrics.txt" | head -8 | tee -a "$OUT/summary.txt"

log "the incident's shape: launcher on nvidia-uvm, tracker, renamed worker and its DataLoader child"
python3 scripts/cuda_worker.py --launch 0 4096 VLLM::Worker_TP0 >"$OUT/launch.out" 2>&1 &
LAUNCHER=$!
for _ in $(seq 150); do grep -q ready "$OUT/launch.out" && break; sleep 0.2; done
cat "$OUT/launch.out" | tee -a "$OUT/summary.txt"
STARTED="$LAUNCHER $(grep -oE '(tracker|child|ready) [0-9]+' "$OUT/launch.out" | awk '{print $2}' | tr '\n' ' ')"
echo "started: $STARTED" | tee -a "$OUT/summary.txt"
echo "pgrep -f 'python3.*vllm' sees: $(pgrep -f 'python3.*vllm' | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv 2>&1 | tee -a "$OUT/summary.txt"
g status --no-color >"$OUT/incident-status.txt" 2>&1
g status --json >"$OUT/incident-status.json" 2>&1
g why --no-color --pattern 'python3.*vllm' >"$OUT/incident-why.txt" 2>&1; echo "why exit $?" | tee -a "$OUT/summary.txt"
g kill --gpu 0 --dry-run --no-color >"$OUT/incident-plan.txt" 2>&1; echo "dry-run exit $?" | tee -a "$OUT/summary.txt"
python3 - "$OUT" "$STARTED" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
doc = json.load(open(f"{sys.argv[1]}/incident-status.json"))
started = {int(p) for p in sys.argv[2].split()}
seen = {p["pid"]: p for p in doc["processes"]}
for pid in sorted(started):
    p = seen.get(pid)
    print(pid, "found" if p else "MISSED", p and (p["comm"], p["gpu_memory"], [(d["path"], d["via"]) for d in p["devices"]]))
PY
g kill --gpu 0 --yes --json --timeout 60s >"$OUT/incident-kill.json" 2>"$OUT/incident-kill.err"; echo "kill --gpu 0 exit $?" | tee -a "$OUT/summary.txt"
python3 -c "import json; k=json.load(open('$OUT/incident-kill.json'))['kill']; print({x: k.get(x) for x in ('targets','survivors','released','seconds_to_release')})" 2>&1 | tee -a "$OUT/summary.txt"
# A zombie (exited, its reaper not yet run) is no survivor.
for p in $STARTED; do
    state=$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)
    [ -n "$state" ] && [ "$state" != Z ] && { echo "$p survived ($state); ending it" | tee -a "$OUT/summary.txt"; kill -9 "$p"; }
done
wait 2>/dev/null
g wait --gpu 0 --timeout 20s >"$OUT/incident-wait.txt" 2>&1; echo "wait exit $?" | tee -a "$OUT/summary.txt"
nvidia-smi --query-gpu=memory.used --format=csv 2>&1 | tee -a "$OUT/summary.txt"

if command -v nvidia-cuda-mps-control >/dev/null; then
    log "MPS: a private control daemon, one client; gpufree must target the client, not the server"
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/gpufree-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/gpufree-mps/log
    mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
    timeout 20 nvidia-cuda-mps-control -d; echo "mps-control -d exit $?" | tee -a "$OUT/summary.txt"
    python3 scripts/cuda_worker.py 0 2048 mps_client >"$OUT/mps-client.out" 2>&1 &
    CLIENT=$!
    for _ in $(seq 100); do grep -q ready "$OUT/mps-client.out" && break; sleep 0.2; done
    cat "$OUT/mps-client.out" | tee -a "$OUT/summary.txt"
    g status --json >"$OUT/mps-status.json" 2>&1
    g status --no-color >"$OUT/mps-status.txt" 2>&1
    g why --no-color >"$OUT/mps-why.txt" 2>&1; echo "why exit $?" | tee -a "$OUT/summary.txt"
    g kill --gpu 0 --dry-run --no-color >"$OUT/mps-plan.txt" 2>&1; echo "dry-run exit $?" | tee -a "$OUT/summary.txt"
    python3 - "$OUT" "$CLIENT" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
doc = json.load(open(f"{sys.argv[1]}/mps-status.json"))
g = doc["gpus"][0]["memory"]
c = [p for p in doc["processes"] if p["pid"] == int(sys.argv[2])]
print("MPS: used", g["used_bytes"] >> 20, "MiB, accounted", g["accounted_bytes"] >> 20,
      "MiB, client", c and c[0]["gpu_memory"], "listings", doc["gpus"][0]["nvml_processes"])
PY
    g kill --pid "$CLIENT" --yes --timeout 30s --no-color >"$OUT/mps-kill.txt" 2>&1; echo "kill client exit $?" | tee -a "$OUT/summary.txt"
    kill -0 "$CLIENT" 2>/dev/null && kill -9 "$CLIENT"
    echo quit | timeout 20 nvidia-cuda-mps-control; echo "mps quit exit $?" | tee -a "$OUT/summary.txt"
    sleep 2
    g status --no-color >"$OUT/mps-after.txt" 2>&1
fi

log "scan speed on this host"
for i in 1 2 3; do /usr/bin/time -f "status %e s, %M KiB" $G status --json >/dev/null; done 2>&1 | tee -a "$OUT/summary.txt"

# The device tool brings back at most 8 files: everything in one archive.
tar -czf all.tgz -C "$OUT" . && mv all.tgz "$OUT/all.tgz"
