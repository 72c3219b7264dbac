//! A JSON body written again as Frappe's sender writes it: Python's
//! `json.dumps(json.loads(text))`. Frappe reads its rendered template as
//! JSON and hands the value to `requests`, which serialises it with
//! Python's defaults: `", "` between items and `": "` after keys, every
//! character past ASCII (and DEL) as `\uXXXX` (astral ones as a surrogate
//! pair), floats as Python's `repr` writes them (`14750.0`, `1e-05`,
//! `1e+16`), a key given twice keeping its first place and its last value.
//! A webhook with `frappe_body` sends these bytes, so a receiver that
//! compares bytes (or a signature over them) with a Frappe sender sees no
//! change.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// A JSON value in the order it was written, as Python's `json.loads`
/// keeps it.
#[derive(Debug, Clone, PartialEq)]
enum PyJson {
    Null,
    Bool(bool),
    /// An integer's digits. (Python's ints have no bound; one past 64 bits
    /// is read as a float here, as serde_json reads it.)
    Int(String),
    Float(f64),
    Str(String),
    List(Vec<PyJson>),
    /// Keys in their first place, each with its last value.
    Dict(Vec<(String, PyJson)>),
}

impl<'de> Deserialize<'de> for PyJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PyJson, D::Error> {
        d.deserialize_any(PyVisitor)
    }
}

struct PyVisitor;

impl<'de> Visitor<'de> for PyVisitor {
    type Value = PyJson;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<PyJson, E> {
        Ok(PyJson::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<PyJson, E> {
        Ok(PyJson::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<PyJson, E> {
        Ok(PyJson::Int(v.to_string()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<PyJson, E> {
        Ok(PyJson::Int(v.to_string()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<PyJson, E> {
        Ok(PyJson::Float(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<PyJson, E> {
        Ok(PyJson::Str(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<PyJson, E> {
        Ok(PyJson::Str(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PyJson, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element()? {
            items.push(v);
        }
        Ok(PyJson::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PyJson, A::Error> {
        let mut entries: Vec<(String, PyJson)> = Vec::new();
        // Where each key stands: a document of many keys costs one lookup
        // a key, not a scan of those before it.
        let mut at: HashMap<String, usize> = HashMap::new();
        while let Some((k, v)) = map.next_entry::<String, PyJson>()? {
            match at.get(&k) {
                Some(&i) => entries[i].1 = v,
                None => {
                    at.insert(k.clone(), entries.len());
                    entries.push((k, v));
                }
            }
        }
        Ok(PyJson::Dict(entries))
    }
}

/// `text` (JSON) written as Python's `json.dumps(json.loads(text))` writes
/// it; an error when it is not JSON.
pub fn dumps(text: &str) -> Result<String, serde_json::Error> {
    let value: PyJson = serde_json::from_str(text)?;
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    write_value(&mut out, &value);
    Ok(out)
}

fn write_value(out: &mut String, v: &PyJson) {
    match v {
        PyJson::Null => out.push_str("null"),
        PyJson::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        PyJson::Int(digits) => out.push_str(digits),
        PyJson::Float(f) if f.is_nan() => out.push_str("NaN"),
        PyJson::Float(f) if f.is_infinite() => {
            out.push_str(if *f > 0.0 { "Infinity" } else { "-Infinity" })
        }
        PyJson::Float(f) => out.push_str(&float_repr(*f)),
        PyJson::Str(s) => push_str(out, s, true),
        PyJson::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, item);
            }
            out.push(']');
        }
        PyJson::Dict(entries) => {
            out.push('{');
            for (i, (k, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                push_str(out, k, true);
                out.push_str(": ");
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

/// A JSON string as Python's `json` writes it: `\"`, `\\`, `\n`, `\r`,
/// `\t`, `\b`, `\f`, other controls as `\u00XX` (lower-case hex), and
/// with `ensure_ascii` everything past `~` as `\uXXXX` (a surrogate pair
/// above U+FFFF).
pub fn push_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if u32::from(c) >= 0x20 && !(ensure_ascii && u32::from(c) > 0x7e) => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// A float as Python's `repr` writes it: the shortest digits that read
/// back as the same float, in fixed notation from 1e-4 to below 1e16
/// (always with a fraction: `2.0`), else in exponent notation (`1e-05`,
/// `1.5e+16`); `nan`, `inf`, `-inf`.
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: `d.ddde±x`.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').expect("an exponent");
    let exp: i32 = exp.parse().expect("a number");
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp < 0 {
            out.push_str("0.");
            out.push_str(&"0".repeat((-exp - 1) as usize));
            out.push_str(&digits);
        } else {
            let point = exp as usize + 1;
            if digits.len() <= point {
                out.push_str(&digits);
                out.push_str(&"0".repeat(point - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..point]);
                out.push('.');
                out.push_str(&digits[point..]);
            }
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each expected text is what python3's `json.dumps(json.loads(text))`
    /// prints.
    #[test]
    fn bodies_are_written_as_python_writes_them() {
        for (given, python) in [
            (
                r#"{"a":1,"b":[1,2.5,"x"]}"#,
                r#"{"a": 1, "b": [1, 2.5, "x"]}"#,
            ),
            (
                r#"{"name": "Müller", "e": "€😀"}"#,
                r#"{"name": "M\u00fcller", "e": "\u20ac\ud83d\ude00"}"#,
            ),
            (r#"{"k": 1, "k": 2, "j": 3}"#, r#"{"k": 2, "j": 3}"#),
            (
                r#"{"t": 14750.0, "i": 14750}"#,
                r#"{"t": 14750.0, "i": 14750}"#,
            ),
            (
                r#"[1e-5, 0.0001, 1e16, 1e15, 1.5e300, -0.0, 123456789.125]"#,
                r#"[1e-05, 0.0001, 1e+16, 1000000000000000.0, 1.5e+300, -0.0, 123456789.125]"#,
            ),
            (
                r#"{"s": "a\"b\\c\n\t\u0001\u007f/"}"#,
                r#"{"s": "a\"b\\c\n\t\u0001\u007f/"}"#,
            ),
            (
                r#"{"big": 18446744073709551615, "neg": -9223372036854775808}"#,
                r#"{"big": 18446744073709551615, "neg": -9223372036854775808}"#,
            ),
            (
                "  {\n \"a\" : null ,\"b\":true}  ",
                r#"{"a": null, "b": true}"#,
            ),
            // Seventeen digits read back exactly (serde_json's float_roundtrip).
            (
                "[99.99000000000001, 0.30000000000000004]",
                "[99.99000000000001, 0.30000000000000004]",
            ),
            ("{}", "{}"),
            ("[]", "[]"),
        ] {
            assert_eq!(dumps(given).unwrap(), python, "{given}");
        }
        assert!(dumps("{").is_err());
    }
}
