//! CSV files: the first row (a header or the first sample), the first sample row, and the
//! number of rows, counted within the first [`CSV_COUNT_BYTES`] of the file.

use std::borrow::Cow;
use std::io::Read;

use super::{read_up_to, CSV_COUNT_BYTES};

/// How many non-blank rows a CSV file has (its header row included).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rows {
    /// Counted to the end of the file.
    Exact(u64),
    /// The file is larger than [`CSV_COUNT_BYTES`]: at least this many.
    AtLeast(u64),
}

/// What the start of a CSV file holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Csv {
    /// The cells of the first non-blank row, unquoted.
    pub first: Vec<String>,
    /// The cells of the second non-blank row, when there is one within the bytes read.
    pub second: Option<Vec<String>>,
    /// The number of non-blank rows.
    pub rows: Rows,
}

/// The rows of CSV text that are not blank, each with its 1-based line: a byte-order mark at the
/// start is dropped, lines end at `\n` or `\r\n`. The one row reader of Kiln: `kiln check`
/// counts rows with it, the runtime reads them.
pub fn rows(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.strip_prefix('\u{feff}')
        .unwrap_or(text)
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l))
}

/// Splits a CSV line at commas outside double quotes, and unquotes the cells.
fn cells(line: &str) -> Vec<String> {
    let mut raw = Vec::new();
    split_cells(line, &mut raw);
    raw.into_iter().map(|c| unquote(c).into_owned()).collect()
}

/// Splits a CSV line at commas outside double quotes into `cells`, as written. The one cell
/// reader of Kiln: `kiln check` reads headers with it, the runtime whole files.
pub fn split_cells<'l>(line: &'l str, cells: &mut Vec<&'l str>) {
    cells.clear();
    let mut start = 0;
    let mut quoted = false;
    for (i, c) in line.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                cells.push(&line[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    cells.push(&line[start..]);
}

/// A cell's text: blanks around it dropped; in double quotes, what the quotes hold, blanks
/// included, with `""` read as one `"`.
pub fn unquote(cell: &str) -> Cow<'_, str> {
    let t = cell.trim();
    match t.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        Some(inner) if inner.contains("\"\"") => Cow::Owned(inner.replace("\"\"", "\"")),
        Some(inner) => Cow::Borrowed(inner),
        None => Cow::Borrowed(t),
    }
}

/// Reads the start of a CSV file of `size` bytes.
pub(super) fn header(r: &mut impl Read, size: u64) -> Result<Csv, String> {
    let bytes = read_up_to(r, CSV_COUNT_BYTES)?;
    let whole = (bytes.len() as u64) >= size;
    // A line cut by the read is not counted.
    let kept = if whole {
        &bytes[..]
    } else {
        &bytes[..bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1)]
    };
    let text = String::from_utf8_lossy(kept);
    let mut count = 0u64;
    let mut first = None;
    let mut second = None;
    for (_, line) in rows(&text) {
        count += 1;
        if count == 1 {
            first = Some(cells(line));
        } else if count == 2 {
            second = Some(cells(line));
        }
    }
    let first = first.ok_or("it holds no rows")?;
    Ok(Csv {
        first,
        second,
        rows: if whole {
            Rows::Exact(count)
        } else {
            Rows::AtLeast(count)
        },
    })
}
