//! The cost of one refresh of a long-running command (watch, serve, wait):
//! one collector, collected ROUNDS times after a first collection (which
//! pays the in-kernel walk's load); prints the first collection's and the
//! median refresh's wall and CPU milliseconds, and the walk used. For
//! bench/scan.py; not a test.
//!
//!     refresh DEVDIR procfs|bpf [ROUNDS]

use gpufree::snapshot::{Collector, Config};
use std::time::Instant;

fn cpu_ms() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 / 1e6
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, dev, scan, rest @ ..] = args.as_slice() else {
        return Err("usage: refresh DEVDIR procfs|bpf [ROUNDS]".into());
    };
    let rounds: usize = rest.first().map_or(Ok(9), |r| r.parse())?;
    let scan = gpufree::proc::scan::ScanChoice::ALL
        .into_iter()
        .find(|c| c.as_str() == scan)
        .ok_or("the walk is procfs or bpf")?;
    let cfg = Config {
        dev_dir: dev.into(),
        nvml_lib: Some("/nonexistent/libnvidia-ml.so.1".into()),
        scan,
        long_lived: true,
        ..Config::default()
    };
    let (t0, c0) = (Instant::now(), cpu_ms());
    let collector = Collector::new(cfg, None)?;
    let first = collector.collect_until(None)?;
    let first_ms = (t0.elapsed().as_secs_f64() * 1e3, cpu_ms() - c0);
    let mut walls = Vec::new();
    let mut cpus = Vec::new();
    // Every refresh must find what the first collection found (a bench of
    // a walk that loses holdings would be a lie).
    let holdings = |s: &gpufree::model::Snapshot| {
        let held: Vec<_> = s.processes.iter().map(|p| (p.pid, &p.devices)).collect();
        serde_json::to_string(&held)
    };
    let want = holdings(&first)?;
    let mut last = first;
    for _ in 0..rounds {
        let (t, c) = (Instant::now(), cpu_ms());
        last = collector.collect_until(None)?;
        walls.push(t.elapsed().as_secs_f64() * 1e3);
        cpus.push(cpu_ms() - c);
        if holdings(&last)? != want {
            return Err("a refresh found other holdings than the first collection".into());
        }
    }
    walls.sort_by(f64::total_cmp);
    cpus.sort_by(f64::total_cmp);
    println!(
        "first_wall_ms={:.2} first_cpu_ms={:.2} refresh_wall_ms={:.2} refresh_cpu_ms={:.2} holders={} scan={} reason={:?}",
        first_ms.0,
        first_ms.1,
        walls[walls.len() / 2],
        cpus[cpus.len() / 2],
        last.processes.len(),
        last.visibility.scan.name(),
        gpufree::present::words::scan::scan_reason(&last.visibility)
    );
    // The process's memory now and at its peak (the load's BTF included).
    let status = std::fs::read_to_string("/proc/self/status")?;
    for key in ["VmRSS", "VmHWM"] {
        if let Some(line) = status.lines().find(|l| l.starts_with(key)) {
            println!("{}", line.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    Ok(())
}
