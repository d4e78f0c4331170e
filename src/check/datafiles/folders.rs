//! Image folders as the checks read them: the inputs and targets of a folder the checker
//! listed (never decoding an image), and its class folders against the experiment's classes and
//! the held-out folders'.

use super::{Cx, Declared, Reader, Side};
use crate::datafile::{Elem, Format, Header};
use crate::diagnostic::problem::{DataFit, Strategies};
use crate::diagnostic::Problem;
use crate::ir::{Shape, Targets};

impl Reader<'_, '_> {
    /// An image folder as two sides: its images at the declared `size` (bytes), and their
    /// classes; the class names are kept for [`folder_classes`].
    pub(super) fn folder(&mut self, path: &str, size: &Shape) -> Option<(Side, Side)> {
        let Header::Folder(classes) = self.open(path, "path", Format::Images)? else {
            return None;
        };
        let n = classes.images();
        self.classes = Some(classes.names);
        let span = self.span("path");
        let mut shape = vec![n];
        shape.extend(size.iter().map(|&d| d.max(0) as u64));
        let x = Side {
            name: format!("`{path}`"),
            span,
            shape,
            elem: Some(Elem::Int {
                signed: false,
                bits: 8,
            }),
        };
        let y = Side {
            name: format!("`{path}`'s class folders"),
            span,
            shape: vec![n],
            elem: Some(Elem::Int {
                signed: true,
                bits: 64,
            }),
        };
        Some((x, y))
    }
}

/// An image folder's classes against the experiment: the training folder's class folders are
/// the classes (set as `targets` when `classes` is not declared, K0220 when it declares
/// another number), and a held-out folder must have the same ones (K0220). False after a
/// report.
pub(in crate::check) fn folder_classes(
    cx: &mut Cx,
    targets: &mut Targets,
    declared: &[Declared],
) -> bool {
    let Some(d) = declared.iter().find(|d| d.trains()) else {
        return true;
    };
    let Some(train) = d.classes.as_ref() else {
        return true;
    };
    let train_span = d.inputs.span;
    let mut ok = true;
    let n = train.len() as u64;
    match targets {
        Targets::Classes(Some(c)) if *c != n => {
            let span = d.spans.args.get("classes").copied().unwrap_or(train_span);
            cx.report(Problem::Strategies(Strategies::DataMismatch {
                span,
                file: d.inputs.name.clone(),
                situation: DataFit::ClassFolders {
                    folders: train.clone(),
                    declared: *c,
                },
            }));
            ok = false;
        }
        Targets::Classes(c) => *c = Some(n),
        _ => {}
    }
    for d in declared.iter().filter(|d| !d.trains()) {
        if let Some(held_out) = d.classes.as_ref().filter(|h| *h != train) {
            cx.report(Problem::Strategies(Strategies::DataMismatch {
                span: d.inputs.span,
                file: d.inputs.name.clone(),
                situation: DataFit::OtherClasses {
                    held_out: held_out.clone(),
                    train: train.clone(),
                    train_span,
                },
            }));
            ok = false;
        }
    }
    ok
}
