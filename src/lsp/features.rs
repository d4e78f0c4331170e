//! Requests answered from one document: hover, navigation, outline, quick fixes.

use std::collections::HashMap;
use std::path::PathBuf;

use lsp_types::{
    CodeAction, CodeActionKind, DocumentSymbol, FoldingRange, Hover, HoverContents, Location,
    MarkupContent, MarkupKind, Position, Range, SymbolKind, TextEdit, Uri, WorkspaceEdit,
};

use super::calls::is_word;
use super::engine::{path_of, uri_of, Doc, Engine};
use super::words;
use crate::present::fmt_count;
use crate::span::Span;
use crate::syntax::ast::{Statement, Value, ValueKind};

/// The word around byte `at`, with its start.
fn word_at(text: &str, at: usize) -> Option<(usize, &str)> {
    let start = text[..at]
        .char_indices()
        .rev()
        .take_while(|(_, c)| is_word(*c))
        .last()
        .map_or(at, |(i, _)| i);
    let end = at
        + text[at..]
            .find(|c: char| !is_word(c))
            .unwrap_or(text.len() - at);
    (start < end).then(|| (start, &text[start..end]))
}

fn markdown(value: String) -> Hover {
    Hover {
        contents: HoverContents::Markup(MarkupContent {
            kind: MarkupKind::Markdown,
            value,
        }),
        range: None,
    }
}

/// A layer's shape, parameters, FLOPs and device, or a word's documentation.
pub fn hover(doc: &Doc, position: Position) -> Option<Hover> {
    let at = doc.index.offset(&doc.text, position);
    let (start, word) = word_at(&doc.text, at)?;
    let layer = doc
        .layers
        .iter()
        .filter(|l| (l.span.start as usize..=l.span.end as usize).contains(&at))
        .min_by_key(|l| l.span.len());
    if let Some(l) = layer {
        let kind_word = l.kind.kind().name();
        let short = l.name.rsplit('.').next().unwrap_or(&l.name);
        if word == short || word == kind_word {
            let mut text = format!(
                "**{}**: `{}`\n\noutput `{}` · {} parameters · {} FLOPs per sample · on `{}`",
                l.name,
                kind_word,
                l.output,
                fmt_count(l.params),
                fmt_count(l.flops),
                l.device
            );
            if let Some(more) = words::document(kind_word) {
                text.push_str(&format!("\n\n---\n\n{more}"));
            }
            return Some(markdown(text));
        }
    }
    // A schedule inside `sequence([...])`, or any call of a `schedule` statement, is read from
    // the statement's own table (`linear` there is the schedule, not the layer).
    let (statement, _) = super::calls::context(&doc.text, start);
    words::document_in(&statement, word).map(markdown)
}

/// Calls `f` on every statement, depth first.
pub(super) fn walk<'a>(statements: &'a [Statement], f: &mut dyn FnMut(&'a Statement)) {
    for s in statements {
        f(s);
        if let Some(body) = &s.body {
            walk(&body.statements, f);
        }
    }
}

/// The name of a `block NAME { ... }` statement, with its span.
pub(super) fn block_name(s: &Statement) -> Option<(&str, Span)> {
    match (s.keyword.name.as_str(), s.values.first()) {
        (
            "block",
            Some(Value {
                kind: ValueKind::Path(name),
                span,
            }),
        ) => Some((name, *span)),
        _ => None,
    }
}

/// The spans in `value` where a segment of a name path is `name`.
fn references_in(value: &Value, text: &str, name: &str, out: &mut Vec<Span>) {
    match &value.kind {
        ValueKind::Path(path) => {
            let base = value.span.start as usize;
            let written = &text[base..value.span.end as usize];
            if written != path {
                return;
            }
            let mut offset = base;
            for segment in path.split('.') {
                if segment == name {
                    out.push(Span::new(value.span.file, offset, offset + segment.len()));
                }
                offset += segment.len() + 1;
            }
        }
        ValueKind::List(items) => items.iter().for_each(|v| references_in(v, text, name, out)),
        ValueKind::Call(_, args) => args
            .items
            .iter()
            .for_each(|a| references_in(&a.value, text, name, out)),
        ValueKind::Arrow(a, b) => {
            references_in(a, text, name, out);
            references_in(b, text, name, out);
        }
        ValueKind::Sweep(v) => references_in(v, text, name, out),
        _ => {}
    }
}

