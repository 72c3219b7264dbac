//! What a read-only viewer (support staff) is not shown: a receiver's URL
//! beyond its host (Slack-style URLs, query tokens and `user:pass@` are
//! credentials) and body templates. Full-access viewers see what the CLI
//! shows.

use serde::Serialize;
use serde_json::Value;

use crate::auth::{Actor, Role};

/// Keys holding a URL, and keys hidden whole, in the views.
const URL_KEYS: &[&str] = &["request_url", "url"];
const HIDDEN_KEYS: &[&str] = &["body_template"];

/// `value` as `actor` may see it.
pub fn for_actor<T: Serialize>(value: &T, actor: Actor) -> Value {
    let mut v = serde_json::to_value(value).unwrap_or(Value::Null);
    if actor.role == Role::Read {
        redact(&mut v);
    }
    v
}

fn redact(v: &mut Value) {
    match v {
        Value::Array(items) => items.iter_mut().for_each(redact),
        Value::Object(map) => {
            for (k, item) in map.iter_mut() {
                if URL_KEYS.contains(&k.as_str()) {
                    if let Some(url) = item.as_str() {
                        *item = Value::String(host_only(url));
                    }
                } else if HIDDEN_KEYS.contains(&k.as_str()) {
                    if !item.is_null() {
                        *item = Value::String("[hidden]".into());
                    }
                } else {
                    redact(item);
                }
            }
        }
        _ => {}
    }
}

/// `https://hooks.example.com/…` for any URL of that host; `[hidden]` for
/// what is not a URL (a dynamic URL's template).
pub fn host_only(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "[hidden]".into();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let more = if end < rest.len() && &rest[end..] != "/" {
        "/…"
    } else {
        ""
    };
    format!("{scheme}://{host}{more}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_sees_a_url_s_host_only() {
        assert_eq!(
            host_only("https://user:pw@hooks.slack.com/services/T0/B0/XXXX?x=1"),
            "https://hooks.slack.com/…"
        );
        assert_eq!(host_only("http://127.0.0.1:9/"), "http://127.0.0.1:9");
        assert_eq!(host_only("{{ doc.url }}"), "[hidden]");
    }

    #[test]
    fn only_a_reader_is_redacted() {
        let v = serde_json::json!([{"url": "https://a.example/secret-path", "body_template": "{}", "name": "x"}]);
        let reader = Actor {
            name: "read-token",
            role: Role::Read,
        };
        let full = Actor {
            name: "token",
            role: Role::Full,
        };
        assert_eq!(
            for_actor(&v, reader),
            serde_json::json!([{"url": "https://a.example/…", "body_template": "[hidden]", "name": "x"}])
        );
        assert_eq!(for_actor(&v, full), v);
    }
}
