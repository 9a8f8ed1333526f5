//! Files the commands read and write: a unit file for `doctor`, man
//! pages and shell completions, and the atomic writes of `metrics
//! --output` and `man --dir`.

use super::shown;
use crate::cli::args::Cli;
use crate::cli::error::{Error, Outcome};
use crate::model::UnitFileWhy;
use crate::present::Printer;
use std::io::Write;

/// `gpufree doctor --unit FILE`: done when clean, not reached with
/// problems (also when the reader of stdout went away).
pub(super) fn run_doctor(unit: &std::path::Path, printer: &Printer) -> Result<Outcome, Error> {
    let text = read_unit_file(unit).map_err(|why| Error::UnitFile {
        path: unit.to_path_buf(),
        why,
    })?;
    let problems = crate::doctor::check(&text);
    let outcome = if problems.is_empty() {
        Outcome::Done
    } else {
        Outcome::NotReached
    };
    let mut out = printer.guard(std::io::stdout().lock());
    let written = crate::present::doctor::write_doctor(&mut out, unit, &problems, printer);
    shown(written.and_then(|()| out.flush()), outcome)
}

/// `gpufree completions SHELL`: the script, as generated.
pub(super) fn completions(shell: clap_complete::Shell) -> Result<Outcome, Error> {
    use clap::CommandFactory;
    // Scripts, not data: tabs and all, written as generated. Generated
    // into memory first: clap_complete panics on a write error (a closed
    // pipe, a full disk), which is the caller's to report.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "gpufree", &mut script);
    let mut out = std::io::stdout().lock();
    out.write_all(&script)?;
    out.flush()?;
    Ok(Outcome::Done)
}

/// `gpufree man [--dir DIR]`: the one page on stdout, or a page per
/// command into DIR.
pub(super) fn man(dir: Option<&std::path::Path>) -> Result<Outcome, Error> {
    match dir {
        Some(dir) => man_pages(dir)?,
        None => man_page(&mut std::io::stdout())?,
    }
    Ok(Outcome::Done)
}

/// The largest unit file `doctor` reads (real ones are a few KiB).
pub(super) const UNIT_FILE_MAX: u64 = 1 << 20;

/// A unit file's text: a regular file of at most [`UNIT_FILE_MAX`] bytes
/// (not /dev/zero, not a FIFO that never ends); bytes that are not UTF-8
/// become U+FFFD, so the rest is still checked.
pub(super) fn read_unit_file(path: &std::path::Path) -> Result<String, UnitFileWhy> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // Non-blocking: opening a FIFO without a writer must not hang.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(UnitFileWhy::Io)?;
    let meta = f.metadata().map_err(UnitFileWhy::Io)?;
    if !meta.is_file() {
        return Err(UnitFileWhy::NotRegular);
    }
    if meta.len() > UNIT_FILE_MAX {
        return Err(UnitFileWhy::TooLarge {
            bytes: meta.len(),
            max: UNIT_FILE_MAX,
        });
    }
    let mut bytes = Vec::new();
    f.take(UNIT_FILE_MAX)
        .read_to_end(&mut bytes)
        .map_err(UnitFileWhy::Io)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The one-page manual: the main page, with the commands listed in it
/// (clap_mangen's own list names a page per command, which exists only
/// where `man --dir` wrote them).
pub(super) fn man_page(w: &mut dyn Write) -> std::io::Result<()> {
    use clap::CommandFactory;
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    man.render_options_section(w)?;
    writeln!(w, ".SH COMMANDS")?;
    for sub in cmd.get_subcommands() {
        let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
        writeln!(
            w,
            ".TP\n\\fBgpufree {}\\fR\n{}",
            sub.get_name(),
            roff_text(&about)
        )?;
    }
    writeln!(
        w,
        ".PP\nOne page per command: \\fBgpufree man \\-\\-dir\\fR \\fIDIR\\fR."
    )?;
    man.render_version_section(w)
}

/// Text for a roff line: backslashes and dashes escaped, no line starting
/// with a control character.
pub(super) fn roff_text(s: &str) -> String {
    let t = s.replace('\\', "\\e").replace('-', "\\-");
    if t.starts_with(['.', '\'']) {
        format!("\\&{t}")
    } else {
        t
    }
}

