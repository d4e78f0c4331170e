//! The syntax tree. It mirrors the grammar: every statement has the same shape and carries
//! spans; meaning is given later by the checker.

use crate::span::Span;

/// A name with its span.
#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    /// The name as written.
    pub name: String,
    /// Where it is written.
    pub span: Span,
}

/// A parsed file: its top-level statements.
#[derive(Clone, Debug, PartialEq)]
pub struct File {
    /// Statements at the top level (`extends`, `experiment`).
    pub statements: Vec<Statement>,
}

/// One statement: `label: keyword(args) values... { body }`.
#[derive(Clone, Debug, PartialEq)]
pub struct Statement {
    /// The optional `label:` in front.
    pub label: Option<Ident>,
    /// The keyword.
    pub keyword: Ident,
    /// Arguments written in parentheses right after the keyword.
    pub args: Option<Args>,
    /// Values after the keyword (and its arguments).
    pub values: Vec<Value>,
    /// The nested block, if any.
    pub body: Option<Block>,
    /// The whole statement.
    pub span: Span,
}

/// A braced list of statements.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    /// The statements inside.
    pub statements: Vec<Statement>,
    /// From `{` to `}`.
    pub span: Span,
}

/// Parenthesised arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct Args {
    /// The arguments in order.
    pub items: Vec<Arg>,
    /// From `(` to `)`.
    pub span: Span,
}

/// One argument, named or positional.
#[derive(Clone, Debug, PartialEq)]
pub struct Arg {
    /// The name for `name: value`.
    pub name: Option<Ident>,
    /// The value.
    pub value: Value,
}

/// Units that may follow a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// `steps` / `step`.
    Steps,
    /// `epochs` / `epoch`.
    Epochs,
    /// `samples`.
    Samples,
    /// A byte size, with its multiplier (`GiB` is 2^30).
    Bytes(u64),
    /// A time, with its multiplier in seconds (`min` is 60).
    Seconds(u64),
}

impl Unit {
    /// Reads a unit as the grammar accepts it.
    pub fn parse(text: &str) -> Option<Unit> {
        Some(match text {
            "steps" | "step" => Unit::Steps,
            "epochs" | "epoch" => Unit::Epochs,
            "samples" => Unit::Samples,
            "GiB" => Unit::Bytes(1 << 30),
            "MiB" => Unit::Bytes(1 << 20),
            "KiB" => Unit::Bytes(1 << 10),
            "GB" => Unit::Bytes(1_000_000_000),
            "MB" => Unit::Bytes(1_000_000),
            "KB" => Unit::Bytes(1_000),
            "bytes" => Unit::Bytes(1),
            "seconds" | "s" => Unit::Seconds(1),
            "min" => Unit::Seconds(60),
            _ => return None,
        })
    }
}

/// A value with its span.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    /// What the value is.
    pub kind: ValueKind,
    /// Where it is written.
    pub span: Span,
}

/// The kinds of values.
#[derive(Clone, Debug, PartialEq)]
pub enum ValueKind {
    /// A number, remembering whether it was written as an integer, and its unit.
    Number {
        /// The value.
        value: f64,
        /// Written without fraction or exponent.
        integer: bool,
        /// The unit after it.
        unit: Option<Unit>,
    },
    /// A string literal (escapes resolved).
    Str(String),
    /// `true` or `false`.
    Bool(bool),
    /// A device with an index: `cuda:0` is `("cuda", 0)`.
    Device(String, u32),
    /// A name or dotted path.
    Path(String),
    /// `[a, b, c]`.
    List(Vec<Value>),
    /// `name(args)`.
    Call(Ident, Args),
    /// `a -> b`.
    Arrow(Box<Value>, Box<Value>),
    /// `sweep [..]` or `sweep range(..)`: the values of a sweep.
    Sweep(Box<Value>),
}

impl Value {
    /// A short word for the value's type, used in messages.
    pub fn type_name(&self) -> &'static str {
        match &self.kind {
            ValueKind::Number { unit: Some(_), .. } => "a number with a unit",
            ValueKind::Number { integer: true, .. } => "an integer",
            ValueKind::Number { .. } => "a number",
            ValueKind::Str(_) => "a string",
            ValueKind::Bool(_) => "a boolean",
            ValueKind::Device(..) => "a device",
            ValueKind::Path(_) => "a name",
            ValueKind::List(_) => "a list",
            ValueKind::Call(..) => "a call",
            ValueKind::Arrow(..) => "an arrow `a -> b`",
            ValueKind::Sweep(_) => "a sweep",
        }
    }
}
