//! `gpufree prepare`: this boot's relocation of the in-kernel walk, kept
//! in its cache (`proc::bpf::prepare`), said by `present`'s writer.

use super::error::{Error, Outcome};
use super::{shown, Settings};
use crate::model::Prepared;
use crate::present::words::prepare::write_prepare;
use crate::present::Printer;
use std::io::Write;

/// `gpufree prepare`: done when the relocation is kept (made now or
/// already there) and loads from the file; not reached when there is
/// nothing to keep; a typed error when it is not kept or the caller is
/// not root.
pub(super) fn run_prepare(s: &Settings, printer: &Printer) -> Result<Outcome, Error> {
    let collect = &s.collect;
    let prepared =
        crate::proc::bpf::prepare(collect.bpf_cache.as_deref(), collect.bpf_pin.as_deref())
            .map_err(Error::Prepare)?;
    let outcome = match prepared {
        Prepared::Kept(_) => Outcome::Done,
        Prepared::Nothing(_) => Outcome::NotReached,
    };
    let mut out = printer.guard(std::io::stdout().lock());
    let written = write_prepare(&mut out, &prepared, printer);
    shown(written.and_then(|()| out.flush()), outcome)
}
