//! Tests of `parse.rs`.

use super::*;

#[test]
fn supervision_env_keeps_only_its_keys_escaped_and_cut() {
    let long = "x".repeat(300);
    let raw = [
        b"PATH=/bin".as_slice(),
        b"TORCHELASTIC_RESTART_COUNTX=no",
        b"NOEQUALS",
        b"TORCHELASTIC_RESTART_COUNT=\xff1",
        format!("TORCHELASTIC_MAX_RESTARTS={long}").as_bytes(),
    ]
    .join(&0u8);
    let env = supervision_env(&raw);
    assert_eq!(env.len(), 2, "{env:?}");
    assert_eq!(env["TORCHELASTIC_RESTART_COUNT"], "\\xff1");
    assert_eq!(env["TORCHELASTIC_MAX_RESTARTS"].len(), 256);
}

#[test]
fn preload_env_finds_either_variable_among_any_bytes() {
    let env = |parts: &[&[u8]]| parts.join(&0u8);
    assert_eq!(preload_env(&env(&[b"PATH=/bin", b"HOME=/root"])), None);
    assert_eq!(
        preload_env(&env(&[b"A=\xff\xfe", b"LD_PRELOAD=/tmp/x.so", b""])),
        Some(("LD_PRELOAD".into(), "/tmp/x.so".into()))
    );
    assert_eq!(
        preload_env(&env(&[b"LD_AUDIT=/home/u/\xfe.so"])),
        Some(("LD_AUDIT".into(), "/home/u/\\xfe.so".into()))
    );
    // Empty, or only separators: nothing is loaded.
    assert_eq!(preload_env(&env(&[b"LD_PRELOAD=", b"LD_AUDIT= : "])), None);
    // A repeat that names a library counts, wherever it is.
    assert_eq!(
        preload_env(&env(&[b"LD_PRELOAD=", b"X=1", b"LD_PRELOAD=libm.so.6"])),
        Some(("LD_PRELOAD".into(), "libm.so.6".into()))
    );
    // Not the variable: a longer name, a value that mentions it, a
    // truncated entry without '='.
    assert_eq!(
        preload_env(&env(&[
            b"LD_PRELOAD_X=/a",
            b"X=LD_PRELOAD=/a",
            b"LD_PRELOAD"
        ])),
        None
    );
    let long = [b"LD_PRELOAD=".as_slice(), &[b'a'; 1000]].concat();
    assert_eq!(preload_env(&long).unwrap().1.len(), 256);
}

fn stat_line(comm: &str, state: char) -> Vec<u8> {
    // 52 fields as the kernel writes them; 22 = start time 777.
    let mut f: Vec<String> = (3..=52).map(|i| i.to_string()).collect();
    f[0] = state.to_string();
    f[1] = "1".into(); // ppid
    f[17] = "3".into(); // threads (field 20)
    f[19] = "777".into(); // start time (field 22)
    f[45] = "140000".into(); // arg_start (48)
    f[46] = "140020".into(); // arg_end (49)
    format!("4242 ({comm}) {}\n", f.join(" ")).into_bytes()
}

#[test]
fn stat_with_spaces_and_parentheses_in_comm() {
    let s = parse_stat(&stat_line("a) S 1 (b", 'S')).unwrap();
    assert_eq!(s.pid, 4242);
    assert_eq!(s.comm, "a) S 1 (b");
    assert_eq!(s.state, 'S');
    assert_eq!(s.ppid, 1);
    assert_eq!(s.threads, 3);
    assert_eq!(s.start_time, 777);
    assert_eq!(s.arg_area, Some((140000, 140020)));
}

#[test]
fn stat_of_a_renamed_vllm_worker() {
    let s = parse_stat(&stat_line("VLLM::Worker_TP", 'Z')).unwrap();
    assert_eq!(s.comm, "VLLM::Worker_TP");
    assert_eq!(s.state, 'Z');
}

