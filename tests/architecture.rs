//! The module graph flows one way, as ARCHITECTURE.md draws it: no top-level module of the
//! library imports one that imports it back, and the typed experiment (`ir`) sits below every
//! stage, importing none of them. Within every folder the files do the same, beyond the groups
//! ARCHITECTURE.md names ("Imports within a folder").
//!
//! Imports are read from the source text: `crate::X` inside the library, `kiln::X` from the
//! binaries (`src/cli/`, `src/runtime/`, `src/bin/`); within folders also `super::`, `self::` and
//! a file's own children.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a source file belongs to (`src/check/cx.rs` -> `check`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    match first {
        "lib.rs" | "main.rs" => None,
        _ => Some(first.trim_end_matches(".rs").to_string()),
    }
}

/// The top-level modules named after `prefix::` in `text` (`crate::` or `kiln::`).
fn imports(text: &str, prefix: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices(prefix) {
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &text[i + prefix.len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if known.contains(&name) {
            out.insert(name);
        }
    }
    out
}

/// Which top-level module imports which.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(&src, f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(module) = module_of(&src, file) else {
            continue;
        };
        let text = std::fs::read_to_string(file).expect("source file");
        let mut deps = imports(&text, "crate::", &modules);
        deps.extend(imports(&text, "kiln::", &modules));
        deps.remove(&module);
        graph.entry(module).or_default().extend(deps);
    }
    graph
}

