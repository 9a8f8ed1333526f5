//! Checks that need a real NVIDIA GPU and driver. They compile everywhere
//! and run only where asked: `cargo test --test it -- --ignored real_gpu`.

use crate::harness::*;

#[test]
#[ignore = "needs an NVIDIA GPU, its driver and nvidia-smi"]
fn real_gpu_status_agrees_with_nvidia_smi() {
    let out = std::process::Command::new("nvidia-smi")
        .args([
            "--query-gpu=index,uuid,memory.total,memory.used",
            "--format=csv,noheader,nounits",
        ])
        .output()
        .expect("nvidia-smi runs");
    let smi = String::from_utf8_lossy(&out.stdout);
    let r = Gpufree::new(["status"]).json().dev("/dev").run();
    r.assert_exit(0);
    let doc = r.json();
    assert_eq!(doc["nvml"]["available"], true);
    for (line, g) in smi.lines().zip(doc["gpus"].as_array().unwrap()) {
        let f: Vec<&str> = line.split(", ").collect();
        assert_eq!(g["uuid"], f[1]);
        let total_mib: u64 = f[2].trim().parse().unwrap();
        assert_eq!(
            g["memory"]["total_bytes"].as_u64().unwrap() >> 20,
            total_mib
        );
    }
}
