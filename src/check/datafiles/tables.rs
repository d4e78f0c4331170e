//! The sources whose files are not arrays of samples, as the two sides the checks read: a
//! Parquet table's columns (from its footer) and a token stream's windows.

use super::{Reader, Side};
use crate::datafile::{Elem, Format, Header};
use crate::diagnostic::problem::{DataFit, Strategies};
use crate::diagnostic::Problem;

impl Reader<'_, '_> {
    /// A Parquet table as two sides: the input columns (several of one value each, or one list
    /// column), and the target column. A list column whose length varies from row to row is
    /// checked when the data loads.
    pub(super) fn parquet(
        &mut self,
        path: &str,
        inputs: &[String],
        target: &str,
    ) -> Option<(Side, Side)> {
        let Header::Table(table) = self.open(path, "path", Format::Parquet)? else {
            return None;
        };
        let names: Vec<String> = table.columns.iter().map(|c| c.name.clone()).collect();
        let find = |me: &mut Self, name: &str, param: &str| {
            let found = table.columns.iter().find(|c| c.name == name).cloned();
            if found.is_none() {
                let span = me.span(param);
                me.cx.report(Problem::Strategies(Strategies::DataMismatch {
                    span,
                    file: format!("`{path}`"),
                    situation: DataFit::NoColumn {
                        name: name.to_string(),
                        columns: names.clone(),
                    },
                }));
            }
            found
        };
        let columns: Vec<_> = inputs.iter().map(|c| find(self, c, "inputs")).collect();
        let y = find(self, target, "target");
        let (columns, y): (Vec<_>, _) = (columns.into_iter().collect::<Option<_>>()?, y?);
        let rows = table.rows;
        let side = |me: &Self, c: &[crate::datafile::parquet::Column], param: &str| {
            let per = match c {
                [one] => match one.list {
                    None => vec![],
                    Some(Some(n)) => vec![n],
                    Some(None) => return None,
                },
                many if many.iter().all(|c| c.list.is_none()) => vec![many.len() as u64],
                _ => return None,
            };
            let float = c
                .iter()
                .find(|c| matches!(c.elem, Elem::Float { .. } | Elem::Other(_)));
            let mut shape = vec![rows];
            shape.extend(per);
            Some(Side {
                name: format!("`{path}`"),
                span: me.span(param),
                shape,
                elem: Some(float.unwrap_or(&c[0]).elem.clone()),
            })
        };
        let x = side(self, &columns, "inputs");
        if x.is_none() && columns.len() > 1 {
            let span = self.span("inputs");
            self.unusable(
                span,
                path,
                "several input columns must each hold one value per row; name a single list column instead (`inputs: \"pixels\"`)".into(),
            );
        }
        let mut x = x?;
        // The samples of a single scalar column are one value each.
        if x.shape.len() == 1 {
            x.shape.push(1);
        }
        Some((x, side(self, std::slice::from_ref(&y), "target")?))
    }

    /// A token stream of `tokens` ids as windows of `block`, each the inputs and (shifted by
    /// one) the targets of a sample; refused when it holds no window and its next token.
    pub(super) fn stream(
        &mut self,
        path: &str,
        tokens: u64,
        elem: Elem,
        block: u64,
    ) -> Option<(Side, Side)> {
        let span = self.span("path");
        if tokens <= block {
            let block_span = self.span("block");
            self.cx
                .report(Problem::Strategies(Strategies::DataMismatch {
                    span,
                    file: format!("`{path}`"),
                    situation: DataFit::ShortStream {
                        tokens,
                        block,
                        block_span,
                    },
                }));
            return None;
        }
        let side = Side {
            name: format!("`{path}`"),
            span,
            shape: vec![tokens - block, block],
            elem: Some(elem),
        };
        Some((side.clone(), side))
    }
}
