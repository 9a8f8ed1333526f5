//! The NVIDIA driver's MIG capability table, `/proc/driver/nvidia-caps/mig-minors`:
//! which minor of `/dev/nvidia-caps/nvidia-capN` opens which GPU instance
//! or compute instance. Its lines, as the driver writes them (read on an
//! H200, driver 580.159):
//!
//! ```text
//! config 1
//! monitor 2
//! gpu0/gi0/access 3
//! gpu0/gi0/ci0/access 4
//! ```
//!
//! `gpuN` is the GPU's minor number (N of `/dev/nvidiaN`).

/// One line of the table that names an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigMinor {
    /// The GPU's minor number.
    pub gpu_minor: u32,
    /// The GPU instance.
    pub gpu_instance_id: u32,
    /// The compute instance; None for the GPU instance's own access.
    pub compute_instance_id: Option<u32>,
    /// N of `nvidia-caps/nvidia-capN`.
    pub cap_minor: u32,
}

/// The instance lines of the table; other lines (`config`, `monitor`, a
/// form this code does not know) are skipped, never guessed at.
pub fn parse_mig_minors(text: &str) -> Vec<MigMinor> {
    text.lines().filter_map(parse_line).collect()
}

/// Every minor the table names, instance or not (`config 1`, `monitor 2`):
/// a capability node whose minor is not here is one gpufree cannot place.
pub fn listed_minors(text: &str) -> std::collections::BTreeSet<u32> {
    text.lines()
        .filter_map(|l| l.trim().rsplit_once(' ')?.1.parse().ok())
        .collect()
}

fn parse_line(line: &str) -> Option<MigMinor> {
    let (path, minor) = line.trim().split_once(' ')?;
    let cap_minor = minor.trim().parse().ok()?;
    let mut parts = path.split('/');
    let number = |part: Option<&str>, prefix: &str| -> Option<u32> {
        part?.strip_prefix(prefix)?.parse().ok()
    };
    let gpu_minor = number(parts.next(), "gpu")?;
    let gpu_instance_id = number(parts.next(), "gi")?;
    let (compute_instance_id, last) = match parts.next()? {
        "access" => (None, None),
        ci => (Some(number(Some(ci), "ci")?), parts.next()),
    };
    if compute_instance_id.is_some() && last != Some("access") || parts.next().is_some() {
        return None;
    }
    Some(MigMinor {
        gpu_minor,
        gpu_instance_id,
        compute_instance_id,
        cap_minor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_s_table_as_read_on_an_h200() {
        let text = "config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\n\
                    gpu0/gi0/ci4/access 8\ngpu1/gi13/access 140\n";
        let t = parse_mig_minors(text);
        assert_eq!(t.len(), 4);
        assert_eq!(
            t[0],
            MigMinor {
                gpu_minor: 0,
                gpu_instance_id: 0,
                compute_instance_id: None,
                cap_minor: 3
            }
        );
        assert_eq!(t[2].compute_instance_id, Some(4));
        assert_eq!(
            (t[3].gpu_minor, t[3].gpu_instance_id, t[3].cap_minor),
            (1, 13, 140)
        );
        assert_eq!(listed_minors(text), [1, 2, 3, 4, 8, 140].into());
    }

    #[test]
    fn odd_lines_are_skipped() {
        for line in [
            "gpu0/gi1/ci0/access",
            "gpu0/gi1/ci0/access x",
            "gpu0/gi1/ci0/extra/access 5",
            "gpu0/gi1/ci0/other 5",
            "gpux/gi1/access 5",
            "gpu0/access 5",
            "",
            "\u{1b}[31m 5",
        ] {
            assert!(parse_mig_minors(line).is_empty(), "{line:?}");
        }
    }
}
