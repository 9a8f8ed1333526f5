//! The bundle's archive: a gzipped tar of one directory, every entry a
//! regular file of mode 0600 owned by uid 0 (no names of this host's
//! users), made in memory and then written to a file created new.

use crate::model::Bundle;
use std::io::Write;
use std::path::Path;

/// The gzipped tar of `b`'s members under directory `dir`, each dated
/// `mtime` (seconds since the epoch).
pub fn tar_gz(dir: &str, b: &Bundle, mtime: u64) -> std::io::Result<Vec<u8>> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    for m in &b.members {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_size(m.bytes.len() as u64);
        h.set_mode(0o600);
        h.set_mtime(mtime);
        h.set_uid(0);
        h.set_gid(0);
        tar.append_data(&mut h, format!("{dir}/{}", m.name), m.bytes.as_slice())?;
    }
    tar.into_inner()?.finish()
}

/// Writes `bytes` to `path`, created new with mode 0600 through its
/// directory reached without links (`paths::create_new`): an existing
/// file, link or FIFO there is refused. A failed write removes nothing
/// (the name may be someone else's by then): the error says it.
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<(), crate::cli::WriteError> {
    let mut f = crate::paths::create_new(path, 0o600)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::tar_gz;
    use crate::model::{Bundle, Content};
    use std::io::Read;

    #[test]
    fn the_archive_reads_back_under_its_directory_with_mode_0600() {
        let mut b = Bundle::default();
        b.add("status.json", Content::StatusJson, b"{}\n".to_vec());
        let unit = Content::Unit {
            unit: "x.service".into(),
            source: "/etc/x.service".into(),
        };
        b.add("units/etc/x.service", unit, b"[Unit]\n".to_vec());
        let gz = tar_gz("bundle-h-t", &b, 1).unwrap();
        let mut a = tar::Archive::new(flate2::read::GzDecoder::new(gz.as_slice()));
        let mut seen = Vec::new();
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            assert_eq!(e.header().mode().unwrap(), 0o600);
            let mut text = String::new();
            e.read_to_string(&mut text).unwrap();
            seen.push((e.path().unwrap().display().to_string(), text));
        }
        assert_eq!(seen[0], ("bundle-h-t/status.json".into(), "{}\n".into()));
        assert_eq!(seen[1].0, "bundle-h-t/units/etc/x.service");
    }
}
