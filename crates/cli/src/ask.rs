//! Asking before what cannot be undone: a question on the terminal when a
//! person is at one, nothing when a script runs the command (it could not
//! answer, and a script that means it says so by running the command).

use std::io::{BufRead, IsTerminal, Write};

/// Whether to go on with what `question` describes: true with `yes`
/// (`--yes`), or without a terminal on both standard input and standard
/// error; otherwise the person's answer (`y` or `yes`, any case; anything
/// else, or no answer, is no).
pub fn confirmed(question: &str, yes: bool) -> bool {
    if yes || !person_present() {
        return true;
    }
    let mut stderr = std::io::stderr();
    let _ = write!(stderr, "{question} [y/N] ");
    let _ = stderr.flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// Whether a person is at a terminal to answer (standard input and standard
/// error both are one).
pub fn person_present() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}
