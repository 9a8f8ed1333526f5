//! Sizes and durations as people type and read them: `512MiB`, `2GiB`,
//! `10s`, `200ms`; and byte counts printed as nvidia-smi does (MiB).

/// `96610 MiB` style, with thousands separators: `96,610 MiB`; rounded
/// down, as nvidia-smi does (a 102,642,810,880-byte card is 97,887 MiB).
pub fn mib(bytes: u64) -> String {
    let m = bytes / (1024 * 1024);
    let digits = m.to_string();
    let mut out = String::with_capacity(digits.len() + 8);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out.push_str(" MiB");
    out
}

/// `772.3 GiB` style for totals.
pub fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mib_like_nvidia_smi() {
        assert_eq!(mib(0), "0 MiB");
        assert_eq!(mib(96_610 * 1024 * 1024), "96,610 MiB");
        assert_eq!(mib(1), "0 MiB");
        assert_eq!(mib(102_642_810_880), "97,887 MiB");
        assert_eq!(mib(1_000_000 * 1024 * 1024), "1,000,000 MiB");
        assert_eq!(gib(3 << 30), "3.0 GiB");
    }
}