/// A cycle through `start`, if there is one.
fn cycle_from(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    fn walk(
        graph: &BTreeMap<String, BTreeSet<String>>,
        start: &str,
        path: &mut Vec<String>,
    ) -> bool {
        let here = path.last().cloned().unwrap_or_default();
        for next in graph.get(&here).into_iter().flatten() {
            if next == start {
                path.push(next.clone());
                return true;
            }
            if path.contains(next) {
                continue;
            }
            path.push(next.clone());
            if walk(graph, start, path) {
                return true;
            }
            path.pop();
        }
        false
    }
    let mut path = vec![start.to_string()];
    walk(graph, start, &mut path).then_some(path)
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let graph = graph();
    for module in graph.keys() {
        if let Some(cycle) = cycle_from(&graph, module) {
            panic!("the module graph has a cycle: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn the_typed_experiment_is_below_every_stage() {
    let graph = graph();
    let ir = graph.get("ir").cloned().unwrap_or_default();
    let allowed: BTreeSet<String> = ["span".to_string()].into();
    assert!(
        ir.is_subset(&allowed),
        "ir imports {ir:?}; it may import only span"
    );
    for stage in ["check", "plan", "runtime"] {
        assert!(
            graph.get(stage).is_some_and(|deps| deps.contains("ir")),
            "{stage} does not read the typed experiment from ir"
        );
    }
    assert!(
        !graph.get("plan").is_some_and(|deps| deps.contains("check")),
        "plan imports check: costs are computed from the typed experiment alone"
    );
}

#[test]
fn data_file_headers_are_read_without_the_rest_of_the_crate() {
    // `datafile` is a leaf, as `rundir` is: it reads bytes and knows nothing of experiments.
    let graph = graph();
    for leaf in ["datafile", "rundir"] {
        let deps = graph.get(leaf).cloned().unwrap_or_default();
        assert!(
            deps.is_empty(),
            "{leaf} imports {deps:?}; it may import nothing"
        );
    }
    assert!(
        graph
            .get("check")
            .is_some_and(|deps| deps.contains("datafile")),
        "check does not read data headers through datafile"
    );
}

#[test]
fn the_graph_finds_a_planted_cycle() {
    // The cycle search itself, on a graph with a known cycle, so the tests above can fail.
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    graph.insert("a".into(), ["b".to_string()].into());
    graph.insert("b".into(), ["c".to_string()].into());
    graph.insert("c".into(), ["a".to_string()].into());
    assert_eq!(
        cycle_from(&graph, "a"),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    graph.insert("c".into(), BTreeSet::new());
    assert_eq!(cycle_from(&graph, "a"), None);
}

#[test]
fn the_language_server_sits_on_top_of_the_checker() {
    // `lsp` reads the checker's results and answers editors; only the command line starts it,
    // and like `kiln check` it never reaches libtorch (`runtime`).
    let graph = graph();
    for (module, deps) in &graph {
        assert!(
            module == "cli" || !deps.contains("lsp"),
            "{module} imports lsp; only the command line may"
        );
    }
    let lsp = graph.get("lsp").cloned().unwrap_or_default();
    assert!(lsp.contains("check"), "lsp does not check through check");
    assert!(!lsp.contains("runtime"), "lsp imports runtime");
}

/// A module's path from the crate root (`["check", "cx"]`); the binaries' roots are the root too,
/// so `crate::runtime::x` (from `kiln-runtime`) and `crate::check::x` (from the library) resolve
/// alike.
type ModPath = Vec<String>;

/// `text` with comments, string and character literals blanked, so only code is read.
fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c[i] == 'r'
            && (i == 0 || !ident(c[i - 1]) || (c[i - 1] == 'b' && (i < 2 || !ident(c[i - 2]))))
            && matches!(next, Some('"' | '#'))
            && {
                let hashes = c[i + 1..].iter().take_while(|&&h| h == '#').count();
                c.get(i + 1 + hashes) == Some(&'"')
            }
        {
            let hashes = c[i + 1..].iter().take_while(|&&h| h == '#').count();
            i += hashes + 2;
            while i < c.len() {
                if c[i] == '"'
                    && c[i + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == '#')
                        .count()
                        == hashes
                {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.push_str("\"\"");
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c[i] == '\'' && next == Some('\\') {
            i += 2;
            while i < c.len() && c[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else if c[i] == '\'' && c.get(i + 2) == Some(&'\'') {
            i += 3;
            out.push_str("' '");
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// The index just past the bracket that closes the one at `open`.
fn closing(c: &[char], open: usize) -> usize {
    let (o, cl) = (c[open], if c[open] == '[' { ']' } else { '}' });
    let mut depth = 0;
    for (i, &ch) in c.iter().enumerate().skip(open) {
        if ch == o {
            depth += 1;
        } else if ch == cl {
            depth -= 1;
            if depth == 0 {
                return i + 1;
            }
        }
    }
    c.len()
}

/// The index of the first character at or after `i` that is not white space.
fn skip_space(c: &[char], mut i: usize) -> usize {
    while i < c.len() && c[i].is_whitespace() {
        i += 1;
    }
    i
}

/// The identifier (or keyword) that starts at `i`, empty if none does.
fn word_at(c: &[char], i: usize) -> String {
    c[i..]
        .iter()
        .take_while(|ch| ch.is_alphanumeric() || **ch == '_')
        .collect()
}

/// Code with every `#[cfg(test)]` item blanked, and the names of the test modules it declares
/// in files of their own (`#[cfg(test)] mod tests;`): tests may drive the checker from its
/// entry point, so they are not part of the graph.
fn without_tests(code: &str) -> (String, Vec<String>) {
    let mut c: Vec<char> = code.chars().collect();
    let mut files = Vec::new();
    let attr: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + attr.len() <= c.len() {
        if c[i..i + attr.len()] != attr[..] {
            i += 1;
            continue;
        }
        let start = i;
        let mut j = skip_space(&c, i + attr.len());
        while c.get(j) == Some(&'#') && c.get(j + 1) == Some(&'[') {
            j = skip_space(&c, closing(&c, j + 1));
        }
        let mut k = j;
        while k < c.len() && c[k] != ';' && c[k] != '{' {
            k += 1;
        }
        let item: String = c[j..k].iter().collect();
        let end = if c.get(k) == Some(&'{') {
            closing(&c, k)
        } else {
            if let Some(name) = item.split_whitespace().skip_while(|w| *w != "mod").nth(1) {
                files.push(name.to_string());
            }
            k + 1
        };
        let end = end.min(c.len());
        for ch in &mut c[start..end] {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
        i = end;
    }
    (c.into_iter().collect(), files)
}

/// One source file under `src/`: its module and the code that counts.
struct File {
    module: ModPath,
    code: String,
}

/// One file's code (test modules blanked), the test modules it declares in files of their own,
/// and the inline modules it declares (`pub mod words { ... }`).
fn parse(module: ModPath, text: &str) -> (File, Vec<ModPath>, Vec<ModPath>) {
    let (code, test_mods) = without_tests(&code_only(text));
    let tests = test_mods
        .into_iter()
        .map(|m| [module.clone(), vec![m]].concat())
        .collect();
    let c: Vec<char> = code.chars().collect();
    let mut inline = Vec::new();
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    for i in 0..c.len() {
        match c[i] {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if stack.last().is_some_and(|(_, d)| *d == depth) {
                    stack.pop();
                }
            }
            'm' if word_at(&c, i) == "mod" && (i == 0 || !c[i - 1].is_alphanumeric()) => {
                let j = skip_space(&c, i + 3);
                let name = word_at(&c, j);
                if c.get(skip_space(&c, j + name.len())) == Some(&'{') {
                    let mut m = module.clone();
                    m.extend(stack.iter().map(|(n, _)| n.clone()));
                    m.push(name.clone());
                    inline.push(m);
                    stack.push((name, depth));
                }
            }
            _ => {}
        }
    }
    (File { module, code }, tests, inline)
}

/// Every file of the crate by module, with `#[path]` and `#[cfg(test)]` modules honoured (test
/// modules left out), and the inline modules (`pub mod words { ... }`) each file declares.
fn files() -> (Vec<File>, BTreeMap<ModPath, ModPath>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    sources(&src, &mut paths);
    // The module of each file by convention, then corrected by `#[path]` attributes.
    let mut module: BTreeMap<PathBuf, ModPath> = BTreeMap::new();
    for p in &paths {
        let rel = p.strip_prefix(&src).expect("under src");
        let mut parts: Vec<String> = rel
            .iter()
            .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
            .collect();
        if parts.last().is_some_and(|l| l == "mod") {
            parts.pop();
        }
        if parts[0] == "lib" || parts[0] == "main" || parts[0] == "bin" {
            parts.clear();
        }
        module.insert(p.clone(), parts);
    }
    let mut tests: BTreeSet<ModPath> = BTreeSet::new();
    let texts: BTreeMap<PathBuf, String> = paths
        .iter()
        .map(|p| (p.clone(), std::fs::read_to_string(p).expect("source file")))
        .collect();
    // `#[path]` on a declaration in a nested file (`#[path = "objective_tests.rs"] mod tests;`).
    for (p, text) in &texts {
        let here = module[p].clone();
        if here.is_empty() {
            continue;
        }
        for (at, _) in text.match_indices("#[path = \"") {
            let rest = &text[at + 10..];
            let target = &rest[..rest.find('"').expect("closed")];
            let after = &rest[rest.find("mod ").expect("a mod follows") + 4..];
            let name = after
                .split(|ch: char| !(ch.is_alphanumeric() || ch == '_'))
                .next();
            let file = p.parent().expect("dir").join(target);
            if let (Some(name), Ok(file)) = (name, file.canonicalize()) {
                if let Some(slot) = module
                    .iter_mut()
                    .find(|(k, _)| k.canonicalize().ok() == Some(file.clone()))
                {
                    *slot.1 = [here.clone(), vec![name.to_string()]].concat();
                }
            }
        }
    }
    let mut out = Vec::new();
    let mut inline = BTreeMap::new();
    for (p, text) in &texts {
        let (file, test_mods, inner) = parse(module[p].clone(), text);
        tests.extend(test_mods);
        inline.extend(inner.into_iter().map(|m| (m, file.module.clone())));
        out.push(file);
    }
    out.retain(|f| !f.module.is_empty() && !tests.iter().any(|t| f.module.starts_with(t)));
    (out, inline)
}

/// The paths a file names from the crate's modules: `crate::`, `kiln::`, `super::`, `self::`
/// and its own children (`placed::check_placed`), groups (`super::{cx, data}`) expanded, each
/// as the module of the inline scope it is written in and the path's segments.
fn paths_of(file: &File, children: &BTreeSet<ModPath>) -> Vec<(ModPath, Vec<String>)> {
    let c: Vec<char> = file.code.chars().collect();
    let mut out = Vec::new();
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch == '{' {
            depth += 1;
        } else if ch == '}' {
            depth -= 1;
            if stack.last().is_some_and(|(_, d)| *d == depth) {
                stack.pop();
            }
        }
        let boundary =
            i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_' || c[i - 1] == ':');
        if !(boundary && (ch.is_alphabetic() || ch == '_')) {
            i += 1;
            continue;
        }
        let word = word_at(&c, i);
        let mut scope = file.module.clone();
        scope.extend(stack.iter().map(|(n, _)| n.clone()));
        let after = skip_space(&c, i + word.len());
        if word == "mod" {
            let name = word_at(&c, after);
            if c.get(skip_space(&c, after + name.len())) == Some(&'{') {
                stack.push((name.clone(), depth));
            }
            i = after + name.len();
            continue;
        }
        let rooted = ["crate", "kiln", "super", "self"].contains(&word.as_str())
            || children.contains(&[scope.clone(), vec![word.clone()]].concat());
        if rooted && c.get(after) == Some(&':') && c.get(after + 1) == Some(&':') {
            let mut found = Vec::new();
            let end = tree(&c, after + 2, vec![word.clone()], &mut found);
            out.extend(found.into_iter().map(|p| (scope.clone(), p)));
            i = end;
        } else {
            i += word.len().max(1);
        }
    }
    out
}

/// Reads the rest of a path after `prefix::` at `i` (a segment, a group or `*`), into `out`;
/// returns where it ends.
fn tree(c: &[char], i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let i = skip_space(c, i);
    if c.get(i) == Some(&'{') {
        let end = closing(c, i);
        let mut j = i + 1;
        while j < end - 1 {
            j = skip_space(c, j);
            if c.get(j) == Some(&'}') || j >= end - 1 {
                break;
            }
            let word = word_at(c, j);
            if word.is_empty() {
                j += 1;
                continue;
            }
            let mut p = prefix.clone();
            p.push(word.clone());
            let k = skip_space(c, j + word.len());
            if c.get(k) == Some(&':') && c.get(k + 1) == Some(&':') {
                j = tree(c, k + 2, p, out);
            } else {
                out.push(p);
                j = k;
            }
            // Past `as name` and up to the next item.
            let mut level = 0;
            while j < end - 1 {
                match c[j] {
                    '{' => level += 1,
                    '}' => level -= 1,
                    ',' if level == 0 => {
                        j += 1;
                        break;
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        return end;
    }
    let word = word_at(c, i);
    let mut p = prefix;
    if word.is_empty() {
        out.push(p);
        return i;
    }
    p.push(word.clone());
    let k = skip_space(c, i + word.len());
    if c.get(k) == Some(&':') && c.get(k + 1) == Some(&':') {
        tree(c, k + 2, p, out)
    } else {
        out.push(p);
        k
    }
}

/// Which file (by module) imports which, across the whole crate, test modules left out.
fn file_graph() -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let (files, inline) = files();
    graph_of(&files, inline)
}

/// Which of `files` imports which; `inline` maps each inline module to its file's.
fn graph_of(
    files: &[File],
    inline: BTreeMap<ModPath, ModPath>,
) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let mut modules: BTreeMap<ModPath, ModPath> = files
        .iter()
        .map(|f| (f.module.clone(), f.module.clone()))
        .collect();
    modules.extend(inline);
    let known: BTreeSet<ModPath> = modules.keys().cloned().collect();
    let mut graph: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for file in files {
        let deps = graph.entry(file.module.clone()).or_default();
        for (scope, path) in paths_of(file, &known) {
            let mut at: ModPath = match path[0].as_str() {
                "crate" | "kiln" => Vec::new(),
                "self" => scope.clone(),
                "super" => scope.clone(),
                _ => [scope.clone(), vec![path[0].clone()]].concat(),
            };
            let mut rest = path[1..].iter().peekable();
            if path[0] == "super" {
                at.pop();
                while rest.peek().is_some_and(|s| *s == "super") {
                    rest.next();
                    at.pop();
                }
            }
            for seg in rest {
                let deeper = [at.clone(), vec![seg.clone()]].concat();
                if !known.contains(&deeper) {
                    break;
                }
                at = deeper;
            }
            if let Some(target) = modules.get(&at) {
                if *target != file.module {
                    deps.insert(target.clone());
                }
            }
        }
    }
    graph
}

/// The folders' graphs: for every module with files of its own below it (`check`, whose files
/// are `src/check/*.rs`, or `check::compress`, beside `src/check/compress/`), which of its
/// children imports which. A child that is a folder stands for every file in it; the folder's
/// own file (`mod.rs`, or `compress.rs` beside `compress/`) is left out: it declares, dispatches
/// to and re-exports its children, and they may use what it defines.
fn folder_graphs(
    files: &BTreeMap<ModPath, BTreeSet<ModPath>>,
) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut out: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let folders: BTreeSet<ModPath> = files
        .keys()
        .flat_map(|m| (1..m.len()).map(|n| m[..n].to_vec()))
        .collect();
    for folder in &folders {
        let child = |m: &ModPath| -> Option<String> {
            (m.len() > folder.len() && m.starts_with(folder)).then(|| m[..=folder.len()].join("::"))
        };
        let graph = out.entry(folder.join("::")).or_default();
        for (file, deps) in files {
            let Some(from) = child(file) else { continue };
            let edges = graph.entry(from.clone()).or_default();
            edges.extend(deps.iter().filter_map(child).filter(|to| *to != from));
        }
    }
    out
}

/// The groups of files ARCHITECTURE.md names under `heading` (in "Imports within a folder"):
/// each line `- `a` ↔ `b`: why`.
fn named(heading: &str) -> Vec<Vec<String>> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md"))
            .expect("ARCHITECTURE.md");
    let section = doc
        .split("\n### ")
        .find(|s| s.starts_with(heading))
        .unwrap_or_else(|| panic!("ARCHITECTURE.md has no section \"{heading}\""));
    let section = section.split("\n## ").next().unwrap_or_default();
    section
        .lines()
        .filter(|l| l.starts_with("- `") && l.contains(" ↔ "))
        .map(|l| {
            let names = &l[..l.find("`:").map_or(l.len(), |i| i + 1)];
            names
                .split('`')
                .skip(1)
                .step_by(2)
                .map(String::from)
                .collect()
        })
        .collect()
}

/// The groups of files allowed to import one another: the pairs that are one concept and the
/// cycles still to break, as ARCHITECTURE.md names them.
fn allowed() -> Vec<Vec<String>> {
    let mut groups = named("Pairs that are one concept");
    groups.extend(named("Cycles still to break"));
    groups
}

/// `graph` with each group made one node (`a ↔ b`).
fn merged(
    graph: &BTreeMap<String, BTreeSet<String>>,
    groups: &[Vec<String>],
) -> BTreeMap<String, BTreeSet<String>> {
    let rename = |n: &String| -> String {
        groups
            .iter()
            .find(|g| g.contains(n))
            .map_or_else(|| n.clone(), |g| g.join(" ↔ "))
    };
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, deps) in graph {
        let from = rename(from);
        let deps: BTreeSet<String> = deps.iter().map(rename).filter(|d| *d != from).collect();
        out.entry(from).or_default().extend(deps);
    }
    out
}

/// Every cycle among the files of a folder, beyond the `allowed` groups, one line each
/// (`in check: check::data -> check::split -> check::data`).
fn folder_cycles(
    files: &BTreeMap<ModPath, BTreeSet<ModPath>>,
    allowed: &[Vec<String>],
) -> Vec<String> {
    let mut out = Vec::new();
    for (folder, graph) in folder_graphs(files) {
        let graph = merged(&graph, allowed);
        let mut seen: Vec<BTreeSet<String>> = Vec::new();
        for node in graph.keys() {
            let Some(cycle) = cycle_from(&graph, node) else {
                continue;
            };
            let members: BTreeSet<String> = cycle.iter().cloned().collect();
            if !seen.contains(&members) {
                seen.push(members);
                out.push(format!("in {folder}: {}", cycle.join(" -> ")));
            }
        }
    }
    out
}

#[test]
fn no_file_imports_one_that_imports_it_back() {
    // Within every folder, as within the crate, imports go one way: no file imports one that
    // imports it back, directly or through others, beyond the groups ARCHITECTURE.md names.
    let cycles = folder_cycles(&file_graph(), &allowed());
    assert!(
        cycles.is_empty(),
        "files import one another in a cycle (move what both need to a leaf, or name the pair \
         in ARCHITECTURE.md, \"Imports within a folder\", when it is one concept):\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_named_cycles_are_cycles() {
    // A group that no longer imports itself in a circle is struck from ARCHITECTURE.md, so the
    // list says what is, and a cycle once broken is not let back in.
    let files = file_graph();
    let graphs = folder_graphs(&files);
    let reaches = |from: &String, to: &String| -> bool {
        graphs.values().any(|g| {
            let mut seen = BTreeSet::new();
            let mut todo = vec![from.clone()];
            while let Some(n) = todo.pop() {
                for next in g.get(&n).into_iter().flatten() {
                    if next == to {
                        return true;
                    }
                    if seen.insert(next.clone()) {
                        todo.push(next.clone());
                    }
                }
            }
            false
        })
    };
    for group in allowed() {
        for a in &group {
            for b in group.iter().filter(|b| *b != a) {
                assert!(
                    reaches(a, b),
                    "ARCHITECTURE.md names {} as a cycle, but {a} does not import {b}, even \
                     through others: strike it from the list",
                    group.join(" ↔ ")
                );
            }
        }
    }
}

#[test]
fn the_folder_graph_finds_a_planted_cycle() {
    // The whole reading, from source text to the cycle's line, on files with a known cycle
    // (`x` -> `y` through a group, `y` -> `x` through `crate::`), a folder's own file that
    // dispatches to its children and defines what they share, and a test module that drives
    // the folder from its entry: only the cycle between `x` and `y` counts.
    let sources = [
        (
            vec!["a"],
            "mod x;\nmod y;\npub use x::f;\npub struct Shared;\n\
             pub fn entry() { y::g() }\n",
        ),
        (
            vec!["a", "x"],
            "use super::{y::{self, g}, Shared};\n// crate::a::z::h is a comment\n\
             pub fn f() { let _ = \"super::z\"; g() }\n",
        ),
        (
            vec!["a", "y"],
            "pub fn g() { crate::a::x::f() }\n\
             #[cfg(test)]\nmod tests {\n    use super::super::z::h;\n}\n",
        ),
        (vec!["a", "z"], "pub fn h() { super::entry() }\n"),
    ];
    let files: Vec<File> = sources
        .iter()
        .map(|(m, text)| parse(m.iter().map(|s| s.to_string()).collect(), text).0)
        .collect();
    let graph = graph_of(&files, BTreeMap::new());
    assert_eq!(
        folder_cycles(&graph, &[]),
        ["in a: a::x -> a::y -> a::x"],
        "{graph:?}"
    );
    let pair = vec!["a::x".to_string(), "a::y".to_string()];
    assert!(folder_cycles(&graph, &[pair]).is_empty());
}
