//! The Jinja side of a webhook: its condition, body template and dynamic URL
//! template, compiled and rendered on one document. This code runs only in
//! the renderer process ([`crate::sandbox`]), where the operating system
//! bounds its memory and the parent its time; what it produces (a verdict, a
//! URL, a body) goes back to the parent, which checks it
//! ([`hookfleet_core::request`]).
//!
//! Templates see one variable, `doc` (the document as JSON). Inside that
//! process every render is bounded as well: `TEMPLATE_FUEL` caps the
//! instructions, `range` yields at most `RANGE_LIMIT` numbers, and output is
//! cut off as soon as it passes its limit.
//!
//! A body template's values are written as JSON for where they land
//! ([`crate::body`]).

use std::collections::HashMap;
use std::sync::Arc;

use minijinja::value::Value as JinjaValue;
use minijinja::{Environment, UndefinedBehavior};
use serde_json::Value;

use hookfleet_core::request::{
    Rendered, Templates, MAX_BODY_BYTES, MAX_TEMPLATE_BYTES, MAX_URL_BYTES,
};
use hookfleet_core::RenderError;

/// Instructions one render may execute. A few thousand cover a template that
/// loops over a document with hundreds of child rows; this bound stops a
/// template that would spin (nested `range`s) in milliseconds.
pub const TEMPLATE_FUEL: u64 = 1_000_000;

/// The most numbers `range()` yields in a template (minijinja allows
/// 100,000): enough for any loop a webhook body needs; loops over the
/// document's own rows are not affected.
pub const RANGE_LIMIT: usize = 1_000;

const BODY: &str = "body";
const URL: &str = "url";
const CONDITION: &str = "condition";

/// What marks an error as one of our limits (not a value the document
/// lacks): refused at validation even on a sample document.
#[derive(Debug)]
struct OverLimit;

impl std::fmt::Display for OverLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a limit of hookfleet's")
    }
}

impl std::error::Error for OverLimit {}

/// An error saying `msg`, marked as a limit reached ([`OverLimit`]).
fn over_limit(msg: String) -> minijinja::Error {
    minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg).with_source(OverLimit)
}

/// `escape` (`e`) as Jinja's MarkupSafe writes it, so a body says what
/// Frappe's would: `&`, `<`, `>`, `"` and `'` as `&amp;`, `&lt;`, `&gt;`,
/// `&#34;` and `&#39;`; text already safe is left as it is.
fn markupsafe_escape(value: JinjaValue) -> JinjaValue {
    if value.is_safe() {
        return value;
    }
    let text = value.to_string();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    JinjaValue::from_safe_string(out)
}

/// Jinja's `truncate(s, length=255, killwords=False, end='...',
/// leeway=5)`: `s` as it is if within `length + leeway` characters, else
/// cut to `length` characters with `end` (at a word's end unless
/// `killwords`). Positional or named, as Jinja takes them (`leeway`
/// named only: a filter takes at most five arguments here).
fn jinja_truncate(
    value: JinjaValue,
    length: Option<usize>,
    killwords: Option<bool>,
    end: Option<String>,
    kwargs: minijinja::value::Kwargs,
) -> Result<JinjaValue, minijinja::Error> {
    let length = kwargs
        .get::<Option<usize>>("length")?
        .or(length)
        .unwrap_or(255);
    let killwords = kwargs
        .get::<Option<bool>>("killwords")?
        .or(killwords)
        .unwrap_or(false);
    let end = kwargs
        .get::<Option<String>>("end")?
        .or(end)
        .unwrap_or_else(|| "...".into());
    let leeway = kwargs.get::<Option<usize>>("leeway")?.unwrap_or(5);
    kwargs.assert_all_used()?;
    if value.is_none() || value.is_undefined() {
        return Ok(JinjaValue::from(""));
    }
    let text = value
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| value.to_string());
    let chars: Vec<char> = text.chars().collect();
    let end_len = end.chars().count();
    if length < end_len {
        return Err(minijinja::Error::new(
            minijinja::ErrorKind::InvalidOperation,
            format!("truncate: length {length} is shorter than the end {end:?}"),
        ));
    }
    if chars.len() <= length.saturating_add(leeway) {
        return Ok(JinjaValue::from(text));
    }
    let kept: String = chars[..length - end_len].iter().collect();
    let kept = if killwords {
        kept
    } else {
        // Python's `rsplit(" ", 1)[0]`: up to the last space, if any.
        kept.rsplit_once(' ')
            .map_or(kept.clone(), |(head, _)| head.to_string())
    };
    Ok(JinjaValue::from(kept + &end))
}

