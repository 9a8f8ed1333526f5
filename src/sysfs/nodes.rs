//! Which PCI device each DRM node is: `class/drm/cardN` and
//! `class/drm/renderDN` link `device` to the PCI device behind
//! `/dev/dri/cardN` and `/dev/dri/renderDN`, and `device/driver` to its
//! driver.

use super::pci_slot;
use std::collections::BTreeMap;
use std::path::Path;

/// One DRM node's PCI device and driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriDevice {
    /// The PCI slot (`0000:c3:00.0`).
    pub pdev: String,
    /// The kernel driver bound to it (`amdgpu`, `i915`, `xe`, `nvidia`);
    /// None when the link cannot be read.
    pub driver: Option<String>,
}

/// Every DRM node under `sys_root` (`card1`, `renderD128`; connectors such
/// as `card1-DP-1` and non-PCI devices left out), by its name under
/// `/dev/dri`.
pub fn dri_devices(sys_root: &Path) -> BTreeMap<String, DriDevice> {
    let Ok(entries) = std::fs::read_dir(sys_root.join("class/drm")) else {
        return BTreeMap::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let number = name
                .strip_prefix("renderD")
                .or_else(|| name.strip_prefix("card"))?;
            if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let device = e.path().join("device");
            let pdev = link_name(&device)?;
            pci_slot(&pdev).then(|| {
                let driver = link_name(&device.join("driver"));
                (name, DriDevice { pdev, driver })
            })
        })
        .collect()
}

/// The last component of where a symlink points.
fn link_name(link: &Path) -> Option<String> {
    Some(
        std::fs::read_link(link)
            .ok()?
            .file_name()?
            .to_str()?
            .to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn cards_and_render_nodes_name_their_pci_device_and_driver() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let dev = root.join("devices/pci0000:00/0000:c3:00.0");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::create_dir_all(root.join("bus/pci/drivers/amdgpu")).unwrap();
        symlink("../../../bus/pci/drivers/amdgpu", dev.join("driver")).unwrap();
        let vgem = root.join("devices/platform/vgem");
        std::fs::create_dir_all(&vgem).unwrap();
        for (name, target) in [
            ("card1", &dev),
            ("renderD128", &dev),
            ("card1-DP-1", &dev),
            ("card2", &vgem),
            ("renderD", &dev),
        ] {
            let class = root.join("class/drm").join(name);
            std::fs::create_dir_all(&class).unwrap();
            symlink(target, class.join("device")).unwrap();
        }
        let amd = DriDevice {
            pdev: "0000:c3:00.0".into(),
            driver: Some("amdgpu".into()),
        };
        let found = dri_devices(root);
        assert_eq!(
            found.into_iter().collect::<Vec<_>>(),
            [
                ("card1".to_string(), amd.clone()),
                ("renderD128".to_string(), amd)
            ]
        );
        assert!(dri_devices(&root.join("nonexistent")).is_empty());
    }
}
