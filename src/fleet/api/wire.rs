//! The answer's JSON as it is read: the envelope, a bounded list of
//! series, labels as pairs; and the bytes the view's answers may take.

use super::{Labels, MAX_LABELS, MAX_SERIES};
use crate::model::LabelsOver;
use serde::Deserialize;
use std::sync::atomic::{AtomicU64, Ordering};

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Labels, D::Error> {
        struct Pairs;
        impl<'de> serde::de::Visitor<'de> for Pairs {
            type Value = Labels;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of label names to values")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, mut m: M) -> Result<Labels, M::Error> {
                let mut pairs = Vec::with_capacity(m.size_hint().unwrap_or(4).min(16));
                while let Some(pair) = m.next_entry::<Box<str>, Box<str>>()? {
                    if pairs.len() == MAX_LABELS {
                        return Err(serde::de::Error::custom(LabelsOver(MAX_LABELS)));
                    }
                    pairs.push(pair);
                }
                pairs.shrink_to_fit();
                Ok(Labels(pairs))
            }
        }
        d.deserialize_map(Pairs)
    }
}

#[derive(Deserialize)]
pub(super) struct Envelope {
    pub(super) status: String,
    #[serde(default)]
    pub(super) data: Option<Data>,
    #[serde(default, rename = "errorType")]
    pub(super) error_type: Option<String>,
    #[serde(default)]
    pub(super) error: Option<String>,
    #[serde(default)]
    pub(super) warnings: Vec<String>,
}

#[derive(Deserialize)]
pub(super) struct Data {
    #[serde(rename = "resultType")]
    pub(super) result_type: String,
    pub(super) result: Bounded,
}

/// At most [`MAX_SERIES`] series; past them, the rest is read and
/// dropped (`over`), so that the answer is refused in its own words.
#[derive(Default)]
pub(super) struct Bounded {
    pub(super) series: Vec<Series>,
    pub(super) over: bool,
}

impl<'de> Deserialize<'de> for Bounded {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Bounded, D::Error> {
        struct Seq;
        impl<'de> serde::de::Visitor<'de> for Seq {
            type Value = Bounded;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of series")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Bounded, A::Error> {
                let mut b = Bounded::default();
                while b.series.len() < MAX_SERIES {
                    match a.next_element()? {
                        Some(s) => b.series.push(s),
                        None => return Ok(b),
                    }
                }
                while a.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    b.over = true;
                }
                Ok(b)
            }
        }
        d.deserialize_seq(Seq)
    }
}

#[derive(Deserialize)]
pub(super) struct Series {
    pub(super) metric: Labels,
    pub(super) value: (f64, String),
}

/// The view's answers went past [`MAX_ANSWER_BYTES`] together.
#[derive(Debug, thiserror::Error)]
#[error("over the answers' bound")]
pub(super) struct OverBudget;

/// A body read against the bytes left to the view's answers.
pub(super) struct Budgeted<'a, R> {
    pub(super) inner: R,
    pub(super) budget: &'a AtomicU64,
}

impl<R: std::io::Read> std::io::Read for Budgeted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let take = |left: u64| left.checked_sub(n as u64);
        if self
            .budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, take)
            .is_err()
        {
            return Err(std::io::Error::other(OverBudget));
        }
        Ok(n)
    }
}
