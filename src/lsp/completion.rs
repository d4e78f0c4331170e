//! Completion: what may be written at a position, from the enclosing block and the keyword
//! being completed.

use std::path::Path;

use lsp_types::{CompletionItem, CompletionItemKind, CompletionTextEdit, Position, TextEdit, Uri};

use super::calls::{self, is_word, statement_keyword};
use super::engine::{path_of, Doc};
use super::features::{block_name, walk};
use super::words;

/// The keyword of each block open at `at`, outermost first (strings and comments skipped).
fn enclosing(text: &str, at: usize) -> Vec<String> {
    let mut stack = Vec::new();
    let mut statement_start = 0;
    let mut chars = text[..at].char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => {
                while let Some((_, c)) = chars.next() {
                    if c == '\\' {
                        chars.next();
                    } else if c == '"' {
                        break;
                    }
                }
            }
            '#' => {
                for (_, c) in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
                statement_start = i;
            }
            '{' => {
                stack.push(statement_keyword(&text[statement_start..i]));
                statement_start = i + 1;
            }
            '}' => {
                stack.pop();
                statement_start = i + 1;
            }
            '\n' => statement_start = i + 1,
            _ => {}
        }
    }
    stack
}

fn item(label: &str, kind: CompletionItemKind, detail: Option<String>) -> CompletionItem {
    CompletionItem {
        label: label.to_string(),
        kind: Some(kind),
        detail,
        ..Default::default()
    }
}

/// Where the string the cursor is in starts on its line (after its opening quote), if it is in
/// one.
fn open_string(before: &str) -> Option<usize> {
    let mut open = None;
    let mut chars = before.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' if open.is_some() => {
                chars.next();
            }
            '"' => open = if open.is_some() { None } else { Some(i + 1) },
            '#' if open.is_none() => return None,
            _ => {}
        }
    }
    open
}

/// The files and folders that complete the path typed so far in a string of the `data` block
/// or of `extends` (only `.exp` files there), relative to the document's folder. Each replaces
/// the last part of the path.
fn paths(doc: &Doc, dir: &Path, at: usize, typed: &str, extends: bool) -> Vec<CompletionItem> {
    let (folder, partial) = typed.rsplit_once('/').unwrap_or(("", typed));
    let listed = if typed.starts_with('/') {
        Path::new("/").join(folder)
    } else {
        dir.join(folder)
    };
    let Ok(entries) = std::fs::read_dir(&listed) else {
        return Vec::new();
    };
    let range = doc.index.range(&doc.text, at - partial.len(), at);
    let mut items: Vec<CompletionItem> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let hidden = name.starts_with('.') && !partial.starts_with('.');
            if hidden || !name.starts_with(partial) {
                return None;
            }
            let is_dir = entry.path().is_dir();
            if !is_dir && extends && !name.ends_with(".exp") {
                return None;
            }
            let (label, kind) = if is_dir {
                (format!("{name}/"), CompletionItemKind::FOLDER)
            } else {
                (name, CompletionItemKind::FILE)
            };
            Some(CompletionItem {
                text_edit: Some(CompletionTextEdit::Edit(TextEdit::new(
                    range,
                    label.clone(),
                ))),
                ..item(&label, kind, None)
            })
        })
        .collect();
    items.sort_by(|a, b| a.label.cmp(&b.label));
    items
}

