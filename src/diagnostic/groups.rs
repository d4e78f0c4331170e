//! Wording of the optimizer's parameter-group problems (K0226, K0419).

use super::problem::Problem;
use super::Diagnostic;
use crate::diagnostic::problem::{Strategies, Warnings};
use crate::span::Span;

/// Parameter-group problems in words. Only those variants are passed here.
pub(super) fn words(problem: Problem) -> Diagnostic {
    let code = problem.code();
    let new = |span: Span, message: String| Diagnostic::new(code, span, message);
    match problem {
        Problem::Strategies(Strategies::GroupOverlap {
            span,
            param,
            selector,
            first,
            first_selector,
        }) => new(span, format!("parameter `{param}` is in two parameter groups"))
            .label(format!("`{selector}` selects `{param}` again"))
            .with(first, format!("`{first_selector}` selected it first"))
            .help(format!(
                "a parameter belongs to one group: select `{param}` in one of them only, or merge the two groups"
            )),
        Problem::Warnings(Warnings::EmptyGroup { span, selectors }) => {
            let written: Vec<String> = selectors.iter().map(|s| format!("`{s}`")).collect();
            let label = match written.as_slice() {
                [] => "no layer, block or class is named".to_string(),
                [one] => format!("{one} holds no parameter in this model"),
                all => format!("{} hold no parameter in this model", all.join(", ")),
            };
            new(span, "this parameter group selects no parameter".into())
                .label(label)
                .help("remove the group, or select layers, blocks or classes that hold parameters")
        }
        _ => unreachable!("only parameter-group problems are worded here"),
    }
}
