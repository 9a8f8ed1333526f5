use super::*;

fn driver(symbol: &str, module: Option<&str>) -> Wait {
    Wait::Driver {
        symbol: symbol.into(),
        module: module.map(Into::into),
    }
}

fn elsewhere(symbol: &str, module: Option<&str>) -> Wait {
    Wait::Elsewhere {
        symbol: symbol.into(),
        module: module.map(Into::into),
    }
}

/// A vfork parent's stack, as Linux 6.18 shows it (measured).
const VFORK: &[u8] = b"[<0>] kernel_clone+0x1d3/0x400\n\
[<0>] __do_sys_vfork+0x66/0x90\n\
[<0>] do_syscall_64+0x71/0x290\n\
[<0>] entry_SYSCALL_64_after_hwframe+0x76/0x7e\n";

/// A read of a FUSE file whose daemon does not answer, after a signal
/// (FUSE built in; measured on Linux 6.18).
const FUSE_READ: &[u8] = b"[<0>] request_wait_answer+0xd6/0x280\n\
[<0>] __fuse_simple_request+0x120/0x330\n\
[<0>] fuse_readahead+0x2ff/0x3b0\n\
[<0>] read_pages+0x95/0x240\n\
[<0>] page_cache_ra_unbounded+0x1a4/0x280\n\
[<0>] filemap_get_pages+0x157/0x770\n\
[<0>] filemap_read+0x111/0x400\n\
[<0>] vfs_read+0x2a4/0x3d0\n\
[<0>] ksys_read+0x6f/0xf0\n\
[<0>] do_syscall_64+0x71/0x290\n\
[<0>] entry_SYSCALL_64_after_hwframe+0x76/0x7e\n";

/// A CUDA process whose exit waits in UVM's teardown.
const UVM_EXIT: &[u8] = b"[<0>] uvm_va_space_mm_shutdown+0x9c/0x1a0 [nvidia_uvm]\n\
[<0>] uvm_va_space_destroy+0x1c/0x80 [nvidia_uvm]\n\
[<0>] uvm_release+0x5a/0x90 [nvidia_uvm]\n\
[<0>] __fput+0xea/0x2d0\n\
[<0>] task_work_run+0x5d/0x90\n\
[<0>] do_exit+0x2d6/0xad0\n\
[<0>] do_group_exit+0x30/0x80\n";

/// A uvm ioctl blocked on a mutex (the mutex's own frames are the
/// scheduler's, which /proc/PID/stack leaves out).
const UVM_IOCTL: &[u8] = b"[<0>] uvm_page_tree_get_ptes_async+0x93/0x970 [nvidia_uvm]\n\
[<0>] uvm_page_table_range_vec_init+0x191/0x260 [nvidia_uvm]\n\
[<0>] uvm_ioctl+0x13e0/0x16f0 [nvidia_uvm]\n\
[<0>] __x64_sys_ioctl+0x9f/0x100\n";

/// An NFS read waiting for its server.
const NFS_READ: &[u8] = b"[<0>] rpc_wait_bit_killable+0x11/0x70 [sunrpc]\n\
[<0>] __rpc_execute+0x118/0x480 [sunrpc]\n\
[<0>] rpc_execute+0x60/0xa0 [sunrpc]\n\
[<0>] nfs_read_folio+0xf2/0x1a0 [nfs]\n\
[<0>] filemap_read+0x111/0x400\n";

/// The NVIDIA driver pinning user pages of a FUSE file's mapping (a
/// user's own daemon could leave it unanswered): the page's wait.
const GUP_ON_FUSE: &[u8] = b"[<0>] request_wait_answer+0xd6/0x280\n\
[<0>] __fuse_simple_request+0x120/0x330\n\
[<0>] fuse_read_folio+0x5a/0x90\n\
[<0>] filemap_fault+0x5f1/0xa80\n\
[<0>] __do_fault+0x33/0x170\n\
[<0>] handle_mm_fault+0x1fc/0x370\n\
[<0>] __get_user_pages+0x1e4/0x6d0\n\
[<0>] os_lock_user_pages+0xa6/0x180 [nvidia]\n\
[<0>] nvidia_unlocked_ioctl+0x447/0x950 [nvidia]\n";

