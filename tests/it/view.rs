//! The view for users who are not root (issue "Trust III"): root's
//! `gpufree serve --view-socket` answers a user's `status` and `why` on a
//! local socket, knowing the user from the socket's peer credentials, with
//! other users' command lines, environments and executables removed. Two
//! users (nobody, and uid 4242) ask it; a socket that is not root's is
//! never believed.

use crate::harness::*;
use gpufree::demo::holder::HoldSpec;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A process of `uid` holding `node` of the test's device directory, with
/// `secret` on its command line.
fn user_holder(uid: u32, node: &Path, secret: &str) -> Child {
    let script =
        "import sys,time\nf=open(sys.argv[1],'rb')\nprint('ready',flush=True)\ntime.sleep(600)";
    spawn_ready(
        Command::new("setpriv")
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"))
            .args(["--clear-groups", "--", "/usr/bin/python3", "-c", script])
            .arg(node)
            .args(["--token", secret]),
    )
}

/// `gpufree ARGS` as `uid`, asking the view at `socket` (and naming no
/// library or directory of its own).
fn as_user(d: &TestDir, uid: u32, socket: &Path, args: &[&str]) -> Output {
    // The kit's gpufree, as `uid`, in an environment of its own: `env -i`
    // drops the test's and the builder's variables.
    let mut view = std::ffi::OsString::from("GPUFREE_VIEW_SOCKET=");
    view.push(socket);
    Gpufree::new(args)
        .program(nobody_kit(d).gpufree)
        .wrapped([
            "setpriv".into(),
            format!("--reuid={uid}").into(),
            format!("--regid={uid}").into(),
            "--clear-groups".into(),
            "--".into(),
            "env".into(),
            "-i".into(),
            "PATH=/usr/bin:/bin".into(),
            view,
        ])
        .run()
}

