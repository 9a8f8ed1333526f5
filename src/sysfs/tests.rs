//! sysfs readers on a fixture tree laid out as the kernel's: DRM cards and
//! their PCI devices (amdgpu's memory files), connectors that are not
//! cards, and the KFD's topology and per-process VRAM.

use super::*;
use std::collections::BTreeMap;
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
        vram.by_device,
        BTreeMap::from([(
            4242,
            BTreeMap::from([
                ("0000:c3:00.0".to_string(), 1 << 30),
                ("0001:04:10.3".to_string(), 4096)
            ])
        )])
    );
    // The GPU id the topology does not know is reported, not dropped.
    assert_eq!(
        vram.unmapped,
        BTreeMap::from([(77, BTreeMap::from([(11111, 5)]))])
    );
}

/// A KFD topology node: `gpu_id` and `properties`.
fn kfd_node(root: &Path, n: u32, gpu_id: u32, properties: &str) {
    let dir = format!("class/kfd/kfd/topology/nodes/{n}");
    write(root, &format!("{dir}/gpu_id"), &format!("{gpu_id}\n"));
    write(root, &format!("{dir}/properties"), properties);
}

#[test]
fn kfd_partitions_map_to_function_0_and_their_vram_adds_up() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    // One MI300 in CPX mode at 0000:0c:00.0 (a DRM card), split into
    // partitions whose node ids the driver ORs into location_id: into the
    // function bits (node 1 reads as .1), or into bits 28 and up.
    card(root, 0, "0000:0c:00.0", &[("vendor", "0x1002\n")]);
    let base = 0x0c << 8;
    kfd_node(root, 1, 100, &format!("location_id {base}\ndomain 0\n"));
    kfd_node(
        root,
        2,
        101,
        &format!("location_id {}\ndomain 0\n", base | 1),
    );
    kfd_node(
        root,
        3,
        102,
        &format!("location_id {}\ndomain 0\n", base | (2 << 28)),
    );
    // An older kernel without a domain property: domain 0.
    kfd_node(root, 4, 200, &format!("location_id {}\n", 0x43 << 8));
    // A second card at 0000:43:00.1 exists as itself: kept exact.
    card(root, 1, "0000:43:00.1", &[("vendor", "0x1002\n")]);
    kfd_node(
        root,
        5,
        201,
        &format!("location_id {}\ndomain 0\n", (0x43 << 8) | 1),
    );
    // Without a location_id a node cannot be placed: its memory is unmapped.
    kfd_node(root, 6, 300, "domain 0\n");
    assert_eq!(
        kfd_gpus(root),
        BTreeMap::from([
            (100, "0000:0c:00.0".to_string()),
            (101, "0000:0c:00.0".to_string()),
            (102, "0000:0c:00.0".to_string()),
            (200, "0000:43:00.0".to_string()),
            (201, "0000:43:00.1".to_string()),
        ])
    );
    let procs = "class/kfd/kfd/proc/9";
    write(root, &format!("{procs}/vram_100"), "1000\n");
    write(root, &format!("{procs}/vram_101"), "200\n");
    write(root, &format!("{procs}/vram_102"), "30\n");
    write(root, &format!("{procs}/vram_300"), "4\n");
    let vram = kfd_vram(root);
    assert_eq!(
        vram.by_device[&9],
        BTreeMap::from([("0000:0c:00.0".to_string(), 1230)])
    );
    assert_eq!(vram.unmapped[&9], BTreeMap::from([(300, 4)]));
}

#[test]
fn kfd_and_fdinfo_overlap_so_the_join_takes_the_larger_never_the_sum() {
    let kfd = BTreeMap::from([
        (10, BTreeMap::from([("0000:0c:00.0".to_string(), 8 << 30)])),
        (11, BTreeMap::from([("0000:0c:00.0".to_string(), 1 << 30)])),
    ]);
    let drm = [
        // pid 10's render client holds the KFD's 8 GiB and 1 GiB more.
        (10, "0000:0c:00.0".to_string(), 9 << 30),
        // pid 11's client sees less than the KFD: the KFD's counts.
        (11, "0000:0c:00.0".to_string(), 1 << 20),
        // pid 12 has two distinct clients on one device: they add up.
        (12, "0000:43:00.0".to_string(), 3),
        (12, "0000:43:00.0".to_string(), 4),
    ];
    let joined = per_process_device_bytes(&kfd, drm);
    assert_eq!(
        joined,
        BTreeMap::from([
            ((10, "0000:0c:00.0".to_string()), 9 << 30),
            ((11, "0000:0c:00.0".to_string()), 1 << 30),
            ((12, "0000:43:00.0".to_string()), 7),
        ])
    );
}

#[test]
fn xe_vram_total_sums_its_tiles_in_decimal_or_hex_and_use_is_unknown() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    card(root, 0, "0000:03:00.0", &[("vendor", "0x8086\n")]);
    let dev = "devices/pci0000:00/0000:03:00.0";
    write(
        root,
        &format!("{dev}/tile0/physical_vram_size_bytes"),
        "17179869184\n",
    );
    write(
        root,
        &format!("{dev}/tile1/physical_vram_size_bytes"),
        "0x400000000\n",
    );
    // Not tiles.
    write(
        root,
        &format!("{dev}/tiles/physical_vram_size_bytes"),
        "1\n",
    );
    write(root, &format!("{dev}/tile/physical_vram_size_bytes"), "1\n");
    let c = &drm_cards(root)[0];
    assert_eq!(c.vendor, Vendor::Intel);
    assert_eq!(c.vram_total, Some(32 << 30));
    assert_eq!(c.vram_used, None, "xe publishes no use: unknown, never 0");
    // One tile unreadable: the total is unknown, not the other tile's.
    write(
        root,
        &format!("{dev}/tile1/physical_vram_size_bytes"),
        "0xzz\n",
    );
    assert_eq!(drm_cards(root)[0].vram_total, None);
}

#[test]
fn pci_slots_have_a_domain_of_four_or_more_hex_digits() {
    for ok in [
        "0000:03:00.0",
        "10000:03:00.0",
        "0000:c3:1f.7",
        "abcd:EF:00.1",
    ] {
        assert!(pci_slot(ok), "{ok}");
    }
    for bad in [
        "000:03:00.0",
        "0000:3:00.0",
        "0000:03:00.8",
        "0000:03:00",
        "0000:03:00.0.1",
        "0000:0g:00.0",
        "0000:03:00:0",
        "",
        "vgem",
        "123456789:03:00.0",
    ] {
        assert!(!pci_slot(bad), "{bad}");
    }
    // A card in a PCI domain of five digits (behind a VMD bridge) is a card.
    let t = tempfile::tempdir().unwrap();
    card(t.path(), 0, "10000:e1:00.0", &[("vendor", "0x1002\n")]);
    assert_eq!(drm_cards(t.path())[0].pdev, "10000:e1:00.0");
}

#[test]
fn no_sysfs_no_cards_no_kfd() {
    let t = tempfile::tempdir().unwrap();
    assert!(drm_cards(t.path()).is_empty());
    assert_eq!(kfd_vram(t.path()), KfdVram::default());
}
