//! A person at a terminal: asked before what cannot be undone, and shown
//! how a long operation is going; a script (no terminal) is neither asked
//! (it could not answer, and means it by running the command) nor sent
//! progress lines it would have to filter out.

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

/// How often a long operation's progress line is redrawn: often enough to
/// see it move, rarely enough to cost nothing.
pub const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// A progress line on standard error, redrawn in place at most every
/// [`PROGRESS_EVERY`]; silent unless standard error is a terminal.
#[derive(Clone)]
pub struct Progress {
    /// When it was last drawn (None: never); absent when there is no
    /// terminal.
    drawn: Option<std::sync::Arc<std::sync::Mutex<Option<std::time::Instant>>>>,
}

impl Progress {
    pub fn on_a_terminal() -> Progress {
        Progress {
            drawn: std::io::stderr()
                .is_terminal()
                .then(|| std::sync::Arc::new(std::sync::Mutex::new(None))),
        }
    }

    /// Redraws the line with `text()` if it is time to.
    pub fn show(&self, text: impl FnOnce() -> String) {
        let Some(drawn) = &self.drawn else { return };
        let mut last = drawn.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|t| t.elapsed() < PROGRESS_EVERY) {
            return;
        }
        *last = Some(std::time::Instant::now());
        let _ = write!(std::io::stderr(), "\r\x1b[2K{}", text());
        let _ = std::io::stderr().flush();
    }

    /// Clears the line, if one was drawn, for what is printed next.
    pub fn done(&self) {
        let Some(drawn) = &self.drawn else { return };
        if drawn.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
            let _ = std::io::stderr().flush();
        }
    }
}