/// The labels named `name` and the places that refer to it.
fn occurrences(doc: &Doc, name: &str) -> (Vec<Span>, Vec<Span>) {
    let (mut defs, mut refs) = (Vec::new(), Vec::new());
    let Some(file) = &doc.ast else {
        return (defs, refs);
    };
    walk(&file.statements, &mut |s| {
        if let Some(label) = s.label.as_ref().filter(|l| l.name == name) {
            defs.push(label.span);
        }
        let block = block_name(s);
        if let Some((_, span)) = block.filter(|(n, _)| *n == name) {
            defs.push(span);
        }
        for v in s.values.iter().skip(usize::from(block.is_some())) {
            references_in(v, &doc.text, name, &mut refs);
        }
        if let Some(args) = &s.args {
            for a in &args.items {
                references_in(&a.value, &doc.text, name, &mut refs);
            }
        }
    });
    // Spans of a tree parsed from older text must still lie in the text.
    let fits = |s: &Span| (s.end as usize) <= doc.text.len();
    defs.retain(fits);
    refs.retain(fits);
    (defs, refs)
}

fn location(doc: &Doc, uri: &Uri, span: Span) -> Location {
    let range = doc
        .index
        .range(&doc.text, span.start as usize, span.end as usize);
    Location::new(uri.clone(), range)
}

/// The document's `extends "..."` string, with the path it names, when the tree still fits the
/// text.
fn extends_string(doc: &Doc, uri: &Uri) -> Option<(Span, PathBuf)> {
    let file = doc.ast.as_ref()?;
    let statement = file
        .statements
        .iter()
        .find(|s| s.keyword.name == "extends")?;
    let value = statement.values.first()?;
    let ValueKind::Str(relative) = &value.kind else {
        return None;
    };
    // The tree may be older than the text: its span must still hold this string.
    let written = doc
        .text
        .get(value.span.start as usize..value.span.end as usize)?;
    if !written.starts_with('"') {
        return None;
    }
    Some((value.span, path_of(uri).parent()?.join(relative)))
}

/// The file named by the `extends "..."` string under the cursor, when it exists.
fn extends_target(doc: &Doc, uri: &Uri, at: usize) -> Option<PathBuf> {
    let (span, path) = extends_string(doc, uri)?;
    let under = (span.start as usize..=span.end as usize).contains(&at);
    std::fs::canonicalize(path).ok().filter(|_| under)
}

/// On an `extends` string: that string in every open document that extends the same file.
pub fn extends_references(engine: &Engine, uri: &Uri, position: Position) -> Option<Vec<Location>> {
    let doc = engine.doc(uri)?;
    let target = extends_target(doc, uri, doc.index.offset(&doc.text, position))?;
    let mut found: Vec<Location> = engine
        .docs()
        .filter_map(|(other_uri, other)| {
            let (span, path) = extends_string(other, other_uri)?;
            (std::fs::canonicalize(path).ok()? == target).then(|| location(other, other_uri, span))
        })
        .collect();
    found.sort_by(|a, b| a.uri.as_str().cmp(b.uri.as_str()));
    Some(found)
}

/// The label that defines the layer or block name under the cursor, or the base file of the
/// `extends` string under it.
pub fn definition(doc: &Doc, uri: &Uri, position: Position) -> Vec<Location> {
    let at = doc.index.offset(&doc.text, position);
    if let Some(base) = extends_target(doc, uri, at).and_then(|p| uri_of(&p)) {
        return vec![Location::new(base, Range::default())];
    }
    let Some((_, word)) = word_at(&doc.text, at) else {
        return Vec::new();
    };
    let (defs, _) = occurrences(doc, word);
    defs.into_iter().map(|s| location(doc, uri, s)).collect()
}

