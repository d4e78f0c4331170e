//! The canonical layout of `.exp` files, as `kiln fmt` writes it.
//!
//! The formatter works on the file's tokens, comments included, so that it can never drop a
//! comment: every token of the input is written to the output in its order, and only the space
//! between tokens (and the commas and semicolons that separate items) changes. The file is
//! parsed first, so that text that does not parse is refused with its syntax diagnostic; the
//! output is parsed again before it is returned.
//!
//! The rules:
//! * one statement per line (`;` ends a line), indented by two spaces per enclosing block;
//! * one space between a statement's parts, none inside brackets, `name: value` with a space after
//!   the colon only, `, ` between items, ` -> ` around arrows, ` {` before a block;
//! * a list or argument list stays on one line unless the text between its brackets holds a
//!   newline or a comment: then each item goes on its own line, one level deeper, with a comma
//!   after every item, and the closing bracket goes on a line of its own;
//! * one blank line is kept where the text had one or more, except at the start or end of a block;
//! * a comment stays where it was: after its line's code, or on a line of its own at the
//!   indentation of the code around it; the comments after code in one paragraph (lines with no
//!   blank line between them) start in one column, two spaces after the longest such code (the
//!   grammar allows comments only where it allows newlines: between statements, and around the
//!   brackets and commas of lists, so an item's comma goes before the comments that follow it);
//! * numbers, units, strings and names keep their text; the file ends with one newline.

use crate::diagnostic::Diagnostic;
use crate::span::FileId;

/// Formats the text of a `.exp` file in the canonical layout (see the module's documentation).
///
/// Returns the formatted text, or the syntax diagnostic of the text when it does not parse (its
/// spans refer to `FileId(0)`). Formatting formatted text returns it unchanged.
pub fn format(text: &str) -> Result<String, Box<Diagnostic>> {
    super::parse(FileId(0), text)?;
    let tokens = lex(text);
    let out = Printer::new(&tokens).print();
    // The layout only moves space between tokens, so the output parses whenever the input does.
    super::parse(FileId(0), &out)?;
    Ok(out)
}

/// One token of a file that parses.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Tok<'a> {
    /// A name, number, unit, device or path: a run of characters with no space in it.
    Word(&'a str),
    /// A string literal with its quotes.
    Str(&'a str),
    /// `(`, `[` or `{`.
    Open(u8),
    /// `)`, `]` or `}`.
    Close(u8),
    /// `,`.
    Comma,
    /// `:` after a label or an argument's name.
    Colon,
    /// `->`.
    Arrow,
    /// `;`.
    Semi,
    /// A line break (a continued line, `\` at its end, is no break).
    Newline,
    /// A comment from `#`, without trailing space.
    Comment(&'a str),
}

/// Cuts text that parses into tokens.
fn lex(text: &str) -> Vec<Tok<'_>> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    // The open brackets, and whether the next token starts an argument of a call: there a
    // name followed by `:` is the argument's name (`lr:1e-3`, as the grammar reads it), not a
    // device's `cuda:0`.
    let mut open: Vec<u8> = Vec::new();
    let mut argument = false;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        i += 1;
        let starts_argument = std::mem::replace(&mut argument, false);
        match c {
            b' ' | b'\t' => argument = starts_argument,
            b'\\' if matches!(bytes.get(i), Some(b'\n' | b'\r')) => {
                argument = starts_argument;
                i += if bytes[i..].starts_with(b"\r\n") {
                    2
                } else {
                    1
                };
            }
            b'\n' => {
                argument = starts_argument;
                tokens.push(Tok::Newline);
            }
            b'\r' => {
                if bytes.get(i) == Some(&b'\n') {
                    i += 1;
                }
                argument = starts_argument;
                tokens.push(Tok::Newline);
            }
            b'#' => {
                while i < bytes.len() && !matches!(bytes[i], b'\n' | b'\r') {
                    i += 1;
                }
                argument = starts_argument;
                tokens.push(Tok::Comment(text[start..i].trim_end()));
            }
            b'"' => {
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(bytes.len());
                tokens.push(Tok::Str(&text[start..i]));
            }
            b'(' | b'[' | b'{' => {
                open.push(c);
                argument = c == b'(';
                tokens.push(Tok::Open(c));
            }
            b')' | b']' | b'}' => {
                open.pop();
                tokens.push(Tok::Close(c));
            }
            b',' => {
                argument = open.last() == Some(&b'(');
                tokens.push(Tok::Comma);
            }
            b':' => tokens.push(Tok::Colon),
            b';' => tokens.push(Tok::Semi),
            b'-' if bytes.get(i) == Some(&b'>') => {
                i += 1;
                tokens.push(Tok::Arrow);
            }
            _ if text[start..].starts_with('\u{FEFF}') => {
                argument = starts_argument;
                i = start + '\u{FEFF}'.len_utf8();
            }
            _ => {
                while i < bytes.len()
                    && word_continues(bytes, i)
                    && !(starts_argument && bytes[i] == b':')
                {
                    i += 1;
                }
                tokens.push(Tok::Word(&text[start..i]));
            }
        }
    }
    tokens
}

