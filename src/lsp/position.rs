//! Byte offsets to LSP positions and back; LSP columns count UTF-16 code units.

use lsp_types::Position;

/// The byte offset of the start of each line of a text.
#[derive(Clone, Debug, Default)]
pub struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    /// Indexes `text`.
    pub fn new(text: &str) -> LineIndex {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { starts }
    }

    /// The position of byte `offset` (clamped to the text, and back to a character boundary).
    pub fn position(&self, text: &str, offset: usize) -> Position {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.starts.partition_point(|&s| s <= offset) - 1;
        let start = self.starts[line];
        let character: usize = text[start..offset].chars().map(char::len_utf16).sum();
        Position::new(line as u32, character as u32)
    }

    /// The byte offset of `position` (a column past the line's end is its end).
    pub fn offset(&self, text: &str, position: Position) -> usize {
        let Some(&start) = self.starts.get(position.line as usize) else {
            return text.len();
        };
        let end = self
            .starts
            .get(position.line as usize + 1)
            .map_or(text.len(), |&s| s - 1);
        let mut units = 0;
        for (i, c) in text[start..end].char_indices() {
            if units >= position.character as usize {
                return start + i;
            }
            units += c.len_utf16();
        }
        end
    }

    /// The range of bytes `start..end`.
    pub fn range(&self, text: &str, start: usize, end: usize) -> lsp_types::Range {
        lsp_types::Range::new(self.position(text, start), self.position(text, end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_count_utf16_units() {
        let text = "a\n\u{e9}\u{1f600}x\n";
        let index = LineIndex::new(text);
        // `é` is 2 bytes and 1 unit; the emoji is 4 bytes and 2 units.
        let x = text.find('x').unwrap();
        assert_eq!(index.position(text, x), Position::new(1, 3));
        assert_eq!(index.offset(text, Position::new(1, 3)), x);
        assert_eq!(index.offset(text, Position::new(1, 99)), text.len() - 1);
        assert_eq!(index.offset(text, Position::new(9, 0)), text.len());
        assert_eq!(index.position(text, 0), Position::new(0, 0));
    }
}