/// Every use of the layer or block name under the cursor (with its definition if asked).
pub fn references(doc: &Doc, uri: &Uri, position: Position, declaration: bool) -> Vec<Location> {
    let at = doc.index.offset(&doc.text, position);
    let Some((_, word)) = word_at(&doc.text, at) else {
        return Vec::new();
    };
    let (defs, refs) = occurrences(doc, word);
    if defs.is_empty() {
        return Vec::new();
    }
    let defs = if declaration { defs } else { Vec::new() };
    defs.into_iter()
        .chain(refs)
        .map(|s| location(doc, uri, s))
        .collect()
}

/// The range of the layer or block name under the cursor, which a rename would change; an
/// explanation when there is none.
pub fn prepare_rename(doc: &Doc, position: Position) -> Result<Range, String> {
    let at = doc.index.offset(&doc.text, position);
    let named = word_at(&doc.text, at).filter(|(_, word)| !occurrences(doc, word).0.is_empty());
    match named {
        Some((start, word)) => Ok(doc.index.range(&doc.text, start, start + word.len())),
        None => Err("only the names of layers and blocks can be renamed".into()),
    }
}

/// Renames a layer or block name, its label and every use. Refuses a new name that is not a
/// name or that already names another layer or block (the file would no longer mean the same).
pub fn rename(
    doc: &Doc,
    uri: &Uri,
    position: Position,
    new_name: &str,
) -> Result<Option<WorkspaceEdit>, String> {
    let at = doc.index.offset(&doc.text, position);
    let Some((_, old)) = word_at(&doc.text, at) else {
        return Ok(None);
    };
    let mut chars = new_name.chars();
    let is_name = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !is_name {
        return Err(format!(
            "`{new_name}` is not a name: a name starts with a letter or `_` and holds only \
             letters, digits and `_`"
        ));
    }
    if new_name != old {
        if let Some(taken) = occurrences(doc, new_name).0.first() {
            let line = doc
                .index
                .range(&doc.text, taken.start as usize, taken.end as usize);
            return Err(format!(
                "`{new_name}` already names a layer or block (line {})",
                line.start.line + 1
            ));
        }
    }
    let edits: Vec<TextEdit> = references(doc, uri, position, true)
        .into_iter()
        .map(|l| TextEdit::new(l.range, new_name.to_string()))
        .collect();
    if edits.is_empty() {
        return Ok(None);
    }
    Ok(Some(WorkspaceEdit {
        changes: Some(HashMap::from([(uri.clone(), edits)])),
        ..Default::default()
    }))
}

/// The outline: the experiment, its blocks and layers.
pub fn symbols(doc: &Doc) -> Vec<DocumentSymbol> {
    fn of(doc: &Doc, statements: &[Statement]) -> Vec<DocumentSymbol> {
        let mut out = Vec::new();
        for s in statements {
            let children = s.body.as_ref().map(|b| of(doc, &b.statements));
            if s.label.is_none() && children.is_none() {
                continue;
            }
            let block = block_name(s);
            let (name, kind) = match (&s.label, s.keyword.name.as_str()) {
                (None, "block") if block.is_some() => (
                    block.map_or_else(String::new, |(n, _)| n.to_string()),
                    SymbolKind::NAMESPACE,
                ),
                (Some(l), _) if s.body.is_some() => (l.name.clone(), SymbolKind::NAMESPACE),
                (Some(l), _) => (l.name.clone(), SymbolKind::FIELD),
                (None, "experiment") => {
                    let name = s.values.first().map_or("", |v| {
                        &doc.text[v.span.start as usize..v.span.end as usize]
                    });
                    (format!("experiment {name}"), SymbolKind::MODULE)
                }
                (None, k) => (k.to_string(), SymbolKind::STRUCT),
            };
            let range = doc
                .index
                .range(&doc.text, s.span.start as usize, s.span.end as usize);
            let at = s
                .label
                .as_ref()
                .map(|l| l.span)
                .or(block.map(|(_, span)| span))
                .unwrap_or(s.keyword.span);
            let selection = doc
                .index
                .range(&doc.text, at.start as usize, at.end as usize);
            #[allow(deprecated)]
            out.push(DocumentSymbol {
                name,
                detail: Some(s.keyword.name.clone()),
                kind,
                tags: None,
                deprecated: None,
                range,
                selection_range: selection,
                children: children.filter(|c| !c.is_empty()),
            });
        }
        out
    }
    doc.ast
        .as_ref()
        .filter(|f| {
            f.statements
                .iter()
                .all(|s| (s.span.end as usize) <= doc.text.len())
        })
        .map_or_else(Vec::new, |f| of(doc, &f.statements))
}

