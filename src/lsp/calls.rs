//! Where a position sits among the calls of its statement, read forward from the start of the
//! document (strings and comments skipped): the statement's keyword and the parentheses and
//! brackets still open, innermost last. A statement may span lines inside them, as a
//! `schedule sequence([...], milestones: [...])` often does, and a call may sit inside another
//! call's list, as each schedule of a `sequence` does.

/// Whether `c` may be part of a word of the language (a keyword, a name).
pub(super) fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The keyword of a statement's text: its first word, after an optional `label:`.
pub(super) fn statement_keyword(text: &str) -> String {
    let mut parts = text.split(|c: char| !is_word(c)).filter(|w| !w.is_empty());
    let first = parts.next().unwrap_or_default();
    let label = text
        .trim_start()
        .strip_prefix(first)
        .is_some_and(|rest| rest.trim_start().starts_with(':'));
    if label {
        parts.next().unwrap_or_default().to_string()
    } else {
        first.to_string()
    }
}

/// An opening still unmatched at the position.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Open {
    /// A call's `(`, with the name written before it and the arguments before the position.
    Call(String, usize),
    /// A list's `[`: the parameter it is given to, by name (`milestones: [`) or by position
    /// (the call's argument index), when it is directly a call's argument.
    List(Option<Param>),
}

/// Which parameter of a call a list is given to.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Param {
    /// Written `name: [...]`.
    Named(String),
    /// The argument at this index, written without a name.
    Positional(usize),
}

/// The keyword of the statement at `at` and the openings still unmatched there.
pub(super) fn context(text: &str, at: usize) -> (String, Vec<Open>) {
    let mut opens: Vec<Open> = Vec::new();
    let mut statement_start = 0;
    let mut chars = text[..at].char_indices();
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
                if opens.is_empty() {
                    statement_start = i;
                }
            }
            '(' => {
                let name: String = text[..i]
                    .chars()
                    .rev()
                    .take_while(|c| is_word(*c))
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                opens.push(Open::Call(name, 0));
            }
            '[' => {
                let before = text[..i].trim_end();
                let param = match (before.strip_suffix(':'), opens.last()) {
                    (Some(label), Some(Open::Call(..))) => {
                        let name: String = label
                            .chars()
                            .rev()
                            .take_while(|c| is_word(*c))
                            .collect::<Vec<_>>()
                            .into_iter()
                            .rev()
                            .collect();
                        Some(Param::Named(name))
                    }
                    (None, Some(Open::Call(_, index))) => Some(Param::Positional(*index)),
                    _ => None,
                };
                opens.push(Open::List(param));
            }
            ',' => {
                if let Some(Open::Call(_, index)) = opens.last_mut() {
                    *index += 1;
                }
            }
            ')' | ']' => {
                opens.pop();
            }
            // A brace or a new line outside every call ends the statement; a brace inside one
            // is a mistake, after which the calls are forgotten.
            '{' | '}' | ';' => {
                opens.clear();
                statement_start = i + 1;
            }
            '\n' if opens.is_empty() => statement_start = i + 1,
            _ => {}
        }
    }
    let keyword = statement_keyword(&text[statement_start..at]);
    (keyword, opens)
}

/// Whether the position is where a schedule is written inside `sequence([...])`: in the list
/// that is the sequence's first argument, outside any of its schedules' own calls.
pub(super) fn in_sequence_list(keyword: &str, opens: &[Open]) -> bool {
    keyword == "schedule"
        && matches!(opens, [.., Open::Call(name, _), Open::List(_)] if name == "sequence")
        && schedules_list(opens)
}

/// Whether the innermost list is given to the `schedules` parameter: the first argument, or
/// `schedules: [`.
fn schedules_list(opens: &[Open]) -> bool {
    match opens.last() {
        Some(Open::List(Some(Param::Positional(0)))) => true,
        Some(Open::List(Some(Param::Named(name)))) => name == "schedules",
        _ => false,
    }
}

/// The call whose parentheses the position is directly in, if any.
pub(super) fn innermost_call(opens: &[Open]) -> Option<&str> {
    match opens.last() {
        Some(Open::Call(name, _)) => Some(name),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hover text at the first `needle` (its first character) of `text`.
    fn hover_at(text: &str, needle: &str) -> String {
        let mut out = String::new();
        crate::lsp::features::tests::with_doc(text, |doc, _| {
            let offset = text.find(needle).unwrap();
            let line = text[..offset].matches('\n').count() as u32;
            let column = (offset - text[..offset].rfind('\n').map_or(0, |i| i + 1)) as u32;
            let hover = crate::lsp::features::hover(doc, lsp_types::Position::new(line, column));
            if let Some(lsp_types::Hover {
                contents: lsp_types::HoverContents::Markup(m),
                ..
            }) = hover
            {
                out = m.value;
            }
        });
        out
    }

    #[test]
    fn nested_schedules_hover_as_schedules() {
        let text = "experiment \"x\" {\n  schedule sequence([\n    linear(end_factor: 0.5),\n    cosine(min_lr: 0)\n  ], milestones: [10])\n}\n";
        let linear = hover_at(text, "linear(");
        assert!(
            linear.contains("schedule `linear(start_factor, end_factor, length)`"),
            "{linear}"
        );
        let cosine = hover_at(text, "cosine(");
        assert!(
            cosine.contains("schedule `cosine(warmup, min_lr, start_factor)`"),
            "{cosine}"
        );
        // In the model, `linear` is still the layer.
        let layer = hover_at(
            "experiment \"x\" {\n  model {\n    input [4]\n    linear(2)\n  }\n}\n",
            "linear(",
        );
        assert!(layer.contains("layer `linear("), "{layer}");
    }

    #[test]
    fn nested_schedule_calls_are_found_across_lines() {
        let text = "experiment \"x\" {\n  schedule sequence([\n    warmup(length: 10),\n    cosine(min_lr: 0)\n  ], milestones: [10])\n}\n";
        let at = |needle: &str| text.find(needle).unwrap() + needle.len();
        let (kw, opens) = context(text, at("warmup("));
        assert_eq!(kw, "schedule");
        assert_eq!(innermost_call(&opens), Some("warmup"));
        let (kw, opens) = context(text, at("10),\n    "));
        assert!(in_sequence_list(&kw, &opens), "{kw} {opens:?}");
        let (kw, opens) = context(text, at("milestones: ["));
        assert!(!in_sequence_list(&kw, &opens));
        assert_eq!(innermost_call(&opens), None);
        let (kw, opens) = context(text, at("  ], "));
        assert_eq!(
            (kw.as_str(), innermost_call(&opens)),
            ("schedule", Some("sequence"))
        );
        // The list named `schedules:` holds schedules too.
        let named = "experiment \"x\" {\n  schedule sequence(milestones: [5], schedules: [\n";
        let (kw, opens) = context(named, named.len());
        assert!(in_sequence_list(&kw, &opens), "{kw} {opens:?}");
        // After the statement, nothing is open.
        let (_, opens) = context(text, text.len() - 2);
        assert!(opens.is_empty());
    }
}