/// What may be written at a position: keywords, layer kinds, choices, parameters, devices,
/// layer names, and file paths in the strings of data sources and `extends`.
pub fn completion(doc: &Doc, uri: &Uri, position: Position) -> Vec<CompletionItem> {
    let text = &doc.text;
    let at = doc.index.offset(text, position);
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let before = &text[line_start..at];
    if let Some(start) = open_string(before) {
        let extends = statement_keyword(before) == "extends";
        let in_data = enclosing(text, line_start).last().map(String::as_str) == Some("data");
        let path = path_of(uri);
        return match path.parent() {
            Some(dir) if extends || in_data => paths(doc, dir, at, &before[start..], extends),
            _ => Vec::new(),
        };
    }
    // Inside a call's parentheses: its named parameters, read from the statement's own table
    // first (`schedule linear(...)` is the schedule, not the layer). In the list of a
    // `sequence`, the schedules.
    let (statement, opens) = calls::context(text, at);
    if calls::in_sequence_list(&statement, &opens) {
        return schedules();
    }
    if let Some(name) = calls::innermost_call(&opens) {
        return words::parameters_in(&statement, name)
            .into_iter()
            .map(|p| CompletionItem {
                insert_text: Some(format!("{p}: ")),
                ..item(
                    p,
                    CompletionItemKind::FIELD,
                    Some(format!("{name} parameter")),
                )
            })
            .collect();
    }
    let tokens: Vec<&str> = before.split_whitespace().collect();
    let typing = before.ends_with(|c: char| is_word(c) || c == ':');
    // Completed tokens before the one being typed.
    let done = if typing {
        &tokens[..tokens.len().saturating_sub(1)]
    } else {
        &tokens[..]
    };
    let done: Vec<&str> = done
        .iter()
        .copied()
        .filter(|t| !t.ends_with(':') || done.first() != Some(t))
        .collect();
    let blocks = enclosing(text, line_start);
    let Some(&keyword) = done.first() else {
        let block = blocks.last().map(String::as_str);
        let layers = matches!(block, Some("model" | "block" | "residual"));
        return words::statements(block)
            .into_iter()
            .map(|w| {
                let is_kind = layers && !["input", "block", "residual"].contains(&w);
                let kind = if is_kind {
                    CompletionItemKind::CLASS
                } else {
                    CompletionItemKind::KEYWORD
                };
                item(w, kind, words::document(w).map(|d| d.replace("**", "")))
            })
            .collect();
    };
    let devices = || {
        ["cpu", "cuda", "cuda:0", "cuda:1", "auto"]
            .into_iter()
            .map(|d| item(d, CompletionItemKind::VALUE, Some("device".into())))
            .collect()
    };
    match keyword {
        "device" => devices(),
        "place" | "prune" | "quantize" if done.last() == Some(&"on") => devices(),
        "place" | "prune" | "quantize" => {
            let mut names = Vec::new();
            if let Some(file) = &doc.ast {
                walk(&file.statements, &mut |s| {
                    if let Some(label) = &s.label {
                        names.push(label.name.clone());
                    }
                    if let Some((name, _)) = block_name(s) {
                        names.push(name.to_string());
                    }
                });
            }
            let mut items: Vec<CompletionItem> = names
                .iter()
                .map(|n| {
                    item(
                        n,
                        CompletionItemKind::REFERENCE,
                        Some("layer or block".into()),
                    )
                })
                .collect();
            if keyword == "place" && done.len() > 1 {
                items.push(item("on", CompletionItemKind::KEYWORD, None));
            }
            items
        }
        _ if done.len() == 1 => choices(keyword),
        _ => Vec::new(),
    }
}

/// The choices of `keyword` (optimizers, schedules, losses), each with its parameters.
fn choices(keyword: &str) -> Vec<CompletionItem> {
    words::choices(keyword)
        .into_iter()
        .map(|(n, p)| {
            item(
                n,
                CompletionItemKind::ENUM_MEMBER,
                Some(format!("{keyword} {n}({})", p.join(", "))),
            )
        })
        .collect()
}

