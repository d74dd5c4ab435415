//! A request's sampling parameters, SGLang's checks on them, and SGLang's normalization.
//!
//! SGLang builds a `SamplingParams` from the merged request, calls `normalize()` and then
//! `verify()` (`TokenizerManager._create_tokenized_object`). The scheduler only ever sees the
//! normalized values, and its batch routing reads them, so this module keeps the same two steps
//! in the same order: [`SamplingParams::normalize`] is the only way to a [`NormalizedParams`].

use serde::Serialize;
use serde_json::{Map, Value};

use super::json::{self, FieldError};

/// SGLang's `TOP_K_ALL`: how `top_k = -1` ("the whole vocabulary") is stored after normalization.
pub const TOP_K_ALL: i64 = 1 << 30;

/// SGLang's `_SAMPLING_EPS`: temperatures in `[0, SAMPLING_EPS)` are greedy. This is the threshold
/// the kernels apply as [`crate::GREEDY_EPS`], kept here in the `f64` SGLang compares in.
pub const SAMPLING_EPS: f64 = 1e-6;

const TEMPERATURE: f64 = 1.0;
const TOP_P: f64 = 1.0;
const TOP_K: i64 = -1;
const MIN_P: f64 = 0.0;

/// The values SGLang uses for parameters nobody set. `SamplingParams`' constructor defaults and the
/// OpenAI endpoints' `_DEFAULT_SAMPLING_PARAMS` are the same numbers: 1.0, 1.0, -1, 0.0.
pub const DEFAULTS: SamplingParams = SamplingParams {
    temperature: Some(TEMPERATURE),
    top_p: Some(TOP_P),
    top_k: Some(TOP_K),
    min_p: Some(MIN_P),
    seed: None,
};

/// The sampling fields of a request body, each `None` when the body does not set it.
///
/// Other keys of the body (messages, max_tokens, ...) are ignored: they do not decide a path.
/// Deserializing goes through [`TryFrom<Value>`], so a wrong type names its field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(try_from = "Value")]
pub struct SamplingParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Softmax temperature; 0 (below 1e-6) means greedy.
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Nucleus mass in (0, 1]; 1 keeps everything.
    pub top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Top-k: -1 (every token) or at least 1.
    pub top_k: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Min-p ratio to the most likely token, in [0, 1].
    pub min_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// The request's seed, for the seeded sampler.
    pub seed: Option<u64>,
}

impl TryFrom<Value> for SamplingParams {
    type Error = FieldError;

    fn try_from(value: Value) -> Result<Self, FieldError> {
        SamplingParams::from_object(json::object(&value, "sampling parameters")?)
    }
}

impl SamplingParams {
    /// Reads the sampling fields of a JSON object; `null` counts as unset, as in SGLang.
    pub fn from_object(object: &Map<String, Value>) -> Result<Self, FieldError> {
        Ok(SamplingParams {
            temperature: json::optional(object, "temperature")?,
            top_p: json::optional(object, "top_p")?,
            top_k: json::optional(object, "top_k")?,
            min_p: json::optional(object, "min_p")?,
            seed: json::optional(object, "seed")?,
        })
    }

    /// Each field of `self`, or `fallback`'s where `self` has none: Python's `{**fallback, **self}`
    /// for keys that are present. Every layer of SGLang's merge is one call of this.
    pub fn or(self, fallback: &SamplingParams) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature.or(fallback.temperature),
            top_p: self.top_p.or(fallback.top_p),
            top_k: self.top_k.or(fallback.top_k),
            min_p: self.min_p.or(fallback.min_p),
            seed: self.seed.or(fallback.seed),
        }
    }

    /// SGLang's `normalize()` then `verify()`, with [`DEFAULTS`] for unset fields.
    ///
    /// The order matters in one corner: a greedy request (temperature below [`SAMPLING_EPS`]) has
    /// its `top_k` replaced by 1 before the check, so SGLang accepts `temperature: 0, top_k: 0`
    /// and so does this. NaN and infinities fail every range check.
    pub fn normalize(&self) -> Result<NormalizedParams, ParamError> {
        let (mut temperature, mut top_k) = (self.temperature.unwrap_or(TEMPERATURE), self.top_k.unwrap_or(TOP_K));
        let (top_p, min_p) = (self.top_p.unwrap_or(TOP_P), self.min_p.unwrap_or(MIN_P));
        if (0.0..SAMPLING_EPS).contains(&temperature) {
            temperature = 1.0;
            top_k = 1;
        }
        if top_k == -1 {
            top_k = TOP_K_ALL;
        }
        if !(temperature.is_finite() && temperature >= 0.0) {
            return Err(ParamError::Temperature(temperature));
        }
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(ParamError::TopP(top_p));
        }
        if top_k < 1 {
            return Err(ParamError::TopK(top_k));
        }
        if !(0.0..=1.0).contains(&min_p) {
            return Err(ParamError::MinP(min_p));
        }
        Ok(NormalizedParams { temperature, top_p, top_k, min_p, seed: self.seed })
    }
}

/// A value SGLang's `verify()` rejects. Each variant names its field and carries the value.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum ParamError {
    #[error("temperature must be a non-negative finite number, got {0}")]
    /// Not a non-negative finite number.
    Temperature(f64),
    #[error("top_p must be in (0, 1], got {0}")]
    /// Outside (0, 1].
    TopP(f64),
    #[error("top_k must be -1 (whole vocabulary) or at least 1, got {0}")]
    /// Neither -1 nor at least 1.
    TopK(i64),
    #[error("min_p must be in [0, 1], got {0}")]
    /// Outside [0, 1].
    MinP(f64),
}

impl ParamError {
    /// The name of the offending field, as a request body spells it.
    pub fn field(&self) -> &'static str {
        match self {
            ParamError::Temperature(_) => "temperature",
            ParamError::TopP(_) => "top_p",
            ParamError::TopK(_) => "top_k",
            ParamError::MinP(_) => "min_p",
        }
    }
}

/// Parameters after SGLang's normalization and checks: what its scheduler and sampler read.
///
/// Greedy requests have `temperature == 1.0` and `top_k == 1`; "no top-k" is [`TOP_K_ALL`].
/// Only [`SamplingParams::normalize`] makes one, so every value here passed SGLang's checks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NormalizedParams {
    temperature: f64,
    top_p: f64,
    top_k: i64,
    min_p: f64,
    seed: Option<u64>,
}

impl NormalizedParams {
    /// The temperature (1.0 for greedy rows, as SGLang stores them).
    pub fn temperature(&self) -> f64 {
        self.temperature
    }
    /// The nucleus mass.
    pub fn top_p(&self) -> f64 {
        self.top_p
    }
    /// Top-k ([`TOP_K_ALL`] for the whole vocabulary, 1 for greedy).
    pub fn top_k(&self) -> i64 {
        self.top_k
    }
    /// The min-p ratio.
    pub fn min_p(&self) -> f64 {
        self.min_p
    }
    /// The seed, if the request gave one.
    pub fn seed(&self) -> Option<u64> {
        self.seed
    }
}