/// Whether the byte at `i` continues the word before it. A `:` does when a digit follows it,
/// as in the device `cuda:0`; a `-` does unless it starts `->`.
fn word_continues(bytes: &[u8], i: usize) -> bool {
    match bytes[i] {
        b' ' | b'\t' | b'\n' | b'\r' | b'#' | b'"' | b'(' | b')' | b'[' | b']' | b'{' | b'}'
        | b',' | b';' => false,
        b':' => bytes.get(i + 1).is_some_and(u8::is_ascii_digit),
        b'-' => bytes.get(i + 1) != Some(&b'>'),
        b'\\' => !matches!(bytes.get(i + 1), Some(b'\n' | b'\r')),
        _ => !bytes[i..].starts_with("\u{FEFF}".as_bytes()),
    }
}

/// An open bracket while printing.
struct Frame {
    /// A block (`{`) rather than a list or argument list.
    block: bool,
    /// A list or argument list laid out one item per line.
    broken: bool,
    /// The output's length right after the opening bracket.
    opened_at: usize,
}

/// Writes tokens in the canonical layout.
struct Printer<'t, 'a> {
    tokens: &'t [Tok<'a>],
    /// Whether each group opened at a token index is laid out one item per line.
    broken: Vec<bool>,
    out: String,
    stack: Vec<Frame>,
    /// The last token written (comments aside), or `None` at the start of a line.
    prev: Option<Tok<'a>>,
    /// The next token starts a new line.
    need_break: bool,
    /// The text had a blank line before the next token.
    blank: bool,
    /// Where each comment written after code on its line starts in the output.
    trailing: Vec<usize>,
    /// A comma was written ahead of the comments before it; the source's comma is skipped.
    comma_written: bool,
}

