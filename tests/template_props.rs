//! Properties of templates, over generated documents and templates:
//! - no document value can change a JSON body's structure (strings are
//!   written as escaped string content, lists and objects as JSON);
//! - whatever work or memory a template asks for, its render ends within the
//!   renderer's limits, and the renderers go on rendering.

use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use serde_json::{json, Value};

use hookfleet_core::error::RenderError;
use hookfleet_core::request::{RenderJob as Job, Templates};
use hookfleet_template::sandbox;
use hookfleet_template::Compiled;

fn body_template(body: &str) -> Templates {
    Templates {
        condition: None,
        body: Some(body.into()),
        url: None,
        lenient: false,
        python_text: false,
    }
}

/// Templates written Frappe's way: values quoted in the template, numbers
/// and lists bare.
const ORDER: &str = r#"{"customer": "{{ doc.customer }}", "note": "{{ doc.note }}", "total": {{ doc.total }}, "items": {{ doc.items }}}"#;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn no_document_value_changes_a_json_bodys_structure(
        customer in any::<String>(),
        note in "[\"\\\\{}:,\\[\\] a-z\u{0}-\u{1f}\u{2028}\u{7f}]{0,40}",
        total in any::<f64>().prop_filter("finite", |f| f.is_finite()),
        items in proptest::collection::vec(any::<String>(), 0..4),
    ) {
        let compiled = Compiled::compile(&body_template(ORDER)).expect("compiles");
        let doc = json!({"customer": customer, "note": note, "total": total, "items": items});
        let body = compiled.render_all(&doc).expect("renders").body.expect("a body");
        let parsed: serde_json::Map<String, Value> =
            serde_json::from_str(&body).map_err(|e| TestCaseError::fail(format!("{e}: {body}")))?;
        prop_assert_eq!(parsed.len(), 4, "{}", body);
        prop_assert_eq!(&parsed["customer"], &json!(customer));
        prop_assert_eq!(&parsed["note"], &json!(note));
        // The number as JSON writes it (compared as text: serde_json's own
        // float parsing is not exact by default).
        let written = serde_json::to_string(&json!(total)).expect("json");
        prop_assert!(body.contains(&format!(r#""total": {written},"#)), "{}", body);
        prop_assert_eq!(&parsed["items"], &json!(items));
    }
}

/// Any JSON value, a few levels deep, with strings made of the characters
/// that matter to JSON.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "[\"\\\\{}:,\\[\\] a-z\u{0}-\u{1f}]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z\",:]{0,4}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    /// Whatever type the document gives a field, in a quoted position or a
    /// bare one, the body has the template's structure: the quoted ones are
    /// strings, the bare ones the values themselves.
    #[test]
    fn no_value_of_any_type_changes_the_structure_in_any_position(
        quoted in any_json(),
        bare in any_json(),
        element in any_json(),
    ) {
        let t = r#"{"quoted": "a {{ doc.q }} b", "bare": {{ doc.b }}, "list": [{{ doc.e }}, 1]}"#;
        let compiled = Compiled::compile(&body_template(t)).expect("compiles");
        let doc = json!({"q": quoted, "b": bare, "e": element});
        let body = compiled.render_all(&doc).expect("renders").body.expect("a body");
        let parsed: serde_json::Map<String, Value> =
            serde_json::from_str(&body).map_err(|e| TestCaseError::fail(format!("{e}: {body}")))?;
        prop_assert_eq!(parsed.len(), 3, "{}", body);
        prop_assert!(parsed["quoted"].is_string(), "{}", body);
        prop_assert_eq!(&parsed["bare"], &bare);
        prop_assert_eq!(parsed["list"].as_array().map(Vec::len), Some(2), "{}", body);
        prop_assert_eq!(&parsed["list"][0], &element);
    }
}

/// Body templates that ask for work or memory of `10^exponent`.
fn demanding() -> impl Strategy<Value = String> {
    prop_oneof![
        (1u32..=12).prop_map(|e| format!(r#"{{"a": {{{{ ([0]*{})|sum }}}}}}"#, 10u64.pow(e))),
        (1u32..=11).prop_map(|e| format!(r#"{{"a": "{{{{ "x"|indent({}) }}}}"}}"#, 10u64.pow(e))),
        (1u32..=8, 1usize..12).prop_map(|(e, k)| format!(
            r#"{{% set s = "x" * {} %}}{{"a": {{{{ [{}]|join|length }}}}}}"#,
            10u64.pow(e),
            vec!["s"; k].join(", ")
        )),
        (1u32..=8, 1usize..12).prop_map(|(e, k)| format!(
            r#"{{% set s = "x" * {} %}}{{"a": {{{{ ({})|length }}}}}}"#,
            10u64.pow(e),
            vec!["s"; k].join(" ~ ")
        )),
        (1u32..=4, 1u32..=4).prop_map(|(a, b)| format!(
            r#"{{"a": "{{% for i in range({}) %}}{{% for j in range({}) %}}.{{% endfor %}}{{% endfor %}}"}}"#,
            10u32.pow(a).min(1000),
            10u32.pow(b).min(1000)
        )),
    ]
}

/// The longest one render may take as the parent sees it: the wall-clock
/// limit that stops a render however little CPU it got, and generous room
/// for a renderer to start on a busy machine. (The CPU limit is what stops
/// these on an idle one, in about a second.)
const RENDER_BOUND: Duration = Duration::from_secs(sandbox::TEMPLATE_WALL_LIMIT.as_secs() + 20);

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_render_ends_within_the_renderers_limits(template in demanding()) {
        hookfleet_testkit::use_renderer();
        let doc = json!({"name": "SO-1"});
        let templates = Arc::new(body_template(&template));
        let started = Instant::now();
        let result = sandbox::render(&[Job { templates: &templates, doc: &doc }])
            .pop()
            .expect("one result");
        let took = started.elapsed();
        prop_assert!(took < RENDER_BOUND, "{} took {:?}", template, took);
        match &result {
            Ok(_)
            | Err(RenderError::TimeLimit { .. })
            | Err(RenderError::MemoryLimit { .. })
            | Err(RenderError::BodyTooLarge { .. })
            | Err(RenderError::OutOfFuel { .. })
            | Err(RenderError::Template(_)) => {}
            // A machine so busy that the render did not get its second of
            // CPU within the wall-clock limit: stopped all the same.
            Err(RenderError::Renderer(reason)) if reason.contains("overloaded") => {}
            Err(other) => prop_assert!(false, "{}: {:?}", template, other),
        }
        // The renderers go on rendering.
        let plain = Arc::new(body_template(r#"{"ok": "{{ doc.name }}"}"#));
        let after = sandbox::render(&[Job { templates: &plain, doc: &doc }])
            .pop()
            .expect("one result")
            .map_err(|e| TestCaseError::fail(format!("after {template}: {e}")))?;
        prop_assert_eq!(after.body.as_deref(), Some(r#"{"ok": "SO-1"}"#));
    }
}
