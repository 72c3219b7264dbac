//! What the translator's tests share: translating and expecting a verdict, and evaluating
//! a translation in an environment like the renderer's, on a Sales Order.

use std::collections::BTreeMap;

use minijinja::value::Value;
use minijinja::{context, Environment};

use super::{to_jinja, PyError};

pub(super) fn tr(src: &str) -> String {
    to_jinja(src).unwrap_or_else(|e| panic!("{src:?} should translate, got {e:?}"))
}

pub(super) fn refusal(src: &str) -> String {
    match to_jinja(src) {
        Err(PyError::Refused(msg)) => msg,
        other => panic!("{src:?} should be refused, got {other:?}"),
    }
}

pub(super) fn not_py(src: &str) -> String {
    match to_jinja(src) {
        Err(PyError::NotPython(msg)) => msg,
        other => panic!("{src:?} should be NotPython, got {other:?}"),
    }
}

pub(super) fn assert_refused(src: &str, needle: &str) {
    let msg = refusal(src);
    assert!(
        msg.contains(needle),
        "{src:?}: {msg:?} should mention {needle:?}"
    );
}

pub(super) fn assert_not_python(src: &str, needle: &str) {
    let msg = not_py(src);
    assert!(
        msg.contains(needle),
        "{src:?}: {msg:?} should mention {needle:?}"
    );
}

/// Test stand-ins for Frappe's `flt` and `cint`.
fn flt(v: Value) -> f64 {
    match v.as_str() {
        Some(s) => s.trim().parse().unwrap_or(0.0),
        None => f64::try_from(v).unwrap_or(0.0),
    }
}

fn cint(v: Value) -> i64 {
    flt(v) as i64
}

/// The renderer's environment, with a stub `utils` (a map of functions).
pub(super) fn env() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    super::install(&mut env);
    let mut utils = BTreeMap::new();
    utils.insert("flt", Value::from_function(flt));
    utils.insert("cint", Value::from_function(cint));
    env.add_global("utils", Value::from(utils));
    env
}

/// A Sales Order, as the webhook's `doc`.
pub(super) fn doc() -> serde_json::Value {
    serde_json::json!({
        "name": "SO-0001",
        "status": "Approved",
        "grand_total": 1500.5,
        "customer": "ACME",
        "items": [{"item_code": "I-1", "qty": 2}, {"item_code": "I-2", "qty": 0}],
        "discount": null,
        "docstatus": 1,
        "tags": "a,b",
    })
}

pub(super) fn eval_jinja(jinja: &str) -> Result<Value, minijinja::Error> {
    let env = env();
    let expr = env.compile_expression(jinja)?;
    expr.eval(context! { doc => doc() })
}

/// Translates `src` and evaluates it for its truth value.
pub(super) fn truth(src: &str) -> Result<bool, minijinja::Error> {
    eval_jinja(&tr(src)).map(|v| v.is_true())
}

/// Runs `f` on a thread with a small stack, to show the recursion is bounded.
pub(super) fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(f)
        .expect("spawn")
        .join()
        .expect("no panic or overflow")
}

pub(super) fn nested(open: &str, inner: &str, close: &str, n: usize) -> String {
    format!("{}{inner}{}", open.repeat(n), close.repeat(n))
}
