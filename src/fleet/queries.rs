//! The PromQL of one view: eight instant queries, whatever the fleet's
//! size, each aggregated to the labels the view keeps (a holder's
//! `cmdline` or a GPU's `name` never travel).

use super::Source;

/// One value per query of a view, by what the query answers: the
/// queries themselves ([`Queries`]), their answers, the threads asking
/// them. The one list of the eight; [`PerQuery::map`] keeps them apart by
/// name, never by position.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PerQuery<T> {
    /// Per node, `up` (its targets' worst): 0 for a target down.
    pub up: T,
    /// Per node, seconds since its snapshot was taken
    /// (`gpufree_snapshot_timestamp_seconds`), else since its newest
    /// sample (of `gpufree_nvml_up`: one series a node, in serve's
    /// metrics and in the textfile alike).
    pub age: T,
    /// Per node, the age of the snapshot when it was scraped (serve's,
    /// where it exports no snapshot timestamp).
    pub snapshot_age: T,
    /// The GPUs that are not free (`busy` or `unknown` is 1).
    pub not_free: T,
    /// Used bytes of those GPUs.
    pub used: T,
    /// Unaccounted bytes of those GPUs.
    pub unaccounted: T,
    /// Every holder of GPU memory.
    pub holders: T,
    /// Per holder, seconds since its series' first sample in the history.
    pub held: T,
}

/// The PromQL of one view; `{S}` is the selector, `L` the node label.
pub type Queries = PerQuery<String>;

impl<T> PerQuery<T> {
    /// How many queries a view sends.
    pub const COUNT: usize = 8;

    /// Each value through `f`, each kept under its query's name.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> PerQuery<U> {
        PerQuery {
            up: f(self.up),
            age: f(self.age),
            snapshot_age: f(self.snapshot_age),
            not_free: f(self.not_free),
            used: f(self.used),
            unaccounted: f(self.unaccounted),
            holders: f(self.holders),
            held: f(self.held),
        }
    }
}

impl<T, E> PerQuery<Result<T, E>> {
    /// Every value, or the first error (in the order of the fields).
    pub fn transpose(self) -> Result<PerQuery<T>, E> {
        Ok(PerQuery {
            up: self.up?,
            age: self.age?,
            snapshot_age: self.snapshot_age?,
            not_free: self.not_free?,
            used: self.used?,
            unaccounted: self.unaccounted?,
            holders: self.holders?,
            held: self.held?,
        })
    }
}

pub use crate::model::look_back_steps as steps;

impl Queries {
    /// The queries for `source`.
    pub fn new(source: &Source) -> Queries {
        let (s, l) = (&source.selector, &source.node_label);
        let sel = |extra: &str| match (s.is_empty(), extra.is_empty()) {
            (true, _) => format!("{{{extra}}}"),
            (false, true) => format!("{{{s}}}"),
            (false, false) => format!("{{{s},{extra}}}"),
        };
        // A GPU's verdict, or a MIG device's (a serve narrowed to MIG
        // devices exports no GPU verdict for their GPU): either not free.
        let not_free = format!(
            "{} == 1",
            sel("__name__=~\"gpufree_gpu_verdict|gpufree_mig_verdict\",state!=\"free\"")
        );
        let memory = |what: &str| {
            format!("max by ({l}, gpu) (gpufree_gpu_memory_{what}_bytes{}) and on ({l}, gpu) ({not_free})", sel(""))
        };
        let history = source.history.as_secs().max(60);
        let (coarse, fine) = steps(history);
        let first = |range: u64, step: u64| {
            format!(
                "min_over_time(timestamp(gpufree_process_gpu_memory_bytes{})[{range}s:{step}s])",
                sel("")
            )
        };
        let holders = format!("gpufree_process_gpu_memory_bytes{}", sel(""));
        let tag = |q: &str, step: &str| {
            format!("label_replace({q}, \"gpufree_look_back\", \"{step}\", \"\", \"\")")
        };
        Queries {
            up: format!("min by ({l}) (up{})", sel("")),
            // Clock-free where serve answers: its sample's age on
            // Prometheus's clock plus serve's own snapshot age (below).
            // A textfile node_exporter re-serves is fresh on every scrape:
            // there, since the snapshot was taken (the node's clock), or
            // else since the file was written (an older gpufree's file);
            // from any other exporter, since its newest sample.
            age: format!(
                "(max by ({l}) (time() - timestamp(gpufree_nvml_up{s1})) and on ({l}) max by ({l}) (gpufree_snapshot_age_seconds{s1})) \
                 or max by ({l}) (time() - gpufree_snapshot_timestamp_seconds{s1}) \
                 or max by ({l}) (time() - node_textfile_mtime_seconds{tf}) \
                 or max by ({l}) (time() - timestamp(gpufree_nvml_up{s1}))",
                s1 = sel(""),
                tf = sel("file=~\"(.*/)?gpufree[.]prom\"")
            ),
            snapshot_age: format!("max by ({l}) (gpufree_snapshot_age_seconds{})", sel("")),
            used: memory("used"),
            unaccounted: memory("unaccounted"),
            not_free: format!("max by ({l}, gpu, uuid, state) ({not_free})"),
            holders: format!(
                "max by ({l}, gpu, pid, comm, user, owner_kind, owner, orphaned, renamed) (gpufree_process_gpu_memory_bytes{})",
                sel("")
            ),
            // By PID and comm: a recycled PID under another name is
            // another holder. Each step sees the newest sample before it
            // (within Prometheus's lookback), so the earliest step a
            // holder was seen at is its first sample to within that step;
            // each look back is tagged so that `min` sees all three (an
            // `or` of untagged ones keeps only the coarse). Only holders
            // there now: those gone within the history are not asked for.
            held: format!(
                "time() - min by ({l}, gpu, pid, comm) ({} or {} or {}) and on ({l}, gpu, pid, comm) {h}",
                tag(&first(history, coarse), "coarse"),
                tag(&first(coarse, fine), "fine"),
                tag(&format!("timestamp({holders})"), "newest"),
                h = holders
            ),
        }
    }
}