#[test]
fn stat_truncated_or_garbage_is_an_error_not_a_panic() {
    assert!(parse_stat(b"12 (x) S 1 2").is_err());
    assert!(parse_stat(b"").is_err());
    assert!(parse_stat(b"12 x) S (").is_err());
    assert!(parse_stat(b"abc (x) S 1").is_err());
    let full = stat_line("ok", 'R');
    for cut in 0..full.len() {
        let _ = parse_stat(&full[..cut]);
    }
}

#[test]
fn stat_with_non_utf8_comm() {
    let mut line = stat_line("ab", 'S');
    line[7] = 0xff; // "4242 (ab)": byte 7 is the b
    let s = parse_stat(&line).unwrap();
    assert_eq!(s.comm, "a\\xff");
}

#[test]
fn status_uid_and_nested_nspid() {
    let st = parse_status(
        b"Name:\tpython3\nTgid:\t5\nUid:\t1000\t1000\t1000\t1000\nNSpid:\t212702\t17\t1\n",
    )
    .unwrap();
    assert_eq!(st.uid, 1000);
    assert_eq!(st.nspid, vec![212702, 17, 1]);
    assert!(parse_status(b"Name: x\n").is_err());
}

#[test]
fn cmdline_setproctitle_padding_and_non_utf8() {
    assert_eq!(
        parse_cmdline(b"VLLM::Worker_TP0\0\0\0\0\0\0"),
        vec!["VLLM::Worker_TP0"]
    );
    assert_eq!(
        parse_cmdline(b"python3\0-m\0vllm.entrypoints.openai.api_server\0"),
        vec!["python3", "-m", "vllm.entrypoints.openai.api_server"]
    );
    assert_eq!(parse_cmdline(b"a\xffb\0c\0"), vec!["a\\xffb", "c"]);
    assert!(parse_cmdline(b"").is_empty());
    assert_eq!(parse_cmdline(b"a\0\0b\0"), vec!["a", "", "b"]);
}

#[test]
fn maps_lines_with_spaces_deleted_and_non_utf8() {
    let l =
        b"7f1c2a000000-7f1c2a200000 rw-s 00000000 00:05 1042                       /dev/nvidia0";
    let e = parse_maps_line(l).unwrap();
    assert_eq!((e.major, e.minor, e.inode), (0, 5, 1042));
    assert_eq!(e.path, b"/dev/nvidia0");
    assert!(!e.exec);
    let l = b"7f00-7f01 r-xp 00001000 08:01 7 /usr/lib/x86_64-linux-gnu/libm.so.6";
    assert!(parse_maps_line(l).unwrap().exec);
    let l = b"7f00-7f01 r--s 00000000 fd:01 99 /tmp/my dev dir/nvidia-uvm (deleted)";
    let e = parse_maps_line(l).unwrap();
    assert_eq!((e.major, e.minor, e.inode), (0xfd, 1, 99));
    assert_eq!(e.path, b"/tmp/my dev dir/nvidia-uvm (deleted)");
    let l = b"7f00-7f01 r--s 00000000 103:02 5 /x/\xfe\xff";
    assert_eq!(parse_maps_line(l).unwrap().path, b"/x/\xfe\xff");
    let anon = b"7ffd1000-7ffd2000 rw-p 00000000 00:00 0 ";
    assert_eq!(parse_maps_line(anon).unwrap().inode, 0);
    assert_eq!(maps_line_inode(l), Some(5));
    assert_eq!(maps_line_inode(anon), Some(0));
    assert!(parse_maps_line(b"7f00-7f01 r--s").is_none());
    assert!(parse_maps_line(b"7f00-7f01 r--s 0 zz:01 5 /x").is_none());
}

#[test]
fn hidepid_from_mountinfo() {
    let mi = b"22 1 0:21 / /proc rw,nosuid - proc proc rw,hidepid=invisible\n\
               23 1 0:22 / /sys rw - sysfs sysfs rw\n";
    assert!(mountinfo_hidepid(mi, b"/proc"));
    let mi = b"22 1 0:21 / /proc rw,nosuid - proc proc rw\n";
    assert!(!mountinfo_hidepid(mi, b"/proc"));
    let mi = b"22 1 0:21 / /proc rw - proc proc rw,hidepid=0\n";
    assert!(!mountinfo_hidepid(mi, b"/proc"));
}
