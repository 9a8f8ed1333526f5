//! `gpufree watch` used as a person uses it: tmux runs it in a pseudo-terminal
//! on the incident; the test reads the screen, sorts, opens the detail pane,
//! filters to a GPU, kills from the view, and quits.

use crate::harness::*;
use gpufree::demo::holder::HoldSpec;
use gpufree::demo::Incident;
use std::time::{Duration, Instant};

#[test]
fn watch_shows_sorts_details_kills_and_quits_cleanly() {
    let inc = Incident::start(&bin()).unwrap();
    let lib = sim_lib();
    // The kill's audit record: a journal socket of the test's, and a file.
    let tmp = tempfile::tempdir().unwrap();
    let journal_path = tmp.path().join("journal.sock");
    let journal = std::os::unix::net::UnixDatagram::bind(&journal_path).unwrap();
    journal
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let audit_log = tmp.path().join("kills.jsonl");
    let cmd = format!(
        "env GPUFREE_SIM_STATE={} GPUFREE_JOURNAL_SOCKET={} {} watch --dev-dir {} --nvml-lib {} \
         --interval 200ms --audit-log {}",
        inc.state.display(),
        journal_path.display(),
        bin().display(),
        inc.dev.display(),
        lib.display(),
        audit_log.display()
    );
    let Some(t) = Tmux::start("watch", &cmd) else {
        return;
    };
    // The findings pane is drawn last: the whole first frame is on screen.
    let s = t.wait_for("error: 8 live processes of launcher");
    assert_eq!(
        s.matches("96,610 MiB / 97,887 MiB").count(),
        8,
        "a memory bar per GPU:\n{s}"
    );
    assert!(s.contains("sorted by memory"));
    // Each holder's SM % over the idle window (issue 29).
    let header = s
        .lines()
        .find(|l| l.contains("PID      USER"))
        .unwrap_or("");
    assert!(header.contains("SM%"), "an SM% column:\n{s}");
    assert!(
        s.contains("error: 8 live processes of launcher"),
        "the top finding of why:\n{s}"
    );

    t.keys(&["p"]);
    let s = t.wait_for("sorted by pid");
    let first_row = s
        .lines()
        .skip_while(|l| !l.contains("PID      USER"))
        .nth(1)
        .unwrap();
    assert!(
        first_row.contains(&inc.pid("launcher").unwrap().to_string()),
        "lowest PID first: {first_row}"
    );

    t.keys(&["Enter"]);
    t.wait_for_all(&["┌ detail", "cmdline: VLLM::EngineCore", "via fd"]);

    t.keys(&["Enter", "g", "g", "g", "g"]);
    let s = t.wait_for("gpu=3");
    let w3 = inc.pid("worker3").unwrap();
    assert!(s.contains(&w3.to_string()));
    assert!(
        !s.contains(&inc.pid("worker2").unwrap().to_string()),
        "filtered to GPU 3:\n{s}"
    );

    t.keys(&["k"]);
    let s = t.wait_for("kill: plan");
    assert!(
        s.contains(&format!("{w3}  holds 96,610 MiB on GPU 3")),
        "{s}"
    );
    t.keys(&["y"]);
    let s = t.wait_for("kill: done");
    assert!(s.contains("memory released after"), "{s}");
    assert!(!s.contains("audit record not written"), "{s}");
    assert!(!alive(w3), "killed through the safe path");
    assert!(alive(inc.pid("worker2").unwrap()), "and nothing else");
    // Audited as `gpufree kill` is: the journal and the file.
    let mut buf = vec![0u8; 1 << 16];
    let n = journal.recv(&mut buf).expect("a journal record");
    let datagram = String::from_utf8_lossy(&buf[..n]);
    assert!(datagram.contains("\nGPUFREE_COMMAND=watch\n"), "{datagram}");
    assert!(
        datagram.contains(&format!("\nGPUFREE_TARGET_PIDS={w3}\n")),
        "{datagram}"
    );
    let text = std::fs::read_to_string(&audit_log).unwrap();
    let rec: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
    assert_eq!(rec["command"], "watch");
    assert_eq!(rec["targets"][0]["pid"], w3);
    assert_eq!(rec["outcome"]["released"], true);

    // Esc closes the popup; q, sent only once it is gone, quits (the two
    // at once read as Alt+q).
    t.keys(&["Escape"]);
    let closing = Instant::now() + Duration::from_secs(5);
    while t.screen().contains("kill: done") {
        assert!(Instant::now() < closing, "Esc did not close the popup");
        std::thread::sleep(Duration::from_millis(50));
    }
    t.keys(&["q"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let state = String::from_utf8_lossy(
            &t.cmd(&["display", "-p", "#{pane_dead} #{alternate_on}"])
                .stdout,
        )
        .trim()
        .to_string();
        if state == "1 0" {
            break; // exited, and the alternate screen was left: terminal restored
        }
        assert!(
            Instant::now() < deadline,
            "watch did not quit cleanly: {state}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `watch`'s kill key goes through `gpufree kill`'s guards: a proc root
/// other than /proc (here a tree of the test's whose `self` names the
/// running gpufree, as a caller steering a privileged gpufree could make
/// it) signals nothing; the process its PIDs name is untouched.
#[test]
fn watch_kills_nothing_through_a_proc_root_other_than_proc() {
    let d = TestDir::new(1);
    let victim = hold(&["victim"], HoldSpec::default());
    let start = std::fs::read_to_string(format!("/proc/{}/stat", victim.pid())).unwrap();
    let start: u64 = start
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    let fake = FakeProc::idle(d.tmp.path());
    let node = d.node("nvidia0");
    fake.add(&FakeProcess {
        pid: victim.pid(),
        ppid: 1,
        comm: "victim",
        state: 'S',
        start,
        cmdline: &["victim"],
        exe: "/usr/bin/victim",
        uid: 0,
        cgroup: "0::/system.slice/victim.service",
        fds: &[&node],
        maps: &[],
    });
    let cmd = format!(
        "{} watch --proc-root {} --dev-dir {} --nvml-lib /nonexistent/libnvidia-ml.so.1 --interval 200ms",
        bin().display(),
        fake.root.display(),
        d.dev.display(),
    );
    let Some(t) = Tmux::start("watch-proc-root", &cmd) else {
        return;
    };
    t.wait_for("victim");
    // The running gpufree's PID: the pane's shell's child. The tree's
    // `self` names it, as /proc's does.
    let shell = String::from_utf8_lossy(&t.cmd(&["display", "-p", "#{pane_pid}"]).stdout)
        .trim()
        .to_string();
    let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap();
    let me: u32 = children.split_whitespace().next().unwrap().parse().unwrap();
    std::os::unix::fs::symlink(me.to_string(), fake.root.join("self")).unwrap();
    std::fs::create_dir_all(fake.root.join(me.to_string())).unwrap();
    std::fs::write(
        fake.root.join(me.to_string()).join("status"),
        format!("Name:\tgpufree\nNSpid:\t{me}\n"),
    )
    .unwrap();
    t.keys(&["k"]);
    t.wait_for("kill: plan");
    t.keys(&["y"]);
    let s = t.wait_for("kill: done");
    assert!(s.contains("nothing signalled"), "{s}");
    assert!(alive(victim.pid()), "signalled through another proc root");
    t.keys(&["Escape"]);
    t.keys(&["q"]);
}
