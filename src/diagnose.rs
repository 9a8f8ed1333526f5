//! The diagnosis: a pure function from a [`Snapshot`] to ordered findings,
//! each with its evidence and the exact next command. It never reads /proc
//! or NVML, so every finding is tested from a snapshot value.

use crate::model::{Finding, Process, Severity, Snapshot};
use crate::units::{gib, mib};

/// GPU indexes as `0-7` or `0, 2, 5`.
pub fn gpu_list(gpus: &[u32]) -> String {
    let mut g = gpus.to_vec();
    g.sort_unstable();
    g.dedup();
    if g.len() > 2 && g.windows(2).all(|w| w[1] == w[0] + 1) {
        return format!("{}-{}", g[0], g[g.len() - 1]);
    }
    g.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The `gpufree kill` command that targets exactly these PIDs.
pub fn kill_command(pids: &[u32]) -> String {
    let mut cmd = String::from("gpufree kill");
    for p in pids {
        cmd.push_str(&format!(" --pid {p}"));
    }
    cmd
}

fn gpus_of(p: &Process) -> Vec<u32> {
    let mut g: Vec<u32> = p.gpu_memory.iter().map(|m| m.gpu).collect();
    g.extend(p.devices.iter().filter_map(|d| d.gpu));
    g.sort_unstable();
    g.dedup();
    g
}

fn finding(
    kind: &str,
    severity: Severity,
    message: String,
    pids: Vec<u32>,
    gpus: Vec<u32>,
    next: String,
) -> Finding {
    Finding {
        kind: kind.into(),
        severity,
        message,
        pids,
        gpus,
        next,
    }
}

/// Diagnoses a snapshot; the most important finding first.
pub fn diagnose(s: &Snapshot) -> Vec<Finding> {
    let mut out = Vec::new();
    let live: Vec<&Process> = s
        .processes
        .iter()
        .filter(|p| p.memory_bytes() > 0 && p.state != "Z")
        .collect();
    let memory: u64 = live.iter().map(|p| p.memory_bytes()).sum();
    if !live.is_empty() {
        let pids: Vec<u32> = live.iter().map(|p| p.pid).collect();
        let gpus: Vec<u32> = live.iter().flat_map(|p| gpus_of(p)).collect();
        out.push(finding(
            "live-holders",
            Severity::Error,
            format!(
                "{} {} {} on GPU{} {}",
                plural(live.len(), "live process", "live processes"),
                if live.len() == 1 { "holds" } else { "hold" },
                gib(memory),
                if gpu_list(&gpus).contains([',', '-']) {
                    "s"
                } else {
                    ""
                },
                gpu_list(&gpus)
            ),
            pids.clone(),
            gpus,
            kill_command(&pids),
        ));
    }
    let renamed: Vec<&Process> = s.processes.iter().filter(|p| p.renamed).collect();
    if !renamed.is_empty() {
        let first = renamed[0];
        out.push(finding(
            "renamed-holders",
            Severity::Warning,
            format!(
                "{} renamed {} (e.g. PID {} runs {} but shows comm '{}' and cmdline '{}'): `ps | grep` and `pkill -f` patterns written for the original command line miss {}",
                plural(renamed.len(), "holder has", "holders have"),
                if renamed.len() == 1 { "itself" } else { "themselves" },
                first.pid,
                first.exe.as_deref().unwrap_or("?"),
                first.comm,
                first.cmdline_joined(),
                if renamed.len() == 1 { "it" } else { "them" },
            ),
            renamed.iter().map(|p| p.pid).collect(),
            renamed.iter().flat_map(|p| gpus_of(p)).collect(),
            "gpufree why --pattern 'REGEX'".into(),
        ));
    }
    let node_only: Vec<&Process> = s
        .processes
        .iter()
        .filter(|p| p.memory_bytes() == 0 && !p.devices.is_empty())
        .collect();
    if !node_only.is_empty() {
        let pids: Vec<u32> = node_only.iter().map(|p| p.pid).collect();
        out.push(finding(
            "device-holders-without-memory",
            Severity::Warning,
            format!(
                "{} GPU device nodes open without GPU memory ({}): they keep the driver's files open",
                plural(node_only.len(), "process holds", "processes hold"),
                node_only.iter().map(|p| format!("{} {}", p.pid, p.comm)).collect::<Vec<_>>().join(", ")
            ),
            pids.clone(),
            node_only.iter().flat_map(|p| gpus_of(p)).collect(),
            kill_command(&pids),
        ));
    }
    let orphans: Vec<&Process> = s.processes.iter().filter(|p| p.orphaned).collect();
    if !orphans.is_empty() {
        let pids: Vec<u32> = orphans.iter().map(|p| p.pid).collect();
        out.push(finding(
            "orphans",
            Severity::Warning,
            format!(
                "{} whose parent died (reparented to init or a subreaper): whatever started {} is gone",
                plural(orphans.len(), "holder", "holders"),
                if orphans.len() == 1 { "it" } else { "them" }
            ),
            pids.clone(),
            orphans.iter().flat_map(|p| gpus_of(p)).collect(),
            kill_command(&pids),
        ));
    }
    let zombies: Vec<&Process> = s.processes.iter().filter(|p| p.state == "Z").collect();
    if !zombies.is_empty() {
        let parents: Vec<String> = zombies.iter().map(|p| p.ppid.to_string()).collect();
        out.push(finding(
            "zombies",
            Severity::Warning,
            format!(
                "{}: killing does nothing; parent{} {} must reap {}",
                plural(zombies.len(), "zombie holder", "zombie holders"),
                if parents.len() == 1 { "" } else { "s" },
                parents.join(", "),
                if zombies.len() == 1 { "it" } else { "them" }
            ),
            zombies.iter().map(|p| p.pid).collect(),
            zombies.iter().flat_map(|p| gpus_of(p)).collect(),
            format!(
                "gpufree status --json  # then signal parent {}",
                parents.join(", ")
            ),
        ));
    }
    if !s.visibility.nvml_pids_not_visible.is_empty() {
        let pids = s.visibility.nvml_pids_not_visible.clone();
        let gpus: Vec<u32> = s
            .gpus
            .iter()
            .filter(|g| g.nvml_processes.iter().any(|p| pids.contains(&p.pid)))
            .map(|g| g.index)
            .collect();
        out.push(finding(
            "outside-namespace",
            Severity::Error,
            format!(
                "NVML lists {} that this /proc does not have (another PID namespace: a container, or the host): run gpufree on the host (or with hostPID)",
                plural(pids.len(), "PID", "PIDs")
            ),
            pids,
            gpus,
            "nsenter -t 1 -p -m gpufree status".into(),
        ));
    }
    for g in &s.gpus {
        let listed_elsewhere: u64 = g
            .nvml_processes
            .iter()
            .filter(|p| s.visibility.nvml_pids_not_visible.contains(&p.pid))
            .filter_map(|p| p.used_bytes)
            .sum();
        let unexplained = g.memory.unaccounted_bytes.saturating_sub(listed_elsewhere);
        if g.memory.known
            && unexplained > 0
            && g.nvml_processes.is_empty()
            && !s.processes.iter().any(|p| p.touches_gpu(g.index))
        {
            out.push(finding(
                "unaccounted-memory",
                Severity::Warning,
                format!(
                    "GPU {}: {} used with no process listed and no holder of its device node",
                    g.index,
                    mib(unexplained)
                ),
                Vec::new(),
                vec![g.index],
                format!("gpufree why --gpu {}", g.index),
            ));
        }
    }
    let v = &s.visibility;
    if v.processes_unreadable > 0 || v.hidepid || !s.nvml.available {
        let mut why = Vec::new();
        if v.processes_unreadable > 0 {
            why.push(format!(
                "{} could not be read",
                plural(v.processes_unreadable as usize, "process", "processes")
            ));
        }
        if v.hidepid {
            why.push("/proc is mounted with hidepid".into());
        }
        if !s.nvml.available {
            why.push(format!(
                "NVML is unavailable ({})",
                s.nvml.error.as_deref().unwrap_or("?")
            ));
        }
        out.push(finding(
            "partial-view",
            Severity::Warning,
            format!("partial view: {}", why.join("; ")),
            v.unreadable_pids.clone(),
            Vec::new(),
            "sudo gpufree status".into(),
        ));
    }
    if out.is_empty() && !s.gpus.is_empty() {
        out.push(finding(
            "free",
            Severity::Info,
            format!(
                "GPU{} {} free: no holders",
                if s.gpus.len() == 1 { "" } else { "s" },
                gpu_list(&s.gpus.iter().map(|g| g.index).collect::<Vec<_>>())
            ),
            Vec::new(),
            s.gpus.iter().map(|g| g.index).collect(),
            String::new(),
        ));
    }
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Gpu, GpuMemory, Memory};

    fn worker(pid: u32, gpu: u32) -> Process {
        Process {
            pid,
            comm: "VLLM::Worker_TP".into(),
            cmdline: vec![format!("VLLM::Worker_TP{gpu}")],
            exe: Some("/usr/bin/python3.12".into()),
            state: "S".into(),
            renamed: true,
            gpu_memory: vec![GpuMemory {
                gpu,
                used_bytes: Some(96_610 << 20),
            }],
            ..Process::default()
        }
    }

    #[test]
    fn live_renamed_holders_come_first_with_a_kill_of_exactly_them() {
        let s = Snapshot {
            gpus: (0..8)
                .map(|i| Gpu {
                    index: i,
                    memory: Memory {
                        known: true,
                        ..Memory::default()
                    },
                    ..Gpu::default()
                })
                .collect(),
            processes: (0..8).map(|i| worker(212_702 + i, i)).collect(),
            ..Snapshot::default()
        };
        let f = diagnose(&s);
        assert_eq!(f[0].kind, "live-holders");
        assert_eq!(f[0].message, "8 live processes hold 754.8 GiB on GPUs 0-7");
        assert_eq!(f[0].pids.len(), 8);
        assert!(f[0]
            .next
            .starts_with("gpufree kill --pid 212702 --pid 212703"));
        assert!(f.iter().any(|x| x.kind == "renamed-holders"));
        assert!(!f.iter().any(|x| x.kind == "free"));
    }

    #[test]
    fn no_holders_is_free() {
        let s = Snapshot {
            gpus: vec![Gpu::default()],
            ..Snapshot::default()
        };
        let s = Snapshot {
            nvml: crate::model::NvmlStatus {
                available: true,
                ..Default::default()
            },
            ..s
        };
        assert_eq!(diagnose(&s)[0].kind, "free");
    }

    #[test]
    fn gpu_lists_read_as_ranges() {
        assert_eq!(gpu_list(&[3, 1, 2, 0]), "0-3");
        assert_eq!(gpu_list(&[0, 2]), "0, 2");
        assert_eq!(gpu_list(&[5]), "5");
    }
}