/// Jinja's `wordcount`: how many runs of word characters (Python's `\w`:
/// letters, digits and the underscore, in any script) `s` holds.
fn jinja_wordcount(value: JinjaValue) -> usize {
    let text = value
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| value.to_string());
    let word = |c: char| c.is_alphanumeric() || c == '_';
    text.split(|c: char| !word(c))
        .filter(|w| !w.is_empty())
        .count()
}

/// Jinja's `sum(iterable, attribute=None, start=0)`: the items (or each
/// item's `attribute`, dotted for nested ones) added left to right as
/// Python adds them: integers stay integers until a float joins.
fn jinja_sum(
    value: JinjaValue,
    attribute: Option<String>,
    start: Option<JinjaValue>,
    kwargs: minijinja::value::Kwargs,
) -> Result<JinjaValue, minijinja::Error> {
    let attribute = kwargs.get::<Option<String>>("attribute")?.or(attribute);
    let start = kwargs.get::<Option<JinjaValue>>("start")?.or(start);
    kwargs.assert_all_used()?;
    let not_a_number = |v: &JinjaValue| {
        minijinja::Error::new(
            minijinja::ErrorKind::InvalidOperation,
            format!("sum: cannot add {} to a number", v.kind()),
        )
    };
    enum Total {
        Int(i128),
        Float(f64),
    }
    let add = |total: Total, v: &JinjaValue| -> Result<Total, minijinja::Error> {
        let as_int = v
            .is_integer()
            .then(|| i128::try_from(v.clone()).ok())
            .flatten();
        Ok(match (total, as_int) {
            (Total::Int(t), Some(i)) => {
                Total::Int(t.checked_add(i).ok_or_else(|| not_a_number(v))?)
            }
            (Total::Int(t), None) => {
                Total::Float(t as f64 + f64::try_from(v.clone()).map_err(|_| not_a_number(v))?)
            }
            (Total::Float(t), _) => {
                Total::Float(t + f64::try_from(v.clone()).map_err(|_| not_a_number(v))?)
            }
        })
    };
    let mut total = match start {
        Some(s) => add(Total::Int(0), &s)?,
        None => Total::Int(0),
    };
    for item in value.try_iter()? {
        let v = match &attribute {
            Some(path) => path.split('.').try_fold(item, |v, part| v.get_attr(part))?,
            None => item,
        };
        total = add(total, &v)?;
    }
    Ok(match total {
        Total::Int(i) => JinjaValue::from(i),
        Total::Float(f) => JinjaValue::from(f),
    })
}

/// `range` as in Jinja, capped at [`RANGE_LIMIT`] numbers.
fn capped_range(
    lower: i64,
    upper: Option<i64>,
    step: Option<i64>,
) -> Result<JinjaValue, minijinja::Error> {
    let (start, end) = match upper {
        Some(u) => (lower, u),
        None => (0, lower),
    };
    let step = step.unwrap_or(1);
    if step == 0 {
        return Err(minijinja::Error::new(
            minijinja::ErrorKind::InvalidOperation,
            "range step cannot be 0",
        ));
    }
    let count = if (step > 0 && end > start) || (step < 0 && end < start) {
        ((end - start).unsigned_abs().div_ceil(step.unsigned_abs())) as usize
    } else {
        0
    };
    if count > RANGE_LIMIT {
        return Err(over_limit(format!(
            "range of {count} numbers; at most {RANGE_LIMIT}"
        )));
    }
    Ok(JinjaValue::from(
        (0..count as i64)
            .map(|i| start + i * step)
            .collect::<Vec<i64>>(),
    ))
}

/// Refuses a count past [`RANGE_LIMIT`]: `batch` and `slice` set aside
/// room for `count` items before they look at the list, so a count a
/// document chooses (`batch(doc.per_page)`) could ask for more memory than
/// exists.
fn capped_count(filter: &str, count: usize) -> Result<(), minijinja::Error> {
    if count > RANGE_LIMIT {
        return Err(over_limit(format!(
            "{filter} of {count}; at most {RANGE_LIMIT}"
        )));
    }
    Ok(())
}

