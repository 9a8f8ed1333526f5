//! DRM clients in the status table: the clients a holder shares with
//! other processes (fork, dup, SCM_RIGHTS), said where their memory is
//! counted once.

use crate::model::Process;
use crate::units::mib;

/// `client 7 on GPU 1 (amdgpu, 8,192 MiB), shared with 101` for each
/// client of `p` that other processes hold too; None when none is shared.
pub(super) fn shared(p: &Process) -> Option<String> {
    let said: Vec<String> = p
        .drm_clients
        .iter()
        .filter(|c| !c.shared_with.is_empty())
        .map(|c| {
            let with: Vec<String> = c.shared_with.iter().map(u32::to_string).collect();
            format!(
                "client {} on GPU {} ({}, {}), shared with {}; counted once, in the lowest PID",
                c.client_id,
                c.gpu,
                c.driver,
                mib(c.device_bytes),
                with.join(", ")
            )
        })
        .collect();
    (!said.is_empty()).then(|| said.join("; "))
}
