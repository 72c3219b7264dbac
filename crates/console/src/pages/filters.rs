//! How the templates show what they are given beyond escaping it: a time
//! (in UTC and how long ago; the page's script then shows it in the
//! viewer's zone) and a JSON body (pretty-printed, keys in their order).

use chrono::{DateTime, SecondsFormat, Utc};
use minijinja::Value;

/// A time as the pages show it: a `<time>` holding it in UTC (`2026-12-05
/// 01:29:03 UTC`) and, beside it, how long ago (or how soon) that is. The
/// page's script shows the time in the viewer's zone and keeps "ago"
/// current; without it both still read. What is not a time is shown as it
/// is (escaped).
pub fn when(t: &Value, now: DateTime<Utc>) -> Value {
    let Some(at) = t
        .as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
    else {
        return t.clone();
    };
    // Both strings are ours, made of digits, letters and punctuation that
    // need no escaping.
    Value::from_safe_string(format!(
        "<time datetime=\"{}\">{}</time> <span class=\"ago\">{}</span>",
        at.to_rfc3339_opts(SecondsFormat::Millis, true),
        at.format("%Y-%m-%d %H:%M:%S UTC"),
        ago(at, now)
    ))
}

/// How long before or after `now` `t` is, as a person says it: "just
/// now", "40 s ago", "3 min ago", "in 5 min", "2 h ago", "3 days ago"
/// (console.js says it the same way).
fn ago(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (now - t).num_seconds();
    let n = secs.unsigned_abs();
    let span = match n {
        0..5 => return "just now".into(),
        5..60 => format!("{n} s"),
        60..3_600 => format!("{} min", n / 60),
        // Hours up to two days: "30 h ago" reads better than "1 days".
        3_600..172_800 => format!("{} h", n / 3_600),
        _ => format!("{} days", n / 86_400),
    };
    if secs < 0 {
        format!("in {span}")
    } else {
        format!("{span} ago")
    }
}

/// A JSON object or list, pretty-printed with its keys in the order they
/// came (a person reads a body as it was written); None for other text.
pub fn pretty_json(text: &str) -> Option<String> {
    let text = text.trim();
    if !(text.starts_with('{') || text.starts_with('['))
        || serde_json::from_str::<serde::de::IgnoredAny>(text).is_err()
    {
        return None;
    }
    const INDENT: &str = "  ";
    let mut out = String::with_capacity(text.len() * 2);
    let mut depth = 0usize;
    let (mut in_string, mut escaped) = (false, false);
    let mut chars = text.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&INDENT.repeat(depth));
    };
    while let Some(ch) = chars.next() {
        if in_string {
            out.push(ch);
            match (escaped, ch) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match ch {
            '"' => {
                in_string = true;
                out.push(ch);
            }
            '{' | '[' => {
                out.push(ch);
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
                // An empty object or list stays on its line.
                if chars.peek().is_some_and(|c| *c == '}' || *c == ']') {
                    out.extend(chars.next());
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(ch);
            }
            ',' => {
                out.push(ch);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_reads_in_utc_and_how_long_ago() {
        let now: DateTime<Utc> = "2026-12-05T10:00:00Z".parse().unwrap();
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        assert_eq!(ago(at("2026-12-05T09:59:58Z"), now), "just now");
        assert_eq!(ago(at("2026-12-05T09:59:20Z"), now), "40 s ago");
        assert_eq!(ago(at("2026-12-05T09:57:00Z"), now), "3 min ago");
        assert_eq!(ago(at("2026-12-05T10:05:00Z"), now), "in 5 min");
        assert_eq!(ago(at("2026-12-04T04:00:00Z"), now), "30 h ago");
        assert_eq!(ago(at("2026-12-01T10:00:00Z"), now), "4 days ago");
        let shown = when(&Value::from("2026-12-05T09:56:59.5Z"), now).to_string();
        assert_eq!(
            shown,
            "<time datetime=\"2026-12-05T09:56:59.500Z\">2026-12-05 09:56:59 UTC</time> \
             <span class=\"ago\">3 min ago</span>"
        );
        assert_eq!(when(&Value::from("soon"), now).to_string(), "soon");
        assert!(!when(&Value::from("<b>"), now).is_safe(), "left to escape");
    }

    #[test]
    fn a_json_body_is_pretty_printed_in_its_own_key_order() {
        let body = r#"{"z":1,"a":{"list":[1,"x,y: \"q\""],"empty":{}}, "n":[]}"#;
        assert_eq!(
            pretty_json(body).unwrap(),
            "{\n  \"z\": 1,\n  \"a\": {\n    \"list\": [\n      1,\n      \"x,y: \\\"q\\\"\"\n    ],\n    \"empty\": {}\n  },\n  \"n\": []\n}"
        );
        assert_eq!(pretty_json("name=SO-1&total=2"), None);
        assert_eq!(pretty_json("{not json"), None);
        assert_eq!(pretty_json("42"), None, "a scalar is shown as sent");
    }
}
