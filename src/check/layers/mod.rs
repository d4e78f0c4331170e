//! Layer kinds in the checker: one home per family, beside the family's facts in `ir` (its
//! spec, tensors, FLOPs). Each family module holds the check functions that read the
//! arguments, check them against the input shape with diagnostics and spans, and infer the
//! output shape; parameters and FLOPs come from the facts. Each family names the kinds it
//! checks in its `checker`, and [`check`] asks the families in turn; the test below proves that
//! every kind of the language has exactly one family, so a kind added without a check fails it.

mod activation;
mod attention;
mod conv;
mod embedding;
mod linear;
mod norm;
mod pool;
mod positional;
mod shape;

use super::cx::{Bound, Cx, Range};
use crate::diagnostic::problem::{Arguments, Declared, Names, Producer, Reading, Shapes, Window};
use crate::diagnostic::Problem;
use crate::ir::{DType, Kind, LayerKind, Shape};

pub use crate::ir::{spec, Fallback};
use crate::span::Span;
use crate::syntax::ast::{Value, ValueKind};

/// The parameter names of a kind, in positional order (for binding arguments).
pub fn param_names(kind: Kind) -> Vec<&'static str> {
    spec(kind).params.iter().map(|p| p.name).collect()
}

/// What flows from one layer to the next.
#[derive(Clone)]
pub struct Flow {
    /// The per-sample shape, unknown after an error.
    pub shape: Option<Shape>,
    /// The element type.
    pub dtype: DType,
    /// Exclusive bound of integer values (token ids), when known.
    pub int_bound: Option<u64>,
    /// Who produced the shape: the layer's span and a description.
    pub producer: (Span, String),
}

/// A checked layer: what it computes and what it costs.
pub struct Checked {
    /// The kind with every size resolved.
    pub kind: LayerKind,
    /// The per-sample output shape.
    pub output: Vec<i64>,
    /// The output's element type.
    pub dtype: DType,
    /// Trainable parameters.
    pub params: u64,
    /// Forward FLOPs per sample.
    pub flops: u64,
}

impl Checked {
    /// A float-valued layer on `input`, its parameters and FLOPs as its family counts them.
    fn new(kind: LayerKind, input: &[i64], output: Vec<i64>) -> Checked {
        Checked {
            params: kind.params(),
            flops: kind.flops(input, &output),
            kind,
            output,
            dtype: DType::Float,
        }
    }
}

/// Checks one layer of `kind` whose arguments are `bound`, against what flows into it.
pub fn check(cx: &mut Cx, kind: Kind, span: Span, bound: &Bound, flow: &Flow) -> Option<Checked> {
    let mut lc = LayerCheck {
        cx,
        kind,
        span,
        bound,
    };
    match checker(kind) {
        Some(check) => check(&mut lc, flow),
        None => {
            lc.cx.report(Problem::Reading(Reading::Internal { span }));
            None
        }
    }
}

/// How the checker reads one kind: its family's check, with the family's options for it.
type Check = Box<dyn Fn(&mut LayerCheck, &Flow) -> Option<Checked>>;

/// The check of `kind`, from the one family that holds it. A test proves that every kind of
/// the language has exactly one.
fn checker(kind: Kind) -> Option<Check> {
    FAMILIES.iter().find_map(|family| family(kind))
}

/// Each family's [`Check`]s: a new kind is one arm in its family's `checker`.
const FAMILIES: [fn(Kind) -> Option<Check>; 9] = [
    linear::checker,
    conv::checker,
    pool::checker,
    norm::checker,
    activation::checker,
    shape::checker,
    embedding::checker,
    positional::checker,
    attention::checker,
];

/// A size the file declares, with where it declares it.
type Given = Option<(i64, Span)>;

/// The context of one layer's check: its arguments and where to report.
struct LayerCheck<'a, 'c> {
    cx: &'c mut Cx,
    kind: Kind,
    span: Span,
    bound: &'a Bound<'a>,
}

