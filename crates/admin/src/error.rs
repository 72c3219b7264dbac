//! The errors of the operator's actions, typed so that callers can branch
//! on them: the console answers a refused definition with a 400 and names
//! its field, a missing dead letter with a 404; the CLI prints the message
//! and exits 1. Every message is the operator's words: what is wrong and,
//! where it helps, what to write instead.

use std::fmt;

use hookfleet_core::domain::at_rest::SEALED_PREFIX;
use hookfleet_core::domain::{DeliveryStatus, HIDDEN};
use hookfleet_core::error::{QueueError, StoreError};
use hookfleet_core::RenderError;

use crate::limits::{
    MAX_ALLOWED_HOSTS, MAX_ENDPOINT_CONCURRENCY, MAX_NAME_LEN, MAX_RATE_LIMIT, MAX_RETRIES_LIMIT,
    MAX_TIMEOUT,
};

/// A webhook definition that hookfleet refuses, and why. Nothing is written
/// when one is returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValidationError {
    /// `field` breaks `rule`.
    Invalid { field: Field, rule: Rule },
    /// A JSON definition names a key no definition has.
    UnknownKey(String),
    /// A new webhook's JSON definition lacks one of the keys every webhook
    /// has (name, entity_type, event, url).
    Required,
    /// A JSON definition gives one field under both of its keys (`url` and
    /// `request_url`).
    GivenTwice(Field),
}

impl ValidationError {
    /// `field` breaks `rule`.
    pub fn invalid(field: Field, rule: Rule) -> ValidationError {
        ValidationError::Invalid { field, rule }
    }

    /// The field at fault (None for an unknown key).
    pub fn field(&self) -> Option<Field> {
        match self {
            ValidationError::Invalid { field, .. } => Some(*field),
            ValidationError::GivenTwice(field) => Some(*field),
            ValidationError::UnknownKey(_) | ValidationError::Required => None,
        }
    }
}

impl std::error::Error for ValidationError {}

/// The parts of a webhook definition, as the API's JSON names them
/// ([`Field::key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    Name,
    EntityType,
    Event,
    /// The receiver's URL, or the URL template of a dynamic URL.
    Url,
    DynamicUrl,
    AllowedHosts,
    Method,
    Structure,
    BodyTemplate,
    /// The field selection (document fields sent under keys).
    Fields,
    Headers,
    Condition,
    Secret,
    Timeout,
    Queue,
    MaxRetries,
    MaxConcurrency,
    RateLimit,
    Enabled,
    /// The body as Frappe sends it (`frappe_body`).
    FrappeBody,
    SampleDoc,
    /// The templates (condition, body, URL) as tried on the sample
    /// document.
    Templates,
}

impl Field {
    /// The fields of a JSON definition, in the order its keys are listed
    /// (`crate::definitions::JSON_KEYS`).
    pub const JSON: [Field; 21] = [
        Field::Name,
        Field::EntityType,
        Field::Event,
        Field::Url,
        Field::DynamicUrl,
        Field::AllowedHosts,
        Field::Method,
        Field::Structure,
        Field::BodyTemplate,
        Field::Fields,
        Field::Headers,
        Field::Condition,
        Field::Secret,
        Field::Timeout,
        Field::Queue,
        Field::MaxRetries,
        Field::MaxConcurrency,
        Field::RateLimit,
        Field::Enabled,
        Field::FrappeBody,
        Field::SampleDoc,
    ];

    /// The fields a webhook's view (`webhook show --json`, the API's GET)
    /// shows under a key of its own, Frappe's name for it; a definition may
    /// give them under either key, so a view sent back is a definition.
    pub const READ_AS: [(Field, &'static str); 3] = [
        (Field::Url, "request_url"),
        (Field::Method, "request_method"),
        (Field::Structure, "request_structure"),
    ];

    /// The field a JSON definition's `key` gives (its own key or the
    /// view's, [`Field::READ_AS`]); None for a key no definition has.
    pub fn of_json_key(key: &str) -> Option<Field> {
        Field::JSON
            .into_iter()
            .find(|f| f.key() == key)
            .or_else(|| {
                Field::READ_AS
                    .into_iter()
                    .find(|(_, k)| *k == key)
                    .map(|(f, _)| f)
            })
    }

    /// The key of the API's JSON definition; the templates, checked
    /// together, have none of their own.
    pub const fn key(self) -> &'static str {
        match self {
            Field::Name => "name",
            Field::EntityType => "entity_type",
            Field::Event => "event",
            Field::Url => "url",
            Field::DynamicUrl => "dynamic_url",
            Field::AllowedHosts => "allowed_hosts",
            Field::Method => "method",
            Field::Structure => "structure",
            Field::BodyTemplate => "body_template",
            Field::Fields => "fields",
            Field::Headers => "headers",
            Field::Condition => "condition",
            Field::Secret => "secret",
            Field::Timeout => "timeout",
            Field::Queue => "queue",
            Field::MaxRetries => "max_retries",
            Field::MaxConcurrency => "max_concurrency",
            Field::RateLimit => "rate_limit",
            Field::Enabled => "enabled",
            Field::FrappeBody => "frappe_body",
            Field::SampleDoc => "sample_doc",
            Field::Templates => "templates",
        }
    }