/// `batch` as in Jinja, its count capped at [`RANGE_LIMIT`].
fn capped_batch(
    state: &minijinja::State,
    value: JinjaValue,
    count: usize,
    fill_with: Option<JinjaValue>,
) -> Result<JinjaValue, minijinja::Error> {
    capped_count("batch", count)?;
    minijinja::filters::batch(state, value, count, fill_with)
}

/// `slice` as in Jinja, its count capped at [`RANGE_LIMIT`].
fn capped_slice(
    state: &minijinja::State,
    value: JinjaValue,
    count: usize,
    fill_with: Option<JinjaValue>,
) -> Result<JinjaValue, minijinja::Error> {
    capped_count("slice", count)?;
    minijinja::filters::slice(state, value, count, fill_with)
}

/// Writes a value into a template's output. In a body template every
/// interpolation has passed through one of the JSON filters of
/// [`crate::body`], so only their (safe) output is written; anything else is
/// refused rather than written unescaped.
fn formatter(
    out: &mut minijinja::Output,
    state: &minijinja::State,
    value: &JinjaValue,
    lenient: bool,
) -> Result<(), minijinja::Error> {
    if state.name() == BODY && !value.is_safe() {
        return Err(minijinja::Error::new(
            minijinja::ErrorKind::InvalidOperation,
            "a value reached the body without being written as JSON",
        ));
    }
    if lenient && value.is_undefined() {
        return out.write_str("null").map_err(minijinja::Error::from);
    }
    minijinja::escape_formatter(out, state, value)
}

fn environment(lenient: bool, python_text: bool) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.add_function("range", capped_range);
    env.add_filter("batch", capped_batch);
    env.add_filter("escape", markupsafe_escape);
    env.add_filter("e", markupsafe_escape);
    // Jinja's filters minijinja lacks, as Jinja (in Python) writes them.
    env.add_filter("striptags", minijinja_contrib::filters::striptags);
    env.add_filter("truncate", jinja_truncate);
    env.add_filter("wordcount", jinja_wordcount);
    env.add_filter("sum", jinja_sum);
    env.add_filter("slice", capped_slice);
    crate::body::install(&mut env, lenient, python_text);
    env.set_formatter(move |out, state, value| formatter(out, state, value, lenient));
    // Frappe's context: the `utils` and `frappe.utils` globals, its filters
    // (`json`, `len`, `int`, `str`, `flt`) and Python's str and dict methods.
    crate::frappe::install(&mut env);
    crate::pyexpr::install(&mut env);
    if lenient {
        // On a sample document a missing field is undefined: a method
        // called on it (`doc.email.lower()`) is undefined too, as the field
        // itself renders as null, rather than an error the real documents
        // would not give.
        env.set_unknown_method_callback(|state, value, method, args| {
            if value.is_undefined() {
                return Ok(JinjaValue::UNDEFINED);
            }
            minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
        });
    }
    env
}

/// A condition as Jinja: a Python (Frappe) expression translated, or a
/// Jinja expression as written. What neither language may do (imports,
/// dunder names, `eval` and its kin) is refused in both.
fn condition_as_jinja(c: &str) -> Result<String, RenderError> {
    use crate::pyexpr::{refuse_dangerous, to_jinja, PyError};
    // Frappe runs a condition's text NFKC-normalised (`"ＶＩＰ"` is "VIP"),
    // as Python itself reads identifiers.
    let c = &icu_normalizer::ComposingNormalizerBorrowed::new_nfkc().normalize(c);
    let refused = |m: String| RenderError::Template(format!("condition: {m}"));
    refuse_dangerous(c).map_err(|e| refused(e.to_string()))?;
    match to_jinja(c) {
        Ok(jinja) => Ok(jinja),
        Err(PyError::Refused(m)) => Err(refused(m)),
        Err(PyError::NotPython(_)) => Ok(c.to_string()),
    }
}

/// A template error, saying which template (`body template`, `URL
/// template`, `condition`) it is about.
fn template_error(what: &'static str) -> impl Fn(minijinja::Error) -> RenderError {
    move |e| {
        if e.kind() == minijinja::ErrorKind::OutOfFuel {
            return RenderError::OutOfFuel {
                what: what.into(),
                limit: TEMPLATE_FUEL,
            };
        }
        let mut msg = format!("{what}: {}", describe_template_error(&e));
        msg = msg
            .replace(" (in <expression>:1)", "")
            .replace(" (in body:1)", "")
            .replace(" (in url:1)", "")
            .replace(" (in condition:1)", "");
        if wants_a_value(&e) {
            RenderError::WantsValue(msg)
        } else {
            RenderError::Template(msg)
        }
    }
}

