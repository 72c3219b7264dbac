//! A job on a queue: "deliver row N", versioned, with the webhook it is for
//! and the token of the in-flight key its enqueue took.

use serde::{Deserialize, Serialize};

/// A job on a queue. Versioned so a future format can live beside this one.
/// `webhook_id` lets a worker apply the webhook's concurrency limit before
/// claiming the row; `token` is the value of the in-flight key its enqueue
/// took, so only this job releases that key. A job without them (older, or
/// written by hand) is still delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub v: u32,
    pub log_id: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// Why a job cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    #[error("job does not parse: {0}")]
    Malformed(String),
    #[error("job version {0} is not supported (this worker reads version 1)")]
    Version(u32),
    #[error("job names log id {0}, which cannot exist")]
    BadLogId(i64),
}

impl Job {
    pub fn new(log_id: i64) -> Self {
        Job {
            v: 1,
            log_id,
            webhook_id: None,
            token: None,
        }
    }

    pub fn for_webhook(log_id: i64, webhook_id: Option<i64>) -> Self {
        Job {
            webhook_id,
            ..Job::new(log_id)
        }
    }

    pub fn encode(&self) -> String {
        use std::fmt::Write;
        let mut out = format!("{{\"v\":{},\"log_id\":{}", self.v, self.log_id);
        if let Some(w) = self.webhook_id {
            let _ = write!(out, ",\"webhook_id\":{w}");
        }
        if let Some(t) = &self.token {
            // Tokens are hex: nothing to escape.
            let _ = write!(out, ",\"token\":\"{t}\"");
        }
        out.push('}');
        out
    }

    /// Parses a job; the error says what is wrong with it.
    pub fn decode(raw: &str) -> Result<Job, JobError> {
        let job: Job = serde_json::from_str(raw).map_err(|e| JobError::Malformed(e.to_string()))?;
        if job.v != 1 {
            return Err(JobError::Version(job.v));
        }
        if job.log_id <= 0 {
            return Err(JobError::BadLogId(job.log_id));
        }
        Ok(job)
    }
}

/// A fresh in-flight key token: 64 random bits, hex. Two enqueues of one row
/// never share one, so a key is released only by the job its enqueue pushed.
pub(crate) fn new_token() -> String {
    format!("{:016x}", fastrand::u64(..))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_round_trip_and_bad_ones_say_why() {
        let j = Job::new(42);
        assert_eq!(j.encode(), r#"{"v":1,"log_id":42}"#);
        let w = Job::for_webhook(42, Some(7));
        assert_eq!(w.encode(), r#"{"v":1,"log_id":42,"webhook_id":7}"#);
        assert_eq!(Job::decode(&w.encode()).unwrap(), w);
        assert_eq!(Job::decode(&j.encode()).unwrap(), j);
        let t = Job {
            token: Some("00ff".into()),
            ..Job::for_webhook(42, Some(7))
        };
        assert_eq!(
            t.encode(),
            r#"{"v":1,"log_id":42,"webhook_id":7,"token":"00ff"}"#
        );
        assert_eq!(Job::decode(&t.encode()).unwrap(), t);
        assert!(matches!(
            Job::decode("not json"),
            Err(JobError::Malformed(_))
        ));
        assert_eq!(
            Job::decode(r#"{"v":2,"log_id":1}"#),
            Err(JobError::Version(2))
        );
        assert_eq!(
            Job::decode(r#"{"v":1,"log_id":0}"#),
            Err(JobError::BadLogId(0))
        );
    }
}
