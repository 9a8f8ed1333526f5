//! Why a value the user gave on the command line or in a variable cannot
//! be used, as values: a flag's value under its floor, a signal or a
//! choice that is not one, a `doctor --unit` file that cannot be read, a
//! flag that contradicts its command ([`Conflict`]).
//! Usage errors; their sentences are made in `present/words/front.rs`.

/// A flag's or a variable's value that is not one it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadValue {
    /// Not a duration or a size.
    Unit(crate::units::Error),
    /// A duration under the flag's floor.
    Below {
        /// What was given.
        text: String,
        /// The floor, in milliseconds.
        min_ms: u64,
        /// Why the floor is there.
        floor: Floor,
    },
    /// Not a signal `kill` sends.
    Signal(String),
    /// Not one of the names the flag takes.
    NotOneOf {
        /// What was given.
        text: String,
        /// The names it takes.
        names: Vec<&'static str>,
    },
}

impl std::error::Error for BadValue {}

/// A flag that contradicts its command or where its output goes: refused
/// before anything is collected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict {
    /// `metrics --json`: metrics writes Prometheus's text format.
    MetricsJson,
    /// `bundle --json`: the bundle is an archive.
    BundleJson,
    /// `bundle --out -` with stdout a terminal.
    BundleToTerminal,
}

impl From<crate::units::Error> for BadValue {
    fn from(e: crate::units::Error) -> BadValue {
        BadValue::Unit(e)
    }
}

/// Why a duration flag has a floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Floor {
    /// `kill --timeout`: time to signal, wait and check the release.
    Kill,
    /// `--read-timeout`: a shorter one would call every read hung.
    Read,
    /// `serve`'s connection deadlines: no request could arrive in less.
    Request,
    /// An interval that short only spins.
    Spins,
    /// `fleet --history`: the look back steps by a minute.
    LookBack,
    /// `fleet --timeout`: no answer could arrive in less.
    Answer,
    /// `--idle-window`: shorter than the driver's sample period.
    Sample,
}

/// Why `doctor --unit FILE` could not read the file.
#[derive(Debug)]
pub enum UnitFileWhy {
    /// Opening or reading it failed.
    Io(std::io::Error),
    /// Not a regular file (a device, a FIFO, a directory).
    NotRegular,
    /// Larger than any unit file.
    TooLarge {
        /// Its size.
        bytes: u64,
        /// The most read.
        max: u64,
    },
}

impl std::error::Error for UnitFileWhy {}
