//! The words of a selector that cannot be used (`model::GpuMiss`,
//! `model::UnitMiss`): the one-line usage errors of `--gpu` and
//! `kill --unit`.

use crate::model::{mig_label, GpuMiss, Here, UnitMiss};

/// Why `--gpu` selects nothing usable, in one line.
pub fn gpu_miss(m: &GpuMiss) -> String {
    match m {
        GpuMiss::NoSuch { selector, here } => {
            let (what, have): (_, Vec<String>) = match here {
                Here::Mig(migs) => (
                    "no such GPU or MIG device (MIG devices here",
                    migs.iter().map(|&(g, m)| mig_label(g, m)).collect(),
                ),
                Here::Gpus(gpus) => (
                    "no such GPU (GPUs here",
                    gpus.iter().map(u32::to_string).collect(),
                ),
            };
            let have = if have.is_empty() {
                "none".into()
            } else {
                have.join(", ")
            };
            format!("--gpu {selector}: {what}: {have})")
        }
        GpuMiss::Several { selector, mig } => format!(
            "--gpu {selector}: UUID prefix matches several {}",
            if *mig { "MIG devices" } else { "GPUs" }
        ),
    }
}

/// Why `kill --unit` is ambiguous, in one line.
pub fn unit_miss(m: &UnitMiss) -> String {
    let list: Vec<String> = m
        .owners
        .iter()
        .map(|o| {
            let k = o.kind.as_str();
            if o.id == o.name {
                format!("{k} {}", o.id)
            } else {
                format!("{k} {} ({})", o.id, o.name)
            }
        })
        .collect();
    format!(
        "--unit {}: ambiguous, it names {}: {}",
        m.unit,
        m.owners.len(),
        list.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::unit_miss;
    use crate::model::{OwnerKind, UnitMiss, UnitOwner};

    #[test]
    fn an_ambiguous_unit_lists_its_owners_by_id_and_name() {
        let owner = |id: &str, name: &str| UnitOwner {
            kind: OwnerKind::SystemdUnit,
            id: id.into(),
            name: name.into(),
        };
        let m = UnitMiss {
            unit: "vllm".into(),
            owners: vec![owner("vllm-a.service", "vllm-a.service"), owner("x", "y")],
        };
        assert_eq!(
            unit_miss(&m),
            "--unit vllm: ambiguous, it names 2: systemd-unit vllm-a.service, systemd-unit x (y)"
        );
    }
}
