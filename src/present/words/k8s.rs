//! What the kubelet's allocations say, in words.

use super::super::next::who;
use crate::model::{AllocationIssue, KubeletDown, PodName};
use crate::units::gib;

fn pod(p: &PodName) -> String {
    format!("{}/{}", p.namespace, p.name)
}

/// The message and the detail lines of an allocation finding.
pub(super) fn allocation(a: &AllocationIssue, gpus: &[u32], bytes: u64) -> (String, Vec<String>) {
    let on = gpus
        .first()
        .map(|g| format!("GPU {g}"))
        .unwrap_or_else(|| "a GPU".into());
    match a {
        AllocationIssue::Unallocated { uuid, holders } => (
            format!(
                "{on} ({uuid}) has {} in use but the kubelet allocated it to no pod: the scheduler will give it to the next pod that asks",
                gib(bytes)
            ),
            holders.iter().map(who).collect(),
        ),
        AllocationIssue::OtherPod {
            who: w,
            pod: mine,
            allocated_to,
        } => (
            format!(
                "a process of pod {} holds {on}, which the kubelet allocated to {}",
                pod(mine),
                allocated_to.iter().map(pod).collect::<Vec<_>>().join(", ")
            ),
            vec![who(w)],
        ),
        AllocationIssue::GonePod { uid, pod: p, holders } => (
            format!(
                "{} of pod {} still hold{} {on}, but the kubelet no longer runs that pod",
                if holders.len() == 1 { "a process".to_string() } else { format!("{} processes", holders.len()) },
                p.as_ref().map_or_else(|| format!("UID {uid}"), pod),
                if holders.len() == 1 { "s" } else { "" }
            ),
            holders.iter().map(who).collect(),
        ),
    }
}

impl std::fmt::Display for KubeletDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KubeletDown::Runtime { error } => f.write_str(error),
            KubeletDown::Timeout { within } => {
                write!(f, "no answer within {:.1} s", within.as_secs_f64())
            }
            KubeletDown::Connect { error } => write!(f, "cannot connect: {error}"),
            KubeletDown::Call { path, error } => write!(f, "{path}: {error}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Why the kubelet could not be read, in the words collection used
    /// before they were typed.
    #[test]
    fn why_the_kubelet_could_not_be_read_in_words() {
        let cases = [
            (
                KubeletDown::Timeout {
                    within: std::time::Duration::from_millis(2_500),
                },
                "no answer within 2.5 s",
            ),
            (
                KubeletDown::Connect {
                    error: "transport error".into(),
                },
                "cannot connect: transport error",
            ),
            (
                KubeletDown::Call {
                    path: "/v1.PodResourcesLister/List".into(),
                    error: "denied".into(),
                },
                "/v1.PodResourcesLister/List: denied",
            ),
            (
                KubeletDown::Runtime {
                    error: "no epoll".into(),
                },
                "no epoll",
            ),
        ];
        for (down, words) in cases {
            assert_eq!(down.to_string(), words);
        }
    }
}