    /// How a message names the field's text.
    fn noun(self) -> &'static str {
        match self {
            Field::Name => "the webhook name",
            Field::EntityType => "the entity type",
            Field::Event => "the event",
            Field::Queue => "the queue name",
            // Only a URL template is judged as text; a fixed URL is judged
            // as a URL (`Rule::Refused`).
            Field::Url => "the URL template",
            Field::BodyTemplate => "the body template",
            _ => self.key(),
        }
    }
}

/// What a JSON definition's value should have been.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    Text,
    Integer,
    Boolean,
    List,
    Object,
    /// `fields`: `{"field": …, "key": …}` objects.
    FieldObjects,
    /// `headers`: `{"key": …, "value": …}` objects.
    HeaderObjects,
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Expected::Text => "a string",
            Expected::Integer => "an integer",
            Expected::Boolean => "true or false",
            Expected::List => "a list",
            Expected::Object => "a JSON object",
            Expected::FieldObjects => "objects with a field (and a key)",
            Expected::HeaderObjects => "objects with a key and a value",
        })
    }
}

/// The rule a field breaks. Values a rule repeats are the operator's own
/// (a name, a header's name), never a secret or a header's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// Empty, or only spaces.
    Empty,
    /// Longer than [`MAX_NAME_LEN`] characters.
    TooLong,
    ControlCharacters,
    /// A name used in Redis keys with another character than letters,
    /// digits, `_`, `-`, `.` and `:`.
    NotAnIdentifier {
        value: String,
    },
    /// Spaces at the start or the end.
    SpaceAtEnds {
        value: String,
    },
    /// Invisible or direction-changing characters (a name that reads as
    /// another).
    InvisibleCharacters {
        value: String,
    },
    /// Request building refused it: a URL (scheme, host, credentials, an
    /// internal address) or templates that do not compile or render on the
    /// sample document.
    Refused(RenderError),
    /// A form body with a body template.
    TemplateInForm,
    /// A form body without a field selection.
    FormWithoutFields,
    /// A JSON body with both a template and a field selection.
    TemplateAndFields,
    /// A selected field without its document field or its key.
    SelectionIncomplete,
    /// A document field selected twice.
    FieldTwice {
        field: String,
    },
    /// A key two selected fields share.
    KeyTwice {
        key: String,
    },
    HeaderWithoutKey,
    HeaderWithoutValue {
        header: String,
    },
    NotAHeaderName {
        header: String,
    },
    NotAHeaderValue {
        header: String,
    },
    /// A header hookfleet sets itself, or one that belongs to one
    /// connection.
    ReservedHeader {
        header: String,
    },
    HeaderTwice {
        header: String,
    },
    /// A value beginning with the marker of sealed values.
    SealedPrefix,
    /// A secret the signer cannot use (the reason is the signer's).
    UnusableSecret(hookfleet_core::domain::SecretError),
    /// More than [`MAX_ALLOWED_HOSTS`] allowed hosts.
    TooManyHosts,
    NotAHost {
        host: String,
    },
    /// Allowed hosts for a fixed URL.
    HostsWithoutDynamicUrl,
    /// Below the field's least (a timeout of 0, negative retries).
    TooSmall,
    /// Above the field's most.
    TooLarge,
    /// Out of the field's range (concurrency, rate limit).
    OutOfRange,
    /// A rate limit not written `N/s`.
    NotARate,
    /// A JSON value of another type than the key takes (`item`: a part of
    /// each element of a list, as `fields[].key`).
    WrongType {
        item: Option<&'static str>,
        expected: Expected,
    },
    /// A JSON value that does not read as the key's kind (the reason is the
    /// reader's).
    Unreadable(String),
    /// A header sent back as [`HIDDEN`] that no stored header holds.
    HiddenNotStored {
        header: String,
    },
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (field, rule) = match self {
            ValidationError::UnknownKey(key) => {
                let known: Vec<&str> = Field::JSON.iter().map(|f| f.key()).collect();
                return write!(f, "unknown key {key:?} (known: {})", known.join(", "));
            }
            ValidationError::Required => {
                return f.write_str("a webhook needs name, entity_type, event and url")
            }
            ValidationError::GivenTwice(field) => {
                let other = Field::READ_AS
                    .iter()
                    .find(|(f, _)| f == field)
                    .map_or("", |(_, k)| k);
                return write!(
                    f,
                    "{} is given twice (as {} and {other}): give one",
                    field.key(),
                    field.key()
                );
            }
            ValidationError::Invalid { field, rule } => (*field, rule),
        };
        let noun = field.noun();
        match (field, rule) {
            (_, Rule::Empty) => write!(f, "{noun} is empty"),
            (_, Rule::TooLong) => write!(f, "{noun} is longer than {MAX_NAME_LEN} characters"),
            (_, Rule::ControlCharacters) => write!(f, "{noun} contains control characters"),
            (_, Rule::NotAnIdentifier { value }) => write!(
                f,
                "{noun} {value:?} may only use letters, digits, '_', '-', '.' and ':'"
            ),
            (_, Rule::SpaceAtEnds { value }) => {
                write!(f, "{noun} {value:?} starts or ends with a space")
            }
            (_, Rule::InvisibleCharacters { value }) => write!(
                f,
                "{noun} {value:?} contains invisible or direction-changing characters"
            ),
            (_, Rule::Refused(e)) => write!(f, "{e}"),
            (_, Rule::WrongType { item, expected }) => match item {
                Some(item) => write!(f, "{}[].{item}: {expected}", field.key()),
                None => write!(f, "{}: {expected}", field.key()),
            },
            (_, Rule::Unreadable(reason)) => write!(f, "{}: {reason}", field.key()),
            (_, Rule::HiddenNotStored { header }) => write!(
                f,
                "{}: {header}: {HIDDEN} keeps a stored value, and none is stored",
                field.key()
            ),
            (_, Rule::TemplateInForm) => f.write_str(
                "a form body is a field selection (--field); a body template needs --structure json",
            ),
            (_, Rule::FormWithoutFields) => {
                f.write_str("a form body needs at least one --field DOCFIELD[:KEY]")
            }
            (_, Rule::TemplateAndFields) => {
                f.write_str("choose a body template or a field selection, not both")
            }
            (_, Rule::SelectionIncomplete) => f.write_str(
                "a field selection needs a document field and a key (DOCFIELD:KEY)",
            ),
            (_, Rule::FieldTwice { field }) => {
                write!(f, "the document field {field:?} is selected twice")
            }
            (_, Rule::KeyTwice { key }) => {
                write!(f, "the key {key:?} is used by two selected fields")
            }
            (_, Rule::HeaderWithoutKey) => f.write_str("a header has no key (expected KEY:VALUE)"),
            (_, Rule::HeaderWithoutValue { header }) => {
                write!(f, "the header {header:?} has no value (expected KEY:VALUE)")
            }
            (_, Rule::NotAHeaderName { header }) => {
                write!(f, "{header:?} is not a valid header name")
            }
            (_, Rule::NotAHeaderValue { header }) => {
                write!(f, "the value of header {header:?} is not a valid header value")
            }
            (_, Rule::ReservedHeader { header }) => write!(
                f,
                "the header {header:?} is set by hookfleet itself or belongs to one connection"
            ),
            (_, Rule::HeaderTwice { header }) => write!(f, "the header {header:?} is given twice"),
            (Field::Headers, Rule::SealedPrefix) => write!(
                f,
                "a header value may not begin with {SEALED_PREFIX:?} (it marks sealed values)"
            ),
            (_, Rule::SealedPrefix) => write!(
                f,
                "a secret may not begin with {SEALED_PREFIX:?} (it marks sealed values)"
            ),
            (_, Rule::UnusableSecret(reason)) => write!(f, "{reason}"),
            (_, Rule::TooManyHosts) => write!(f, "at most {MAX_ALLOWED_HOSTS} allowed hosts"),
            (_, Rule::NotAHost { host }) => write!(
                f,
                "allowed host {host:?} is not HOST or HOST:PORT (e.g. api.example.com or api.example.com:8443)"
            ),
            (_, Rule::HostsWithoutDynamicUrl) => {
                f.write_str("--allowed-host applies to a dynamic URL (--dynamic-url) only")
            }
            (Field::Timeout, Rule::TooSmall) => f.write_str("the timeout must be more than 0"),
            (Field::Timeout, Rule::TooLarge) => write!(
                f,
                "the timeout must be at most {}s",
                MAX_TIMEOUT.as_secs()
            ),
            (Field::MaxRetries, Rule::TooSmall) => {
                f.write_str("max retries cannot be negative (0 means one attempt only)")
            }
            (Field::MaxRetries, Rule::TooLarge) => {
                write!(f, "max retries is at most {MAX_RETRIES_LIMIT}")
            }
            (Field::MaxConcurrency, Rule::OutOfRange) => {
                write!(f, "max concurrency is 1 to {MAX_ENDPOINT_CONCURRENCY}")
            }
            (Field::RateLimit, Rule::NotARate) => write!(
                f,
                "a rate limit is written N/s, N from 1 to {MAX_RATE_LIMIT} (e.g. 100/s)"
            ),
            (Field::RateLimit, Rule::OutOfRange) => {
                write!(f, "the rate limit is 1/s to {MAX_RATE_LIMIT}/s")
            }
            (_, Rule::TooSmall | Rule::TooLarge | Rule::OutOfRange | Rule::NotARate) => {
                write!(f, "{}: out of range", field.key())
            }
        }
    }
}