/// Errors a template gives for want of what a document holds (a field, a
/// row, a number where there is none), as opposed to what it says itself
/// (its syntax, an unknown filter, function or method, its arguments' count):
/// only the latter are refused before any document is seen, as Frappe's own
/// validation refuses only what does not compile. A limit of ours
/// ([`OverLimit`]) is never for want of a value.
fn wants_a_value(e: &minijinja::Error) -> bool {
    use minijinja::ErrorKind as K;
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<OverLimit>() {
            return false;
        }
        source = s.source();
    }
    matches!(
        e.kind(),
        K::UndefinedError
            | K::InvalidOperation
            | K::CannotUnpack
            | K::BadSerialization
            | K::NonKey
            | K::NonPrimitive
    )
}

fn describe_template_error(e: &minijinja::Error) -> String {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        if !s.is::<OverLimit>() {
            msg.push_str(": ");
            msg.push_str(&s.to_string());
        }
        source = s.source();
    }
    msg
}

/// Refuses a filter, test or `utils` function `source` names that `env`
/// does not have, as Frappe's Jinja refuses one when a template is saved.
fn check_names(env: &Environment<'static>, what: &str, source: &str) -> Result<(), RenderError> {
    let names = crate::names::names(source);
    let unknown = |probe: String, kind: minijinja::ErrorKind| {
        env.render_str(&probe, ())
            .err()
            .is_some_and(|e| e.kind() == kind)
    };
    for f in names.filters {
        if unknown(
            format!("{{{{ none | {f} }}}}"),
            minijinja::ErrorKind::UnknownFilter,
        ) {
            return Err(RenderError::Template(format!(
                "{what}: unknown filter: filter {f} is unknown"
            )));
        }
    }
    for t in names.tests {
        if unknown(
            format!("{{{{ none is {t} }}}}"),
            minijinja::ErrorKind::UnknownTest,
        ) {
            return Err(RenderError::Template(format!(
                "{what}: unknown test: test {t} is unknown"
            )));
        }
    }
    if let Some(u) = names
        .utils
        .iter()
        .find(|u| !crate::frappe::has_utils_function(u))
    {
        return Err(RenderError::Template(format!(
            "{what}: unknown function: utils has no function named {u}"
        )));
    }
    Ok(())
}

/// A sink that refuses to grow past `limit` bytes, so a template that would
/// produce gigabytes is stopped at the limit, not after.
struct Capped {
    buf: Vec<u8>,
    limit: usize,
    overflowed: bool,
}