/// A CPU fault on UVM managed memory: the fault handler is the driver's.
const UVM_FAULT: &[u8] = b"[<0>] uvm_va_block_cpu_fault+0x2a/0x90 [nvidia_uvm]\n\
[<0>] uvm_vm_fault+0x51/0x60 [nvidia_uvm]\n\
[<0>] __do_fault+0x33/0x170\n\
[<0>] handle_mm_fault+0x1fc/0x370\n\
[<0>] do_user_addr_fault+0x1d9/0x6b0\n";

#[test]
fn stack_frames_are_parsed_with_their_modules() {
    let frames = parse_stack(UVM_EXIT);
    assert_eq!(frames.len(), 7);
    assert_eq!(
        frames[0],
        Frame {
            symbol: "uvm_va_space_mm_shutdown".into(),
            module: Some("nvidia_uvm".into())
        }
    );
    assert_eq!(
        frames[3],
        Frame {
            symbol: "__fput".into(),
            module: None
        }
    );
    // Before Linux 4.17 the address was shown; a line with no symbol, an
    // empty one and bytes that are not UTF-8 are read or left out
    // without a panic.
    let old = b"[<ffffffffa09c376e>] uvm_gpu_retain_by_uuid+0x1e/0x40 [nvidia_uvm]\n\
[<ffffffffffffffff>] 0xffffffffffffffff\n\n[<0>] \xff\xfe+0x1/0x2\n[<0>]\n[<0> broken\n";
    let frames = parse_stack(old);
    assert_eq!(frames[0].symbol, "uvm_gpu_retain_by_uuid");
    assert_eq!(frames[0].module.as_deref(), Some("nvidia_uvm"));
    assert_eq!(frames[1].symbol, "0xffffffffffffffff");
    assert_eq!(frames.len(), 3, "{frames:?}");
    assert!(parse_stack(b"").is_empty());
    let long = format!("[<0>] {}+0x1/0x2 [m]\n", "é".repeat(300));
    assert!(parse_stack(long.as_bytes())[0].symbol.len() <= 200);
}

#[test]
fn wchan_zero_or_empty_says_nothing() {
    assert_eq!(parse_wchan(b"0"), None);
    assert_eq!(parse_wchan(b""), None);
    assert_eq!(parse_wchan(b" 0\n"), None);
    assert_eq!(parse_wchan(b"kernel_clone"), Some("kernel_clone".into()));
    assert_eq!(
        parse_wchan(b"do_epoll_wait\n"),
        Some("do_epoll_wait".into())
    );
}

#[test]
fn a_vfork_parent_an_nfs_read_and_a_fuse_read_wait_elsewhere() {
    assert_eq!(
        classify(Some(VFORK), Some(b"kernel_clone")),
        elsewhere("kernel_clone", None)
    );
    assert_eq!(
        classify(Some(FUSE_READ), Some(b"request_wait_answer")),
        elsewhere("request_wait_answer", None)
    );
    assert_eq!(
        classify(Some(NFS_READ), None),
        elsewhere("rpc_wait_bit_killable", Some("sunrpc"))
    );
}