impl<'a> LayerCheck<'a, '_> {
    /// The input shape once the arguments have been read: `None` after an earlier error, or
    /// (with a diagnostic) when the input holds integer ids and the layer needs floats.
    fn input(&mut self, flow: &Flow) -> Option<Vec<i64>> {
        let shape = flow.shape.as_ref()?.to_vec();
        if flow.dtype == DType::Float || self.kind == Kind::Embedding {
            return Some(shape);
        }
        self.cx.report(Problem::Shapes(Shapes::DtypeMismatch {
            span: self.span,
            layer: self.kind.name().to_string(),
            integers: true,
            producer: producer(flow, &shape),
        }));
        None
    }

    /// The span of an argument, or of the layer when it is not given.
    fn at(&self, name: &str) -> Span {
        self.bound.get(name).map_or(self.span, |v| v.span)
    }

    fn opt_uint(&mut self, name: &str, min: u64) -> Option<Option<i64>> {
        match self.bound.get(name) {
            None => Some(None),
            Some(v) => self
                .cx
                .uint_min(v, &format!("`{name}`"), min)
                .map(|x| Some(x as i64)),
        }
    }

    fn bool_or(&mut self, name: &str, default: bool) -> Option<bool> {
        self.bound
            .get(name)
            .map_or(Some(default), |v| self.cx.boolean(v))
    }

    fn num_or(&mut self, name: &str, default: f64, range: Range) -> Option<f64> {
        self.bound.get(name).map_or(Some(default), |v| {
            self.cx.number_in(v, &format!("`{name}`"), range)
        })
    }

    fn required(&mut self, name: &str) -> Option<&'a Value> {
        let v = self.bound.get(name);
        if v.is_none() {
            self.cx.missing(self.kind.name(), name, self.bound.span);
        }
        v
    }

    /// A required integer of at least `min`, with its span.
    fn required_uint(&mut self, name: &str, min: u64) -> Option<(i64, Span)> {
        let v = self.required(name)?;
        let x = self.cx.uint_min(v, &format!("`{name}`"), min)?;
        Some((x as i64, v.span))
    }

    /// One size or a list of sizes, one per spatial dimension.
    fn sizes(&mut self, name: &str, dims: usize, min: u64) -> Option<Option<Vec<i64>>> {
        let Some(v) = self.bound.get(name) else {
            return Some(None);
        };
        match &v.kind {
            ValueKind::List(items) => {
                if items.len() != dims {
                    self.cx.report(Problem::Names(Names::WrongArguments {
                        span: v.span,
                        situation: Arguments::SpatialValues {
                            param: name.to_string(),
                            dims,
                            given: items.len(),
                        },
                    }));
                    return None;
                }
                let mut out = Vec::new();
                for item in items {
                    out.push(self.cx.uint_min(item, &format!("`{name}`"), min)? as i64);
                }
                Some(Some(out))
            }
            _ => {
                let x = self.cx.uint_min(v, &format!("`{name}`"), min)? as i64;
                Some(Some(vec![x; dims]))
            }
        }
    }

    /// A size that may be written `in -> out`, or given apart as `declared`: returns
    /// `(declared in, out)`.
    fn arrow(&mut self, name: &str, declared: &str) -> Option<(Given, Option<i64>)> {
        let (arrow_in, out) = match self.bound.get(name) {
            None => (None, None),
            Some(v) => match &v.kind {
                ValueKind::Arrow(a, b) => {
                    let a_val = self.cx.uint_min(a, "an input size", 1);
                    let b_val = self.cx.uint_min(b, "an output size", 1);
                    (Some((a_val? as i64, a.span)), Some(b_val? as i64))
                }
                _ => (
                    None,
                    Some(self.cx.uint_min(v, &format!("`{name}`"), 1)? as i64),
                ),
            },
        };
        let declared_in = match (arrow_in, self.bound.get(declared)) {
            (Some(a), _) => Some(a),
            (None, Some(v)) => Some((
                self.cx.uint_min(v, &format!("`{declared}`"), 1)? as i64,
                v.span,
            )),
            (None, None) => None,
        };
        Some((declared_in, out))
    }

    /// Reports a declared size that differs from the input `shape` flowing in.
    fn mismatch(&mut self, at: Span, flow: &Flow, shape: &[i64], declared: Declared) {
        self.cx.report(Problem::Shapes(Shapes::ShapeMismatch {
            span: at,
            layer: self.kind.name().to_string(),
            declared,
            producer: producer(flow, shape),
        }));
    }

    /// Requires `ok` of the input's rank, which is described as `want`.
    fn rank(&mut self, shape: &[i64], flow: &Flow, want: &str, ok: bool) -> Option<()> {
        if ok {
            return Some(());
        }
        self.cx.report(Problem::Shapes(Shapes::RankMismatch {
            span: self.span,
            layer: self.kind,
            wants: want.to_string(),
            producer: producer(flow, shape),
        }));
        None
    }

    /// The output size of `window`, which must be at least 1.
    fn window(&mut self, window: Window, shape: &[i64], flow: &Flow) -> Option<i64> {
        let len = window.output();
        if len >= 1 {
            return Some(len);
        }
        self.cx.report(Problem::Shapes(Shapes::EmptyDimension {
            span: self.span,
            layer: self.kind.name().to_string(),
            window,
            producer: producer(flow, shape),
        }));
        None
    }
}

/// What flows into a layer, as the facts of a diagnostic: who produced `shape`, and where.
fn producer(flow: &Flow, shape: &[i64]) -> Producer {
    Producer {
        span: flow.producer.0,
        name: flow.producer.1.clone(),
        shape: shape.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::FAMILIES;
    use crate::ir::Kind;

    #[test]
    fn every_kind_has_exactly_one_family() {
        for &kind in Kind::ALL {
            let families = FAMILIES.iter().filter(|f| f(kind).is_some()).count();
            assert_eq!(families, 1, "`{kind}` is checked by {families} families");
        }
    }
}