/// Root's serve with the view's socket at `socket`; ready once the socket
/// answers.
fn serve_view(d: &TestDir, state: &Path, socket: &Path) -> Child {
    let serve = Gpufree::new(["serve", "--listen", "127.0.0.1:0", "--interval", "200ms"])
        .on(d, state)
        .opt_value("--view-socket", socket);
    let child = serve_listening(&mut serve.command());
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(socket).is_err() {
        assert!(
            Instant::now() < deadline,
            "the view's socket never answered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

fn cmdline(doc: &Value, pid: u32) -> Vec<String> {
    process(doc, pid).unwrap_or_else(|| panic!("{pid} not listed: {doc}"))["cmdline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn users_see_every_holder_through_roots_view_but_only_their_own_command_lines() {
    if !rustix::process::geteuid().is_root() {
        skip_off_ci("root", &"to run holders and gpufree as other users");
        return;
    }
    let d = TestDir::new(1);
    let node = d.node("nvidia0");
    std::fs::set_permissions(d.tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&d.dev, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o644)).unwrap();
    let run = d.tmp.path().join("run");
    std::fs::create_dir(&run).unwrap();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = run.join("view.sock");
    let root = hold(
        &["python3", "-m", "vllm", "--api-key", "sk-root-secret"],
        HoldSpec {
            fd: vec![node.clone()],
            env: [(
                "TORCHELASTIC_RUN_ID".to_string(),
                "root-run-secret".to_string(),
            )]
            .into(),
            ..HoldSpec::default()
        },
    );
    let mut children = Children(Vec::new());
    let a = children.add(user_holder(65534, &node, "secret-of-nobody"));
    let b = children.add(user_holder(4242, &node, "secret-of-4242"));
    let state = d.one_gpu(
        &[
            (root.pid(), 4096, "while-alive"),
            (a, 2048, "while-alive"),
            (b, 1024, "while-alive"),
        ],
        0,
    );
    children.add(serve_view(&d, &state, &socket));
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666, "any user may ask");

    for (uid, mine, theirs) in [(65534, a, b), (4242, b, a)] {
        let r = as_user(&d, uid, &socket, &["status", "--json"]);
        r.assert_exit_with(0, format_args!("uid {uid}: {}", r.stderr));
        assert!(
            r.stderr.contains("from root's gpufree serve at")
                && r.stderr.contains(&format!("as uid {uid}")),
            "says where it came from: {}",
            r.stderr
        );
        let doc = r.json();
        assert_eq!(doc["visibility"]["view"]["uid"], uid);
        // Every holder, root's included, with its user, comm and memory.
        for (pid, mib) in [(root.pid(), 4096u64), (a, 2048), (b, 1024)] {
            let p = process(&doc, pid).unwrap_or_else(|| panic!("uid {uid}: {pid} missing"));
            assert_eq!(
                p["gpu_memory"][0]["used_bytes"],
                mib << 20,
                "uid {uid}: {p}"
            );
        }
        assert_eq!(process(&doc, root.pid()).unwrap()["user"], "root");
        // Their own command line; nobody else's, nor root's environment.
        assert!(
            cmdline(&doc, mine)
                .iter()
                .any(|a| a.starts_with("secret-of-")),
            "uid {uid}"
        );
        assert!(cmdline(&doc, theirs).is_empty(), "uid {uid}");
        assert!(cmdline(&doc, root.pid()).is_empty(), "uid {uid}");
        assert!(
            process(&doc, root.pid()).unwrap()["exe"].is_null(),
            "uid {uid}"
        );
        let text = r.stdout.clone();
        for secret in [
            "sk-root-secret",
            "root-run-secret",
            if uid == 65534 {
                "secret-of-4242"
            } else {
                "secret-of-nobody"
            },
        ] {
            assert!(!text.contains(secret), "uid {uid} sees {secret}");
        }
        // why: the verdict's exit code, the same words, nothing hidden leaks.
        let r = as_user(&d, uid, &socket, &["why", "--no-color"]);
        r.assert_exit_with(1, format_args!("busy: {}{}", r.stdout, r.stderr));
        assert!(
            r.stdout.starts_with("Why GPU 0 is not free:"),
            "{}",
            r.stdout
        );
        assert!(!r.stdout.contains("sk-root-secret"), "{}", r.stdout);
        // A bad selector is the view's usage error, said in one line.
        let r = as_user(&d, uid, &socket, &["status", "--gpu", "7"]);
        r.assert_exit(2);
        assert_eq!(
            r.stderr.trim(),
            "gpufree: --gpu 7: no such GPU (GPUs here: 0)"
        );
    }

    // Idle connections deny the view to no one: one user's (more than the
    // view takes in all), and then those of eight uids (as one user's
    // subordinate uids could be) that fill it, the oldest displaced by a
    // newcomer.
    let hog = |uid: u32, n: u32| {
        let script = format!("import socket,sys,time\nheld=[]\nfor _ in range({n}):\n  s=socket.socket(socket.AF_UNIX)\n  try:\n    s.connect(sys.argv[1]); held.append(s)\n  except OSError: pass\nprint('ready',flush=True)\ntime.sleep(120)");
        spawn_ready(
            Command::new("setpriv")
                .arg(format!("--reuid={uid}"))
                .arg(format!("--regid={uid}"))
                .args(["--clear-groups", "--", "/usr/bin/python3", "-c", &script])
                .arg(&socket),
        )
    };
    let users_view = || {
        let r = as_user(&d, 4242, &socket, &["status", "--json"]);
        r.assert_exit(0);
        assert!(
            r.stderr.contains("from root's gpufree serve at"),
            "{}",
            r.stderr
        );
    };
    children.add(hog(65534, 80));
    users_view();
    for uid in 100_000..100_008 {
        children.add(hog(uid, 8));
    }
    users_view();

    // A socket that is not root's answers nothing: the user scans alone.
    let fake_dir = d.tmp.path().join("fake");
    std::fs::create_dir(&fake_dir).unwrap();
    std::os::unix::fs::chown(&fake_dir, Some(4242), Some(4242)).unwrap();
    let fake = fake_dir.join("view.sock");
    let liar = spawn_ready(
        Command::new("setpriv")
            .args(["--reuid=4242", "--regid=4242", "--clear-groups", "--", "/usr/bin/python3", "-c"])
            .arg("import socket,sys,time\ns=socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\nimport os\nos.chmod(sys.argv[1],0o777)\ns.listen(8)\nprint('ready',flush=True)\nwhile True:\n  c,_=s.accept(); c.sendall(b'{\"verdict\":\"free\"}\\nGPU 0 is free\\n'); c.close()")
            .arg(&fake),
    );
    children.add(liar);
    let r = as_user(&d, 65534, &fake, &["status"]);
    assert!(
        r.stderr.contains("its server runs as uid 4242, not root"),
        "{}",
        r.stderr
    );
    assert!(!r.stdout.contains("GPU 0 is free"), "{}", r.stdout);
}

/// The processes a test started, killed and reaped when it ends (passed
/// or not): none outlives it holding its pipes.
struct Children(Vec<Child>);

impl Children {
    fn add(&mut self, c: Child) -> u32 {
        let pid = c.id();
        self.0.push(c);
        pid
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `serve --view-socket` replaces only a stale socket of its own: a live
/// one of another type (the journal's datagram socket, given by mistake)
/// is left alone, and serve says so in one line.
#[test]
fn serve_never_takes_over_a_live_datagram_socket() {
    let d = TestDir::new(1);
    let path = d.tmp.path().join("journal.sock");
    let live = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    let state = d.one_gpu(&[], 0);
    let r = Gpufree::new(["serve"])
        .on(&d, &state)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--view-socket",
            path.to_str().unwrap(),
        ])
        .run();
    r.assert_exit(3);
    assert!(
        r.stderr.contains("a socket in use is there"),
        "{}",
        r.stderr
    );
    live.send_to(b"still mine", &path).unwrap();
}