#[test]
fn a_wait_in_nvidia_uvm_is_the_driver_s() {
    assert_eq!(
        classify(Some(UVM_EXIT), Some(b"uvm_va_space_mm_shutdown")),
        driver("uvm_va_space_mm_shutdown", Some("nvidia_uvm"))
    );
    assert_eq!(
        classify(Some(UVM_IOCTL), None),
        driver("uvm_page_tree_get_ptes_async", Some("nvidia_uvm"))
    );
    assert_eq!(
        classify(Some(UVM_FAULT), None),
        driver("uvm_va_block_cpu_fault", Some("nvidia_uvm"))
    );
    // A core helper inside the driver: the driver's frame outside it decides.
    let srcu =
        b"[<0>] __synchronize_srcu+0x8e/0xe0\n[<0>] uvm_va_space_destroy+0x1c/0x80 [nvidia_uvm]\n";
    assert_eq!(
        classify(Some(srcu), None),
        driver("uvm_va_space_destroy", Some("nvidia_uvm"))
    );
    let amd = b"[<0>] dma_fence_default_wait+0x1/0x2\n[<0>] amdgpu_vm_fini+0x1/0x2 [amdgpu]\n";
    assert_eq!(
        classify(Some(amd), None),
        driver("amdgpu_vm_fini", Some("amdgpu"))
    );
}

#[test]
fn a_driver_that_faults_in_a_user_page_waits_for_the_page() {
    assert_eq!(
        classify(Some(GUP_ON_FUSE), None),
        elsewhere("request_wait_answer", None)
    );
    // A file system module under the driver decides first.
    let nfs_under_nvidia = b"[<0>] rpc_wait_bit_killable+0x11/0x70 [sunrpc]\n\
[<0>] os_lock_user_pages+0xa6/0x180 [nvidia]\n";
    assert_eq!(
        classify(Some(nfs_under_nvidia), None),
        elsewhere("rpc_wait_bit_killable", Some("sunrpc"))
    );
}

#[test]
fn without_a_stack_the_wchan_symbol_decides() {
    // Unreadable (not root) or empty: wchan.
    for stack in [None, Some(&b""[..])] {
        assert_eq!(
            classify(stack, Some(b"uvm_va_space_mm_shutdown\n")),
            driver("uvm_va_space_mm_shutdown", None)
        );
        assert_eq!(
            classify(stack, Some(b"rpc_wait_bit_killable")),
            elsewhere("rpc_wait_bit_killable", None)
        );
        assert_eq!(classify(stack, Some(b"0")), Wait::Unsaid);
        assert_eq!(classify(stack, None), Wait::Unsaid);
    }
}

#[test]
fn gpu_driver_symbols_and_modules() {
    for s in [
        "uvm_va_space_destroy",
        "nv_close_device",
        "nvidia_close",
        "nvidia_unlocked_ioctl",
        "os_acquire_mutex",
        "nvkms_close_pm",
        "nvPushKickoff",
        "_nv012345rm",
        "amdgpu_amdkfd_gpuvm_free",
        "kfd_process_wq_release",
        "drm_sched_entity_flush",
        "i915_gem_wait_ioctl",
        "xe_vm_close",
        "ttm_bo_wait_ctx",
        "nouveau_fence_wait",
    ] {
        assert!(is_gpu_symbol(s), "{s}");
    }
    for s in [
        "kernel_clone",
        "wait_for_vfork_done",
        "rpc_wait_bit_killable",
        "request_wait_answer",
        "folio_wait_bit_common",
        "nvme_poll",
        "nvdimm_bus_lock",
        "osq_lock",
        "osc_io_submit",
        "_nvalid",
        "dma_fence_default_wait",
        "",
    ] {
        assert!(!is_gpu_symbol(s), "{s}");
    }
    for m in [
        "nvidia",
        "nvidia_uvm",
        "nvidia_modeset",
        "nvidia_drm",
        "nvidia_peermem",
        "amdgpu",
        "i915",
        "xe",
        "drm",
        "drm_kms_helper",
        "gpu_sched",
    ] {
        assert!(is_gpu_module(m), "{m}");
    }
    for m in [
        "nfs",
        "sunrpc",
        "fuse",
        "lustre",
        "nvme",
        "nvidia_fs",
        "zfs",
        "drmx",
    ] {
        assert!(!is_gpu_module(m), "{m}");
    }
}