impl<'t, 'a> Printer<'t, 'a> {
    fn new(tokens: &'t [Tok<'a>]) -> Self {
        Printer {
            tokens,
            broken: broken_groups(tokens),
            out: String::new(),
            stack: Vec::new(),
            prev: None,
            need_break: false,
            blank: false,
            comma_written: false,
            trailing: Vec::new(),
        }
    }

    fn print(mut self) -> String {
        let mut newlines = 0;
        for (i, &tok) in self.tokens.iter().enumerate() {
            if tok == Tok::Newline {
                newlines += 1;
                if newlines >= 2 {
                    self.blank = true;
                }
                if self.at_statement_level() {
                    self.need_break = true;
                }
                continue;
            }
            let after_newline = newlines > 0;
            newlines = 0;
            match tok {
                Tok::Semi => self.need_break = true,
                Tok::Comment(text) => self.comment(text, after_newline),
                Tok::Comma if self.comma_written => self.comma_written = false,
                Tok::Comma if self.in_broken_group() => {
                    self.put(",");
                    self.need_break = true;
                }
                Tok::Open(b'{') => {
                    self.token(tok, " {");
                    self.open(true, false);
                }
                Tok::Open(c) => {
                    let text = if c == b'(' { "(" } else { "[" };
                    self.token(tok, text);
                    self.open(false, self.broken[i]);
                }
                Tok::Comma
                    if self
                        .tokens
                        .get(i + 1)
                        .is_some_and(|t| matches!(t, Tok::Close(_))) => {}
                Tok::Close(c) => self.close(i, tok, c),
                _ => {
                    self.token(tok, text_of(tok));
                    self.comma_ahead(i);
                }
            }
        }
        let mut out = align(&self.out, &self.trailing);
        let len = out.trim_end().len();
        out.truncate(len);
        if !out.is_empty() {
            out.push('\n');
        }
        out
    }

    /// Statements, not items, are being written: newlines end statements.
    fn at_statement_level(&self) -> bool {
        self.stack.last().is_none_or(|f| f.block)
    }

    fn in_broken_group(&self) -> bool {
        self.stack.last().is_some_and(|f| f.broken)
    }

    fn open(&mut self, block: bool, broken: bool) {
        self.stack.push(Frame {
            block,
            broken,
            opened_at: self.out.len(),
        });
        self.need_break = block || broken;
        self.blank = false;
    }

    fn close(&mut self, i: usize, tok: Tok<'a>, c: u8) {
        let Some(frame) = self.stack.pop() else {
            return;
        };
        self.blank = false;
        let text = match c {
            b')' => ")",
            b']' => "]",
            _ => "}",
        };
        if frame.block && self.out.len() == frame.opened_at {
            self.need_break = false;
            self.out.push_str(text);
            self.prev = Some(tok);
            return;
        }
        self.need_break = frame.block || frame.broken;
        self.token(tok, text);
        self.comma_ahead(i);
    }

    /// After an item's last token in a broken group: writes its comma now, ahead of the comments
    /// that may come before it, or adds one before the closing bracket.
    fn comma_ahead(&mut self, i: usize) {
        if !self.in_broken_group() {
            return;
        }
        let next = self.tokens[i + 1..]
            .iter()
            .find(|t| !matches!(t, Tok::Newline | Tok::Comment(_)));
        match next {
            Some(Tok::Comma) => {
                self.put(",");
                self.comma_written = true;
                self.need_break = true;
            }
            Some(Tok::Close(_)) => self.put(","),
            _ => {}
        }
    }

    /// Writes a comment after its line's code, or on a line of its own, and ends the line.
    fn comment(&mut self, text: &str, after_newline: bool) {
        // Code on the line: a comment before this one ends its line and leaves none.
        if !after_newline && self.prev.is_some() {
            self.trailing.push(self.out.len());
        } else {
            self.start_line();
        }
        self.out.push_str(text);
        self.need_break = true;
        self.prev = None;
    }

    /// Writes a token, with the space or line break before it.
    fn token(&mut self, tok: Tok<'a>, text: &str) {
        if self.need_break || self.out.is_empty() {
            self.start_line();
        } else {
            self.blank = false;
            let tight = matches!(
                tok,
                Tok::Colon | Tok::Comma | Tok::Close(_) | Tok::Open(b'(')
            ) || matches!(self.prev, Some(Tok::Open(b'(' | b'[')))
                || text.starts_with(' ');
            if !tight {
                self.out.push(' ');
            }
        }
        self.out.push_str(if self.prev.is_none() {
            text.trim_start()
        } else {
            text
        });
        self.prev = Some(tok);
    }

    /// Writes text right after what was written last.
    fn put(&mut self, text: &str) {
        self.out.push_str(text);
        self.prev = Some(Tok::Comma);
    }

    /// Starts a new line at the current indentation, after one blank line when the text had one.
    fn start_line(&mut self) {
        if !self.out.is_empty() {
            let after_open = self.out.ends_with(['{', '(', '[']);
            if self.blank && !after_open {
                self.out.push('\n');
            }
            self.out.push('\n');
        }
        let depth = self.stack.iter().filter(|f| f.block || f.broken).count();
        for _ in 0..depth {
            self.out.push_str("  ");
        }
        self.blank = false;
        self.need_break = false;
        self.prev = None;
    }
}

/// Puts the comments after code in one paragraph (lines with no blank line between them) in one
/// column, two spaces after the longest code that such a comment follows. `trailing` holds where each such comment starts in `text`.
fn align(text: &str, trailing: &[usize]) -> String {
    let mut out = String::with_capacity(text.len() + 2 * trailing.len());
    let mut done = 0;
    let mut i = 0;
    while i < trailing.len() {
        // The run of comments with no blank line between them.
        let mut j = i + 1;
        while j < trailing.len() && !text[trailing[j - 1]..trailing[j]].contains("\n\n") {
            j += 1;
        }
        let width = |at: usize| {
            let start = text[..at].rfind('\n').map_or(0, |n| n + 1);
            text[start..at].chars().count()
        };
        let column = trailing[i..j]
            .iter()
            .map(|&at| width(at))
            .max()
            .unwrap_or(0)
            + 2;
        for &at in &trailing[i..j] {
            out.push_str(&text[done..at]);
            out.extend(std::iter::repeat_n(' ', column - width(at)));
            done = at;
        }
        i = j;
    }
    out.push_str(&text[done..]);
    out
}

