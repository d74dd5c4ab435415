//! Reading the fields of JSON objects so that every failure names the field it came from.
//!
//! Request bodies, `generation_config.json` and trace lines are written by people; serde's derived
//! errors say "expected f64" without saying where. Every reader in this module goes through these
//! helpers instead, so a bad value is reported as `body.sampling_params.top_k: ...`.
//!
//! Not `serde_path_to_error`, which tracks the same path through a derived `Deserialize`: where a
//! request's sampling fields sit depends on a sibling field (the body's top level for the OpenAI
//! endpoints, its `sampling_params` for `/generate`, which each ignore the other's), so a derive
//! would need `flatten` (through which that crate loses the path, dtolnay/path-to-error#9) or a
//! second pass over a `Value` that joins the paths by hand again; and it would be a new
//! dependency of the library for every user, where these helpers need only `serde_json`.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// A JSON value that is missing, or not of the type its field needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{field}`: {reason}")]
pub struct FieldError {
    /// Dotted path of the field, e.g. `body.sampling_params.top_k`.
    pub field: String,
    /// What was wrong with it.
    pub reason: String,
}

impl FieldError {
    pub(crate) fn new(field: &str, reason: impl Into<String>) -> Self {
        FieldError { field: field.to_owned(), reason: reason.into() }
    }

    /// The same error seen from the object that holds `parent`.
    pub(crate) fn within(self, parent: &str) -> Self {
        FieldError { field: format!("{parent}.{}", self.field), reason: self.reason }
    }
}

/// `value` as an object; `what` names it when it is something else.
pub(crate) fn object<'a>(value: &'a Value, what: &str) -> Result<&'a Map<String, Value>, FieldError> {
    value.as_object().ok_or_else(|| FieldError::new(what, format!("expected a JSON object, got {value}")))
}

/// The field's value, or `None` when it is absent or `null` (Python's `dict.get(k) is None`).
pub(crate) fn optional<T: DeserializeOwned>(object: &Map<String, Value>, field: &str) -> Result<Option<T>, FieldError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => T::deserialize(value).map(Some).map_err(|e| FieldError::new(field, e.to_string())),
    }
}

/// The field's value; absent or `null` is an error.
pub(crate) fn required<T: DeserializeOwned>(object: &Map<String, Value>, field: &str) -> Result<T, FieldError> {
    optional(object, field)?.ok_or_else(|| FieldError::new(field, "missing"))
}
