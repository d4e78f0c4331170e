//! Where each keyword of the language is at home, read from the checker's own tables, so that a
//! setting written in the wrong block can be sent to the right one.

use super::words::{calls, COMPRESS, DATA, EXPERIMENT, SOURCES, TRAIN};
use crate::diagnostic::problem::Home;

/// Every place `word` is a setting or an argument of one, in the order of the blocks.
pub fn homes(word: &str) -> Vec<Home> {
    let blocks: [(&'static str, &[&str]); 5] = [
        ("experiment", EXPERIMENT),
        ("data", DATA),
        ("model", &["input"]),
        ("train", TRAIN),
        ("compress", COMPRESS),
    ];
    let mut out: Vec<Home> = blocks
        .iter()
        .filter(|(_, words)| words.contains(&word))
        .map(|(block, _)| Home::Block(block))
        .collect();
    let sources = SOURCES.iter().map(|(s, params)| ("source", *s, *params));
    for (setting, callee, params) in sources.chain(calls()) {
        let known = out
            .iter()
            .any(|h| matches!(h, Home::Argument { setting: s, .. } if *s == setting));
        if params.contains(&word) && !known {
            out.push(Home::Argument { setting, callee });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_sent_home() {
        assert_eq!(homes("batch"), [Home::Block("data")]);
        assert_eq!(homes("epochs"), [Home::Block("train")]);
        assert_eq!(homes("seed"), [Home::Block("experiment")]);
        assert_eq!(
            homes("lr"),
            [Home::Argument {
                setting: "optimizer",
                callee: "sgd"
            }]
        );
        assert!(homes("nonsense").is_empty());
    }
}
