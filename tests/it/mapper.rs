//! A test process whose memory map the test changes between commands:
//! a mapping of a node (its fd closed), taken away, made again, churned,
//! or replaced by exec.

use std::path::Path;
use std::process::Command;

/// A process that maps `node` (the fd closed at once), unmaps it, changes
/// its protection in a loop (churn) or execs itself anew, as told on its
/// stdin: a line each, answered once done.
pub struct Mapper {
    /// The process (this test's to kill).
    pub child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

/// Its program: `node`, then "map" to map it from the start.
const MAPPER: &str = r#"
import ctypes, os, sys, threading
libc = ctypes.CDLL(None)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
node, held = sys.argv[1], None
def map_it():
    fd = os.open(node, os.O_RDWR)
    at = libc.mmap(None, 4096, 3, 1, fd, 0)  # PROT_READ|PROT_WRITE, MAP_SHARED
    os.close(fd)
    assert at not in (None, ctypes.c_void_p(-1).value), "mmap failed"
    return at
if sys.argv[2:] == ["map"]:
    held = map_it()
print("ready", flush=True)
for line in sys.stdin:
    c = line.strip()
    if c == "map":
        held = map_it()
    elif c == "unmap":
        assert libc.munmap(held, 4096) == 0, "munmap failed"
    elif c == "churn":
        # mprotect on the mapping, back and forth, until the process ends:
        # the memory map's writer takes its lock again and again.
        def churn(at):
            while True:
                libc.mprotect(at, 4096, 1)
                libc.mprotect(at, 4096, 3)
        threading.Thread(target=churn, args=(held,), daemon=True).start()
    elif c == "exec":
        os.execv(sys.executable, [sys.executable, "-c", "SRC = %r\n" % SRC + SRC, node, "map"])
    print("done", flush=True)
"#;

impl Mapper {
    /// Started on `node`, mapping nothing yet.
    pub fn start(node: &Path) -> Mapper {
        use std::io::BufRead;
        let src = format!("SRC = {MAPPER:?}\n{MAPPER}");
        let mut child = Command::new("python3")
            .args(["-c", &src, node.to_str().unwrap()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "ready");
        Mapper { child, lines }
    }

    /// Tells it `what`; returns once it has done it.
    pub fn tell(&mut self, what: &str) {
        use std::io::Write;
        writeln!(self.child.stdin.as_mut().unwrap(), "{what}").unwrap();
        let want = if what == "exec" { "ready" } else { "done" };
        assert_eq!(self.lines.next().unwrap().unwrap(), want, "{what}");
    }
}

impl Drop for Mapper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
