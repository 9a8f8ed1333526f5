//! `kernel_log` as JSON has it: the log's Xid reports as read, a failed
//! read's error with what a refused read needs in words, and `denied`
//! beside it.

use super::words::proc::kmsg_failed;
use crate::model::{KernelLog, Reading, XidReport};
use serde::Serialize;

/// The kernel log as `status --json` prints it.
#[derive(Debug, Serialize)]
pub struct KernelLogDoc<'a> {
    path: &'a str,
    xids: Reading<&'a [XidReport], String>,
    #[serde(skip_serializing_if = "is_zero")]
    lost: u64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    truncated: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    denied: bool,
    /// The system's error where the words above add to it (an addition:
    /// it reads back as the error, not the words).
    #[serde(skip_serializing_if = "Option::is_none")]
    failed_error: Option<&'a str>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl<'a> KernelLogDoc<'a> {
    /// The document of `log`.
    pub fn new(log: &'a KernelLog) -> KernelLogDoc<'a> {
        // Every field named: a field added fails to compile here until
        // the document says whether JSON has it.
        let KernelLog {
            path,
            xids,
            lost,
            truncated,
            denied,
        } = log;
        KernelLogDoc {
            path,
            xids: match xids {
                Reading::Value(x) => Reading::Value(x.as_slice()),
                Reading::NotSupported => Reading::NotSupported,
                Reading::Failed(e) => Reading::Failed(kmsg_failed(e, *denied)),
            },
            lost: *lost,
            truncated: *truncated,
            denied: *denied,
            failed_error: match xids {
                Reading::Failed(e) if *denied => Some(e),
                _ => None,
            },
        }
    }
}