/// One page per command into `dir`, each naming only pages written beside
/// it (the pages clap_mangen's `generate_to` writes, but each through
/// [`write_atomically`]: a symlink planted at a page's name is refused, not
/// followed).
pub(super) fn man_pages(dir: &std::path::Path) -> Result<(), Error> {
    use clap::CommandFactory;
    fn pages(cmd: clap::Command, out: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            pages(sub.clone(), out)?;
        }
        let man = clap_mangen::Man::new(cmd);
        let mut page = Vec::new();
        man.render(&mut page)?;
        out.push((man.get_filename(), page));
        Ok(())
    }
    let failed = |page: Option<&str>, source: WriteError| Error::Write {
        target: match page {
            Some(name) => format!("--dir {}: {name}", dir.display()),
            None => format!("--dir {}", dir.display()),
        },
        source,
    };
    std::fs::create_dir_all(dir).map_err(|e| failed(None, e.into()))?;
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut out = Vec::new();
    pages(cmd, &mut out).map_err(|e| failed(None, e.into()))?;
    for (name, page) in out {
        write_atomically(&dir.join(&name), &page, 0o644).map_err(|e| failed(Some(&name), e))?;
    }
    Ok(())
}

/// Why a file was not written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The path names what gpufree does not write (`paths::Refused`).
    #[error("{0}")]
    Refused(#[from] crate::paths::Refused),
    /// Writing failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl From<crate::paths::OpenError> for WriteError {
    fn from(e: crate::paths::OpenError) -> WriteError {
        match e {
            crate::paths::OpenError::Refused(r) => WriteError::Refused(r),
            crate::paths::OpenError::Io(e) => WriteError::Io(e),
        }
    }
}

/// Writes `bytes` to `path` so that a reader (node_exporter) never sees
/// half a file, and nothing planted is written through. The directory is
/// opened with no symlink anywhere on its path (`openat2` with
/// `RESOLVE_NO_SYMLINKS`), and everything after goes through that
/// directory's fd. Only a new file, or a regular file of the real user's,
/// is replaced: a symlink, device node or FIFO at `path` (`/dev/stdout`,
/// `/dev/null`), or another user's file (root's, for a caller who is not
/// root), is refused, never turned into a file. The bytes go to an
/// exclusively created temporary file of an unpredictable name in that
/// directory (`O_EXCL|O_NOFOLLOW`: whatever is already at that name makes
/// it try another, never open it), of `mode`, synced, then renamed over
/// `path` (a rename opens and follows nothing it replaces), and the
/// directory synced.
pub(super) fn write_atomically(
    path: &std::path::Path,
    bytes: &[u8],
    mode: u32,
) -> Result<(), WriteError> {
    use rustix::fs::{AtFlags, Mode};
    let (dirfd, name) = crate::paths::dir_of(path)?;
    crate::paths::existing(&dirfd, name)?;
    let (tmp, file) = create_temporary(&dirfd, mode)?;
    let written = (|| -> std::io::Result<()> {
        let mut file = std::fs::File::from(file);
        file.write_all(bytes)?;
        rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))?;
        file.sync_all()?;
        rustix::fs::renameat(&dirfd, &tmp, &dirfd, name)?;
        Ok(())
    })();
    if let Err(e) = written {
        let _ = rustix::fs::unlinkat(&dirfd, &tmp, AtFlags::empty());
        return Err(e.into());
    }
    Ok(rustix::fs::fsync(&dirfd).map_err(std::io::Error::from)?)
}

/// A new file in `dirfd` of an unpredictable name (`.gpufree-*.tmp`),
/// created exclusively and never through a link, and its name.
fn create_temporary(
    dirfd: &std::os::fd::OwnedFd,
    mode: u32,
) -> std::io::Result<(std::ffi::OsString, std::os::fd::OwnedFd)> {
    use rustix::fs::{Mode, OFlags};
    use std::hash::{BuildHasher, Hasher};
    let mut last = std::io::Error::from(std::io::ErrorKind::AlreadyExists);
    for attempt in 0u64..16 {
        // RandomState is seeded from the OS's randomness per process: an
        // unpredictable name without a crate for it (O_EXCL alone keeps
        // the write from following anything planted).
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(attempt);
        let name = std::ffi::OsString::from(format!(".gpufree-{:016x}.tmp", h.finish()));
        match rustix::fs::openat(
            dirfd,
            &name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode & 0o600),
        ) {
            Ok(fd) => return Ok((name, fd)),
            Err(rustix::io::Errno::EXIST) => last = std::io::Error::from(rustix::io::Errno::EXIST),
            Err(e) => return Err(e.into()),
        }
    }
    Err(last)
}
