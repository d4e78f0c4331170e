//! Plain-text tables whose columns line up whatever their contents: each column is as wide as its
//! widest cell (header included), two spaces apart. `kiln report`, `kiln compare` and the summary
//! `kiln run` prints at the end of a sweep write their tables with it.

/// How a column's cells sit in its width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text: names, methods, paths.
    Left,
    /// Numbers.
    Right,
}

/// The table of `header` and `rows`, each line starting with `indent`. `align` gives each
/// column's alignment (columns past its end are right-aligned). A row of one cell in a table of
/// several columns is a note, written as it is and left out of the widths. Lines end without
/// trailing spaces.
pub fn render(header: &[String], rows: &[Vec<String>], align: &[Align], indent: &str) -> String {
    let cols = header.len();
    let width = |s: &str| s.chars().count();
    let mut widths: Vec<usize> = header.iter().map(|h| width(h)).collect();
    let is_note = |row: &Vec<String>| row.len() == 1 && cols > 1;
    for row in rows.iter().filter(|r| !is_note(r)) {
        for (i, cell) in row.iter().enumerate().take(cols) {
            widths[i] = widths[i].max(width(cell));
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::from(indent);
        for (i, cell) in cells.iter().enumerate().take(cols) {
            if i > 0 {
                s += "  ";
            }
            let pad = " ".repeat(widths[i].saturating_sub(width(cell)));
            match align.get(i).copied().unwrap_or(Align::Right) {
                Align::Left => {
                    s += cell;
                    s += &pad;
                }
                Align::Right => {
                    s += &pad;
                    s += cell;
                }
            }
        }
        s.truncate(s.trim_end().len());
        s + "\n"
    };
    let mut out = line(header);
    for row in rows {
        if is_note(row) {
            out += indent;
            out += &row[0];
            out += "\n";
        } else {
            out += &line(row);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let header = cells(&["layer", "method", "bytes"]);
        let rows = vec![
            cells(&["encoder.block_with_a_long_name.fc1", "int8", "2.38 KiB"]),
            cells(&[
                "fc2",
                "l1_unstructured 50%, after training",
                "1,000,000.00 KiB",
            ]),
            cells(&["a note"]),
        ];
        let t = render(&header, &rows, &[Align::Left, Align::Left], "  ");
        let lines: Vec<&str> = t.lines().collect();
        // The right-aligned column ends in one place on every line but the note.
        assert!(lines[..3]
            .iter()
            .all(|l| l.chars().count() == lines[0].chars().count()));
        assert_eq!(
            lines,
            [
                "  layer                               method                                          bytes",
                "  encoder.block_with_a_long_name.fc1  int8                                         2.38 KiB",
                "  fc2                                 l1_unstructured 50%, after training  1,000,000.00 KiB",
                "  a note",
            ]
        );
    }
}