/// The schedules a `sequence` may hold.
fn schedules() -> Vec<CompletionItem> {
    choices("schedule")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lsp::features::tests::{with_doc, TEXT};

    fn labels(items: &[CompletionItem]) -> Vec<&str> {
        items.iter().map(|i| i.label.as_str()).collect()
    }

    #[test]
    fn completion_follows_the_enclosing_block_and_the_keyword() {
        with_doc(TEXT, |doc, uri| {
            let in_block = labels(&completion(doc, uri, Position::new(5, 6)).clone()).join(" ");
            assert!(
                in_block.contains("linear") && in_block.contains("conv2d"),
                "{in_block}"
            );
            let items = completion(doc, uri, Position::new(9, 12));
            assert!(labels(&items).contains(&"rmsprop"));
            let items = completion(doc, uri, Position::new(9, 17));
            assert!(labels(&items).contains(&"betas"), "{:?}", labels(&items));
            let items = completion(doc, uri, Position::new(8, 8));
            assert!(labels(&items).contains(&"fc1") && labels(&items).contains(&"enc"));
            let items = completion(doc, uri, Position::new(8, 19));
            assert!(labels(&items).contains(&"cuda:0"));
            let items = completion(doc, uri, Position::new(1, 2));
            assert!(labels(&items).contains(&"optimizer") && !labels(&items).contains(&"relu"));
        });
    }

    #[test]
    fn schedules_inside_a_sequence_complete_as_schedules() {
        let text = "experiment \"x\" {\n  schedule sequence([\n    linear(),\n    warmup(length: 10), \n  ], milestones: [10])\n}\n";
        with_doc(text, |doc, uri| {
            // `linear(` inside the sequence is the schedule, not the layer.
            let items = completion(doc, uri, Position::new(2, 11));
            assert_eq!(
                labels(&items),
                ["start_factor", "end_factor", "length"],
                "{:?}",
                labels(&items)
            );
            assert_eq!(items[0].detail.as_deref(), Some("linear parameter"));
            // Between the schedules of the list: the schedules.
            let items = completion(doc, uri, Position::new(3, 24));
            assert!(labels(&items).contains(&"cosine"), "{:?}", labels(&items));
            assert!(!labels(&items).contains(&"schedules"));
            assert!(!labels(&items).contains(&"sequence") || labels(&items).contains(&"step"));
            // The sequence's own parameters after its list.
            let items = completion(doc, uri, Position::new(4, 5));
            assert!(
                labels(&items).contains(&"milestones"),
                "{:?}",
                labels(&items)
            );
        });
        // A schedule written alone: `linear` is the schedule too.
        let text = "experiment \"x\" {\n  schedule linear(\n}\n";
        with_doc(text, |doc, uri| {
            let items = completion(doc, uri, Position::new(1, 18));
            assert!(
                labels(&items).contains(&"end_factor"),
                "{:?}",
                labels(&items)
            );
        });
    }

    #[test]
    fn paths_complete_in_data_sources_and_extends() {
        let dir = crate::toolkit::scratch("lsp-paths");
        std::fs::create_dir_all(dir.join("data/mnist")).unwrap();
        std::fs::write(dir.join("data/train.npy"), b"").unwrap();
        std::fs::write(dir.join("base.exp"), b"").unwrap();
        std::fs::write(dir.join("notes.txt"), b"").unwrap();
        let text =
            "extends \"b\"\nexperiment \"x\" {\n  data {\n    source npy(\"data/t\")\n  }\n}\n";
        let uri: Uri = format!("file://{}/x.exp", dir.display()).parse().unwrap();
        let mut engine = crate::lsp::engine::Engine::default();
        engine.open(uri.clone(), 1, text.to_string());
        let doc = engine.doc(&uri).unwrap();
        let items = completion(doc, &uri, Position::new(0, 10));
        assert_eq!(labels(&items), ["base.exp"]);
        let items = completion(doc, &uri, Position::new(3, 22));
        assert_eq!(labels(&items), ["train.npy"]);
        let Some(CompletionTextEdit::Edit(edit)) = &items[0].text_edit else {
            panic!("a path completion replaces what was typed");
        };
        assert_eq!(edit.range.start, Position::new(3, 21));
        let items = completion(doc, &uri, Position::new(3, 21));
        assert_eq!(labels(&items), ["mnist/", "train.npy"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
