//! `why --pattern` predicts what pkill would hit: its text is the one
//! procps shows the regex. Checked against `pgrep -f` and `pgrep` (listing
//! only, never pkill) on processes this test starts, whose command lines
//! carry line breaks, tabs, escapes, DEL, C1, quotes and non-ASCII text
//! (UTF-8; where a command line is not, procps's own fallback is not
//! modelled).

use crate::harness::{hex, spawn_ready};
use gpufree::diagnose::{pkill_comm_text, pkill_f_text};
use gpufree::proc::parse::{parse_cmdline, parse_stat};
use std::process::Command;

/// PIDs among `ours` that `pgrep ARGS` lists.
fn pgrep(args: &[&str], ours: &[u32]) -> Vec<u32> {
    let out = Command::new("pgrep").args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|p| ours.contains(p))
        .collect()
}

#[test]
fn pattern_hits_are_the_ones_pgrep_lists() {
    if Command::new("pgrep").arg("-V").output().is_err() {
        panic!("pgrep (procps) is needed for this test");
    }
    let argvs: Vec<Vec<&[u8]>> = vec![
        vec![b"worker\nline2", b"--model", b"it's \"q\""],
        vec![b"tab\there", b"esc\x1b[31m"],
        "mod\u{e8}le \u{202e}rtl"
            .as_bytes()
            .split(|b| *b == b' ')
            .collect(),
        vec![b"plain", b"vllm", b"serve"],
        vec![b"del\x7fx", "c1\u{85}y".as_bytes()],
    ];
    // Each process re-executes python3 with these raw arguments after
    // `-c CODE`, names itself (comm) after its first one, and waits; it
    // dies with the test.
    let code = "import os,sys,time,ctypes\n\
        ctypes.CDLL(None).prctl(1, 9)\n\
        open('/proc/self/comm','wb').write(bytes.fromhex(os.environ['PCOMM']))\n\
        print('ready', flush=True)\n\
        time.sleep(600)";
    let mut children = Vec::new();
    for argv in &argvs {
        use std::os::unix::ffi::OsStrExt;
        let mut c = Command::new("python3");
        c.arg("-c").arg(code);
        for a in argv {
            c.arg(std::ffi::OsStr::from_bytes(a));
        }
        c.env("PCOMM", hex(&argv[0][..argv[0].len().min(15)]));
        children.push(spawn_ready(&mut c));
    }
    let ours: Vec<u32> = children.iter().map(|c| c.id()).collect();
    let texts: Vec<(u32, String, String)> = ours
        .iter()
        .map(|&pid| {
            let stat = parse_stat(&std::fs::read(format!("/proc/{pid}/stat")).unwrap()).unwrap();
            let cmdline = parse_cmdline(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap());
            (
                pid,
                pkill_f_text(&stat.comm, &cmdline),
                pkill_comm_text(&stat.comm),
            )
        })
        .collect();
    let mut compared = 0;
    for pat in [
        "worker.line2",
        "worker\nline2",
        "worker line2",
        "line2$",
        "it's \"q\"",
        "tab.here",
        "tab\there",
        "esc.\\[31m",
        "mod..le",
        "mod.le",
        "\u{202e}",
        ".rtl",
        "...rtl",
        "^python3 -c",
        "vllm serve",
        "del.x",
        "c1.y",
        "c1..y",
        "^worker",
        "^tab",
        "esc",
    ] {
        let re = regex::Regex::new(pat).unwrap();
        let mut f_want = pgrep(&["-f", pat], &ours);
        let mut f_got: Vec<u32> = texts
            .iter()
            .filter(|t| re.is_match(&t.1))
            .map(|t| t.0)
            .collect();
        f_want.sort_unstable();
        f_got.sort_unstable();
        assert_eq!(f_got, f_want, "pkill -f {pat:?}: {texts:?}");
        let mut c_want = pgrep(&[pat], &ours);
        let mut c_got: Vec<u32> = texts
            .iter()
            .filter(|t| re.is_match(&t.2))
            .map(|t| t.0)
            .collect();
        c_want.sort_unstable();
        c_got.sort_unstable();
        assert_eq!(c_got, c_want, "pkill {pat:?}: {texts:?}");
        compared += 1;
    }
    assert_eq!(compared, 21);
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}
