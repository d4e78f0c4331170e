//! The splits that `split(train: ..., val: SOURCE, test: SOURCE)` gives a source of their own,
//! as the plan shows them: the source's kind and its files (or a synthetic source's count).

use serde::Serialize;

use crate::ir::{Data, HeldOut, Source};

/// A split's own source.
#[derive(Serialize, Debug, PartialEq)]
pub struct SplitRow {
    /// `val` or `test`.
    pub split: &'static str,
    /// The source's kind (`synthetic`, `npy`, ...).
    pub source: &'static str,
    /// The files it reads, as the experiment writes them (empty for synthetic data).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// A synthetic source's sample count (left out for files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
}

/// The rows of the splits with a source of their own, validation first.
pub(super) fn rows(data: &Data) -> Vec<SplitRow> {
    let row = |split, own: &HeldOut| {
        let (source, files) = own.source.kind_and_files();
        let samples = match &own.source {
            Source::Synthetic { count, .. } => Some(*count),
            _ => None,
        };
        SplitRow {
            split,
            source,
            files,
            samples,
        }
    };
    [("val", &data.val), ("test", &data.test)]
        .into_iter()
        .filter_map(|(split, own)| own.as_ref().map(|o| row(split, o)))
        .collect()
}
