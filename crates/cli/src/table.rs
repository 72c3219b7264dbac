//! Plain-text tables for people; `--json` is for scripts.

use chrono::{DateTime, Utc};

use hookfleet_core::store::deliveries::held_until;

/// Prints rows under headers, each column as wide as its widest cell; every
/// cell is [`clean`]ed first.
pub fn print(headers: &[&str], rows: &[Vec<String>]) {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| clean(c)).collect())
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{:<width$}", c, width = widths.get(i).copied().unwrap_or(0)))
            .collect();
        println!("{}", parts.join("  ").trim_end());
    };
    line(headers.to_vec());
    for row in &rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// `text` safe for a terminal: control characters (a receiver's escape
/// sequences, say) and the bidirectional overrides and isolates that can
/// make text read differently from what it is are shown escaped
/// (`\u{1b}`), never interpreted.
pub fn clean(text: &str) -> String {
    hookfleet_core::domain::shown_on_one_line(text).into_owned()
}

/// Like [`clean`], but keeps line breaks (for multi-line text such as a
/// template).
pub fn clean_lines(text: &str) -> String {
    text.lines().map(clean).collect::<Vec<_>>().join("\n")
}

/// Cuts `text` to `max` characters on one line, marking the cut; control
/// characters are escaped (see [`clean`]).
pub fn clip(text: &str, max: usize) -> String {
    let one_line = clean(&text.replace(['\n', '\r'], " "));
    if one_line.chars().count() <= max {
        one_line
    } else {
        format!(
            "{}…",
            one_line
                .chars()
                .take(max.saturating_sub(1))
                .collect::<String>()
        )
    }
}

/// A time as the tables show it (UTC, to the second), or `-`.
pub fn time(t: Option<DateTime<Utc>>) -> String {
    t.map(|t| held_or(t, t.format("%Y-%m-%d %H:%M:%S").to_string()))
        .unwrap_or_else(|| "-".into())
}

/// A held row's next_retry (its webhook is paused) says so, not year 9999.
pub fn held_or(t: DateTime<Utc>, shown: String) -> String {
    if t == held_until() {
        "held (webhook paused)".into()
    } else {
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_bidirectional_overrides_are_shown_not_obeyed() {
        assert_eq!(clean("ok\u{1b}[31m"), "ok\\u{1b}[31m");
        assert_eq!(clean("abc\u{202E}fed"), "abc\\u{202e}fed");
        assert_eq!(clean("x\u{2066}y\u{2069}"), "x\\u{2066}y\\u{2069}");
        assert_eq!(clean("\u{200F}\u{061C}"), "\\u{200f}\\u{61c}");
        assert_eq!(clean("plain Ünïcode ✓"), "plain Ünïcode ✓");
    }
}
