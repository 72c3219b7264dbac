//! The errors of the operator's actions that callers match on.

use std::fmt;

/// A webhook definition (or one of its fields) that hookfleet refuses.
/// The message is meant for the operator who typed the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError(pub String);

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ValidationError {}
