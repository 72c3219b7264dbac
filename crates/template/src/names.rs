//! What a template names, read from its text: the filters (`| name`), the
//! tests (`is [not] name`) and Frappe's `utils` functions
//! (`utils.name(…)`) its expressions use. Frappe's Jinja refuses an unknown
//! filter or test when a template is saved, before any document is seen;
//! minijinja looks them up only when it gets there, so a template that fails
//! earlier on a sample document for want of a value (`doc.taxes[0]` on a
//! document with only a name) would hide a misspelt filter behind it. This
//! reads the names without rendering, so validation can refuse them.
//!
//! It reads the text inside `{{ … }}` and `{% … %}` (comments and
//! `{% raw %}` blocks skipped) outside string literals: there `|` is only
//! ever a filter's pipe, and `is` only ever a test.

/// The names a template uses.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Names<'a> {
    pub filters: Vec<&'a str>,
    pub tests: Vec<&'a str>,
    pub utils: Vec<&'a str>,
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The identifier starting at `at` (after any whitespace), and where it
/// ends; None if there is none.
fn ident_at(src: &[u8], mut at: usize) -> Option<(usize, usize)> {
    while at < src.len() && src[at].is_ascii_whitespace() {
        at += 1;
    }
    if at < src.len() && is_ident_start(src[at]) {
        let start = at;
        while at < src.len() && is_ident(src[at]) {
            at += 1;
        }
        return Some((start, at));
    }
    None
}

/// Every filter, test and `utils` function `src` names, each once, in the
/// order first met. Text that is not a well-formed template yields what was
/// read up to where it stops (its syntax is the compiler's to refuse).
pub(crate) fn names(src: &str) -> Names<'_> {
    let b = src.as_bytes();
    let mut out = Names::default();
    // A word that starts a name of its own: not the tail of another
    // (`doc.utils`), but `frappe.utils` is Frappe's `utils`.
    let starts_a_name = |i: usize| {
        i == 0 || (!is_ident(b[i - 1]) && b[i - 1] != b'.') || src[..i].ends_with("frappe.")
    };
    let mut i = 0;
    while i + 1 < b.len() {
        let open = (b[i], b[i + 1]);
        if open == (b'{', b'#') {
            i = src[i..].find("#}").map_or(b.len(), |at| i + at + 2);
            continue;
        }
        if open != (b'{', b'{') && open != (b'{', b'%') {
            i += 1;
            continue;
        }
        let close = if open.1 == b'{' { b'}' } else { b'%' };
        let block_start = i;
        i += 2;
        // Inside one expression or tag, up to its close outside strings.
        while i < b.len() {
            match b[i] {
                q @ (b'\'' | b'"') => {
                    i += 1;
                    while i < b.len() && b[i] != q {
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                    i += 1;
                }
                c if c == close && b.get(i + 1) == Some(&b'}') => {
                    i += 2;
                    break;
                }
                b'|' => {
                    if let Some((s, e)) = ident_at(b, i + 1) {
                        note(&mut out.filters, &src[s..e]);
                        i = e;
                    } else {
                        i += 1;
                    }
                }
                c if is_ident_start(c) && starts_a_name(i) => {
                    let (s, e) = ident_at(b, i).expect("an identifier starts here");
                    let word = &src[s..e];
                    i = e;
                    if word == "is" {
                        if let Some((s, e)) = ident_at(b, i) {
                            let (s, e) = if &src[s..e] == "not" {
                                ident_at(b, e).unwrap_or((s, e))
                            } else {
                                (s, e)
                            };
                            note(&mut out.tests, &src[s..e]);
                            i = e;
                        }
                    } else if word == "utils" && b.get(i) == Some(&b'.') {
                        if let Some((s, e)) = ident_at(b, i + 1) {
                            note(&mut out.utils, &src[s..e]);
                            i = e;
                        }
                    }
                }
                _ => i += 1,
            }
        }
        // `{% raw %}`: its text up to `{% endraw %}` is no template. (An
        // unclosed tag, or one that stops inside a character, is none.)
        let inner = src
            .get(block_start + 2..i.min(src.len()).saturating_sub(2))
            .unwrap_or("");
        if open.1 == b'%'
            && inner.trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace()) == "raw"
        {
            i = find_endraw(src, i.min(src.len()));
        }
    }
    out
}

/// Adds `name` to `list` unless it is there.
fn note<'a>(list: &mut Vec<&'a str>, name: &'a str) {
    if !list.contains(&name) {
        list.push(name);
    }
}

/// Where the text after the `{% endraw %}` that closes a raw block starting
/// at `from` begins (the end of `src` if none does).
fn find_endraw(src: &str, from: usize) -> usize {
    let mut at = from;
    while let Some(open) = src[at..].find("{%") {
        let start = at + open;
        let Some(len) = src[start..].find("%}") else {
            return src.len();
        };
        let inner = src[start + 2..start + len]
            .trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        if inner == "endraw" {
            return start + len + 2;
        }
        at = start + 2;
    }
    src.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_tests_and_utils_functions_are_read_outside_strings() {
        let n = names(
            r#"{"a": {{ doc.taxes[0].rate | round(2) | no_such }}, "b": "{{ x | e }}",
            "c": {{ "a | fake" ~ 'is odd' }}{% if doc.items is not defined %}1{% endif %}
            {# {{ x | in_a_comment }} #}{% raw %}{{ x | raw_text }}{% endraw %}
            "d": {{ utils.fmt_money(doc.total) }}, "e": {{ frappe.utils.nowdate() }},
            "f": {{ doc.utils.not_ours }}{{ x|tojson }}{{ y is odd }}}"#,
        );
        assert_eq!(n.filters, ["round", "no_such", "e", "tojson"]);
        assert_eq!(n.tests, ["defined", "odd"]);
        assert_eq!(n.utils, ["fmt_money", "nowdate"]);
    }

    #[test]
    fn text_that_is_no_template_yields_what_was_read() {
        assert_eq!(names("{{ x | "), Names::default());
        assert_eq!(names("{{ 'unterminated | f }}").filters, Vec::<&str>::new());
        assert_eq!(names("{% raw %}{{ x | f }}").filters, Vec::<&str>::new());
        assert_eq!(names("plain | text is odd").filters, Vec::<&str>::new());
        // A tag left open at a character of several bytes reads as nothing
        // (and panics on none).
        for src in ["{% ab€", "{% x \"€", "{{ a | b€", "{%€%}", "{{ '\\€' }}"] {
            let _ = names(src);
        }
    }
}
