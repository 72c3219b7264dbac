//! Text from outside (a document's name, a pause reason, a receiver's
//! answer) as people are shown it: characters that would make it read
//! differently from what it is are shown escaped, never obeyed.

use std::borrow::Cow;

/// Characters that change how the text around them reads without being
/// seen: the bidirectional overrides, embeddings, isolates and marks, and
/// the invisible joiners, spaces and marks (zero width, the byte-order
/// mark). A name can hide behind them (`SO-1\u{202E}1-OS`).
pub(crate) fn is_deceptive(c: char) -> bool {
    matches!(c,
        '\u{061C}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

/// `text` with every deceptive character and every control character but
/// a line break or a tab shown as its escape (`\u{202e}`).
pub fn shown(text: &str) -> Cow<'_, str> {
    escaped(text, |c| c == '\n' || c == '\t')
}

/// As [`shown`], with line breaks and tabs escaped too: for one line of a
/// terminal's table.
pub fn shown_on_one_line(text: &str) -> Cow<'_, str> {
    escaped(text, |_| false)
}

/// `text` with its deceptive and control characters, but those `kept`,
/// shown as their escapes.
fn escaped(text: &str, kept: impl Fn(char) -> bool) -> Cow<'_, str> {
    let hidden = |c: char| is_deceptive(c) || (c.is_control() && !kept(c));
    if !text.chars().any(hidden) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| {
                if hidden(c) {
                    c.escape_unicode().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

/// The one of `all` whose name (`name_of`) is `text`, ignoring ASCII case:
/// how the closed sets of names (methods, structures, statuses) are parsed.
pub(crate) fn named<T: Copy>(all: &[T], name_of: fn(T) -> &'static str, text: &str) -> Option<T> {
    all.iter()
        .copied()
        .find(|v| name_of(*v).eq_ignore_ascii_case(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_invisibles_and_controls_are_shown_escaped_and_the_rest_kept() {
        assert_eq!(shown("SO-1"), "SO-1");
        assert_eq!(shown("SO-1\u{202E}1-OS"), "SO-1\\u{202e}1-OS");
        assert_eq!(shown("a\u{200B}b\u{FEFF}"), "a\\u{200b}b\\u{feff}");
        assert_eq!(shown("bell\u{7}"), "bell\\u{7}");
        assert_eq!(shown("two\nlines\tand a tab"), "two\nlines\tand a tab");
        assert_eq!(shown("Müller & Söhne"), "Müller & Söhne");
        assert_eq!(shown_on_one_line("two\nlines\t"), "two\\u{a}lines\\u{9}");
    }
}
