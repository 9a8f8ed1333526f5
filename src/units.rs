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

/// Splits `1.5GiB` into its number's text and its unit.
fn split_number(t: &str) -> (&str, &str) {
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    (num, unit.trim())
}

/// Splits `1.5GiB` into its number and its unit.
fn number_and_unit(t: &str) -> Option<(f64, &str)> {
    let (num, unit) = split_number(t);
    Some((num.parse().ok()?, unit))
}

/// A duration in seconds as people read it back: `10s`, `1.5s`, `300ms`
/// (never `0s` for a part of a second).
pub fn seconds(s: f64) -> String {
    if s > 0.0 && s < 1.0 {
        format!("{:.0}ms", s * 1000.0)
    } else if s.fract() == 0.0 {
        format!("{s:.0}s")
    } else {
        format!("{s:.1}s")
    }
}

/// A span of seconds in its two largest units, rounded down: `45s`,
/// `12m 5s`, `3h 4m`, `2d 3h` (a part of a second is `0s`).
pub fn span(secs: f64) -> String {
    let s = if secs.is_finite() && secs > 0.0 {
        secs as u64
    } else {
        0
    };
    let (d, h, m, s) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, _) => format!("{h}h {m}m"),
        _ => format!("{d}d {h}h"),
    }
}

/// A duration or a size as typed that is not one; its words are
/// `present::words::front`'s. Each carries the text as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Not a number and a unit.
    NotADuration(String),
    /// A bare number other than 0 (seconds or milliseconds?).
    NeedsUnit(String),
    /// A duration's unit that is not one.
    DurationUnit {
        /// What was given.
        text: String,
        /// Its unit.
        unit: String,
    },
    /// Not a number with a size's unit.
    NotASize(String),
    /// A size's unit that is not one.
    SizeUnit {
        /// What was given.
        text: String,
        /// Its unit.
        unit: String,
    },
    /// Negative, over a year, or over the largest u64 bytes.
    OutOfRange(String),
}

impl std::error::Error for Error {}

/// Parses a duration: `10s`, `200ms`, `1.5s`, `2m`, `1h`, or `0`. A bare
/// number other than 0 is refused (seconds or milliseconds?).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, Error> {
    let t = s.trim();
    if t == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    let (n, unit) = number_and_unit(t).ok_or_else(|| Error::NotADuration(s.into()))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        "" => return Err(Error::NeedsUnit(s.into())),
        _ => {
            return Err(Error::DurationUnit {
                text: s.into(),
                unit: unit.into(),
            })
        }
    };
    if !secs.is_finite() || !(0.0..=365.0 * 86400.0).contains(&secs) {
        return Err(Error::OutOfRange(s.into()));
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// Parses a size: `512MiB`, `2GiB`, `100MB`, `4096` (bytes), `0`. A whole
/// number is exact up to the largest u64; a fraction (`1.5GiB`) is rounded
/// down to a byte. A size above the largest u64 is refused, never clamped.
pub fn parse_size(s: &str) -> Result<u64, Error> {
    let (num, unit) = split_number(s.trim());
    let not_a_size = || Error::NotASize(s.into());
    if num.is_empty() {
        return Err(not_a_size());
    }
    let mult: u64 = match unit {
        "" | "B" => 1,
        "KiB" | "K" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        "TiB" | "T" => 1 << 40,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        u => {
            return Err(Error::SizeUnit {
                text: s.into(),
                unit: u.into(),
            })
        }
    };
    let out_of_range = || Error::OutOfRange(s.into());
    if num.bytes().all(|b| b.is_ascii_digit()) {
        // Whole numbers exactly: a u64 times the unit, or out of range.
        return num
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(mult))
            .ok_or_else(out_of_range);
    }
    let n: f64 = num.parse().map_err(|_| not_a_size())?;
    let bytes = n * mult as f64;
    // 2^64 itself is out of range (`as u64` would clamp it to u64::MAX).
    if !bytes.is_finite() || !(0.0..18_446_744_073_709_551_616.0).contains(&bytes) {
        return Err(out_of_range());
    }
    Ok(bytes as u64)
}

/// Now, in seconds since the Unix epoch (0 for a clock before it).
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Now, in milliseconds since the Unix epoch (0 for a clock before it).
pub fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A time of day on a civil (proleptic Gregorian) date, in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    /// Year.
    pub year: u64,
    /// Month, 1 to 12.
    pub month: u64,
    /// Day of the month, 1 to 31.
    pub day: u64,
    /// Hour, minute and second.
    pub hms: (u64, u64, u64),
}

/// `secs` since the Unix epoch as a civil date and time in UTC (Howard
/// Hinnant's `civil_from_days`, on 400-year eras). Written by hand: it
/// takes every `u64` (a file's or the kernel's time may be absurd), where
/// the `time` crate, which parses RFC 3339 (`model::rfc3339_ms`), stops
/// at the year 9999.
pub fn civil(secs: u64) -> Civil {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    Civil {
        year: yoe + era * 400 + u64::from(month <= 2),
        month,
        day,
        hms: (rem / 3600, rem % 3600 / 60, rem % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn seconds_read_back_as_typed() {
        assert_eq!(seconds(10.0), "10s");
        assert_eq!(seconds(0.3), "300ms");
        assert_eq!(seconds(1.5), "1.5s");
        assert_eq!(seconds(0.0), "0s");
    }

    #[test]
    fn spans_in_two_units() {
        assert_eq!(span(45.9), "45s");
        assert_eq!(span(725.0), "12m 5s");
        assert_eq!(span(3.0 * 3600.0 + 4.0 * 60.0 + 59.0), "3h 4m");
        assert_eq!(span(2.0 * 86_400.0 + 3.0 * 3600.0), "2d 3h");
        assert_eq!(span(f64::NAN), "0s");
        assert_eq!(span(-5.0), "0s");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("200ms").unwrap(), Duration::from_millis(200));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("10"), Err(Error::NeedsUnit("10".into())));
        assert!(parse_duration("ten").is_err());
        assert_eq!(
            parse_duration("5y"),
            Err(Error::DurationUnit {
                text: "5y".into(),
                unit: "y".into()
            })
        );
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("0").unwrap(), 0);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size("100MB").unwrap(), 100_000_000);
        assert!(parse_size("lots").is_err());
        assert!(matches!(
            parse_size("5XB"),
            Err(Error::SizeUnit { unit, .. }) if unit == "XB"
        ));
        assert_eq!(parse_size("18446744073709551615").unwrap(), u64::MAX);
        assert!(matches!(
            parse_size("18446744073709551616"),
            Err(Error::OutOfRange(_))
        ));
        assert!(matches!(
            parse_size("16777216TiB"),
            Err(Error::OutOfRange(_))
        ));
    }

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