/// Why a definition was not stored.
#[derive(Debug, thiserror::Error)]
pub enum DefinitionError {
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<diesel::result::Error> for DefinitionError {
    fn from(e: diesel::result::Error) -> DefinitionError {
        DefinitionError::Store(e.into())
    }
}

/// Why an action on deliveries, dead letters or the stored secrets did
/// not happen (or did not finish).
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// A bulk replay asked for another status than Failed or Exhausted.
    #[error("bulk replay takes the status Failed or Exhausted")]
    BulkStatus(DeliveryStatus),
    /// No dead letter has this id.
    #[error("no dead letter {0:?}")]
    NoDeadLetter(String),
    /// `secrets reencrypt` with no key would store every value as it is,
    /// and `--decrypt` did not say that is wanted.
    #[error(
        "no HOOKFLEET_SECRET_KEY: reencrypt would store every secret unencrypted; \
         set the key, or pass --decrypt if that is what you want"
    )]
    NoKeyToSealWith,
    /// `secrets reencrypt --decrypt` while a key is set.
    #[error("--decrypt is for when HOOKFLEET_SECRET_KEY is unset; unset it first")]
    DecryptWithKey,
    /// An action run on a task of its own stopped before it finished (it
    /// panicked).
    #[error(transparent)]
    Stopped(#[from] tokio::task::JoinError),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn says(field: Field, rule: Rule) -> String {
        ValidationError::invalid(field, rule).to_string()
    }

    #[test]
    fn a_refusal_names_its_field_and_reads_as_a_sentence() {
        let simple = [
            (Field::Name, Rule::Empty, "the webhook name is empty"),
            (
                Field::Event,
                Rule::TooLong,
                "the event is longer than 140 characters",
            ),
            (Field::Url, Rule::Empty, "the URL template is empty"),
            (
                Field::Timeout,
                Rule::TooSmall,
                "the timeout must be more than 0",
            ),
            (
                Field::Timeout,
                Rule::TooLarge,
                "the timeout must be at most 60s",
            ),
            (
                Field::MaxRetries,
                Rule::TooSmall,
                "max retries cannot be negative (0 means one attempt only)",
            ),
            (
                Field::MaxRetries,
                Rule::TooLarge,
                "max retries is at most 50",
            ),
            (
                Field::RateLimit,
                Rule::NotARate,
                "a rate limit is written N/s, N from 1 to 100000 (e.g. 100/s)",
            ),
        ];
        for (field, rule, want) in simple {
            assert_eq!(says(field, rule), want, "{field:?}");
        }
        assert_eq!(
            says(
                Field::Queue,
                Rule::NotAnIdentifier {
                    value: "a b".into()
                }
            ),
            "the queue name \"a b\" may only use letters, digits, '_', '-', '.' and ':'"
        );
        assert_eq!(
            says(Field::Headers, Rule::SealedPrefix),
            format!("a header value may not begin with {SEALED_PREFIX:?} (it marks sealed values)")
        );
        assert_eq!(
            ValidationError::invalid(Field::Url, Rule::Refused(RenderError::Url("x".into())))
                .field(),
            Some(Field::Url)
        );
    }

    #[test]
    fn a_json_refusal_names_the_key_as_written() {
        let wrong = |field, item, expected| says(field, Rule::WrongType { item, expected });
        assert_eq!(
            wrong(Field::Fields, Some("field"), Expected::Text),
            "fields[].field: a string"
        );
        assert_eq!(
            wrong(Field::AllowedHosts, None, Expected::Text),
            "allowed_hosts: a string"
        );
        assert_eq!(
            wrong(Field::MaxConcurrency, None, Expected::Integer),
            "max_concurrency: an integer"
        );
        assert_eq!(
            says(
                Field::Headers,
                Rule::HiddenNotStored {
                    header: "X-Key".into()
                }
            ),
            "headers: X-Key: [hidden] keeps a stored value, and none is stored"
        );
        assert!(ValidationError::UnknownKey("colour".into())
            .to_string()
            .starts_with("unknown key \"colour\" (known: name, entity_type,"));
        assert_eq!(
            ValidationError::Required.to_string(),
            "a webhook needs name, entity_type, event and url"
        );
    }
}
