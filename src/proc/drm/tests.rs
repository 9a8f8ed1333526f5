//! The DRM fdinfo parser on samples of each driver's format
//! (fixtures/drm/README.md says where the format comes from), on broken
//! input, and the counting of shared clients once.

use super::*;

const AMDGPU_LEGACY: &[u8] = include_bytes!("../../../fixtures/drm/amdgpu-legacy.txt");
const AMDGPU: &[u8] = include_bytes!("../../../fixtures/drm/amdgpu.txt");
const XE: &[u8] = include_bytes!("../../../fixtures/drm/xe.txt");
const I915: &[u8] = include_bytes!("../../../fixtures/drm/i915.txt");
const NOT_DRM: &[u8] = include_bytes!("../../../fixtures/drm/not-drm.txt");
const AMDGPU_SHARED: &[u8] = include_bytes!("../../../fixtures/drm/amdgpu-shared.txt");
const AMDGPU_5_18: &[u8] = include_bytes!("../../../fixtures/drm/amdgpu-5.18.txt");
const I915_DISCRETE: &[u8] = include_bytes!("../../../fixtures/drm/i915-discrete.txt");
const XE_INTEGRATED: &[u8] = include_bytes!("../../../fixtures/drm/xe-integrated.txt");

const MIB: u64 = 1 << 20;

#[test]
fn amdgpu_before_total_and_resident_reports_drm_memory_in_kib() {
    let f = parse_fdinfo(AMDGPU_LEGACY).unwrap();
    assert_eq!(f.driver, "amdgpu");
    assert_eq!(f.pdev.as_deref(), Some("0000:c3:00.0"));
    assert_eq!(f.client_id, 412);
    assert_eq!(f.device_bytes(), Some(8192 * MIB));
    assert_eq!(f.regions["gtt"].bytes(), Some(20 * MIB));
    assert_eq!(f.regions["cpu"].bytes(), Some(0));
    // Driver keys (amd-memory-visible-vram) are not regions.
    assert_eq!(f.regions.len(), 3);
}

#[test]
fn amdgpu_total_and_resident_keys_come_in_any_order() {
    let f = parse_fdinfo(AMDGPU).unwrap();
    assert_eq!((f.client_id, f.pdev.as_deref()), (77, Some("0000:c3:00.0")));
    assert_eq!(f.device_bytes(), Some(48 * 1024 * MIB));
    assert_eq!(f.regions["gtt"].resident, Some(2 * MIB));
    assert_eq!(f.regions["cpu"].total, Some(0));
}

#[test]
fn xe_counts_vram0_and_stolen_on_a_discrete_part_never_cycles() {
    let f = parse_fdinfo(XE).unwrap();
    assert_eq!(f.driver, "xe");
    // Engine cycles (drm-cycles-rcs, drm-total-cycles-rcs) are no region.
    let names: Vec<&str> = f.regions.keys().map(String::as_str).collect();
    assert_eq!(names, ["gtt", "stolen", "system", "vram0"]);
    // Resident vram0 (90 of a 96 MiB total) and stolen, which a discrete
    // part keeps in VRAM; gtt and system are host memory.
    assert_eq!(f.device_bytes(), Some(94 * MIB));
    assert_eq!(f.regions["vram0"].total, Some(96 * MIB));
    assert_eq!(f.regions["gtt"].total, Some(256 << 10));
}

#[test]
fn xe_stolen_on_an_integrated_part_is_host_memory() {
    let f = parse_fdinfo(XE_INTEGRATED).unwrap();
    assert_eq!(f.regions["stolen"].bytes(), Some(8 * MIB));
    assert_eq!(f.device_bytes(), None, "no vram: stolen is system memory");
    assert!(!f.regions.keys().any(|k| k.contains("cycles")));
}

#[test]
fn i915_local_memory_is_device_memory_and_pdev_may_be_absent() {
    let f = parse_fdinfo(I915).unwrap();
    assert_eq!((f.driver.as_str(), f.pdev.as_deref()), ("i915", None));
    // local0: 512 MiB resident of a 640 MiB total.
    assert_eq!(f.device_bytes(), Some(512 * MIB));
    assert_eq!(f.regions["system0"].bytes(), Some(12 * MIB));
}

#[test]
fn i915_stolen_local_is_device_memory_and_stolen_system_is_not() {
    let f = parse_fdinfo(I915_DISCRETE).unwrap();
    assert_eq!(f.regions["stolen-system0"].bytes(), Some(0));
    assert_eq!(f.device_bytes(), Some(1024 * MIB + 8 * MIB));
    // Host memory regions with a device-sounding prefix stay host memory.
    let mut host = f.clone();
    host.regions
        .retain(|k, _| k.starts_with("system") || k.starts_with("stolen-system"));
    assert_eq!(host.device_bytes(), None);
}

#[test]
fn resident_wins_over_a_total_that_counts_shared_buffers() {
    let f = parse_fdinfo(AMDGPU_SHARED).unwrap();
    let vram = f.regions["vram"];
    assert_eq!(vram.total, Some(12 * 1024 * MIB));
    assert_eq!(vram.resident, Some(4 * 1024 * MIB));
    assert_eq!(f.device_bytes(), Some(4 * 1024 * MIB));
    // drm-memory- is the resident key's alias; the total is the last word.
    let only = |total, resident, memory| Region {
        total,
        resident,
        memory,
        shared: None,
    };
    assert_eq!(only(Some(9), Some(3), Some(5)).bytes(), Some(3));
    assert_eq!(only(Some(9), None, Some(5)).bytes(), Some(5));
    assert_eq!(only(Some(9), None, None).bytes(), Some(9));
    assert_eq!(only(None, None, None).bytes(), None);
}

