//! What the helpers' tests share: an environment like the renderer's, a document with
//! awkward values, rendering and expecting a result or an error, and the lock that
//! serializes tests which set the process-wide zone.

use std::sync::{Mutex, PoisonError};

use minijinja::{Environment, Error, ErrorKind, UndefinedBehavior};
use serde_json::json;

use super::install;

/// Serializes the tests that set or depend on the process-wide zone.
static ZONE_LOCK: Mutex<()> = Mutex::new(());

pub(super) fn zone_guard() -> std::sync::MutexGuard<'static, ()> {
    ZONE_LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An environment like hookfleet's: lenient undefined, helpers installed.
pub(super) fn env() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    install(&mut env);
    env
}

pub(super) fn doc() -> serde_json::Value {
    json!({
        "doc": {
            "name": "SO-0001",
            "items": [
                {"qty": 2, "rate": 10.5, "item": "Caf\u{e9} \u{20ac} \u{1F600}"},
                {"qty": 1, "rate": 1e16, "item": "a\"b\\c\nd\u{1}\u{7f}"}
            ],
            "empty": [], "obj": {}, "flag": true, "none": null,
            "big": 12345678901234567890u64, "small": 1e-7, "neg": -0.0
        }
    })
}

pub(super) fn render_with(src: &str, ctx: serde_json::Value) -> String {
    env()
        .render_str(src, ctx)
        .unwrap_or_else(|e| panic!("{src}: {e:#}"))
}

pub(super) fn render(src: &str) -> String {
    render_with(src, doc())
}

pub(super) fn render_err(src: &str) -> Error {
    match env().render_str(src, doc()) {
        Ok(out) => panic!("{src}: rendered {out:?}, expected an error"),
        Err(e) => e,
    }
}

pub(super) fn assert_renders(cases: &[(&str, &str)]) {
    for (src, expected) in cases {
        assert_eq!(render(src), *expected, "template {src}");
    }
}

/// `src` fails saying `needle`: an invalid operation, or arguments that do
/// not fit the call (too many, unknown, missing).
pub(super) fn assert_fails(src: &str, needle: &str) {
    let e = render_err(src);
    assert!(
        matches!(
            e.kind(),
            ErrorKind::InvalidOperation | ErrorKind::TooManyArguments | ErrorKind::MissingArgument
        ),
        "{src}: {e:#}"
    );
    assert!(
        e.to_string().contains(needle),
        "{src}: {e} lacks {needle:?}"
    );
}
