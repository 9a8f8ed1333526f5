//! Which character devices are GPU nodes: the majors the kernel registered
//! for the GPU drivers, from its table `<proc root>/devices` (the
//! "Character devices:" section, one `%3d %s` line per registration),
//! parsed from bytes by [`parse_devices`]. A device node is taken for a GPU
//! node only when its major is the one its name's driver registered
//! ([`Majors::check`]); where the table cannot be read, only the fixed
//! majors are known (195, the NVIDIA frontend's; 226, DRM's).

use crate::model::{MajorsUnread, Wanted, WrongDevice};

/// The driver a GPU node's name says it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// `nvidiaN`, `nvidiactl`, `nvidia-modeset`: the NVIDIA frontend.
    NvidiaFrontend,
    /// `nvidia-uvm`, `nvidia-uvm-tools`.
    NvidiaUvm,
    /// `nvidia-caps/*`.
    NvidiaCaps,
    /// `dri/card*`, `dri/renderD*`.
    Drm,
    /// `kfd` (AMD).
    Kfd,
}

impl Driver {
    /// The names the driver registers its major under (the NVIDIA frontend
    /// is `nvidia-frontend`, on some drivers `nvidia`).
    pub fn names(self) -> &'static [&'static str] {
        match self {
            Driver::NvidiaFrontend => &["nvidia-frontend", "nvidia"],
            Driver::NvidiaUvm => &["nvidia-uvm"],
            Driver::NvidiaCaps => &["nvidia-caps"],
            Driver::Drm => &["drm"],
            Driver::Kfd => &["kfd"],
        }
    }

    /// Its name in words.
    pub fn name(self) -> &'static str {
        self.names()[0]
    }

    /// The major assigned to it for good (Documentation/admin-guide/
    /// devices.txt), known without the kernel's table.
    pub fn fixed(self) -> Option<u32> {
        match self {
            Driver::NvidiaFrontend => Some(195),
            Driver::Drm => Some(226),
            _ => None,
        }
    }
}

/// Why the kernel's table of majors could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DevicesError {
    /// No `Character devices:` heading: not the kernel's table.
    NoCharacterSection,
}

/// The character devices of the kernel's table (`/proc/devices`): each
/// registration as (major, name), in its order. The block devices are
/// ignored; a name may hold any byte but a newline (read lossily); a line
/// that is not `major name` is skipped, and so is a last line with no
/// newline (a cut table: its name or major may be cut short).
pub fn parse_devices(b: &[u8]) -> Result<Vec<(u32, String)>, DevicesError> {
    let mut lines = b.split_inclusive(|&c| c == b'\n');
    lines
        .by_ref()
        .find(|l| l.trim_ascii() == b"Character devices:")
        .ok_or(DevicesError::NoCharacterSection)?;
    let mut out = Vec::new();
    for line in lines {
        let Some(line) = line.strip_suffix(b"\n") else {
            break; // cut short
        };
        if line.trim_ascii().is_empty() || line.trim_ascii() == b"Block devices:" {
            break; // the end of the section
        }
        let line = line.trim_ascii_start();
        let Some(space) = line.iter().position(|&c| c == b' ') else {
            continue;
        };
        let (major, name) = (&line[..space], &line[space + 1..]);
        let major = std::str::from_utf8(major)
            .ok()
            .filter(|m| !m.is_empty() && m.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|m| m.parse().ok());
        if let Some(major) = major.filter(|_| !name.is_empty()) {
            out.push((major, String::from_utf8_lossy(name).into_owned()));
        }
    }
    Ok(out)
}

/// The majors the kernel registered, or why they are not known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Majors {
    /// The table's registrations (major, name), and those the tests add.
    registered: Vec<(u32, String)>,
    /// Why the table could not be read: then the fixed majors stand in.
    unread: Option<MajorsUnread>,
}

impl Majors {
    /// The majors of a table the kernel gave.
    pub fn from_table(registered: Vec<(u32, String)>) -> Majors {
        Majors {
            registered,
            unread: None,
        }
    }

    /// No table (`why` says why not): only the fixed majors are known.
    pub fn unknown(why: MajorsUnread) -> Majors {
        Majors {
            registered: Vec::new(),
            unread: Some(why),
        }
    }

    /// Reads `devices` under the proc root (`proc_fd`, whose path is
    /// `proc_root`), and adds the majors the tests register
    /// ([`crate::test_hooks::gpu_majors`]). Opened without blocking: a FIFO
    /// there (a proc root that is no kernel's) reads as empty, no table.
    pub fn read(proc_fd: impl std::os::fd::AsFd, proc_root: &std::path::Path) -> Majors {
        use rustix::fs::{Mode, OFlags};
        use std::io::Read;
        let path = proc_root.join("devices");
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let read = rustix::fs::openat(proc_fd, "devices", flags, Mode::empty())
            .map_err(std::io::Error::from)
            .and_then(|fd| {
                let mut b = Vec::with_capacity(1024);
                std::fs::File::from(fd).read_to_end(&mut b).map(|_| b)
            });
        let path = path.display().to_string();
        let mut majors = match read {
            Ok(b) => match parse_devices(&b) {
                Ok(table) => Majors::from_table(table),
                Err(DevicesError::NoCharacterSection) => {
                    Majors::unknown(MajorsUnread::NoCharacterSection { path })
                }
            },
            Err(e) => Majors::unknown(MajorsUnread::Unread {
                path,
                error: e.to_string(),
            }),
        };
        for (name, major) in crate::test_hooks::gpu_majors() {
            majors.register(major, name);
        }
        majors
    }

    /// Adds a registration, as if the kernel had made it.
    pub fn register(&mut self, major: u32, name: impl Into<String>) {
        self.registered.push((major, name.into()));
    }

    /// The majors `driver` has: its registrations (the fixed one too where
    /// the table could not be read).
    pub fn of(&self, driver: Driver) -> Vec<u32> {
        let mut out: Vec<u32> = self
            .registered
            .iter()
            .filter(|(_, n)| driver.names().contains(&n.as_str()))
            .map(|(m, _)| *m)
            .collect();
        if self.unread.is_some() {
            out.extend(driver.fixed());
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Whether a character device of device number `rdev` is `driver`'s;
    /// if not, what it is (in words: "a character device of major 1
    /// (mem), not the nvidia-frontend driver's 195").
    pub fn check(&self, driver: Driver, rdev: u64) -> Result<(), WrongDevice> {
        let major = rustix::fs::major(rdev);
        let want = self.of(driver);
        if want.contains(&major) {
            return Ok(());
        }
        let names = (self.registered.iter())
            .filter(|(m, _)| *m == major)
            .map(|(_, n)| n.clone())
            .collect();
        let wanted = match (&self.unread, want.is_empty()) {
            (_, false) => Wanted::Majors(want),
            (None, true) => Wanted::NoneRegistered,
            (Some(why), true) => Wanted::Unknown(why.clone()),
        };
        Err(WrongDevice {
            major,
            names,
            driver: driver.name().to_string(),
            wanted,
        })
    }
}
