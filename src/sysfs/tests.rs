//! sysfs readers on a fixture tree laid out as the kernel's: DRM cards and
//! their PCI devices (amdgpu's memory files), connectors that are not
//! cards, and the KFD's topology and per-process VRAM.

use super::*;
use std::os::unix::fs::symlink;
use std::path::PathBuf;

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A PCI device with `files`, and `class/drm/cardN/device` linking to it.
fn card(root: &Path, n: u32, slot: &str, files: &[(&str, &str)]) {
    let dev = root.join("devices/pci0000:00").join(slot);
    std::fs::create_dir_all(&dev).unwrap();
    for (name, text) in files {
        std::fs::write(dev.join(name), text).unwrap();
    }
    let class = root.join(format!("class/drm/card{n}"));
    std::fs::create_dir_all(&class).unwrap();
    symlink(
        PathBuf::from("../../../devices/pci0000:00").join(slot),
        class.join("device"),
    )
    .unwrap();
}

#[test]
fn drm_cards_name_their_pci_device_vendor_and_amdgpu_memory() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    card(
        root,
        1,
        "0000:c3:00.0",
        &[
            ("vendor", "0x1002\n"),
            ("mem_info_vram_total", "206141652992\n"),
            ("mem_info_vram_used", "51539607552\n"),
        ],
    );
    card(root, 0, "0000:00:02.0", &[("vendor", "0x8086\n")]);
    // A connector and a render node are not cards; a card without a PCI
    // device (a virtual one) is left out.
    std::fs::create_dir_all(root.join("class/drm/card1-DP-1")).unwrap();
    std::fs::create_dir_all(root.join("class/drm/renderD128")).unwrap();
    std::fs::create_dir_all(root.join("devices/platform/vgem")).unwrap();
    std::fs::create_dir_all(root.join("class/drm/card2")).unwrap();
    symlink(
        "../../../devices/platform/vgem",
        root.join("class/drm/card2/device"),
    )
    .unwrap();
    let cards = drm_cards(root);
    assert_eq!(
        cards,
        [
            DrmCard {
                card: 0,
                pdev: "0000:00:02.0".into(),
                vendor: Vendor::Intel,
                vram_total: None,
                vram_used: None,
            },
            DrmCard {
                card: 1,
                pdev: "0000:c3:00.0".into(),
                vendor: Vendor::Amd,
                vram_total: Some(206_141_652_992),
                vram_used: Some(51_539_607_552),
            },
        ]
    );
    assert_eq!(Vendor::Amd.as_str(), "amd");
    assert_eq!(Vendor::from_pci_id("0x10de"), Vendor::Nvidia);
    assert_eq!(Vendor::from_pci_id("garbage"), Vendor::Other);
}

#[test]
fn an_unreadable_memory_file_is_unknown_not_zero() {
    let t = tempfile::tempdir().unwrap();
    card(
        t.path(),
        0,
        "0000:03:00.0",
        &[("vendor", "0x1002\n"), ("mem_info_vram_used", "lots\n")],
    );
    let c = &drm_cards(t.path())[0];
    assert_eq!((c.vram_total, c.vram_used), (None, None));
}

#[test]
fn kfd_vram_per_process_maps_gpu_ids_to_pci_slots() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let nodes = "class/kfd/kfd/topology/nodes";
    // Node 0 is the CPU (gpu_id 0); 1 and 2 are GPUs at c3:00.0 and
    // 0001:04:10.3 (location_id = bus << 8 | device << 3 | function).
    write(root, &format!("{nodes}/0/gpu_id"), "0\n");
    write(
        root,
        &format!("{nodes}/0/properties"),
        "domain 0\nlocation_id 0\n",
    );
    write(root, &format!("{nodes}/1/gpu_id"), "45678\n");
    write(
        root,
        &format!("{nodes}/1/properties"),
        "cpu_cores_count 0\nlocation_id 49920\ndomain 0\n",
    );
    write(root, &format!("{nodes}/2/gpu_id"), "1234\n");
    write(
        root,
        &format!("{nodes}/2/properties"),
        &format!("domain 1\nlocation_id {}\n", (4 << 8) | (0x10 << 3) | 3),
    );
    assert_eq!(
        kfd_gpus(root),
        BTreeMap::from([
            (1234, "0001:04:10.3".to_string()),
            (45678, "0000:c3:00.0".to_string())
        ])
    );
    let procs = "class/kfd/kfd/proc";
    write(root, &format!("{procs}/4242/vram_45678"), "1073741824\n");
    write(root, &format!("{procs}/4242/vram_1234"), "4096\n");
    write(root, &format!("{procs}/4242/sdma_45678"), "999\n");
    // A GPU id the topology does not know, and a file that is no number.
    write(root, &format!("{procs}/77/vram_11111"), "5\n");
    write(root, &format!("{procs}/78/vram_45678"), "n/a\n");
    let vram = kfd_vram(root);
    assert_eq!(
        vram,
        BTreeMap::from([(
            4242,
            BTreeMap::from([
                ("0000:c3:00.0".to_string(), 1 << 30),
                ("0001:04:10.3".to_string(), 4096)
            ])
        )])
    );
}

#[test]
fn no_sysfs_no_cards_no_kfd() {
    let t = tempfile::tempdir().unwrap();
    assert!(drm_cards(t.path()).is_empty());
    assert!(kfd_vram(t.path()).is_empty());
}