#[test]
fn amdgpu_before_drm_usage_stats_reports_vram_mem_in_kb_with_its_pasid() {
    let f = parse_fdinfo(AMDGPU_5_18).unwrap();
    assert_eq!(f.driver, "amdgpu");
    assert_eq!(f.pdev.as_deref(), Some("0000:c3:00.0"));
    assert_eq!(f.client_id, 32769);
    assert_eq!(f.device_bytes(), Some(2048 * MIB));
    assert_eq!(f.regions["gtt"].bytes(), Some(10 * MIB));
    assert_eq!(f.regions.len(), 3, "vram, gtt, cpu; no engine percentages");
    // Without a pdev or a pasid it cannot be counted once: none.
    let text = String::from_utf8_lossy(AMDGPU_5_18);
    let no_pasid = text.replace("pasid:\t32769\n", "");
    assert_eq!(parse_fdinfo(no_pasid.as_bytes()), None);
    assert_eq!(parse_fdinfo(text.replace("32769", "0").as_bytes()), None);
    assert_eq!(parse_fdinfo(text.replace("0000:c3", "c3").as_bytes()), None);
    // A unit other than kB is not guessed.
    let mib = text.replace("2097152 kB", "2048 MiB");
    assert_eq!(parse_fdinfo(mib.as_bytes()).unwrap().device_bytes(), None);
}

#[test]
fn a_drm_driver_line_wins_over_amdgpu_s_older_lines() {
    // Current amdgpu prints a pasid too: the client id is drm-client-id.
    let f = parse_fdinfo(AMDGPU).unwrap();
    assert_eq!(f.client_id, 77);
}

#[test]
fn a_file_that_is_no_drm_client_is_none() {
    assert_eq!(parse_fdinfo(NOT_DRM), None);
    assert_eq!(parse_fdinfo(b""), None);
    // A driver without a client id cannot be counted once: none.
    assert_eq!(parse_fdinfo(b"drm-driver:\tamdgpu\n"), None);
    assert_eq!(
        parse_fdinfo(b"drm-driver:\tamdgpu\ndrm-client-id:\tlots\n"),
        None
    );
}

#[test]
fn sizes_it_does_not_understand_are_absent_never_guessed() {
    let f = parse_fdinfo(
        b"drm-driver: x\ndrm-client-id: 1\n\
          drm-total-vram: 5 GiB\n\
          drm-total-gtt: 18446744073709551615 KiB\n\
          drm-total-cpu: -1\n\
          drm-total-: 7\n\
          drm-resident-vram: 3 KiB extra\n\
          drm-total-stolen:\t\t 9 \n\
          \xff\xfe: 1\n\
          no colon at all\n",
    )
    .unwrap();
    assert_eq!(f.device_bytes(), None, "GiB is not a unit the format has");
    assert_eq!(f.regions.get("gtt"), None, "overflow");
    assert_eq!(f.regions.get("cpu"), None);
    assert_eq!(f.regions["stolen"].total, Some(9));
    assert_eq!(f.regions.len(), 1);
}

#[test]
fn a_client_shared_by_fork_dup_or_scm_rights_is_counted_once() {
    let a = parse_fdinfo(AMDGPU).unwrap();
    let mut other_device = a.clone();
    other_device.pdev = Some("0000:c4:00.0".into());
    let mut other_client = a.clone();
    other_client.client_id = 78;
    let found = clients([
        (100, a.clone()),
        (100, a.clone()), // a dup in the same process
        (200, a.clone()), // a child after fork
        (300, other_device),
        (100, other_client),
    ]);
    assert_eq!(found.len(), 3);
    let shared = found
        .iter()
        .find(|c| c.info.client_id == 77 && c.info.pdev.as_deref() == Some("0000:c3:00.0"))
        .unwrap();
    assert_eq!(shared.pids, BTreeSet::from([100, 200]));
    let total: u64 = found.iter().filter_map(|c| c.info.device_bytes()).sum();
    assert_eq!(total, 3 * 48 * 1024 * MIB, "each client once, not each fd");
}

#[test]
fn drm_shared_is_read_per_region_and_summed_over_the_device_regions() {
    // drm-usage-stats: drm-shared-<region> is what of the total is in
    // buffers with more than one handle.
    let f = parse_fdinfo(
        b"drm-driver:\tamdgpu\ndrm-client-id:\t7\ndrm-pdev:\t0000:c3:00.0\n\
          drm-total-vram:\t8388608 KiB\ndrm-shared-vram:\t4194304 KiB\n\
          drm-resident-vram:\t8388608 KiB\ndrm-shared-gtt:\t2048 KiB\n",
    )
    .unwrap();
    assert_eq!(f.regions["vram"].shared, Some(4 << 30));
    assert_eq!(f.device_bytes(), Some(8 << 30));
    assert_eq!(f.device_shared_bytes(), Some(4 << 30), "gtt is host memory");
    // No memory key at all: no region, so nothing is known.
    let bare = parse_fdinfo(b"drm-driver:\tamdgpu\ndrm-client-id:\t7\n").unwrap();
    assert!(bare.regions.is_empty());
    assert_eq!(bare.device_shared_bytes(), None);
}