impl std::io::Write for Capped {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + data.len() > self.limit {
            self.overflowed = true;
            return Err(std::io::Error::other("output limit reached"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A webhook's templates, compiled.
pub struct Compiled {
    env: Environment<'static>,
    /// Validation: every template is rendered, whatever the condition says.
    validation: bool,
    has_condition: bool,
    has_body: bool,
    has_url: bool,
}

impl Compiled {
    /// Compiles `t`; the error names the template at fault.
    pub fn compile(t: &Templates) -> Result<Compiled, RenderError> {
        for (what, source) in [
            ("condition", &t.condition),
            ("body template", &t.body),
            ("URL template", &t.url),
        ] {
            if source
                .as_ref()
                .is_some_and(|s| s.len() > MAX_TEMPLATE_BYTES)
            {
                return Err(RenderError::Template(format!(
                    "{what}: over {MAX_TEMPLATE_BYTES} bytes"
                )));
            }
        }
        let mut env = environment(t.lenient, t.python_text);
        if let Some(body) = &t.body {
            // The source as written is parsed first, so that a syntax error
            // is reported as the author wrote it (line and all), not as the
            // rewrite's pre-scan sees it.
            env.template_from_str(body)
                .map_err(template_error("body template"))?;
            env.add_template_owned(BODY, crate::body::rewrite_body(body)?)
                .map_err(template_error("body template"))?;
        }
        if let Some(url) = &t.url {
            env.add_template_owned(URL, url.clone())
                .map_err(template_error("URL template"))?;
        }
        if t.lenient {
            // Validation: what the templates name is checked before any
            // document is, once they parse (a value the sample lacks may stop the render
            // before it reaches a misspelt filter).
            for (what, source) in [("body template", &t.body), ("URL template", &t.url)] {
                if let Some(source) = source {
                    check_names(&env, what, source)?;
                }
            }
        }
        let condition = t.condition.as_deref().filter(|c| !c.trim().is_empty());
        if let Some(c) = condition {
            let c = &condition_as_jinja(c)?;
            // Parsed alone first so that a condition is one expression, not a
            // fragment that closes the wrapper below.
            env.compile_expression(c)
                .map_err(template_error("condition"))?;
            env.add_template_owned(CONDITION, format!("{{% if {c} %}}1{{% endif %}}"))
                .map_err(template_error("condition"))?;
        }
        Ok(Compiled {
            env,
            validation: t.lenient,
            has_condition: condition.is_some(),
            has_body: t.body.is_some(),
            has_url: t.url.is_some(),
        })
    }

    fn render(&self, name: &'static str, doc: &JinjaValue) -> Result<String, RenderError> {
        let (what, limit) = match name {
            // Room for the whitespace a template adds around its JSON; the
            // trimmed body is checked against the exact limit.
            BODY => ("body template", 2 * MAX_BODY_BYTES),
            URL => ("URL template", MAX_URL_BYTES),
            _ => ("condition", 16),
        };
        let template = self.env.get_template(name).map_err(template_error(what))?;
        let mut out = Capped {
            buf: Vec::new(),
            limit,
            overflowed: false,
        };
        let result = template
            .render_captured_to(minijinja::context! { doc => doc.clone() }, &mut out)
            .map(|_| ());
        if out.overflowed {
            return Err(match name {
                URL => RenderError::Url(format!(
                    "the URL template renders over {MAX_URL_BYTES} bytes"
                )),
                _ => RenderError::BodyTooLarge {
                    size: out.buf.len() + 1,
                    limit: MAX_BODY_BYTES,
                },
            });
        }
        result.map_err(template_error(what))?;
        String::from_utf8(out.buf)
            .map_err(|_| RenderError::Template(format!("{what}: output is not UTF-8")))
    }

    /// Renders the condition, then (if it holds) the URL and the body.
    pub fn render_all(&self, doc: &Value) -> Result<Rendered, RenderError> {
        let doc = JinjaValue::from_serialize(doc);
        let mut rendered = Rendered::default();
        if self.has_condition {
            match self.render(CONDITION, &doc) {
                Ok(out) => {
                    let holds = out == "1";
                    rendered.condition = Some(holds);
                    if !holds && !self.validation {
                        return Ok(rendered);
                    }
                }
                // On a sample document a condition may fail for want of a
                // field the real documents have (`len(doc.items)` on a
                // document with only a name): it compiled, which is what
                // validation asks; `webhook preview` tries it on a real one.
                // A condition that runs out of fuel is refused even here.
                Err(RenderError::Template(_) | RenderError::WantsValue(_)) if self.validation => {}
                Err(e) => return Err(e),
            }
        }
        if self.has_url {
            rendered.url = Some(self.render(URL, &doc)?);
        }
        if self.has_body {
            rendered.body = Some(self.render(BODY, &doc)?);
        }
        Ok(rendered)
    }
}

/// Compiled templates by their sources (compared whole: no hash collision
/// can hand one webhook's compiled templates to another), so a renderer
/// compiles each webhook's templates once. Bounded by the bytes of the
/// sources kept: past [`Self::CAPACITY_BYTES`] it starts afresh.
#[derive(Default)]
pub(crate) struct CompiledCache {
    entries: HashMap<Templates, Arc<Result<Compiled, RenderError>>>,
    bytes: usize,
}

impl CompiledCache {
    /// Template source bytes kept compiled at once: a few thousand ordinary
    /// webhooks, and far below the renderer's memory.
    const CAPACITY_BYTES: usize = 16 * 1024 * 1024;

    /// `t` compiled, compiling it the first time it is seen.
    pub(crate) fn get(&mut self, t: &Templates) -> Arc<Result<Compiled, RenderError>> {
        if let Some(c) = self.entries.get(t) {
            return c.clone();
        }
        if self.bytes + t.source_len() > Self::CAPACITY_BYTES {
            self.entries.clear();
            self.bytes = 0;
        }
        let compiled = Arc::new(Compiled::compile(t));
        self.bytes += t.source_len();
        self.entries.insert(t.clone(), compiled.clone());
        compiled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_is_capped_and_counts_like_jinja() {
        assert_eq!(capped_range(3, None, None).unwrap().len(), Some(3));
        assert_eq!(capped_range(1, Some(10), Some(3)).unwrap().len(), Some(3));
        assert_eq!(capped_range(10, Some(0), Some(-2)).unwrap().len(), Some(5));
        assert_eq!(
            capped_range(0, Some(RANGE_LIMIT as i64), None)
                .unwrap()
                .len(),
            Some(RANGE_LIMIT)
        );
        assert!(capped_range(0, Some(RANGE_LIMIT as i64 + 1), None).is_err());
        assert!(capped_range(0, Some(5), Some(0)).is_err());
    }

    fn render(src: &str) -> String {
        environment(false, false)
            .render_str(src, ())
            .unwrap_or_else(|e| panic!("{src}: {e:#}"))
    }

    #[test]
    fn a_condition_is_read_nfkc_normalised_as_frappe_runs_it() {
        let holds = |condition: &str, doc: Value| {
            let t = hookfleet_core::request::Templates {
                condition: Some(condition.into()),
                body: None,
                url: None,
                lenient: false,
                python_text: false,
            };
            Compiled::compile(&t)
                .unwrap()
                .render_all(&doc)
                .unwrap()
                .condition
        };
        let doc = serde_json::json!({"customer_group": "VIP Customers"});
        assert_eq!(
            holds(r#""ＶＩＰ" in doc.customer_group"#, doc.clone()),
            Some(true)
        );
        // The document's own text is not normalised, as in Frappe.
        let wide = serde_json::json!({"customer_group": "ＶＩＰ Customers"});
        assert_eq!(holds(r#""VIP" in doc.customer_group"#, wide), Some(false));
    }

    /// Values Python's Jinja gives (Frappe's templates, run by Frappe).
    #[test]
    fn round_and_escape_write_what_jinja_in_python_writes() {
        for (src, python) in [
            ("{{ 2.5 | round }}", "2.0"),
            ("{{ 3.5 | round }}", "4.0"),
            ("{{ 0.125 | round(2) }}", "0.12"),
            ("{{ 12500.5 | round | int }}", "12500"),
            ("{{ 7 | round }}", "7"),
            ("{{ 2.1 | round(0, 'ceil') }}", "3.0"),
            ("{{ 2.19 | round(1, 'floor') }}", "2.1"),
            (
                r#"{{ 'a "b" <c> & \'d\'' | e }}"#,
                "a &#34;b&#34; &lt;c&gt; &amp; &#39;d&#39;",
            ),
        ] {
            assert_eq!(render(src), python, "{src}");
        }
        for (src, python) in [
            ("{{ 'Café Zürich & Co' | truncate(9) }}", "Café..."),
            ("{{ 'Café Zürich & Co' | truncate(9, True) }}", "Café Z..."),
            (
                "{{ 'Café Zürich & Co' | truncate(length=9, end='…') }}",
                "Café…",
            ),
            ("{{ 'short' | truncate(3) }}", "short"),
            (
                "{{ '<b>Widget</b>  &mdash;\n 20 &amp; <!-- x -->more' | striptags }}",
                "Widget — 20 & more",
            ),
            (
                "{{ 'Müller & Söhne' | urlencode }}",
                "M%C3%BCller%20%26%20S%C3%B6hne",
            ),
            ("{{ 'one, two_2 — drei!' | wordcount }}", "3"),
            ("{{ [{'a': 1}, {'a': 2.5}] | sum(attribute='a') }}", "3.5"),
            (
                "{{ [{'a': {'b': 2}}, {'a': {'b': 3}}] | sum(attribute='a.b', start=10) }}",
                "15",
            ),
            ("{{ [1, 2, 3] | sum }}", "6"),
        ] {
            assert_eq!(render(src), python, "{src}");
        }
        let refused = environment(false, false).render_str("{{ 2.5 | round(0, 'up') }}", ());
        assert!(refused.is_err_and(|e| e.to_string().contains("common, ceil or floor")));
    }
}