/// The text of a token that is written as it is.
fn text_of<'a>(tok: Tok<'a>) -> &'a str {
    match tok {
        Tok::Word(text) | Tok::Str(text) => text,
        Tok::Colon => ":",
        Tok::Comma => ",",
        Tok::Arrow => "->",
        _ => "",
    }
}

/// For each token index, whether the list or argument list opened there holds a comment, or a
/// newline and at least one item.
fn broken_groups(tokens: &[Tok]) -> Vec<bool> {
    let mut broken = vec![false; tokens.len()];
    let mut open: Vec<(usize, bool, bool, bool)> = Vec::new();
    for (i, tok) in tokens.iter().enumerate() {
        match tok {
            Tok::Open(b'(' | b'[') => open.push((i, false, false, false)),
            Tok::Close(b')' | b']') => {
                if let Some((at, comment, newline, item)) = open.pop() {
                    broken[at] = comment || (newline && item);
                    if let Some(outer) = open.last_mut() {
                        outer.1 |= comment;
                        outer.2 |= newline;
                        outer.3 = true;
                    }
                }
            }
            Tok::Comment(_) => {
                if let Some(g) = open.last_mut() {
                    g.1 = true;
                }
            }
            Tok::Newline => {
                if let Some(g) = open.last_mut() {
                    g.2 = true;
                }
            }
            _ => {
                if let Some(g) = open.last_mut() {
                    g.3 = true;
                }
            }
        }
    }
    broken
}

#[cfg(test)]
mod tests {
    use super::format;

    fn fmt(text: &str) -> String {
        let out = format(text).expect("formats");
        assert_eq!(format(&out).expect("formats again"), out, "not idempotent");
        out
    }

    #[test]
    fn statements_go_one_per_line_in_blocks() {
        assert_eq!(
            fmt("experiment \"a\" {seed 1;data{batch   2}}"),
            "experiment \"a\" {\n  seed 1\n  data {\n    batch 2\n  }\n}\n"
        );
    }

    #[test]
    fn parts_are_spaced_and_literals_kept() {
        assert_eq!(
            fmt("fc1 : linear ( 784->256 , bias :false ) 1e-3  10_000 cuda:0 80GiB [ 1 ,2, ]"),
            "fc1: linear(784 -> 256, bias: false) 1e-3 10_000 cuda:0 80GiB [1, 2]\n"
        );
    }

    #[test]
    fn every_argument_name_gets_its_space_and_devices_keep_their_colon() {
        assert_eq!(
            fmt("s split(train:0.8, val:0.2)\no adam(lr:1e-3)\nd f(at:cuda:0) [cuda:0, cuda:1] cuda:2\n"),
            "s split(train: 0.8, val: 0.2)\no adam(lr: 1e-3)\nd f(at: cuda:0) [cuda:0, cuda:1] cuda:2\n"
        );
        assert_eq!(
            fmt("a f(\n  x:1, # one\n  y:2)\n"),
            "a f(\n  x: 1,  # one\n  y: 2,\n)\n"
        );
    }

    #[test]
    fn broken_lists_get_one_item_per_line_and_comments_stay() {
        let text = "a f(x: 1, # one\n  y: [2,\n 3])\n";
        assert_eq!(
            fmt(text),
            "a f(\n  x: 1,  # one\n  y: [\n    2,\n    3,\n  ],\n)\n"
        );
    }

    #[test]
    fn a_comma_goes_before_the_comments_after_its_item() {
        assert_eq!(
            fmt("a f(x: 1 # why\n\n # more\n , 2 # two\n )\n"),
            "a f(\n  x: 1,  # why\n\n  # more\n  2,  # two\n)\n"
        );
    }

    #[test]
    fn blank_lines_collapse_and_leave_block_edges() {
        assert_eq!(
            fmt("\n\n# c\n\n\n\nx {\n\n  a\n\n\n  b\n\n}\n\n\n"),
            "# c\n\nx {\n  a\n\n  b\n}\n"
        );
    }

    #[test]
    fn continued_lines_join_and_empty_blocks_close() {
        assert_eq!(fmt("batch \\\n  64\nx {}\n"), "batch 64\nx {}\n");
        assert_eq!(fmt(""), "");
    }

    #[test]
    fn a_comment_after_a_semicolon_on_a_new_line_gets_its_own_line() {
        assert_eq!(fmt("x {  # a\n ;# b\n}\n"), "x {  # a\n  # b\n}\n");
    }

    #[test]
    fn text_that_does_not_parse_is_its_diagnostic() {
        assert!(format("a (").is_err());
    }
}