/// One folding range per block that spans lines.
pub fn folding(doc: &Doc) -> Vec<FoldingRange> {
    let mut out = Vec::new();
    if let Some(file) = &doc.ast {
        walk(&file.statements, &mut |s| {
            if let Some(b) = s
                .body
                .as_ref()
                .filter(|b| (b.span.end as usize) <= doc.text.len())
            {
                let start = doc.index.position(&doc.text, b.span.start as usize).line;
                let end = doc.index.position(&doc.text, b.span.end as usize).line;
                if end > start {
                    out.push(FoldingRange {
                        start_line: start,
                        end_line: end,
                        ..Default::default()
                    });
                }
            }
        });
    }
    out
}

fn overlaps(a: Range, b: Range) -> bool {
    a.start <= b.end && b.start <= a.end
}

/// One quick fix per fix carried by a diagnostic in `range`.
pub fn code_actions(doc: &Doc, uri: &Uri, range: Range) -> Vec<CodeAction> {
    let Some(analysis) = doc.analysis.as_ref().filter(|a| a.version == doc.version) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (shown, d) in &analysis.diagnostics {
        if !overlaps(shown.range, range) {
            continue;
        }
        for fix in d
            .fixes
            .iter()
            .filter(|f| f.span.file.0 == 0 && (f.span.end as usize) <= doc.text.len())
        {
            let at = doc
                .index
                .range(&doc.text, fix.span.start as usize, fix.span.end as usize);
            let title = if fix.replacement.is_empty() {
                format!(
                    "{}: remove `{}`",
                    d.code.code(),
                    &doc.text[fix.span.start as usize..fix.span.end as usize]
                )
            } else {
                format!("{}: write `{}`", d.code.code(), fix.replacement)
            };
            out.push(CodeAction {
                title,
                kind: Some(CodeActionKind::QUICKFIX),
                diagnostics: Some(vec![shown.clone()]),
                edit: Some(WorkspaceEdit {
                    changes: Some(HashMap::from([(
                        uri.clone(),
                        vec![TextEdit::new(at, fix.replacement.clone())],
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
    }
    out
}

/// The document in Kiln's canonical layout (`kiln fmt`), as one edit of the whole text; no edit
/// when it is already formatted or does not parse (its syntax error is already published).
pub fn formatting(doc: &Doc) -> Vec<TextEdit> {
    match crate::syntax::format(&doc.text) {
        Ok(formatted) if formatted != doc.text => vec![TextEdit {
            range: doc.index.range(&doc.text, 0, doc.text.len()),
            new_text: formatted,
        }],
        _ => Vec::new(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::lsp::engine::{analyze, Engine};

    pub(crate) const TEXT: &str = "experiment \"x\" {\n  model {\n    input [8]\n    block enc {\n      fc1: linear(4)\n      \n    }\n  }\n  place enc.fc1 on cpu\n  optimizer adam(lr: 1e-3)\n}\n";

    pub(crate) fn with_doc(text: &str, f: impl FnOnce(&Doc, &Uri)) {
        let uri: Uri = "file:///t/x.exp".parse().unwrap();
        let mut engine = Engine::default();
        engine.open(uri.clone(), 1, text.to_string());
        let (analysis, _) = analyze(&engine.job(&uri).unwrap());
        assert!(engine.store(&uri, analysis).is_ok());
        f(engine.doc(&uri).unwrap(), &uri);
    }

    #[test]
    fn an_extends_string_leads_to_its_base_and_to_the_files_sharing_it() {
        let dir = crate::toolkit::scratch("lsp-extends");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("base.exp"), "experiment \"base\" {}\n").unwrap();
        let mut engine = Engine::default();
        let uris: Vec<Uri> = ["a", "b", "c"]
            .iter()
            .map(|n| format!("file://{}/{n}.exp", dir.display()).parse().unwrap())
            .collect();
        let texts = [
            "extends \"base.exp\"\nexperiment \"a\" {}\n",
            "# the same base\nextends \"./base.exp\"\nexperiment \"b\" {}\n",
            "extends \"other.exp\"\nexperiment \"c\" {}\n",
        ];
        for (uri, text) in uris.iter().zip(texts) {
            engine.open(uri.clone(), 1, text.to_string());
            let (analysis, _) = analyze(&engine.job(uri).unwrap());
            assert!(engine.store(uri, analysis).is_ok());
        }
        let a = engine.doc(&uris[0]).unwrap();
        let base = definition(a, &uris[0], Position::new(0, 12));
        assert_eq!(base.len(), 1);
        assert!(
            base[0].uri.as_str().ends_with("/base.exp"),
            "{:?}",
            base[0].uri
        );
        // Off the string, and for a base that does not exist, there is no file to go to.
        assert!(definition(a, &uris[0], Position::new(1, 3)).is_empty());
        let c = engine.doc(&uris[2]).unwrap();
        assert!(definition(c, &uris[2], Position::new(0, 12)).is_empty());
        let found = extends_references(&engine, &uris[0], Position::new(0, 12)).unwrap();
        let places: Vec<(&str, u32)> = found
            .iter()
            .map(|l| {
                (
                    l.uri.as_str().rsplit('/').next().unwrap(),
                    l.range.start.line,
                )
            })
            .collect();
        assert_eq!(places, [("a.exp", 0), ("b.exp", 1)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn names_are_found_in_labels_blocks_and_dotted_paths() {
        with_doc(TEXT, |doc, uri| {
            // `fc1` in `place enc.fc1`: its label, then the segment of the path.
            let defs = definition(doc, uri, Position::new(8, 13));
            assert_eq!(defs[0].range.start, Position::new(4, 6));
            let edit = rename(doc, uri, Position::new(3, 11), "encoder").unwrap();
            let edits = &edit.unwrap().changes.unwrap()[uri];
            let starts: Vec<Position> = edits.iter().map(|e| e.range.start).collect();
            assert_eq!(starts, [Position::new(3, 10), Position::new(8, 8)]);
            assert!(rename(doc, uri, Position::new(9, 5), "x")
                .unwrap()
                .is_none());
            // A name already taken, or not a name, is refused with the reason.
            let taken = rename(doc, uri, Position::new(3, 11), "fc1").unwrap_err();
            assert!(taken.contains("line 5"), "{taken}");
            assert!(rename(doc, uri, Position::new(3, 11), "2x").is_err());
            let range = prepare_rename(doc, Position::new(8, 13)).unwrap();
            assert_eq!(
                (range.start, range.end),
                (Position::new(8, 12), Position::new(8, 15))
            );
            assert!(prepare_rename(doc, Position::new(9, 5)).is_err());
            let outline = symbols(doc);
            let model = &outline[0].children.as_ref().unwrap()[0];
            assert_eq!(model.children.as_ref().unwrap()[0].name, "enc");
            let folds: Vec<(u32, u32)> = folding(doc)
                .iter()
                .map(|f| (f.start_line, f.end_line))
                .collect();
            assert_eq!(folds, [(0, 10), (1, 7), (3, 6)]);
        });
    }
}
